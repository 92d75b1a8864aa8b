"""Stripe's events out of order and days late, for PaymentIntents made on the local Stripe
server: whatever the order in which `created`, `processing`, `payment_failed` and `succeeded`
arrive, a paid top-up is credited once and stays credited; an event delivered again three days
later (Stripe retries for up to three days, each time with a fresh signature) is applied once,
neither refused as stale nor applied twice; events of PaymentIntents that are not ours change
nothing. What tests/billing/test_webhook.py covers already (a failure right after the success,
stale and bad signatures, an unknown PaymentIntent's success) is not repeated here."""

from __future__ import annotations

import copy
import json
import time
import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client

from billing import services
from billing.models import Entry, StripeEvent, TopUp, Transaction
from billing.selectors import ledger_verify, wallet_get
from tests.billing.test_webhook import deliver
from tests.factories import UserFactory, funded_organization
from tests.localstripe import LocalStripe

pytestmark = pytest.mark.django_db

DAY = 24 * 3600
# The life of a card PaymentIntent whose first attempt is declined and whose second succeeds.
KINDS = (
    "payment_intent.created",
    "payment_intent.processing",
    "payment_intent.payment_failed",
    "payment_intent.succeeded",
)


def top_up_made(amount: str = "40.00") -> TopUp:
    """A top-up with its PaymentIntent created on the local Stripe server."""
    return services.top_up_create(
        organization=funded_organization("0"), actor=UserFactory(), amount=amount
    )


def event_of(
    intent: dict[str, Any], kind: str, *, age_seconds: int = 0, event_id: str | None = None
) -> bytes:
    """An event of `kind` as Stripe sends it: `intent` (the PaymentIntent as the Stripe server
    has it) with the status the event reports, created `age_seconds` ago."""
    intent = copy.deepcopy(intent)
    intent["status"], intent["amount_received"] = {
        "payment_intent.created": ("requires_payment_method", 0),
        "payment_intent.processing": ("processing", 0),
        "payment_intent.payment_failed": ("requires_payment_method", 0),
        "payment_intent.succeeded": ("succeeded", intent["amount"]),
    }[kind]
    if kind == "payment_intent.payment_failed":
        intent["last_payment_error"] = {"message": "Your card was declined."}
    event = {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": kind,
        "created": int(time.time()) - age_seconds,
        "data": {"object": intent},
    }
    return json.dumps(event).encode()


def intent_on_stripe(localstripe: LocalStripe, payment_intent: str) -> dict[str, Any]:
    return localstripe.client().v1.payment_intents.retrieve(payment_intent).to_dict()


def credits_of(top_up: TopUp) -> int:
    return Transaction.objects.filter(kind="top_up", reference=top_up.uuid).count()


@pytest.mark.parametrize(
    "order",
    [
        # As they happen.
        ("created", "processing", "payment_failed", "succeeded"),
        # The success first, then everything before it, the decline last.
        ("succeeded", "processing", "created", "payment_failed"),
        # The success before `created` and `processing`, after the decline.
        ("payment_failed", "succeeded", "processing", "created"),
        # The success between `processing` and the decline.
        ("processing", "succeeded", "payment_failed", "created"),
    ],
    ids="-".join,
)
def test_any_order_of_a_payment_intents_events_credits_once(
    client: Client, localstripe: LocalStripe, order: tuple[str, ...]
):
    # Given a top-up, and its four events in this order, each delivered hours after it was made
    # (the order of `created` is the order in which Stripe made them).
    top_up = top_up_made()
    intent = intent_on_stripe(localstripe, top_up.payment_intent)
    payloads = {
        kind: event_of(intent, kind, age_seconds=(4 - step) * 3600)
        for step, kind in enumerate(KINDS)
    }

    # When they arrive in `order`.
    answers = [deliver(client, payloads[f"payment_intent.{kind}"]) for kind in order]

    # Then every delivery is acknowledged, and the top-up is paid and credited exactly once,
    # whether the failure came before the success or after it.
    assert [answer.status_code for answer in answers] == [200] * 4
    top_up.refresh_from_db()
    assert (top_up.status, top_up.failure_reason) == ("succeeded", "")
    assert credits_of(top_up) == 1
    assert wallet_get(top_up.organization).available == Decimal("40.00")
    outcomes = dict(StripeEvent.objects.values_list("type", "outcome"))
    assert outcomes["payment_intent.succeeded"] == "credited"
    assert outcomes["payment_intent.created"] == "ignored: not an event we act on"
    assert outcomes["payment_intent.processing"] == "ignored: not an event we act on"
    failed_first = order.index("payment_failed") < order.index("succeeded")
    assert outcomes["payment_intent.payment_failed"] == (
        "marked failed" if failed_first else "ignored: top-up is succeeded"
    )
    assert ledger_verify() == []


def test_an_event_first_delivered_three_days_late_is_applied(
    client: Client, localstripe: LocalStripe
):
    # Given a success made three days ago that our endpoint never answered (it was down).
    top_up = top_up_made("12.50")
    intent = intent_on_stripe(localstripe, top_up.payment_intent)
    payload = event_of(intent, "payment_intent.succeeded", age_seconds=3 * DAY)

    # When Stripe's last retry arrives, signed now.
    answer = deliver(client, payload)

    # Then it is applied: only the signature's time is checked for replays, not the event's age.
    assert answer.status_code == 200
    assert answer.json()["outcome"] == "credited"
    assert wallet_get(top_up.organization).available == Decimal("12.50")


def test_a_duplicate_three_days_later_with_a_fresh_signature_is_applied_once(
    client: Client, localstripe: LocalStripe
):
    # Given a success applied when it was made.
    top_up = top_up_made("30.00")
    intent = intent_on_stripe(localstripe, top_up.payment_intent)
    event_id = f"evt_{uuid.uuid4().hex[:24]}"
    first = deliver(client, event_of(intent, "payment_intent.succeeded", event_id=event_id))
    assert first.json()["outcome"] == "credited"

    # When the same event arrives again three days later (Stripe did not get our answer), its
    # `created` three days old and its signature made now.
    again = deliver(
        client,
        event_of(intent, "payment_intent.succeeded", age_seconds=3 * DAY, event_id=event_id),
    )

    # Then it is acknowledged, counted as a delivery, and changes nothing.
    assert again.status_code == 200
    assert again.json() == {"received": True, "outcome": "credited"}
    stored = StripeEvent.objects.get(event_id=event_id)
    assert stored.deliveries == 2
    assert credits_of(top_up) == 1
    assert wallet_get(top_up.organization).available == Decimal("30.00")
    assert ledger_verify() == []


@pytest.mark.parametrize("kind", KINDS)
def test_events_of_a_payment_intent_that_is_not_ours_change_nothing(
    client: Client, localstripe: LocalStripe, kind: str
):
    # Given one of our top-ups, and a PaymentIntent on the same Stripe account that is not ours
    # (another integration's, no metadata of ours).
    ours = top_up_made("20.00")
    theirs = (
        localstripe.client()
        .v1.payment_intents.create(params={"amount": 2000, "currency": "usd"})
        .to_dict()
    )
    before = Entry.objects.count()

    # When an event of theirs arrives, days late.
    answer = deliver(client, event_of(theirs, kind, age_seconds=2 * DAY))

    # Then it is acknowledged (Stripe must not retry it) and stored, and nothing else changes.
    assert answer.status_code == 200
    acted_on = kind in ("payment_intent.succeeded", "payment_intent.payment_failed")
    assert answer.json()["outcome"] == (
        "ignored: unknown PaymentIntent" if acted_on else "ignored: not an event we act on"
    )
    assert StripeEvent.objects.get().processed_at is not None
    assert Entry.objects.count() == before
    ours.refresh_from_db()
    assert (ours.status, ours.failure_reason) == ("pending", "")
    assert TopUp.objects.count() == 1
