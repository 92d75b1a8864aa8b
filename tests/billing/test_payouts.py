"""Payouts through Stripe Connect against the local Stripe server, on PostgreSQL: onboarding
and its account.updated (replayed, late, tampered), earnings held for the holding period then
payable, a transfer that pays once per payout and balances the ledger, and the refusals that
write nothing."""

import datetime
import json
import time
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import selectors, services
from billing.errors import AmountNotPayable, OutstandingDebt, PayoutsNotEnabled
from billing.models import Account, ConnectedAccount, Payout, StripeEvent, Transaction
from computeshare.errors import IdempotencyKeyReused
from tests.billing.stripe_flows import (
    connected_and_active,
    deliver,
    earn,
    onboarding_submit,
    signed_event,
    stripe_events,
)
from tests.billing.test_localstripe_server import WebhookReceiver
from tests.billing.test_webhook import signature
from tests.factories import MembershipFactory, OrganizationFactory
from tests.localstripe import LocalStripe
from webhooks.models import WebhookEvent
from webhooks.services import endpoint_create

__all__ = ["stripe_events"]

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner():
    return OrganizationFactory(name="Dune Cluster Co")


@pytest.fixture
def owner_admin(owner):
    return MembershipFactory(organization=owner, role="admin").user


@pytest.fixture
def no_holding_period(settings):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(0)


def payout_rows() -> tuple[int, int]:
    return Payout.objects.count(), Transaction.objects.filter(kind="payout").count()


def test_onboarding_makes_one_express_account_that_account_updated_activates(
    client: Client, stripe_events: WebhookReceiver, localstripe: LocalStripe, owner, owner_admin
):
    first = services.connected_account_onboard(
        organization=owner,
        actor=owner_admin,
        return_url="http://127.0.0.1:9/return",
        refresh_url="http://127.0.0.1:9/refresh",
    )
    second = services.connected_account_onboard(
        organization=owner,
        actor=owner_admin,
        return_url="http://127.0.0.1:9/return",
        refresh_url="http://127.0.0.1:9/refresh",
    )

    account = ConnectedAccount.objects.get(organization=owner)
    assert account.status == "onboarding"
    assert account.stripe_account and account.stripe_account.startswith("acct_")
    assert "external_account" in account.requirements_due
    assert first.url != second.url  # a fresh single-use link each time, for one account
    stripe_account = localstripe.client().v1.accounts.retrieve(account.stripe_account)
    assert stripe_account.metadata["organization"] == str(owner.uuid)

    assert onboarding_submit(second.url) == "http://127.0.0.1:9/return"
    body, header = stripe_events.wait_for("account.updated", account.stripe_account)
    answers = [deliver(client, body, header) for _ in range(3)]

    assert [answer.json()["outcome"] for answer in answers] == ["account active"] * 3
    account.refresh_from_db()
    assert (account.status, account.payouts_enabled, account.transfers_active) == (
        "active",
        True,
        True,
    )
    assert account.requirements_due == []
    assert StripeEvent.objects.get(type="account.updated").deliveries == 3


def test_a_late_or_tampered_account_updated_changes_nothing(
    client: Client, stripe_events: WebhookReceiver, owner, owner_admin
):
    account = connected_and_active(client, stripe_events, owner, owner_admin)
    stale_state = {
        "id": account.stripe_account,
        "object": "account",
        "details_submitted": False,
        "payouts_enabled": False,
        "capabilities": {"transfers": "inactive"},
        "requirements": {"currently_due": ["external_account"]},
    }
    late = signed_event("account.updated", stale_state, created=account.stripe_updated - 60)

    assert deliver(client, late).json()["outcome"] == "ignored: older than the state we have"
    tampered = json.loads(late)
    tampered["created"] = account.stripe_updated + 60
    tampered_body = json.dumps(tampered).encode()
    answer = deliver(client, tampered_body, signature(late))

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid_signature"
    account.refresh_from_db()
    assert account.status == "active"


def test_earnings_are_held_for_the_holding_period_then_payable(settings, owner):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(seconds=2)
    net = earn(owner, "10.00")

    before = selectors.payout_balance(owner)
    time.sleep(2.1)
    after = selectors.payout_balance(owner)

    assert net == Decimal("9.00")
    assert (before.earnings, before.held, before.payable) == (net, net, Decimal("0.00"))
    assert (after.earnings, after.held, after.payable) == (net, Decimal("0"), net)


def test_a_payout_of_held_earnings_is_refused_and_writes_nothing(
    client: Client, stripe_events: WebhookReceiver, owner, owner_admin
):
    connected_and_active(client, stripe_events, owner, owner_admin)
    earn(owner, "10.00")  # within the default seven days' hold
    before = payout_rows()

    with pytest.raises(AmountNotPayable) as refused:
        services.payout_create(organization=owner, actor=owner_admin)

    assert refused.value.extra["payable"] == "0.00"
    assert payout_rows() == before
    assert selectors.payout_balance(owner).held == Decimal("9.00")


def test_a_payout_transfers_what_is_payable_once_and_the_ledger_balances(
    client: Client,
    stripe_events: WebhookReceiver,
    localstripe: LocalStripe,
    no_holding_period,
    owner,
    owner_admin,
):
    account = connected_and_active(client, stripe_events, owner, owner_admin)
    earn(owner, "25.00")
    earn(owner, "0.05")  # 0.045 net: the half cent stays in earnings

    payout = services.payout_create(organization=owner, actor=owner_admin, idempotency_key="k1")
    again = services.payout_create(organization=owner, actor=owner_admin, idempotency_key="k1")

    assert payout.status == "paid"
    assert again.pk == payout.pk
    assert payout.amount == Decimal("22.54")
    transfer = localstripe.client().v1.transfers.retrieve(str(payout.stripe_transfer))
    assert (transfer.amount, transfer.currency, transfer.destination) == (
        2254,
        "usd",
        account.stripe_account,
    )
    assert transfer.metadata["payout"] == str(payout.uuid)
    posted = Transaction.objects.get(kind="payout")
    assert sorted((e.account.kind, e.amount) for e in posted.entries.all()) == [
        ("earnings", Decimal("-22.540000")),
        ("stripe_clearing", Decimal("22.540000")),
    ]
    balance = selectors.payout_balance(owner)
    assert (balance.earnings, balance.payable) == (Decimal("0.005000"), Decimal("0.00"))
    assert selectors.ledger_verify() == []
    with pytest.raises(IdempotencyKeyReused):
        services.payout_create(
            organization=owner, actor=owner_admin, amount="1.00", idempotency_key="k1"
        )
    assert payout_rows() == (1, 1)


def test_a_paid_payout_tells_the_owners_endpoints_once(
    client: Client, stripe_events: WebhookReceiver, no_holding_period, owner, owner_admin
):
    connected_and_active(client, stripe_events, owner, owner_admin)
    # An endpoint that wants the event (port 9, discard: its deliveries are only retried).
    endpoint_create(organization=owner, url="http://127.0.0.1:9/hooks", events=["payout.paid"])
    earn(owner, "10.00")

    payout = services.payout_create(organization=owner, actor=owner_admin)
    services.payout_transfer(payout_id=payout.pk)  # the sweep, after a lost answer: paid already

    events = WebhookEvent.objects.filter(organization=owner, type="payout.paid")
    assert [event.object_key for event in events] == [f"payout:{payout.uuid}"]
    data = events.get().data
    assert (data["id"], data["amount"], data["currency"]) == (str(payout.uuid), "9.00", "USD")
    assert data["stripe_transfer"] == payout.stripe_transfer
    assert data["paid_at"] is not None


def test_a_part_of_the_payable_can_be_paid_out(
    client: Client, stripe_events: WebhookReceiver, no_holding_period, owner, owner_admin
):
    connected_and_active(client, stripe_events, owner, owner_admin)
    earn(owner, "20.00")

    payout = services.payout_create(organization=owner, actor=owner_admin, amount="5.00")

    assert (payout.status, payout.amount) == ("paid", Decimal("5.00"))
    assert selectors.payout_balance(owner).payable == Decimal("13.00")
    with pytest.raises(AmountNotPayable):
        services.payout_create(organization=owner, actor=owner_admin, amount="13.01")
    assert payout_rows() == (1, 1)


def test_no_payout_without_an_active_account_or_while_the_organization_owes(
    client: Client, stripe_events: WebhookReceiver, no_holding_period, owner, owner_admin
):
    earn(owner, "10.00")
    with pytest.raises(PayoutsNotEnabled) as not_connected:
        services.payout_create(organization=owner, actor=owner_admin)
    assert not_connected.value.extra == {"status": "not_connected"}

    services.connected_account_onboard(
        organization=owner,
        actor=owner_admin,
        return_url="http://127.0.0.1:9/return",
        refresh_url="http://127.0.0.1:9/refresh",
    )
    with pytest.raises(PayoutsNotEnabled) as onboarding:
        services.payout_create(organization=owner, actor=owner_admin)
    assert onboarding.value.extra == {"status": "onboarding"}

    ConnectedAccount.objects.filter(organization=owner).delete()
    connected_and_active(client, stripe_events, owner, owner_admin)
    services.wallet_debit(
        organization=owner, amount="3", kind="refund", idempotency_reference="test-debt"
    )
    assert Account.objects.get(organization=owner, kind="debt").balance == Decimal("-3")
    with pytest.raises(OutstandingDebt):
        services.payout_create(organization=owner, actor=owner_admin)
    assert payout_rows() == (0, 0)


def test_a_transfer_stripe_refuses_puts_the_money_back_in_earnings(
    no_holding_period, owner, owner_admin
):
    # Our row says active, Stripe's account cannot receive transfers: Stripe refuses.
    services.connected_account_onboard(
        organization=owner,
        actor=owner_admin,
        return_url="http://127.0.0.1:9/return",
        refresh_url="http://127.0.0.1:9/refresh",
    )
    ConnectedAccount.objects.filter(organization=owner).update(status="active")
    earn(owner, "10.00")

    payout = services.payout_create(organization=owner, actor=owner_admin)

    assert payout.status == "failed"
    assert payout.failure_reason.startswith("Stripe refused the transfer")
    assert not WebhookEvent.objects.filter(type="payout.paid").exists()
    assert selectors.payout_balance(owner).payable == Decimal("9.00")
    kinds = sorted(
        (e.account.kind, e.amount)
        for t in Transaction.objects.filter(kind="payout")
        for e in t.entries.all()
    )
    assert kinds == [
        ("earnings", Decimal("-9.000000")),
        ("earnings", Decimal("9.000000")),
        ("stripe_clearing", Decimal("-9.000000")),
        ("stripe_clearing", Decimal("9.000000")),
    ]
    assert selectors.ledger_verify() == []


def test_a_payout_is_a_line_of_the_months_statement(
    client: Client, stripe_events: WebhookReceiver, no_holding_period, owner, owner_admin
):
    connected_and_active(client, stripe_events, owner, owner_admin)
    earn(owner, "30.00")
    services.payout_create(organization=owner, actor=owner_admin)
    today = timezone.localdate()

    statement = selectors.statement_build(owner, today.year, today.month)

    earnings = {account.kind: account for account in statement.accounts}["earnings"]
    assert earnings.totals == {"earning": Decimal("27"), "payout": Decimal("-27")}
    assert (earnings.opening, earnings.closing) == (0, 0)
    assert "debt" not in {account.kind for account in statement.accounts}
    client.force_login(owner_admin)
    page = client.get(f"/organizations/{owner.uuid}/statements/{today.year}/{today.month}/")
    assert b'data-field="payout"' in page.content


def test_an_account_updated_signed_by_the_connect_endpoint_needs_its_secret(
    client: Client, settings, owner, owner_admin
):
    ConnectedAccount.objects.create(
        organization=owner, created_by=owner_admin, stripe_account="acct_connect_endpoint"
    )
    body = signed_event(
        "account.updated",
        {
            "id": "acct_connect_endpoint",
            "object": "account",
            "details_submitted": True,
            "payouts_enabled": True,
            "capabilities": {"transfers": "active"},
            "requirements": {"currently_due": []},
        },
        account="acct_connect_endpoint",
    )
    header = signature(body, secret="whsec_connect_endpoint")

    refused = deliver(client, body, header)
    settings.STRIPE_CONNECT_WEBHOOK_SECRET = "whsec_connect_endpoint"
    accepted = deliver(client, body, header)

    assert refused.status_code == 400
    assert accepted.json()["outcome"] == "account active"
    assert ConnectedAccount.objects.get(organization=owner).status == "active"
