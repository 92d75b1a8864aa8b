"""Clearing auctions through the real services on PostgreSQL, with real billing holds: the
worked example of docs/design.md end to end, idempotence, no sale, buy-now before the close, the
management command and the periodic task on a real Celery worker; then what follows a clearing
(the allocation window's close) and what may happen before it (cancelling an offer,
withdrawing a bid)."""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing import selectors as billing_selectors
from billing import services as billing
from billing.models import Entry, Hold, ReferenceKind, Transaction
from billing.selectors import Wallet
from billing.tasks import hold_release_batches_due_task
from marketplace import errors, selectors, services
from marketplace.models import Allocation, Bid, Offer
from marketplace.services import AuctionOutcome
from marketplace.tasks import allocations_close_due_task, auctions_clear_due_task
from organizations.models import Membership, Organization
from tests.conftest import wait_for
from tests.factories import MembershipFactory, PartitionFactory, funded_organization

D = Decimal
WORKED_EXAMPLE = [("A", 40, "2.50"), ("B", 30, "2.00"), ("C", 50, "1.80"), ("D", 20, "1.20")]


# --- Helpers -----------------------------------------------------------------------------------


def admin_of(organization: Organization) -> Membership:
    return MembershipFactory(organization=organization, role=Membership.Role.ADMIN)


def team(name: str, funds: str = "500") -> Membership:
    """The admin of a buying organization with `funds` available."""
    return admin_of(funded_organization(funds, name=name))


def listed_offer(
    *, quantity: int = 100, reserve: str = "1.00", buy_now: str | None = None
) -> tuple[Membership, Offer]:
    """An owner's admin and the offer they list through `offer_create`: the auction closes in
    an hour, the window runs from two hours to thirty days from now."""
    partition = PartitionFactory()
    owner = admin_of(partition.cluster.organization)
    now = timezone.now()
    offer = services.offer_create(
        actor=owner,
        cluster=partition.cluster,
        partition=partition.name,
        resource="cpu",
        quantity=quantity,
        window_start=now + timedelta(hours=2),
        window_end=now + timedelta(days=30),
        reserve_price=reserve,
        buy_now_price=buy_now,
        auction_closes_at=now + timedelta(hours=1),
    )
    return owner, offer


def close_auction(offer: Offer) -> None:
    """Time passes: the auction's close time is now behind us."""
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - timedelta(seconds=1)
    )


def place_bids(offer: Offer, bids: list[tuple[str, int, str]]) -> dict[str, Bid]:
    placed = {}
    for name, quantity, price in bids:
        placed[name] = services.bid_place(
            actor=team(name), offer=offer, quantity=quantity, price=price
        )
    return placed


def wallet(bid_or_membership: Bid | Membership) -> tuple[Decimal, Decimal]:
    found = billing_selectors.wallet_get(bid_or_membership.organization)
    return found.available, found.held


def releases_applied() -> int:
    """What the `money` worker does after a clearing's commit (ADR 0025): the losing bids'
    holds released. The tests' transaction never commits, so the task is never sent; the
    sweep's task, run here, applies the pending batches."""
    return hold_release_batches_due_task()


def hold_row(hold_id: int) -> tuple[Any, ...]:
    return Hold.objects.values_list("status", "placed", "amount", "captured", "released").get(
        pk=hold_id
    )


@dataclass(frozen=True)
class Snapshot:
    """Everything a call that must change nothing could have changed."""

    counts: tuple[int, ...]
    bids: list[tuple[Any, ...]]
    holds: list[tuple[Any, ...]]
    offers: list[tuple[Any, ...]]
    allocations: list[tuple[Any, ...]]
    wallets: list[Wallet]


def snapshot() -> Snapshot:
    return Snapshot(
        counts=(
            Bid.objects.count(),
            Allocation.objects.count(),
            Hold.objects.count(),
            Transaction.objects.count(),
            Entry.objects.count(),
        ),
        bids=list(
            Bid.objects.order_by("pk").values_list(
                "pk", "status", "quantity_won", "price_paid", "updated_at"
            )
        ),
        holds=list(
            Hold.objects.order_by("pk").values_list(
                "pk", "status", "amount", "placed", "captured", "released"
            )
        ),
        offers=list(
            Offer.objects.order_by("pk").values_list(
                "pk", "status", "units_sold", "clearing_price", "cleared_at", "bid_count"
            )
        ),
        allocations=list(
            Allocation.objects.order_by("pk").values_list("pk", "quantity", "reserved", "closed_at")
        ),
        wallets=[
            billing_selectors.wallet_get(organization)
            for organization in Organization.objects.order_by("pk")
        ],
    )


def worked_example() -> tuple[Membership, Offer, dict[str, Bid]]:
    """docs/design.md's worked example, through the services: 100 units at a reserve of 1.00; each
    team has 500 and bids A 40@2.50, B 30@2.00, C 50@1.80, D 20@1.20; the auction has closed."""
    owner, offer = listed_offer()
    bids = place_bids(offer, WORKED_EXAMPLE)
    close_auction(offer)
    return owner, offer, bids


# --- The worked example ------------------------------------------------------------------------


@pytest.mark.django_db
def test_worked_example_clears_at_one_price_and_keeps_only_what_the_winners_pay():
    owner, offer, bids = worked_example()
    assert [wallet(bids[name]) for name in "ABCD"] == [
        (D(400), D(100)),
        (D(440), D(60)),
        (D(410), D(90)),
        (D(476), D(24)),
    ]

    outcome = services.auction_clear(offer_id=offer.pk)
    releases_applied()

    assert outcome == AuctionOutcome(
        offer_id=offer.pk, cleared=True, price=D("1.80"), units_sold=100, winners=3, bids=4
    )
    for each in bids.values():
        each.refresh_from_db()
    assert {name: (b.status, b.quantity_won, b.price_paid) for name, b in bids.items()} == {
        "A": (Bid.Status.WON, 40, D("1.80")),
        "B": (Bid.Status.WON, 30, D("1.80")),
        "C": (Bid.Status.PARTIALLY_WON, 30, D("1.80")),
        "D": (Bid.Status.LOST, 0, None),
    }
    allocations = {
        allocation.organization.name: allocation
        for allocation in Allocation.objects.select_related("organization", "hold")
    }
    assert {
        name: (
            a.quantity,
            a.unit_price,
            a.source,
            a.bid_id,
            a.hold_id,
            a.hold.amount,
            a.hold.status,
            (a.cluster_id, a.partition_id, a.resource),
            (a.window_start, a.window_end),
            (a.used, a.reserved, a.closed_at),
        )
        for name, a in allocations.items()
    } == {
        name: (
            units,
            D("1.80"),
            Allocation.Source.AUCTION,
            bids[name].pk,
            bids[name].hold_id,
            D("1.80") * units,
            Hold.Status.OPEN,
            (offer.cluster_id, offer.partition_id, "cpu"),
            (offer.window_start, offer.window_end),
            (D(0), D(0), None),
        )
        for name, units in (("A", 40), ("B", 30), ("C", 30))
    }
    # Each winner's hold shrank to price x units; the loser's closed and went back whole.
    assert [hold_row(bids[name].hold_id) for name in "ABCD"] == [
        (Hold.Status.OPEN, D(100), D(72), D(0), D(28)),
        (Hold.Status.OPEN, D(60), D(54), D(0), D(6)),
        (Hold.Status.OPEN, D(90), D(54), D(0), D(36)),
        (Hold.Status.CLOSED, D(24), D(0), D(0), D(24)),
    ]
    assert [wallet(bids[name]) for name in "ABCD"] == [
        (D(428), D(72)),
        (D(446), D(54)),
        (D(446), D(54)),
        (D(500), D(0)),
    ]
    releases = Transaction.objects.filter(reference=offer.uuid, kind=Transaction.Kind.RELEASE)
    assert sorted(
        releases.filter(entries__account__kind="available").values_list(
            "organization__name", "entries__amount"
        )
    ) == [("A", D(28)), ("B", D(6)), ("C", D(36)), ("D", D(24))]
    offer.refresh_from_db()
    assert (
        offer.status,
        offer.clearing_price,
        offer.units_sold,
        offer.units_sold_at_auction,
        offer.remaining,
        offer.cleared_at is not None,
    ) == (Offer.Status.CLEARED, D("1.80"), 100, 100, 0, True)
    # The owner is paid from the holds as jobs use the allocations, not at the clearing.
    assert billing_selectors.wallet_get(owner.organization).earnings == D(0)
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_one_organization_s_bids_are_settled_together_and_a_hold_kept_whole_moves_nothing():
    """A bids twice, once winning and once losing; B's bid is at the clearing price and wins
    all it asked, so its hold keeps everything and B gets no release at all."""
    _, offer = listed_offer()
    a = team("A")
    a_high = services.bid_place(actor=a, offer=offer, quantity=50, price="2.00")
    a_low = services.bid_place(actor=a, offer=offer, quantity=20, price="1.20")
    b = services.bid_place(actor=team("B"), offer=offer, quantity=50, price="1.50")
    c = services.bid_place(actor=team("C"), offer=offer, quantity=10, price="1.50")
    close_auction(offer)

    outcome = services.auction_clear(offer_id=offer.pk)
    releases_applied()

    assert (outcome.price, outcome.units_sold, outcome.winners, outcome.bids) == (
        D("1.50"),
        100,
        2,
        4,
    )
    assert [hold_row(each.hold_id) for each in (a_high, a_low, b, c)] == [
        (Hold.Status.OPEN, D(100), D(75), D(0), D(25)),
        (Hold.Status.CLOSED, D(24), D(0), D(0), D(24)),
        (Hold.Status.OPEN, D(75), D(75), D(0), D(0)),
        (Hold.Status.CLOSED, D(15), D(0), D(0), D(15)),
    ]
    releases = Transaction.objects.filter(reference=offer.uuid, kind=Transaction.Kind.RELEASE)
    assert sorted(
        releases.filter(entries__account__kind="available").values_list(
            "organization__name", "entries__amount"
        )
    ) == [("A", D(24)), ("A", D(25)), ("C", D(15))]
    # A's 49 comes back in two lines since ADR 0025: its winning bid's change at the clearing,
    # its losing bid's hold after the commit.
    assert {
        name: sum(
            amount
            for who, amount in releases.filter(entries__account__kind="available").values_list(
                "organization__name", "entries__amount"
            )
            if who == name
        )
        for name in "AC"
    } == {"A": D(49), "C": D(15)}
    assert [wallet(each) for each in (a_high, b, c)] == [
        (D(425), D(75)),
        (D(425), D(75)),
        (D(500), D(0)),
    ]
    assert sorted(Allocation.objects.values_list("bid_id", "quantity")) == sorted(
        [(a_high.pk, 50), (b.pk, 50)]
    )
    assert billing_selectors.ledger_verify() == []


# --- When clearing does nothing ------------------------------------------------------------------


@pytest.mark.django_db
def test_clearing_before_the_close_time_changes_nothing():
    _, offer = listed_offer()
    place_bids(offer, WORKED_EXAMPLE)
    before = snapshot()

    early = services.auction_clear(offer_id=offer.pk)
    just_before = services.auction_clear(
        offer_id=offer.pk, now=offer.auction_closes_at - timedelta(microseconds=1)
    )

    assert early == just_before == AuctionOutcome(offer_id=offer.pk, cleared=False)
    assert snapshot() == before
    assert selectors.auctions_due() == []


@pytest.mark.django_db
def test_clearing_twice_changes_nothing_the_second_time():
    _, offer, _ = worked_example()
    services.auction_clear(offer_id=offer.pk)
    releases_applied()
    after_first = snapshot()

    again = services.auction_clear(offer_id=offer.pk)

    assert again == AuctionOutcome(offer_id=offer.pk, cleared=False)
    assert snapshot() == after_first
    assert after_first.counts[1:] == (
        3,  # allocations
        4,  # holds
        4 + 4 + 4,  # transactions: funds, holds, one release per organization
        2 * 12,  # entries: two per transaction
    )
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_a_cancelled_offer_is_not_cleared():
    owner, offer = listed_offer()
    services.offer_cancel(actor=owner, offer=offer)
    close_auction(offer)
    before = snapshot()

    outcome = services.auction_clear(offer_id=offer.pk)

    assert outcome == AuctionOutcome(offer_id=offer.pk, cleared=False)
    assert snapshot() == before
    assert selectors.auctions_due() == []


# --- No sale -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_auction_without_bids_clears_with_no_sale():
    _, offer = listed_offer()
    close_auction(offer)

    outcome = services.auction_clear(offer_id=offer.pk)

    assert outcome == AuctionOutcome(
        offer_id=offer.pk, cleared=True, price=None, units_sold=0, winners=0, bids=0
    )
    offer.refresh_from_db()
    assert (offer.status, offer.clearing_price, offer.units_sold, offer.units_sold_at_auction) == (
        Offer.Status.CLEARED,
        None,
        0,
        0,
    )
    assert Allocation.objects.count() == 0


@pytest.mark.django_db
def test_no_bid_reaching_its_minimum_is_no_sale_and_releases_every_hold():
    """Buy-now takes 70 of 100 units; each bid insists on more than the 30 left, so the reserve
    is never met by a fillable bid."""
    _, offer = listed_offer(buy_now="3.00")
    buyer = team("E")
    bought = services.offer_buy(actor=buyer, offer=offer, quantity=70)
    bids = {
        name: services.bid_place(
            actor=team(name), offer=offer, quantity=quantity, price=price, min_quantity=minimum
        )
        for name, quantity, price, minimum in (("A", 40, "2.50", 31), ("B", 35, "2.00", 35))
    }
    close_auction(offer)

    outcome = services.auction_clear(offer_id=offer.pk)
    releases_applied()

    assert outcome == AuctionOutcome(
        offer_id=offer.pk, cleared=True, price=None, units_sold=0, winners=0, bids=2
    )
    for each in bids.values():
        each.refresh_from_db()
    assert [(b.status, b.quantity_won, b.price_paid) for b in bids.values()] == [
        (Bid.Status.LOST, 0, None)
    ] * 2
    assert [hold_row(bids[name].hold_id) for name in "AB"] == [
        (Hold.Status.CLOSED, D(100), D(0), D(0), D(100)),
        (Hold.Status.CLOSED, D(70), D(0), D(0), D(70)),
    ]
    assert [wallet(bids[name]) for name in "AB"] == [(D(500), D(0))] * 2
    # The buy-now sale stands.
    assert Allocation.objects.get() == bought
    assert wallet(buyer) == (D(290), D(210))
    offer.refresh_from_db()
    assert (offer.status, offer.clearing_price, offer.units_sold, offer.units_sold_at_auction) == (
        Offer.Status.CLEARED,
        None,
        70,
        0,
    )
    assert billing_selectors.ledger_verify() == []


# --- Buy-now before the close ------------------------------------------------------------------


@pytest.mark.django_db
def test_units_bought_now_are_not_auctioned():
    _, offer = listed_offer(buy_now="3.00")
    buyer = team("E")
    bought = services.offer_buy(actor=buyer, offer=offer, quantity=30)
    bids = place_bids(offer, WORKED_EXAMPLE)
    close_auction(offer)

    outcome = services.auction_clear(offer_id=offer.pk)
    releases_applied()

    # 70 left: A and B take them all; C's 1.80 is the highest unserved price.
    assert outcome == AuctionOutcome(
        offer_id=offer.pk, cleared=True, price=D("1.80"), units_sold=70, winners=2, bids=4
    )
    for each in bids.values():
        each.refresh_from_db()
    assert {name: (b.status, b.quantity_won) for name, b in bids.items()} == {
        "A": (Bid.Status.WON, 40),
        "B": (Bid.Status.WON, 30),
        "C": (Bid.Status.LOST, 0),
        "D": (Bid.Status.LOST, 0),
    }
    assert sorted(
        Allocation.objects.values_list("organization__name", "source", "quantity", "unit_price")
    ) == [
        ("A", "auction", 40, D("1.80")),
        ("B", "auction", 30, D("1.80")),
        ("E", "buy_now", 30, D("3.00")),
    ]
    assert hold_row(bought.hold_id) == (Hold.Status.OPEN, D(90), D(90), D(0), D(0))
    assert [wallet(member) for member in (buyer, *(bids[name] for name in "ABCD"))] == [
        (D(410), D(90)),
        (D(428), D(72)),
        (D(446), D(54)),
        (D(500), D(0)),
        (D(500), D(0)),
    ]
    offer.refresh_from_db()
    assert (offer.units_sold, offer.units_sold_at_auction, offer.remaining) == (100, 70, 0)
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_an_offer_sold_out_by_buy_now_clears_with_no_sale():
    _, offer = listed_offer(buy_now="3.00")
    services.offer_buy(actor=team("E"), offer=offer, quantity=100)
    close_auction(offer)

    outcome = services.auction_clear(offer_id=offer.pk)

    assert outcome == AuctionOutcome(
        offer_id=offer.pk, cleared=True, price=None, units_sold=0, winners=0, bids=0
    )
    offer.refresh_from_db()
    assert (offer.status, offer.units_sold, offer.units_sold_at_auction) == ("cleared", 100, 0)


# --- The command and the periodic task ---------------------------------------------------------


@pytest.mark.django_db
def test_the_command_clears_every_due_offer_and_says_what_happened():
    _, sold = listed_offer()
    place_bids(sold, WORKED_EXAMPLE)
    _, unsold = listed_offer()
    _, not_due = listed_offer()
    for offer in (sold, unsold):
        close_auction(offer)
    output = StringIO()

    call_command("auctions_clear", stdout=output)

    # Oldest close time first: `sold` closed a moment before `unsold`.
    assert output.getvalue().splitlines() == [
        f"{sold.uuid}: 100 units to 3 winners at 1.800000 (4 bids)",
        f"{unsold.uuid}: no sale (0 bids)",
    ]
    assert dict(Offer.objects.values_list("uuid", "status")) == {
        sold.uuid: "cleared",
        unsold.uuid: "cleared",
        not_due.uuid: "open",
    }
    assert Allocation.objects.count() == 3


@pytest.mark.django_db
def test_the_command_reports_a_named_offer_it_did_not_clear():
    _, offer = listed_offer()
    before = snapshot()
    output, errors_output = StringIO(), StringIO()

    call_command(
        "auctions_clear",
        str(offer.uuid),
        "00000000-0000-0000-0000-000000000000",
        stdout=output,
        stderr=errors_output,
    )

    assert output.getvalue() == (
        f"{offer.uuid}: not cleared (still open for bids, or already done)\n"
    )
    assert errors_output.getvalue() == "Some of the offers named do not exist.\n"
    assert snapshot() == before


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_periodic_task_clears_due_offers_on_a_real_worker(celery_worker):
    _, offer, bids = worked_example()
    _, not_due = listed_offer()

    auctions_clear_due_task.delay()

    wait_for(lambda: Offer.objects.get(pk=offer.pk).status == Offer.Status.CLEARED)
    # The loser's hold is released by the worker's next task, after the clearing's commit.
    wait_for(lambda: wallet(bids["D"]) == (D(500), D(0)), timeout=10)
    offer.refresh_from_db()
    assert (offer.clearing_price, offer.units_sold) == (D("1.80"), 100)
    assert sorted(
        Allocation.objects.values_list("organization__name", "quantity", "unit_price")
    ) == [("A", 40, D("1.80")), ("B", 30, D("1.80")), ("C", 30, D("1.80"))]
    assert [wallet(bids[name]) for name in "ABCD"] == [
        (D(428), D(72)),
        (D(446), D(54)),
        (D(446), D(54)),
        (D(500), D(0)),
    ]
    assert Offer.objects.get(pk=not_due.pk).status == Offer.Status.OPEN
    assert billing_selectors.ledger_verify() == []


# --- Closing an allocation's window --------------------------------------------------------------


@pytest.mark.django_db
def test_closing_the_window_releases_the_rest_of_the_hold_once():
    owner, offer, bids = worked_example()
    services.auction_clear(offer_id=offer.pk)
    allocation = Allocation.objects.get(bid=bids["A"])
    # A job used 20.00 of A's 72.00 commitment and was charged for it.
    billing.hold_capture(
        hold=allocation.hold,
        amount=D("20"),
        payee=owner.organization,
        idempotency_reference="job-run:test:1",
        reference_kind=ReferenceKind.JOB,
    )
    end = offer.window_end
    early = snapshot()

    assert selectors.allocations_due(now=end - timedelta(microseconds=1)) == []
    assert (
        services.allocation_close(allocation_id=allocation.pk, now=end - timedelta(seconds=1))
        is False
    )
    assert snapshot() == early

    assert selectors.allocations_due(now=end) == sorted(
        Allocation.objects.values_list("pk", flat=True)
    )
    assert services.allocation_close(allocation_id=allocation.pk, now=end) is True

    allocation.refresh_from_db()
    assert allocation.closed_at == end
    assert allocation.status == Allocation.Status.CLOSED
    assert hold_row(allocation.hold_id) == (Hold.Status.CLOSED, D(100), D(0), D(20), D(80))
    assert wallet(bids["A"]) == (D(480), D(0))
    assert billing_selectors.wallet_get(owner.organization).earnings == D(18)
    assert allocation.pk not in selectors.allocations_due(now=end)
    closed = snapshot()

    assert services.allocation_close(allocation_id=allocation.pk, now=end) is False
    assert (
        services.allocation_close(allocation_id=allocation.pk, now=end + timedelta(days=1)) is False
    )
    assert snapshot() == closed
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_closing_the_window_waits_for_jobs_that_still_reserve_units():
    _, offer, bids = worked_example()
    services.auction_clear(offer_id=offer.pk)
    allocation = Allocation.objects.get(bid=bids["B"])
    # A job still running at the window's end holds a reservation on the allocation.
    Allocation.objects.filter(pk=allocation.pk).update(reserved=D("5"))
    end = offer.window_end
    before = snapshot()

    assert services.allocation_close(allocation_id=allocation.pk, now=end) is False

    assert snapshot() == before
    assert allocation.pk in selectors.allocations_due(now=end)
    assert hold_row(allocation.hold_id) == (Hold.Status.OPEN, D(60), D(54), D(0), D(6))

    Allocation.objects.filter(pk=allocation.pk).update(reserved=D(0))

    assert services.allocation_close(allocation_id=allocation.pk, now=end) is True
    assert hold_row(allocation.hold_id) == (Hold.Status.CLOSED, D(60), D(0), D(0), D(60))
    assert wallet(bids["B"]) == (D(500), D(0))
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_the_periodic_close_closes_every_allocation_whose_window_ended():
    _, offer, bids = worked_example()
    services.auction_clear(offer_id=offer.pk)
    releases_applied()
    Allocation.objects.update(window_end=timezone.now() - timedelta(seconds=1))

    # Run in this process: the task is a loop over the service, which the tests above cover.
    closed = allocations_close_due_task.apply().get()

    assert closed == 3
    assert [wallet(bids[name]) for name in "ABCD"] == [(D(500), D(0))] * 4
    assert not Allocation.objects.filter(closed_at__isnull=True).exists()
    assert allocations_close_due_task.apply().get() == 0
    assert billing_selectors.ledger_verify() == []


# --- Cancelling an offer -------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_offer_without_bids_can_be_cancelled():
    owner, offer = listed_offer()

    cancelled = services.offer_cancel(actor=owner, offer=offer)

    offer.refresh_from_db()
    assert cancelled.status == offer.status == Offer.Status.CANCELLED
    with pytest.raises(errors.OfferNotOpen) as refused:
        services.bid_place(actor=team("A"), offer=offer, quantity=1, price="1.00")
    assert refused.value.code == "offer_not_open"


@pytest.mark.django_db
def test_an_offer_with_a_bid_cannot_be_cancelled():
    owner, offer = listed_offer()
    place_bids(offer, [("A", 10, "1.50")])
    before = snapshot()

    with pytest.raises(errors.OfferHasBids) as refused:
        services.offer_cancel(actor=owner, offer=offer)

    assert (refused.value.status_code, refused.value.code) == (409, "offer_has_bids")
    assert refused.value.extra == {"bid_count": 1, "units_sold": 0}
    assert snapshot() == before


@pytest.mark.django_db
def test_an_offer_with_a_sale_cannot_be_cancelled():
    owner, offer = listed_offer(buy_now="2.00")
    services.offer_buy(actor=team("E"), offer=offer, quantity=5)
    before = snapshot()

    with pytest.raises(errors.OfferHasBids) as refused:
        services.offer_cancel(actor=owner, offer=offer)

    assert refused.value.extra == {"bid_count": 0, "units_sold": 5}
    assert snapshot() == before


@pytest.mark.django_db
def test_an_offer_whose_only_bid_was_withdrawn_can_be_cancelled():
    owner, offer = listed_offer()
    bid = place_bids(offer, [("A", 10, "1.50")])["A"]
    services.bid_withdraw(actor=Membership.objects.get(organization=bid.organization), bid=bid)

    services.offer_cancel(actor=owner, offer=offer)

    offer.refresh_from_db()
    assert (offer.status, offer.bid_count, offer.units_bid) == (Offer.Status.CANCELLED, 0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["cancelled", "cleared"])
def test_an_offer_that_is_no_longer_open_cannot_be_cancelled(state):
    owner, offer = listed_offer()
    if state == "cancelled":
        services.offer_cancel(actor=owner, offer=offer)
    else:
        close_auction(offer)
        services.auction_clear(offer_id=offer.pk)
    before = snapshot()

    with pytest.raises(errors.OfferNotOpen) as refused:
        services.offer_cancel(actor=owner, offer=offer)

    assert refused.value.extra == {"status": state}
    assert snapshot() == before


# --- Withdrawing a bid ---------------------------------------------------------------------------


def bidder(bid: Bid) -> Membership:
    return Membership.objects.get(organization=bid.organization)


@pytest.mark.django_db
def test_withdrawing_a_bid_releases_its_whole_hold():
    _, offer = listed_offer()
    bids = place_bids(offer, [("A", 40, "2.50"), ("B", 30, "2.00")])

    withdrawn = services.bid_withdraw(actor=bidder(bids["A"]), bid=bids["A"])

    bids["A"].refresh_from_db()
    assert withdrawn.status == bids["A"].status == Bid.Status.WITHDRAWN
    assert bids["A"].withdrawn_at is not None
    assert hold_row(bids["A"].hold_id) == (Hold.Status.CLOSED, D(100), D(0), D(0), D(100))
    assert wallet(bids["A"]) == (D(500), D(0))
    assert wallet(bids["B"]) == (D(440), D(60))
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid) == (1, 30)
    # A withdrawn bid takes no part in the clearing.
    close_auction(offer)
    assert services.auction_clear(offer_id=offer.pk) == AuctionOutcome(
        offer_id=offer.pk, cleared=True, price=D("1.00"), units_sold=30, winners=1, bids=1
    )
    bids["A"].refresh_from_db()
    assert bids["A"].status == Bid.Status.WITHDRAWN
    assert billing_selectors.ledger_verify() == []


@pytest.mark.django_db
def test_a_bid_cannot_be_withdrawn_after_the_auction_closed():
    _, offer = listed_offer()
    bid = place_bids(offer, [("A", 40, "2.50")])["A"]
    close_auction(offer)
    before = snapshot()

    with pytest.raises(errors.OfferNotOpen) as refused:
        services.bid_withdraw(actor=bidder(bid), bid=bid)

    assert (refused.value.status_code, refused.value.code) == (409, "offer_not_open")
    assert snapshot() == before


@pytest.mark.django_db
def test_a_bid_cannot_be_withdrawn_once_cleared():
    _, offer, bids = worked_example()
    services.auction_clear(offer_id=offer.pk)
    before = snapshot()

    for name, status in (("A", "won"), ("C", "partially_won"), ("D", "lost")):
        with pytest.raises(errors.BidNotOpen) as refused:
            services.bid_withdraw(actor=bidder(bids[name]), bid=bids[name])
        assert (refused.value.status_code, refused.value.code) == (409, "bid_not_open")
        assert refused.value.extra == {"status": status}

    assert snapshot() == before


@pytest.mark.django_db
def test_a_bid_cannot_be_withdrawn_twice():
    _, offer = listed_offer()
    bid = place_bids(offer, [("A", 40, "2.50")])["A"]
    services.bid_withdraw(actor=bidder(bid), bid=bid)
    before = snapshot()

    with pytest.raises(errors.BidNotOpen):
        services.bid_withdraw(actor=bidder(bid), bid=bid)

    assert snapshot() == before
