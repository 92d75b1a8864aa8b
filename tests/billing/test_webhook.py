"""The Stripe webhook with events we sign ourselves: a top-up is credited once per
PaymentIntent whatever the number or order of deliveries; bad, tampered and stale signatures
are refused and change nothing."""

import hashlib
import hmac
import json
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from billing import selectors
from billing.models import Entry, StripeEvent, TopUp, Transaction
from tests.factories import OrganizationFactory, UserFactory

WEBHOOK = "/api/v1/billing/stripe/webhook/"


def signature(payload: bytes, *, timestamp: int | None = None, secret: str | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    secret = secret or settings.STRIPE_WEBHOOK_SECRET
    signed = f"{timestamp}.".encode() + payload
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def payment_event(
    top_up: TopUp,
    kind: str = "payment_intent.succeeded",
    *,
    event_id: str | None = None,
    amount_minor: int | None = None,
    intent_id: str | None = None,
) -> bytes:
    amount = top_up.amount_minor if amount_minor is None else amount_minor
    intent: dict[str, Any] = {
        "id": intent_id or top_up.payment_intent,
        "object": "payment_intent",
        "amount": amount,
        "amount_received": amount if kind.endswith("succeeded") else 0,
        "currency": top_up.currency.lower(),
        "metadata": {"top_up": str(top_up.uuid)},
        "status": "succeeded" if kind.endswith("succeeded") else "requires_payment_method",
    }
    if kind.endswith("failed"):
        intent["last_payment_error"] = {"message": "Your card was declined."}
    event = {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": kind,
        "created": int(time.time()),
        "data": {"object": intent},
    }
    return json.dumps(event).encode()


def deliver(client: Client, payload: bytes, header: str | None = None) -> Any:
    headers = {} if header == "" else {"HTTP_STRIPE_SIGNATURE": header or signature(payload)}
    return client.post(WEBHOOK, data=payload, content_type="application/json", **headers)


@pytest.fixture
def top_up(db: None) -> TopUp:
    return TopUp.objects.create(
        organization=OrganizationFactory(),
        created_by=UserFactory(),
        amount=Decimal("40.00"),
        currency=settings.PLATFORM_CURRENCY,
        payment_intent=f"pi_{uuid.uuid4().hex[:20]}",
        client_secret="secret",
    )


def credited(top_up: TopUp) -> Decimal:
    return selectors.wallet_get(top_up.organization).available


def test_the_same_event_five_times_in_sequence_credits_once(client: Client, top_up: TopUp):
    payload = payment_event(top_up)

    answers = [deliver(client, payload) for _ in range(5)]

    assert [answer.status_code for answer in answers] == [200] * 5
    assert answers[0].json() == {"received": True, "outcome": "credited"}
    assert credited(top_up) == Decimal("40.00")
    assert Transaction.objects.filter(kind="top_up").count() == 1
    event = StripeEvent.objects.get()
    assert event.deliveries == 5
    assert event.outcome == "credited"
    top_up.refresh_from_db()
    assert top_up.status == "succeeded"
    assert selectors.ledger_verify() == []


def test_two_events_for_one_payment_intent_credit_once(client: Client, top_up: TopUp):
    deliver(client, payment_event(top_up, event_id="evt_first"))
    answer = deliver(client, payment_event(top_up, event_id="evt_second"))

    assert answer.json()["outcome"] == "ignored: top-up already succeeded"
    assert credited(top_up) == Decimal("40.00")
    assert StripeEvent.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_the_same_event_five_times_concurrently_credits_once():
    top_up = TopUp.objects.create(
        organization=OrganizationFactory(),
        created_by=UserFactory(),
        amount=Decimal("12.34"),
        currency=settings.PLATFORM_CURRENCY,
        payment_intent="pi_concurrent",
    )
    payload = payment_event(top_up)
    header = signature(payload)
    barrier = threading.Barrier(5)
    statuses: list[int] = []

    def deliver_once() -> None:
        try:
            barrier.wait()
            statuses.append(deliver(Client(), payload, header).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver_once) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert statuses == [200] * 5
    assert credited(top_up) == Decimal("12.34")
    assert Transaction.objects.filter(kind="top_up").count() == 1
    assert StripeEvent.objects.get().deliveries == 5
    assert selectors.ledger_verify() == []


def test_a_failure_arriving_after_the_success_changes_nothing(client: Client, top_up: TopUp):
    deliver(client, payment_event(top_up))

    answer = deliver(client, payment_event(top_up, "payment_intent.payment_failed"))

    assert answer.json()["outcome"] == "ignored: top-up is succeeded"
    top_up.refresh_from_db()
    assert top_up.status == "succeeded"
    assert credited(top_up) == Decimal("40.00")


def test_a_success_after_a_failed_attempt_credits(client: Client, top_up: TopUp):
    failed = deliver(client, payment_event(top_up, "payment_intent.payment_failed"))
    top_up.refresh_from_db()
    assert failed.json()["outcome"] == "marked failed"
    assert (top_up.status, top_up.failure_reason) == ("failed", "Your card was declined.")

    deliver(client, payment_event(top_up))

    top_up.refresh_from_db()
    assert (top_up.status, top_up.failure_reason) == ("succeeded", "")
    assert credited(top_up) == Decimal("40.00")


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda payload: payload.replace(b"4000", b"9000"), id="amount-changed"),
        pytest.param(lambda payload: payload + b" ", id="byte-appended"),
    ],
)
def test_a_tampered_body_is_refused_and_changes_nothing(client: Client, top_up: TopUp, tamper):
    payload = payment_event(top_up)
    header = signature(payload)

    answer = deliver(client, tamper(payload), header)

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid_signature"
    assert StripeEvent.objects.count() == 0
    assert Entry.objects.count() == 0
    top_up.refresh_from_db()
    assert top_up.status == "pending"


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(lambda body: signature(body, timestamp=int(time.time()) - 301), id="stale"),
        pytest.param(lambda body: signature(body, secret="whsec_someone_else"), id="wrong-secret"),
        pytest.param(lambda body: "t=1,v1=00", id="garbage"),
        pytest.param(lambda body: "", id="missing"),
    ],
)  # fmt: skip
def test_bad_or_stale_signatures_are_refused(client: Client, top_up: TopUp, header):
    payload = payment_event(top_up)

    answer = deliver(client, payload, header(payload))

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid_signature"
    assert StripeEvent.objects.count() == 0
    assert credited(top_up) == Decimal("0")


def test_an_unknown_payment_intent_is_stored_and_credits_nothing(client: Client, top_up: TopUp):
    payload = payment_event(top_up, intent_id="pi_not_ours")
    # Not ours by id, and the metadata names a top-up that has its own PaymentIntent.

    answer = deliver(client, payload)

    assert answer.status_code == 200
    assert answer.json()["outcome"] == "ignored: unknown PaymentIntent"
    assert StripeEvent.objects.get().processed_at is not None
    assert Entry.objects.count() == 0
    top_up.refresh_from_db()
    assert top_up.status == "pending"


def test_an_amount_that_differs_from_our_row_is_not_credited(client: Client, top_up: TopUp):
    answer = deliver(client, payment_event(top_up, amount_minor=400000))

    assert answer.json()["outcome"] == "refused: amount or currency differs from the top-up"
    assert Entry.objects.count() == 0
    top_up.refresh_from_db()
    assert top_up.status == "pending"


def test_events_we_do_not_act_on_are_kept(client: Client, top_up: TopUp):
    payload = payment_event(top_up, "customer.created")

    answer = deliver(client, payload)

    assert answer.status_code == 200
    assert StripeEvent.objects.get().outcome == "ignored: not an event we act on"
    assert Entry.objects.count() == 0


def test_a_signed_body_that_is_not_an_event_is_refused(client: Client, db: None):
    payload = b'["not", "an", "event"]'

    answer = deliver(client, payload)

    assert answer.status_code == 400
    assert StripeEvent.objects.count() == 0


def test_metadata_that_is_not_a_top_up_id_is_ignored(client: Client, top_up: TopUp):
    event = json.loads(payment_event(top_up, intent_id="pi_someone_elses"))
    event["data"]["object"]["metadata"] = {"top_up": "order-1234"}
    payload = json.dumps(event).encode()

    answer = deliver(client, payload)

    assert answer.status_code == 200
    assert answer.json()["outcome"] == "ignored: unknown PaymentIntent"
    assert StripeEvent.objects.filter(processed_at__isnull=True).count() == 0


def test_an_event_found_by_its_metadata_when_our_row_lacks_the_intent(client: Client, db: None):
    """The answer of the PaymentIntent create call can be lost after Stripe made it: the row
    has no PaymentIntent yet, and the event is matched by the top-up id it carries."""
    top_up = TopUp.objects.create(
        organization=OrganizationFactory(),
        created_by=UserFactory(),
        amount=Decimal("15.00"),
        currency=settings.PLATFORM_CURRENCY,
    )

    answer = deliver(client, payment_event(top_up, intent_id="pi_answer_lost"))

    assert answer.json()["outcome"] == "credited"
    top_up.refresh_from_db()
    assert (top_up.status, top_up.payment_intent) == ("succeeded", "pi_answer_lost")
    assert credited(top_up) == Decimal("15.00")


def test_the_sweep_processes_an_event_a_crash_left_stored(top_up: TopUp):
    from billing.tasks import stripe_events_process_task

    payload = json.loads(payment_event(top_up))
    StripeEvent.objects.create(event_id=payload["id"], type=payload["type"], payload=payload)

    processed = stripe_events_process_task()

    assert processed == 1
    assert StripeEvent.objects.get().outcome == "credited"
    assert credited(top_up) == Decimal("40.00")
    assert stripe_events_process_task() == 0
