"""scripts/localstripe_server.py against the real localstripe: loopback only, webhooks signed
with the registered secret, declined cards failing the charge, the Stripe.js shim served and
the publishable-key confirm it relies on."""

import datetime
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import localstripe as localstripe_package
import pytest
import stripe

from tests.localstripe import (
    PUBLISHABLE_KEY,
    REPOSITORY,
    RUNNER,
    LocalStripe,
    free_loopback_port,
    http_request,
)

WEBHOOK_SECRET = "whsec_test_localstripe"
LOCALSTRIPE_JS = Path(localstripe_package.__file__).with_name("localstripe-v3.js")
SHIM_MARKER = "// --- ComputeShare shim, appended by scripts/localstripe_server.py"
EXP_YEAR = str(datetime.date.today().year + 3)


class WebhookReceiver:
    """An HTTP endpoint on a free loopback port that keeps every POST it receives."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[bytes, str]] = []
        self._arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver._arrived:
                    receiver.deliveries.append((body, self.headers["Stripe-Signature"]))
                    receiver._arrived.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/stripe/webhook"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def wait_for(self, event_type: str, object_id: str, timeout: float = 10.0) -> tuple[bytes, str]:
        """The first delivery of `event_type` about `object_id`; the server shared by the
        session may also send events of other tests here."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                for body, signature in self.deliveries:
                    event = json.loads(body)
                    if event["type"] == event_type and event["data"]["object"]["id"] == object_id:
                        return body, signature
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = [json.loads(body)["type"] for body, _ in self.deliveries]
                    pytest.fail(f"no {event_type} for {object_id} within {timeout:g} s: {seen}")
                self._arrived.wait(remaining)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def webhooks(localstripe: LocalStripe) -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    localstripe.register_webhook(receiver.url, WEBHOOK_SECRET)
    yield receiver
    receiver.close()


def card_fields(number: str) -> dict[str, str]:
    return {
        "payment_method_data[type]": "card",
        "payment_method_data[card][number]": number,
        "payment_method_data[card][exp_month]": "12",
        "payment_method_data[card][exp_year]": EXP_YEAR,
        "payment_method_data[card][cvc]": "123",
        "payment_method_data[billing_details][address][postal_code]": "75001",
    }


def test_listens_on_127_0_0_1_only(localstripe: LocalStripe) -> None:
    port = int(localstripe.api_base.rsplit(":", 1)[1])
    listening = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    # State, Recv-Q, Send-Q, local address, peer address: one socket, on 127.0.0.1.
    assert listening[3::5] == [f"127.0.0.1:{port}"]
    # A server on 0.0.0.0 or :: would accept this one: the whole of 127/8 is the loopback.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=5).close()


def test_a_paid_payment_intent_sends_a_signed_payment_intent_succeeded(
    localstripe: LocalStripe,
    webhooks: WebhookReceiver,
) -> None:
    intent = localstripe.client().v1.payment_intents.create(
        params={"amount": 4200, "currency": "eur", "metadata": {"order": "42"}}
    )
    assert intent.status == "requires_payment_method"

    assert localstripe.pay(intent.id) == "succeeded"

    body, signature = webhooks.wait_for("payment_intent.succeeded", intent.id)
    assert re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", signature)
    event = stripe.Webhook.construct_event(body, signature, WEBHOOK_SECRET)
    assert event.type == "payment_intent.succeeded"
    assert event.data.object.id == intent.id
    assert event.data.object.amount == 4200
    assert event.data.object.status == "succeeded"
    assert event.data.object.metadata.to_dict() == {"order": "42"}
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(body, signature, "whsec_someone_else")
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(body.replace(b"4200", b"4201"), signature, WEBHOOK_SECRET)


def test_a_declined_card_fails_the_payment_and_sends_payment_failed(
    localstripe: LocalStripe,
    webhooks: WebhookReceiver,
) -> None:
    intent = localstripe.client().v1.payment_intents.create(
        params={"amount": 1500, "currency": "eur"}
    )

    assert localstripe.pay(intent.id, card_number="4000000000000002") == "requires_payment_method"

    body, signature = webhooks.wait_for("payment_intent.payment_failed", intent.id)
    event = stripe.Webhook.construct_event(body, signature, WEBHOOK_SECRET)
    assert event.data.object.status == "requires_payment_method"
    assert event.data.object.last_payment_error.code == "card_declined"
    assert event.data.object.last_payment_error.message == "Your card was declined."
    retrieved = localstripe.client().v1.payment_intents.retrieve(intent.id)
    assert retrieved.status == "requires_payment_method"
    assert retrieved.latest_charge.status == "failed"


def test_the_served_stripe_js_is_localstripes_followed_by_the_shim(
    localstripe: LocalStripe,
    tmp_path: Path,
) -> None:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(localstripe.js_url, timeout=10) as response:
        status, content_type = response.status, response.headers["Content-Type"]
        script = response.read().decode()
    assert status == 200
    assert content_type == "application/javascript; charset=utf-8"
    # localstripe's script and the shim, in one function scope of their own (localstripe
    # declares a global `class Element` that would replace the DOM's).
    opening, closing = "(function () {\n", "\n})();\n"
    assert script.startswith(opening) and script.endswith(closing)
    script_inside = script[len(opening) : -len(closing)]
    original = LOCALSTRIPE_JS.read_text()
    assert script_inside.startswith(original)
    shim = script_inside[len(original) :]
    assert shim.lstrip("\n").startswith(SHIM_MARKER)
    assert "window.Stripe = function (apiKey, options)" in shim
    assert "/v1/payment_intents/${match[1]}/confirm" in shim

    # The shim lives in a Python string: only a JavaScript parser sees its syntax errors.
    node = shutil.which("node")
    assert node, "node is needed (the project's npm install needs it too)"
    saved = tmp_path / "stripe.js"
    saved.write_text(script)
    checked = subprocess.run([node, "--check", str(saved)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_a_publishable_key_confirm_with_the_client_secret_pays(
    localstripe: LocalStripe,
    webhooks: WebhookReceiver,
) -> None:
    intent = localstripe.client().v1.payment_intents.create(
        params={"amount": 2500, "currency": "eur"}
    )

    status, answer = localstripe.post(
        f"/v1/payment_intents/{intent.id}/confirm",
        {
            "key": PUBLISHABLE_KEY,
            "client_secret": intent.client_secret,
            **card_fields("4242424242424242"),
        },
    )

    assert status == 200
    assert answer["id"] == intent.id
    assert answer["status"] == "succeeded"
    assert answer["amount"] == 2500
    assert answer["payment_method"].startswith("pm_")
    payment_method = localstripe.client().v1.payment_methods.retrieve(answer["payment_method"])
    assert payment_method.card.last4 == "4242"
    assert payment_method.billing_details.address.postal_code == "75001"
    body, signature = webhooks.wait_for("payment_intent.succeeded", intent.id)
    assert stripe.Webhook.construct_event(body, signature, WEBHOOK_SECRET).id.startswith("evt_")


def test_a_publishable_key_confirm_with_a_wrong_client_secret_is_refused(
    localstripe: LocalStripe,
) -> None:
    intent = localstripe.client().v1.payment_intents.create(
        params={"amount": 2500, "currency": "eur"}
    )

    status, answer = localstripe.post(
        f"/v1/payment_intents/{intent.id}/confirm",
        {
            "key": PUBLISHABLE_KEY,
            "client_secret": f"{intent.id}_secret_guessed",
            **card_fields("4242424242424242"),
        },
    )

    assert (status, answer) == (
        401,
        {"error": {"message": "Unauthorized", "type": "invalid_request_error"}},
    )
    retrieved = localstripe.client().v1.payment_intents.retrieve(intent.id)
    assert retrieved.status == "requires_payment_method"
    assert retrieved.payment_method is None
    assert retrieved.latest_charge is None


def test_the_publishable_key_opens_nothing_but_the_confirm(
    localstripe: LocalStripe,
) -> None:
    status, _ = localstripe.post(
        "/v1/payment_intents", {"key": PUBLISHABLE_KEY, "amount": "100", "currency": "eur"}
    )
    assert status == 401
    status, _ = http_request(
        "GET", f"{localstripe.api_base}/v1/payment_intents", api_key=PUBLISHABLE_KEY
    )
    assert status == 401


def test_a_declined_publishable_key_confirm_answers_a_card_error_and_can_be_retried(
    localstripe: LocalStripe,
    webhooks: WebhookReceiver,
) -> None:
    intent = localstripe.client().v1.payment_intents.create(
        params={"amount": 900, "currency": "eur"}
    )
    confirm = f"/v1/payment_intents/{intent.id}/confirm"
    auth = {"key": PUBLISHABLE_KEY, "client_secret": intent.client_secret}

    status, answer = localstripe.post(confirm, {**auth, **card_fields("4000000000000002")})

    assert status == 402
    error = answer["error"]
    assert (error["type"], error["code"], error["message"]) == (
        "card_error",
        "card_declined",
        "Your card was declined.",
    )
    assert error["payment_intent"]["id"] == intent.id
    assert error["payment_intent"]["status"] == "requires_payment_method"
    assert error["payment_method"]["card"]["last4"] == "0002"

    status, answer = localstripe.post(confirm, {**auth, **card_fields("4242424242424242")})

    assert (status, answer["status"]) == (200, "succeeded")
    webhooks.wait_for("payment_intent.payment_failed", intent.id)
    webhooks.wait_for("payment_intent.succeeded", intent.id)


def test_a_3d_secure_card_waits_for_authentication(localstripe: LocalStripe) -> None:
    intent = localstripe.client().v1.payment_intents.create(
        params={"amount": 700, "currency": "eur"}
    )
    auth = {"key": PUBLISHABLE_KEY, "client_secret": intent.client_secret}

    status, answer = localstripe.post(
        f"/v1/payment_intents/{intent.id}/confirm", {**auth, **card_fields("4000002500003155")}
    )
    assert (status, answer["status"]) == (200, "requires_action")
    assert answer["next_action"]["type"] == "use_stripe_sdk"

    # What localstripe's own confirmCardPayment() does once its 3-D Secure modal is accepted.
    status, answer = localstripe.post(
        f"/v1/payment_intents/{intent.id}/_authenticate?success=true", auth
    )
    assert (status, answer["status"]) == (200, "succeeded")


def test_webhook_options_register_a_webhook_on_a_server_that_starts_empty(
    localstripe: LocalStripe,
    tmp_path: Path,
) -> None:
    localstripe.client().v1.payment_intents.create(params={"amount": 300, "currency": "eur"})
    receiver = WebhookReceiver()
    port = free_loopback_port()
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                str(RUNNER),
                "--port",
                str(port),
                "--webhook-url",
                receiver.url,
                "--webhook-secret",
                WEBHOOK_SECRET,
            ],
            cwd=REPOSITORY,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    own = LocalStripe(
        api_base=f"http://127.0.0.1:{port}",
        js_url=f"http://127.0.0.1:{port}/js.stripe.com/v3/",
        secret_key=localstripe.secret_key,
        publishable_key=localstripe.publishable_key,
        process=process,
        log_path=log_path,
    )
    try:
        deadline = time.monotonic() + 20
        while not own.answers():
            assert process.poll() is None, own.log()
            assert time.monotonic() < deadline, own.log()
            time.sleep(0.1)

        assert own.client().v1.payment_intents.list().data == []
        intent = own.client().v1.payment_intents.create(params={"amount": 300, "currency": "eur"})
        assert own.pay(intent.id) == "succeeded"
        body, signature = receiver.wait_for("payment_intent.succeeded", intent.id)
        assert stripe.Webhook.construct_event(body, signature, WEBHOOK_SECRET).data.object.id == (
            intent.id
        )
    finally:
        process.terminate()
        process.wait(timeout=10)
        receiver.close()
