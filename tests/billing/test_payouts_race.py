"""Payouts at the same moment on PostgreSQL: concurrent requests never pay out more than is
payable, each payout is one transfer, and the ledger stays balanced."""

import datetime
from decimal import Decimal

import pytest
from django.test import Client

from billing import selectors, services
from billing.models import Payout
from tests.billing.stripe_flows import connected_and_active, earn, stripe_events
from tests.billing.test_localstripe_server import WebhookReceiver
from tests.concurrency import kinds, run_together
from tests.factories import MembershipFactory, OrganizationFactory
from tests.localstripe import LocalStripe

__all__ = ["stripe_events"]

pytestmark = pytest.mark.django_db(transaction=True)


def test_concurrent_payouts_never_pay_more_than_is_payable(
    client: Client, stripe_events: WebhookReceiver, localstripe: LocalStripe, settings
):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(0)
    owner = OrganizationFactory(name="Race Cluster Co")
    admin = MembershipFactory(organization=owner, role="admin").user
    connected_and_active(client, stripe_events, owner, admin)
    earn(owner, "30.00")  # 27.00 payable

    outcomes = run_together(
        [
            lambda: services.payout_create(organization=owner, actor=admin, amount="10.00")
            for _ in range(6)
        ]
    )

    assert kinds(outcomes) == {"Payout": 2, "AmountNotPayable": 4}
    paid = Payout.objects.filter(status="paid")
    assert [payout.amount for payout in paid] == [Decimal("10.00"), Decimal("10.00")]
    transfers = {
        localstripe.client().v1.transfers.retrieve(str(payout.stripe_transfer)).id
        for payout in paid
    }
    assert len(transfers) == 2
    balance = selectors.payout_balance(owner)
    assert (balance.earnings, balance.payable) == (Decimal("7.000000"), Decimal("7.00"))
    assert selectors.ledger_verify() == []
