"""Refunds and disputes of top-ups against the local Stripe server, on PostgreSQL: the wallet
is debited once per refund and per dispute however often or late the events come, a won
dispute gives the money back, what the wallet cannot cover becomes a debt that refuses new
commitments until a top-up repays it, and the ledger stays balanced."""

import json
from decimal import Decimal

import pytest
from django.test import Client

from billing import selectors, services
from billing.errors import OutstandingDebt, TopUpNotRefundable
from billing.models import Account, Dispute, Entry, Hold, ReferenceKind, TopUpRefund, Transaction
from billing.selectors import debt_owed
from tests.billing.stripe_flows import (
    deliver,
    event_matching,
    paid_top_up,
    signed_event,
    stripe_events,
)
from tests.billing.test_localstripe_server import WebhookReceiver
from tests.billing.test_webhook import signature
from tests.conftest import client_for
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.localstripe import LocalStripe
from tests.marketplace.test_market_api import market, offer_for_sale

__all__ = ["market", "stripe_events"]

pytestmark = pytest.mark.django_db

DISPUTED_CARD = "4000000000000259"


@pytest.fixture
def team():
    organization = OrganizationFactory(name="Plasma Group")
    services.wallet_open(organization)
    return organization


@pytest.fixture
def team_admin(team):
    return MembershipFactory(organization=team, role="admin").user


@pytest.fixture
def operator():
    return UserFactory(is_staff=True, is_superuser=True)


def available(organization) -> Decimal:
    return selectors.wallet_get(organization).available


def money_rows() -> tuple[int, int, int]:
    return Transaction.objects.count(), Entry.objects.count(), Hold.objects.count()


def test_an_operator_refund_debits_the_wallet_once_per_refund(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin, operator
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "50.00")

    refund = services.top_up_refund(
        top_up=top_up, actor=operator, amount="20.00", reason="Asked by the team"
    )
    body, header = event_matching(
        stripe_events, "charge.refunded", "payment_intent", top_up.payment_intent
    )
    answers = [deliver(client, body, header).json()["outcome"] for _ in range(3)]

    assert refund.status == "succeeded" and refund.stripe_refund.startswith("re_")
    assert answers == ["debited"] * 3
    assert available(team) == Decimal("30.00")
    top_up.refresh_from_db()
    assert top_up.amount_refunded == Decimal("20.00")
    refunds = Transaction.objects.filter(kind="refund")
    assert refunds.count() == 1
    assert sorted((e.account.kind, e.amount) for e in refunds.get().entries.all()) == [
        ("available", Decimal("-20.000000")),
        ("stripe_clearing", Decimal("20.000000")),
    ]
    with pytest.raises(TopUpNotRefundable) as too_much:
        services.top_up_refund(top_up=top_up, actor=operator, amount="30.01", reason="More")
    assert too_much.value.extra["refundable"] == "30.00"
    assert TopUpRefund.objects.count() == 1
    assert selectors.ledger_verify() == []


def test_a_late_charge_refunded_moves_nothing_and_a_tampered_one_is_refused(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin, operator
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "50.00")
    charge = {
        "id": "ch_made_up",
        "object": "charge",
        "payment_intent": top_up.payment_intent,
        "currency": "usd",
        "amount": 5000,
    }
    second = signed_event("charge.refunded", {**charge, "amount_refunded": 3000})
    first = signed_event("charge.refunded", {**charge, "amount_refunded": 1000})

    assert deliver(client, second).json()["outcome"] == "debited"
    assert deliver(client, first).json()["outcome"] == "ignored: refunds already recorded"
    tampered = json.loads(first)
    tampered["data"]["object"]["amount_refunded"] = 5000
    answer = deliver(client, json.dumps(tampered).encode(), signature(first))
    stale = deliver(
        client, first, signature(first, timestamp=int(top_up.created_at.timestamp()) - 600)
    )

    assert (answer.status_code, stale.status_code) == (400, 400)
    assert available(team) == Decimal("20.00")
    assert Transaction.objects.filter(kind="refund").count() == 1
    assert selectors.ledger_verify() == []


def test_a_refund_the_wallet_cannot_cover_is_a_debt_that_refuses_commitments_until_repaid(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin, operator
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "50.00")
    services.hold_place(organization=team, amount="40", reference_kind=ReferenceKind.BID)

    services.top_up_refund(top_up=top_up, actor=operator, reason="Fraudulent card")
    body, header = event_matching(
        stripe_events, "charge.refunded", "payment_intent", top_up.payment_intent
    )
    outcome = deliver(client, body, header).json()["outcome"]

    assert outcome == "debited; 40.000000 recorded as owed"
    assert debt_owed(team) == Decimal("40")
    assert selectors.wallet_get(team) == selectors.Wallet(
        available=Decimal("0"), held=Decimal("40"), earnings=Decimal("0"), currency="USD"
    )
    before = money_rows()
    with pytest.raises(OutstandingDebt) as refused:
        services.hold_place(organization=team, amount="0.01", reference_kind=ReferenceKind.BID)
    assert refused.value.extra == {"owed": "40.000000", "currency": "USD"}
    assert money_rows() == before
    assert [d.organization for d in selectors.debt_list()] == [team]

    paid_top_up(client, localstripe, stripe_events, team, team_admin, "60.00")

    assert debt_owed(team) == Decimal("0")
    assert available(team) == Decimal("20")
    services.hold_place(organization=team, amount="5", reference_kind=ReferenceKind.BID)
    assert list(selectors.debt_list()) == []
    assert selectors.ledger_verify() == []


def dispute_of(stripe_events: WebhookReceiver, top_up) -> tuple[bytes, str, str]:
    body, header = event_matching(
        stripe_events, "charge.dispute.created", "payment_intent", top_up.payment_intent
    )
    return body, header, json.loads(body)["data"]["object"]["id"]


@pytest.mark.parametrize(
    ("evidence", "status", "outcome", "left"),
    [
        ("winning_evidence", "won", "won; reinstated", Decimal("30.00")),
        ("losing_evidence", "lost", "lost", Decimal("0")),
    ],
)
def test_a_dispute_withdraws_once_and_gives_back_only_if_won(
    client: Client,
    localstripe: LocalStripe,
    stripe_events: WebhookReceiver,
    team,
    team_admin,
    evidence,
    status,
    outcome,
    left,
):
    top_up = paid_top_up(
        client, localstripe, stripe_events, team, team_admin, "30.00", DISPUTED_CARD
    )
    body, header, dispute_id = dispute_of(stripe_events, top_up)

    created = [deliver(client, body, header).json()["outcome"] for _ in range(2)]
    during = available(team)
    localstripe.client().v1.disputes.update(
        dispute_id, params={"evidence": {"uncategorized_text": evidence}}
    )
    closed_body, closed_header = stripe_events.wait_for("charge.dispute.closed", dispute_id)
    closed = [deliver(client, closed_body, closed_header).json()["outcome"] for _ in range(2)]
    late_created = deliver(
        client, signed_event("charge.dispute.created", json.loads(body)["data"]["object"])
    )

    assert created == ["withdrawn", "withdrawn"]
    assert during == Decimal("0")
    assert closed == [outcome, outcome]
    assert late_created.json()["outcome"] == f"ignored: dispute already {status}"
    assert available(team) == left
    dispute = Dispute.objects.get(stripe_dispute=dispute_id)
    assert (dispute.status, dispute.amount, dispute.is_withdrawn) == (
        status,
        Decimal("30.00"),
        True,
    )
    assert Transaction.objects.filter(kind="dispute").count() == (2 if left else 1)
    assert debt_owed(team) == 0
    assert selectors.ledger_verify() == []


def test_a_lost_dispute_closed_before_its_creation_withdraws_once_and_records_the_debt(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "30.00")
    services.hold_place(organization=team, amount="25", reference_kind=ReferenceKind.BID)
    dispute = {
        "id": "dp_made_up_lost",
        "object": "dispute",
        "payment_intent": top_up.payment_intent,
        "charge": "ch_made_up",
        "amount": 3000,
        "currency": "usd",
        "reason": "fraudulent",
    }

    closed = deliver(client, signed_event("charge.dispute.closed", {**dispute, "status": "lost"}))
    created = deliver(
        client, signed_event("charge.dispute.created", {**dispute, "status": "needs_response"})
    )

    assert closed.json()["outcome"] == "lost; withdrawn; 25.000000 recorded as owed"
    assert created.json()["outcome"] == "ignored: dispute already lost"
    assert debt_owed(team) == Decimal("25")
    assert available(team) == Decimal("0")
    assert Transaction.objects.filter(kind="dispute").count() == 1
    assert selectors.ledger_verify() == []


def test_a_won_dispute_closed_before_its_creation_moves_nothing(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "30.00")
    dispute = {
        "id": "dp_made_up_won",
        "object": "dispute",
        "payment_intent": top_up.payment_intent,
        "amount": 3000,
        "currency": "usd",
    }

    closed = deliver(client, signed_event("charge.dispute.closed", {**dispute, "status": "won"}))
    created = deliver(
        client, signed_event("charge.dispute.created", {**dispute, "status": "needs_response"})
    )

    assert (closed.json()["outcome"], created.json()["outcome"]) == (
        "won",
        "ignored: dispute already won",
    )
    assert available(team) == Decimal("30.00")
    assert Transaction.objects.filter(kind="dispute").count() == 0


def test_a_dispute_for_more_than_the_top_up_takes_no_more_than_the_top_up(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "30.00")
    dispute = {
        "id": "dp_made_up_large",
        "object": "dispute",
        "payment_intent": top_up.payment_intent,
        "amount": 999_999,
        "currency": "usd",
        "status": "needs_response",
    }

    outcome = deliver(client, signed_event("charge.dispute.created", dispute)).json()["outcome"]

    assert outcome == "withdrawn"
    assert Dispute.objects.get().amount == Decimal("30.00")
    assert available(team) == Decimal("0")
    assert Account.objects.get(organization=team, kind="debt").balance == 0


def test_an_operator_refunds_from_the_admin_and_sees_the_debt_there(
    client: Client, localstripe, stripe_events: WebhookReceiver, team, team_admin, operator
):
    top_up = paid_top_up(client, localstripe, stripe_events, team, team_admin, "20.00")
    services.hold_place(organization=team, amount="15", reference_kind=ReferenceKind.BID)
    client.force_login(operator)
    change_page = client.get(f"/admin/billing/topup/{top_up.pk}/change/")

    refused = client.post(
        f"/admin/billing/topup/{top_up.pk}/refund/", {"amount": "", "reason": " "}
    )
    answer = client.post(
        f"/admin/billing/topup/{top_up.pk}/refund/", {"amount": "", "reason": "Duplicate payment"}
    )
    body, header = event_matching(
        stripe_events, "charge.refunded", "payment_intent", top_up.payment_intent
    )
    deliver(client, body, header)
    debts = client.get("/admin/billing/debt/")

    assert f"/admin/billing/topup/{top_up.pk}/refund/".encode() in change_page.content
    assert refused.status_code == 200 and b"This field is required" in refused.content
    assert answer.status_code == 302
    refund = TopUpRefund.objects.get()
    assert (refund.amount, refund.reason, refund.created_by) == (
        Decimal("20.00"),
        "Duplicate payment",
        operator,
    )
    assert debt_owed(team) == Decimal("15")
    assert debts.status_code == 200
    assert team.name.encode() in debts.content and b"15.000000" in debts.content
    pages = [
        "/admin/billing/dispute/",
        "/admin/billing/payout/",
        "/admin/billing/connectedaccount/",
        "/admin/billing/topuprefund/",
    ]
    assert [client.get(page).status_code for page in pages] == [200] * 4
    assert selectors.ledger_verify() == []


def test_an_organization_that_owes_can_neither_bid_nor_buy_through_the_api(market):
    offer = offer_for_sale(market)
    services.wallet_debit(
        organization=market.team,
        amount="1000",
        kind="dispute",
        idempotency_reference="test-lost-dispute",
    )
    services.wallet_debit(
        organization=market.team,
        amount="0.50",
        kind="refund",
        idempotency_reference="test-refund-beyond",
    )
    before = money_rows()
    api = client_for(market.team_admin)
    body = {"organization": str(market.team.uuid), "quantity": 1}

    bid = api.post(f"/api/v1/offers/{offer.uuid}/bids/", {**body, "price": "1.00"}, format="json")
    buy = api.post(f"/api/v1/offers/{offer.uuid}/buy/", body, format="json")

    for answer in (bid, buy):
        assert answer.status_code == 402
        assert answer.json()["code"] == "outstanding_debt"
        assert answer.json()["extra"] == {"owed": "0.500000", "currency": "USD"}
    assert money_rows() == before
    assert selectors.ledger_verify() == []
