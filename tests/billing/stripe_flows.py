"""Real Stripe flows against the local Stripe server for the payout, refund and dispute tests:
the events it signs are caught by a receiver on loopback and handed to the webhook endpoint by
the test, so that a test can deliver one twice, late, or tampered with."""

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from billing import services
from billing.models import ConnectedAccount, ReferenceKind, TopUp
from tests.billing.test_localstripe_server import WebhookReceiver
from tests.billing.test_webhook import signature
from tests.factories import funded_organization
from tests.localstripe import LocalStripe

WEBHOOK = "/api/v1/billing/stripe/webhook/"
NOWHERE = "http://127.0.0.1:9/"
RECEIVER_NAME = "billing-flows"


@pytest.fixture
def stripe_events(localstripe: LocalStripe) -> Iterator[WebhookReceiver]:
    """Every event the local server sends, signed with the project's webhook secret."""
    receiver = WebhookReceiver()
    localstripe.register_webhook(receiver.url, settings.STRIPE_WEBHOOK_SECRET, RECEIVER_NAME)
    yield receiver
    localstripe.register_webhook(NOWHERE, settings.STRIPE_WEBHOOK_SECRET, RECEIVER_NAME)
    receiver.close()


def event_matching(
    receiver: WebhookReceiver, event_type: str, field: str, value: str, timeout: float = 10.0
) -> tuple[bytes, str]:
    """The first delivery of `event_type` whose object's `field` is `value`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for body, header in list(receiver.deliveries):
            event = json.loads(body)
            if event["type"] == event_type and event["data"]["object"].get(field) == value:
                return body, header
        time.sleep(0.05)
    seen = [json.loads(body)["type"] for body, _ in receiver.deliveries]
    pytest.fail(f"no {event_type} with {field}={value} within {timeout:g} s: {seen}")


def deliver(client: Client, body: bytes, header: str | None = None) -> Any:
    """Hands one delivery to the webhook endpoint as Stripe would post it."""
    return client.post(
        WEBHOOK,
        data=body,
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE=header or signature(body),
    )


def signed_event(event_type: str, obj: dict[str, Any], **fields: Any) -> bytes:
    """An event of our own making (for orders and shapes the server cannot be made to send),
    signed by `deliver`."""
    event = {
        "id": f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": event_type,
        "created": int(time.time()),
        "data": {"object": obj},
        **fields,
    }
    return json.dumps(event).encode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def onboarding_submit(url: str) -> str:
    """Submits the local server's onboarding page and answers where it redirects to."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 (http only)
    try:
        with opener.open(request, timeout=10) as response:
            return str(response.headers.get("Location", ""))
    except urllib.error.HTTPError as error:
        return str(error.headers.get("Location", ""))


def connected_and_active(
    client: Client, receiver: WebhookReceiver, organization: Any, actor: Any
) -> ConnectedAccount:
    """The organization's Express account, onboarded and made active by its account.updated."""
    link = services.connected_account_onboard(
        organization=organization,
        actor=actor,
        return_url="http://127.0.0.1:9/return",
        refresh_url="http://127.0.0.1:9/refresh",
    )
    assert onboarding_submit(link.url) == "http://127.0.0.1:9/return"
    account = ConnectedAccount.objects.get(organization=organization)
    body, header = receiver.wait_for("account.updated", str(account.stripe_account))
    assert deliver(client, body, header).json()["outcome"] == "account active"
    account.refresh_from_db()
    return account


def earn(owner: Any, gross: str) -> Decimal:
    """`gross` charged to a team's hold and earned by `owner`; answers the owner's net."""
    team = funded_organization(gross)
    hold = services.hold_place(
        organization=team, amount=gross, reference_kind=ReferenceKind.ALLOCATION
    )
    posted = services.hold_capture(
        hold=hold, amount=gross, payee=owner, idempotency_reference=f"test-run:{uuid.uuid4()}"
    )
    assert posted is not None
    return Decimal(gross) - services.platform_fee(Decimal(gross))


def paid_top_up(
    client: Client,
    localstripe: LocalStripe,
    receiver: WebhookReceiver,
    organization: Any,
    actor: Any,
    amount: str,
    card: str = "4242424242424242",
) -> TopUp:
    """A top-up paid with `card` on the local server and credited by its signed
    payment_intent.succeeded."""
    top_up = services.top_up_create(organization=organization, actor=actor, amount=amount)
    assert top_up.payment_intent
    assert localstripe.pay(top_up.payment_intent, card) == "succeeded"
    body, header = receiver.wait_for("payment_intent.succeeded", top_up.payment_intent)
    assert deliver(client, body, header).json()["outcome"] == "credited"
    top_up.refresh_from_db()
    return top_up
