"""The market under real concurrency on PostgreSQL: threads, each with its own connection and
transaction, released together. The offer's row lock must keep an offer from being oversold,
a clearing from running twice, and a bid from slipping in beside a clearing unseen."""

import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing import selectors as billing_selectors
from billing.errors import InsufficientFunds
from billing.models import Account, Entry, Hold, HoldReleaseBatch, Transaction
from billing.services.ledger import accounts_open
from billing.tasks import hold_release_batches_due_task
from marketplace import errors, services
from marketplace.models import Allocation, Bid, Offer
from marketplace.services import AuctionOutcome
from organizations.models import Membership, Organization
from tests.concurrency import kinds, run_together
from tests.conftest import wait_for
from tests.factories import MembershipFactory, OfferFactory, funded_organization

pytestmark = pytest.mark.django_db(transaction=True)

D = Decimal


@pytest.fixture(autouse=True)
def platform_accounts() -> None:
    """The platform's accounts, as migration 0002 leaves them (a transactional test's flush
    removes them)."""
    accounts_open([(None, kind) for kind in Account.PLATFORM_KINDS])


def releases_applied() -> None:
    """The losers' holds released after the clearing's commit (ADR 0025): by the sweep's task
    run here, or by the session's Celery worker when one runs and took the clearing's message
    first (the sweep skips a batch a worker holds), so it waits until no batch is left."""
    hold_release_batches_due_task()
    wait_for(lambda: not HoldReleaseBatch.objects.exists(), timeout=10, interval=0.05)


def teams(count: int, funds: str = "100") -> list[Membership]:
    return [
        MembershipFactory(
            organization=funded_organization(funds, name=f"Team {number:02}"),
            role=Membership.Role.ADMIN,
        )
        for number in range(count)
    ]


def wallets(members: list[Membership]) -> list[tuple[Decimal, Decimal]]:
    found = [billing_selectors.wallet_get(member.organization) for member in members]
    return [(wallet.available, wallet.held) for wallet in found]


def counts() -> tuple[int, ...]:
    return (
        Bid.objects.count(),
        Allocation.objects.count(),
        Hold.objects.count(),
        Transaction.objects.count(),
        Entry.objects.count(),
    )


# --- Buy-now ---------------------------------------------------------------------------------


def test_twenty_teams_buying_at_once_never_oversell_an_offer():
    """50 units, each of 20 teams buys 10 at once: there is room for exactly five."""
    offer = OfferFactory(quantity=50, buy_now_price=D("3.00"))
    buyers = teams(20)

    outcomes = run_together(
        [
            lambda buyer=buyer: services.offer_buy(actor=buyer, offer=offer, quantity=10)
            for buyer in buyers
        ]
    )

    assert kinds(outcomes) == {"Allocation": 5, "InsufficientQuantity": 15}, outcomes
    refusals = [o for o in outcomes if isinstance(o, errors.InsufficientQuantity)]
    assert {(r.code, r.status_code, r.extra["remaining"], r.extra["asked"]) for r in refusals} == {
        ("insufficient_quantity", 409, 0, 10)
    }
    offer.refresh_from_db()
    assert (offer.units_sold, offer.remaining) == (50, 0)
    assert set(Allocation.objects.values_list("quantity", "unit_price")) == {(10, D("3.00"))}
    assert Allocation.objects.count() == 5
    won = [isinstance(outcome, Allocation) for outcome in outcomes]
    assert wallets(buyers) == [(D(70), D(30)) if bought else (D(100), D(0)) for bought in won]
    assert Hold.objects.count() == 5
    assert set(Hold.objects.values_list("status", "amount")) == {(Hold.Status.OPEN, D(30))}
    assert Transaction.objects.filter(kind=Transaction.Kind.HOLD).count() == 5
    assert billing_selectors.ledger_verify() == []


def test_buying_and_funds_running_out_at_once_keep_wallets_and_offer_consistent():
    """One team with money for three purchases tries eight at once from an offer with room for
    five: the wallet, not the offer, is the limit."""
    offer = OfferFactory(quantity=50, buy_now_price=D("3.00"))
    (buyer,) = teams(1, funds="90")

    outcomes = run_together([lambda: services.offer_buy(actor=buyer, offer=offer, quantity=10)] * 8)

    assert kinds(outcomes) == {"Allocation": 3, "InsufficientFunds": 5}, outcomes
    assert all(isinstance(o, Allocation | InsufficientFunds) for o in outcomes)
    offer.refresh_from_db()
    assert offer.units_sold == 30
    assert wallets([buyer]) == [(D(0), D(90))]
    assert billing_selectors.ledger_verify() == []


def test_one_team_bidding_at_once_never_passes_the_cap_per_buyer():
    """Eight bids of 5 at once against a cap of 20 per buyer: exactly four are accepted."""
    offer = OfferFactory(quantity=100, reserve_price=D("1.00"), max_per_buyer=20)
    (bidder,) = teams(1)

    outcomes = run_together(
        [lambda: services.bid_place(actor=bidder, offer=offer, quantity=5, price="1.50")] * 8
    )

    assert kinds(outcomes) == {"Bid": 4, "MaxPerBuyerExceeded": 4}, outcomes
    refusals = [o for o in outcomes if isinstance(o, errors.MaxPerBuyerExceeded)]
    assert [r.extra for r in refusals] == [{"max_per_buyer": 20, "already": 20, "asked": 5}] * 4
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid) == (4, 20)
    assert wallets([bidder]) == [(D(70), D(30))]
    assert billing_selectors.ledger_verify() == []


def test_a_closing_rush_of_many_teams_and_a_withdrawal_keeps_every_hold_and_figure_exact():
    """Bids share the offer's lock (FOR KEY SHARE) and count themselves in shard rows: twelve
    teams bidding twice each at once, while one withdraws an earlier bid, all succeed (no
    deadlock), every hold is price x quantity, and the published demand figures count exactly
    the open bids."""
    offer = OfferFactory(quantity=1_000, reserve_price=D("1.00"))
    members = teams(12)
    early = services.bid_place(actor=members[0], offer=offer, quantity=7, price="1.10")

    def bid(member: Membership, number: int) -> Callable[[], Any]:
        return lambda: services.bid_place(
            actor=member, offer=offer, quantity=number + 1, price=f"1.{number:02}"
        )

    calls = [bid(member, index % 10) for index, member in enumerate(members * 2)]
    calls.append(lambda: services.bid_withdraw(actor=members[0], bid=early))
    outcomes = run_together(calls)

    assert kinds(outcomes) == {"Bid": 25}, outcomes
    open_bids = Bid.objects.filter(offer=offer, status=Bid.Status.OPEN).select_related("hold")
    assert open_bids.count() == 24
    assert all(b.hold.amount == b.hold.placed == b.price * b.quantity for b in open_bids)
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid) == (24, sum(b.quantity for b in open_bids))
    for member in members:
        held = sum(
            (b.hold.amount for b in open_bids if b.organization_id == member.organization_id),
            D(0),
        )
        assert wallets([member]) == [(D(100) - held, held)]
    assert billing_selectors.ledger_verify() == []


# --- Clearing ------------------------------------------------------------------------------------


def worked_example_closed() -> tuple[Offer, dict[str, Bid]]:
    """docs/design.md's worked example (A 40@2.50, B 30@2.00, C 50@1.80, D 20@1.20 for 100 units at
    a reserve of 1.00), each team with 500; the auction has closed."""
    offer = OfferFactory(quantity=100, reserve_price=D("1.00"))
    bids = {}
    for name, quantity, price in (
        ("A", 40, "2.50"),
        ("B", 30, "2.00"),
        ("C", 50, "1.80"),
        ("D", 20, "1.20"),
    ):
        member = MembershipFactory(
            organization=funded_organization("500", name=name), role=Membership.Role.ADMIN
        )
        bids[name] = services.bid_place(actor=member, offer=offer, quantity=quantity, price=price)
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - timedelta(seconds=1)
    )
    return offer, bids


def test_clearing_from_several_workers_at_once_clears_once():
    offer, bids = worked_example_closed()
    before = counts()

    outcomes = run_together([lambda: services.auction_clear(offer_id=offer.pk)] * 8)
    releases_applied()

    assert kinds(outcomes) == {"AuctionOutcome": 8}, outcomes
    assert (
        sorted(outcomes, key=lambda outcome: not outcome.cleared)
        == [
            AuctionOutcome(
                offer_id=offer.pk, cleared=True, price=D("1.80"), units_sold=100, winners=3, bids=4
            )
        ]
        + [AuctionOutcome(offer_id=offer.pk, cleared=False)] * 7
    )
    # Three allocations; one release transaction (two entries) for each of the four teams.
    assert counts() == (
        before[0],
        before[1] + 3,
        before[2],
        before[3] + 4,
        before[4] + 8,
    )
    assert sorted(
        Allocation.objects.values_list("organization__name", "quantity", "unit_price")
    ) == [("A", 40, D("1.80")), ("B", 30, D("1.80")), ("C", 30, D("1.80"))]
    assert [
        (wallet.available, wallet.held)
        for wallet in (
            billing_selectors.wallet_get(Organization.objects.get(name=name)) for name in "ABCD"
        )
    ] == [(D(428), D(72)), (D(446), D(54)), (D(446), D(54)), (D(500), D(0))]
    assert list(
        Hold.objects.filter(pk__in=[bid.hold_id for bid in bids.values()])
        .order_by("bid__organization__name")
        .values_list("amount", "released")
    ) == [(D(72), D(28)), (D(54), D(6)), (D(54), D(36)), (D(0), D(24))]
    offer.refresh_from_db()
    assert (offer.status, offer.units_sold) == (Offer.Status.CLEARED, 100)
    assert billing_selectors.ledger_verify() == []


def test_bids_placed_while_the_auction_closes_are_cleared_or_refused_never_lost():
    """Twelve teams bid at intervals around the close time while three workers try to clear
    the offer as soon as it is due. A bid lands before the clearing (and is cleared with the
    others) or is refused as `offer_not_open`; none is left open, and no refused team pays."""
    closes_in = 1.5
    bidders = teams(12)
    offer = OfferFactory(
        quantity=100,
        reserve_price=D("1.00"),
        auction_closes_at=timezone.now() + timedelta(seconds=closes_in),
    )

    def bid_later(member: Membership, delay: float) -> Callable[[], Any]:
        def call() -> Any:
            time.sleep(delay)
            return services.bid_place(actor=member, offer=offer, quantity=5, price="2.00")

        return call

    def clear_when_due() -> list[AuctionOutcome]:
        outcomes = []
        deadline = time.monotonic() + closes_in + 10
        while time.monotonic() < deadline:
            outcome = services.auction_clear(offer_id=offer.pk)
            outcomes.append(outcome)
            if outcome.cleared or Offer.objects.get(pk=offer.pk).status != Offer.Status.OPEN:
                break
            time.sleep(0.01)
        return outcomes

    # Bids every 0.25 s from the start: about half before the close, half after.
    outcomes = run_together(
        [bid_later(member, 0.25 * number) for number, member in enumerate(bidders)]
        + [clear_when_due] * 3
    )

    bid_outcomes, clearings = outcomes[:12], outcomes[12:]
    assert all(isinstance(o, Bid | errors.OfferNotOpen) for o in bid_outcomes), bid_outcomes
    landed = [o for o in bid_outcomes if isinstance(o, Bid)]
    # The first bids come a second before the close, the last ones a second after it.
    assert isinstance(bid_outcomes[0], Bid), bid_outcomes
    assert isinstance(bid_outcomes[-1], errors.OfferNotOpen), bid_outcomes
    cleared = [o for runs in clearings for o in runs if o.cleared]
    assert cleared == [
        AuctionOutcome(
            offer_id=offer.pk,
            cleared=True,
            price=D("1.00"),
            units_sold=5 * len(landed),
            winners=len(landed),
            bids=len(landed),
        )
    ]
    assert set(Bid.objects.values_list("pk", flat=True)) == {bid.pk for bid in landed}
    assert set(Bid.objects.values_list("status", "quantity_won", "price_paid")) == {
        (Bid.Status.WON, 5, D("1.00"))
    }
    assert Allocation.objects.filter(offer=offer).count() == len(landed)
    offer.refresh_from_db()
    assert (offer.status, offer.bid_count, offer.units_bid, offer.units_sold) == (
        Offer.Status.CLEARED,
        len(landed),
        5 * len(landed),
        5 * len(landed),
    )
    # Winners keep 5 x 1.00 of the 10.00 they held; refused teams were never touched.
    assert wallets(bidders) == [
        (D(95), D(5)) if isinstance(outcome, Bid) else (D(100), D(0)) for outcome in bid_outcomes
    ]
    assert Hold.objects.count() == len(landed)
    assert billing_selectors.ledger_verify() == []


def test_withdrawals_racing_the_clearing_are_either_done_or_refused():
    """Each of the four teams withdraws its bid while two workers clear: a withdrawal that
    gets the offer first releases the whole hold and the bid takes no part; one that comes
    after is refused, and the bid is settled by the clearing."""
    offer, bids = worked_example_closed()
    # Withdrawals are allowed only before the close: move it just ahead of now, and clear
    # with a `now` after it.
    closes = timezone.now() + timedelta(seconds=1)
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=closes)
    members = {name: Membership.objects.get(organization__name=name) for name in bids}

    outcomes = run_together(
        [
            lambda name=name: services.bid_withdraw(actor=members[name], bid=bids[name])
            for name in bids
        ]
        + [lambda: services.auction_clear(offer_id=offer.pk, now=closes)] * 2
    )
    releases_applied()

    withdrawals, clearings = outcomes[:4], outcomes[4:]
    assert all(isinstance(o, Bid | errors.BidNotOpen) for o in withdrawals), withdrawals
    assert sorted(o.cleared for o in clearings) == [False, True], clearings
    for name, outcome in zip(bids, withdrawals, strict=True):
        bid = Bid.objects.select_related("hold").get(pk=bids[name].pk)
        if isinstance(outcome, Bid):
            assert (bid.status, bid.hold.status, bid.hold.released) == (
                Bid.Status.WITHDRAWN,
                Hold.Status.CLOSED,
                bid.hold.placed,
            )
            assert not Allocation.objects.filter(bid=bid).exists()
        else:
            assert bid.status in {Bid.Status.WON, Bid.Status.PARTIALLY_WON, Bid.Status.LOST}
    assert not Bid.objects.filter(status=Bid.Status.OPEN).exists()
    held = {
        organization.name: billing_selectors.wallet_get(organization).held
        for organization in Organization.objects.filter(name__in=bids)
    }
    for name, amount in held.items():
        assert amount == sum(
            Allocation.objects.filter(organization__name=name).values_list(
                "hold__amount", flat=True
            ),
            D(0),
        )
    assert billing_selectors.ledger_verify() == []
