"""Top-ups nobody paid (the card form closed, a card Stripe.js refused before asking Stripe)
are marked expired by the periodic task after TOP_UP_PENDING_EXPIRY_MINUTES instead of showing
as pending for ever; nothing moves in the ledger, and money Stripe does take later is still
credited."""

import datetime
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import selectors
from billing.models import Entry, TopUp
from billing.tasks import top_ups_expire_task
from tests.billing.test_webhook import credited, deliver, payment_event
from tests.factories import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def top_up(db: None, settings) -> TopUp:
    return TopUp.objects.create(
        organization=OrganizationFactory(),
        created_by=UserFactory(),
        amount=Decimal("40.00"),
        currency=settings.PLATFORM_CURRENCY,
        payment_intent="pi_expiry0000000000000",
        client_secret="secret",
    )


def made_ago(top_up: TopUp, minutes: int) -> TopUp:
    TopUp.objects.filter(pk=top_up.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=minutes)
    )
    return top_up


def test_pending_top_ups_past_the_limit_expire_and_nothing_else_changes(top_up: TopUp, settings):
    settings.TOP_UP_PENDING_EXPIRY_MINUTES = 60
    old = made_ago(top_up, 61)
    recent = made_ago(
        TopUp.objects.create(
            organization=old.organization,
            created_by=old.created_by,
            amount=Decimal("10.00"),
            currency=old.currency,
        ),
        59,
    )
    failed = made_ago(
        TopUp.objects.create(
            organization=old.organization,
            created_by=old.created_by,
            amount=Decimal("12.00"),
            currency=old.currency,
            status=TopUp.Status.FAILED,
            failure_reason="Your card was declined.",
        ),
        600,
    )

    assert top_ups_expire_task() == 1
    assert top_ups_expire_task() == 0  # once

    statuses = {
        row.pk: (row.status, row.failure_reason)
        for row in TopUp.objects.filter(pk__in=[old.pk, recent.pk, failed.pk])
    }
    assert statuses == {
        old.pk: ("expired", "Not paid within 60 minutes: abandoned."),
        recent.pk: ("pending", ""),
        failed.pk: ("failed", "Your card was declined."),
    }
    assert not Entry.objects.exists()
    assert selectors.ledger_verify() == []


def test_a_payment_that_arrives_after_the_expiry_is_still_credited(
    client: Client, top_up: TopUp, settings
):
    settings.TOP_UP_PENDING_EXPIRY_MINUTES = 60
    made_ago(top_up, 90)
    top_ups_expire_task()

    answer = deliver(client, payment_event(top_up))

    top_up.refresh_from_db()
    assert answer.json()["outcome"] == "credited"
    assert (top_up.status, top_up.failure_reason) == ("succeeded", "")
    assert credited(top_up) == Decimal("40.00")
    assert selectors.ledger_verify() == []
