"""The fake Stripe server for the tests: scripts/localstripe_server.py, started once per session
on a free loopback port. A server that does not answer fails the tests that need it; nothing is
skipped. All its traffic stays on 127.0.0.1."""

import datetime
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import stripe

REPOSITORY = Path(__file__).resolve().parent.parent
RUNNER = REPOSITORY / "scripts" / "localstripe_server.py"
SECRET_KEY = "sk_test_computeshare"
PUBLISHABLE_KEY = "pk_test_computeshare"
STARTUP_TIMEOUT = 20.0

# No proxy, whatever the environment says: the server is on loopback.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_request(
    method: str, url: str, fields: dict[str, str] | None = None, api_key: str | None = None
) -> tuple[int, Any]:
    """Sends `fields` form-encoded, as Stripe's clients do; answers (status, decoded JSON or
    None when the body is not JSON). HTTP errors are answers, not exceptions."""
    data = urllib.parse.urlencode(fields).encode() if fields is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http only)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with _opener.open(request, timeout=10) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


@dataclass
class LocalStripe:
    api_base: str
    js_url: str
    secret_key: str
    publishable_key: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self) -> stripe.StripeClient:
        return stripe.StripeClient(
            self.secret_key, base_addresses={"api": self.api_base}, max_network_retries=0
        )

    def post(
        self, path: str, fields: dict[str, str], api_key: str | None = None
    ) -> tuple[int, Any]:
        return http_request("POST", self.api_base + path, fields, api_key)

    def register_webhook(self, url: str, secret: str, name: str = "tests") -> None:
        """Sends every event, signed with `secret`, to `url`; registering `name` again replaces
        its URL and secret."""
        status, _ = self.post(f"/_config/webhooks/{name}", {"url": url, "secret": secret})
        if status != 200:
            pytest.fail(f"localstripe refused the webhook {url}: HTTP {status}\n{self.log()}")

    def pay(self, payment_intent_id: str, card_number: str = "4242424242424242") -> str:
        """Pays the PaymentIntent from the server side with a new card PaymentMethod (set on
        it with an update, then a confirm) and answers its status: "succeeded", or
        "requires_payment_method" after a decline, or "requires_action" for a 3-D Secure card.
        """
        client = self.client()
        payment_method = client.v1.payment_methods.create(
            params={
                "type": "card",
                "card": {
                    "number": card_number,
                    "exp_month": 12,
                    "exp_year": datetime.date.today().year + 3,
                    "cvc": "123",
                },
            }
        )
        client.v1.payment_intents.update(
            payment_intent_id, params={"payment_method": payment_method.id}
        )
        try:
            return client.v1.payment_intents.confirm(payment_intent_id).status
        except stripe.CardError:
            return client.v1.payment_intents.retrieve(payment_intent_id).status

    def answers(self) -> bool:
        try:
            status, _ = http_request("GET", self.js_url)
        except OSError:
            return False
        return status == 200


@pytest.fixture(scope="session")
def localstripe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStripe]:
    port = free_loopback_port()
    api_base = f"http://127.0.0.1:{port}"
    log_path = tmp_path_factory.mktemp("localstripe") / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, str(RUNNER), "--port", str(port)],
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = LocalStripe(
        api_base=api_base,
        js_url=f"{api_base}/js.stripe.com/v3/",
        secret_key=SECRET_KEY,
        publishable_key=PUBLISHABLE_KEY,
        process=process,
        log_path=log_path,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not server.answers():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            pytest.fail(
                f"localstripe did not answer on {api_base} within {STARTUP_TIMEOUT:g} s:\n"
                f"{server.log()[-4000:]}"
            )
        time.sleep(0.1)
    yield server
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
