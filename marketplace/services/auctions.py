"""Clearing auctions and closing allocation windows."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from billing import services as billing
from billing.models import Hold, ReferenceKind
from computeshare.states import status_move, status_move_all
from hpc.batches import batched
from hpc.errors import ReservationRefused
from marketplace import notices, webhook_events
from marketplace.auction import BidRow, Clearing, SealedBid, uniform_price_clear
from marketplace.models import Allocation, Bid, Capacity, Offer, PendingReservation
from marketplace.services.orders import allocation_of, hold_amount, slurm_accounts_follow
from marketplace.services.reservations import (
    HeldBlock,
    allocation_reservation_remove,
    block_hold,
    block_pending,
    block_release,
    tenant_name,
)
from marketplace.services.tenants import TenantSeats, tenant_lease_take, tenant_seats_lock


@dataclass(frozen=True)
class AuctionOutcome:
    offer_id: int
    cleared: bool  # False: not due, or cleared or cancelled before (nothing changed)
    price: Decimal | None = None
    units_sold: int = 0
    winners: int = 0
    bids: int = 0


def auction_clear(*, offer_id: int, now: datetime | None = None) -> AuctionOutcome:
    """Clears one offer whose auction has closed (see `_auction_clear`; a reserved offer's
    winners get their blocks held by the scheduler first, `_reserved_auction_clear`)."""
    kind = Offer.objects.filter(pk=offer_id).values_list("capacity", flat=True).first()
    if kind == Capacity.RESERVED:
        return _reserved_auction_clear(offer_id, now or timezone.now())
    return _auction_clear(offer_id=offer_id, now=now)


@transaction.atomic
def _auction_clear(*, offer_id: int, now: datetime | None = None) -> AuctionOutcome:
    """Clears one offer whose auction has closed, in one transaction: ranks its open bids,
    fills them at one uniform price (`marketplace.auction`), resizes each winner's hold to
    `price x units won` and leaves every other hold `releasing` (released by a task after the
    commit, `billing.hold_release_batch_apply`), makes the winners' allocations and
    records the result on the offer for the price history.

    Idempotent: the offer's row lock serialises concurrent clearings, and an offer that is no
    longer open is left as it is, so clearing twice changes nothing."""
    now = now or timezone.now()
    offer = Offer.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=offer_id)
    if not offer.is_open or now < offer.auction_closes_at:
        return AuctionOutcome(offer_id=offer_id, cleared=False)
    bids = _open_bids_ranked(offer)
    # A team that would need a tenant account the cluster does not have cannot win: the
    # accounts this clearing may give out are locked now, with the teams that hold one already.
    seats = tenant_seats_lock(
        cluster=offer.cluster, organization_ids={bid.organization_id for bid in bids}
    )
    clearing = _clearing_of(offer, bids, seats)
    winners = [bid for bid in bids if bid.pk in clearing.fills]
    if seats is not None:
        seats.leases_for_all(offer.cluster, (bid.organization_id for bid in winners))
    return _clearing_record(offer, bids, clearing, now, blocks={})


def _clearing_record(
    offer: Offer,
    bids: list[BidRow],
    clearing: Clearing,
    now: datetime,
    *,
    blocks: dict[int, HeldBlock],
) -> AuctionOutcome:
    """Writes a clearing whose winners have their leases (and, reserved, their blocks): the
    holds resized or released, the bids settled, the allocations made, the offer cleared, and
    who is told."""
    winners = [bid for bid in bids if bid.pk in clearing.fills]
    _holds_settle(offer, winners, clearing)
    _bids_settle(offer, winners, clearing, now)
    allocations = _allocations_create(offer, clearing, winners, now, blocks)
    _offer_record(offer, bids, clearing, now)
    webhook_events.auction_cleared(offer, bids, clearing.fills, clearing.price)
    notices.auction_cleared(offer)
    if allocations and offer.cluster.account_mode == offer.cluster.AccountMode.MANAGED:
        slurm_accounts_follow(offer.cluster, {bid.organization_id for bid in winners})
    return AuctionOutcome(
        offer_id=offer.pk,
        cleared=True,
        price=clearing.price,
        units_sold=clearing.units_sold,
        winners=len(winners),
        bids=len(bids),
    )


# --- Reserved offers: every winner's block held by the scheduler before the clearing is written


@dataclass
class _ReservedRound:
    """One round of a reserved clearing: its outcome once every winner's block is held, or
    the winners whose blocks are still to be asked for (with their tenants)."""

    outcome: AuctionOutcome | None = None
    to_hold: list[tuple[int, HeldBlock, str | None]] = field(default_factory=list)
    to_release: list[HeldBlock] = field(default_factory=list)


def _reserved_auction_clear(offer_id: int, now: datetime) -> AuctionOutcome:
    """Clears a reserved offer in rounds, no transaction open while the scheduler is asked:
    each round ranks the bids as `_auction_clear` does, leaving out those whose block the
    scheduler refused (skipped like a bid below its minimum, so that the units go on down the
    ranking), and either writes the clearing, when every winner's block of exactly its fill is
    held, or names the blocks still to be held, which are then asked for. A refusal only ever
    removes bids, so the rounds end. Blocks held for bids that did not win in the end are
    given back."""
    blocks: dict[int, HeldBlock] = {}
    refused: set[int] = set()
    cluster = Offer.objects.select_related("cluster").get(pk=offer_id).cluster
    try:
        while True:
            with transaction.atomic():
                step = _reserved_round(offer_id, now, blocks, frozenset(refused))
            block_release(cluster, step.to_release)
            if step.outcome is not None:
                return step.outcome
            offer = Offer.objects.select_related("cluster", "partition").get(pk=offer_id)
            for bid_id, block, tenant in step.to_hold:
                try:
                    block_hold(offer, block, tenant=tenant)
                except ReservationRefused:
                    refused.add(bid_id)
                    continue
                blocks[bid_id] = block
    finally:
        unused = [
            block
            for block in blocks.values()
            if not Allocation.objects.filter(reservation=block.name).exists()
        ]
        block_release(cluster, unused)


def _reserved_round(
    offer_id: int, now: datetime, blocks: dict[int, HeldBlock], refused: frozenset[int]
) -> _ReservedRound:
    offer = (
        Offer.objects.select_for_update(of=("self",))
        .select_related("cluster", "partition")
        .get(pk=offer_id)
    )
    if not offer.is_open or now < offer.auction_closes_at:
        return _ReservedRound(outcome=AuctionOutcome(offer_id=offer_id, cleared=False))
    bids = _open_bids_ranked(offer)
    seats = tenant_seats_lock(
        cluster=offer.cluster, organization_ids={bid.organization_id for bid in bids}
    )
    clearing = _clearing_of(offer, bids, seats, skipped=refused)
    winners = [bid for bid in bids if bid.pk in clearing.fills]
    missing = [
        bid
        for bid in winners
        if bid.pk not in blocks or blocks[bid.pk].quantity != clearing.fills[bid.pk]
    ]
    if seats is not None:
        seats.leases_for_all(offer.cluster, (bid.organization_id for bid in missing))
    if not missing:
        PendingReservation.objects.filter(
            name__in=[blocks[bid.pk].name for bid in winners]
        ).delete()
        return _ReservedRound(outcome=_clearing_record(offer, bids, clearing, now, blocks=blocks))
    step = _ReservedRound(to_release=[blocks.pop(bid.pk) for bid in missing if bid.pk in blocks])
    for bid in missing:
        lease = tenant_lease_take(cluster=offer.cluster, organization_id=bid.organization_id)
        block = block_pending(
            offer=offer, organization_id=bid.organization_id, quantity=clearing.fills[bid.pk]
        )
        step.to_hold.append((bid.pk, block, tenant_name(lease)))
    return step


def _open_bids_ranked(offer: Offer) -> list[BidRow]:
    """The offer's open bids as plain rows, best first (off the `bid_ranking` index)."""
    rows = (
        Bid.objects.filter(offer=offer, status=Bid.Status.OPEN)
        .order_by("-price", "created_at", "pk")
        .values_list(*BidRow._fields)
    )
    return [BidRow(*row) for row in rows]


def _clearing_of(
    offer: Offer,
    bids: list[BidRow],
    seats: TenantSeats | None,
    *,
    skipped: frozenset[int] = frozenset(),
) -> Clearing:
    """The uniform-price clearing of what is unsold among `bids`, within the seats left,
    passing over the bids `skipped`."""
    return uniform_price_clear(
        offer.remaining,
        offer.reserve_price,
        (
            SealedBid(
                key=bid.pk,
                price=bid.price,
                quantity=bid.quantity,
                min_quantity=bid.min_quantity,
                placed_at=bid.created_at,
                sequence=bid.pk,
                buyer=bid.organization_id,
            )
            for bid in bids
        ),
        seats=None if seats is None else len(seats.free),
        seated=frozenset() if seats is None else seats.held,
        skipped=frozenset(skipped),
    )


def _holds_settle(offer: Offer, winners: list[BidRow], clearing: Clearing) -> None:
    """Each winner's hold down to what it won at the clearing price, released now; every other
    open bid's hold `releasing`, released by a task after the commit (ADR 0025): a team's
    release line per losing offer is most of a clearing's writes, and its money may stay held
    a few seconds longer."""
    keep = {}
    if clearing.price is not None:
        keep = {
            bid.hold_id: hold_amount(
                clearing.price, clearing.fills[bid.pk], unit_hours=offer.unit_hours
            )
            for bid in winners
        }
    billing.holds_settle(
        holds=Hold.objects.filter(bid__offer=offer, bid__status=Bid.Status.OPEN),
        keep=keep,
        reference_kind=ReferenceKind.OFFER,
        reference=offer.uuid,
        memo=f"Auction cleared on {offer.cluster.name}: bids released"[:255],
        release_after_commit=True,
    )


def _bids_settle(offer: Offer, winners: list[BidRow], clearing: Clearing, now: datetime) -> None:
    """Set-wise: every full winner in one statement (per 10,000), the one partly filled bid
    (there is at most one: the bid that used up the supply) in another, and then every bid
    still open lost."""
    full = [bid.pk for bid in winners if clearing.fills[bid.pk] == bid.quantity]
    partial = [bid.pk for bid in winners if clearing.fills[bid.pk] != bid.quantity]
    for batch in batched(full, 10_000):
        status_move_all(
            Bid.objects.filter(pk__in=batch),
            Bid.Status.WON,
            quantity_won=F("quantity"),
            price_paid=clearing.price,
            updated_at=now,
        )
    for pk in partial:
        status_move_all(
            Bid.objects.filter(pk=pk),
            Bid.Status.PARTIALLY_WON,
            quantity_won=clearing.fills[pk],
            price_paid=clearing.price,
            updated_at=now,
        )
    status_move_all(
        Bid.objects.filter(offer=offer), Bid.Status.LOST, quantity_won=0, updated_at=now
    )


def _offer_record(offer: Offer, bids: list[BidRow], clearing: Clearing, now: datetime) -> None:
    """The offer cleared, with the result the price history reads."""
    status_move(offer, Offer.Status.CLEARED)
    offer.clearing_price = clearing.price
    offer.units_sold += clearing.units_sold
    offer.units_sold_at_auction = clearing.units_sold
    offer.cleared_at = now
    # The demand figures as the bids have them: bids publish theirs after their commit, and one
    # that committed just before this clearing may not have yet.
    offer.bid_count = len(bids)
    offer.units_bid = sum(bid.quantity for bid in bids)
    offer.save(
        update_fields=[
            "status",
            "clearing_price",
            "units_sold",
            "units_sold_at_auction",
            "cleared_at",
            "bid_count",
            "units_bid",
            "updated_at",
        ]
    )


def _allocations_create(
    offer: Offer,
    clearing: Clearing,
    winners: list[BidRow],
    now: datetime,
    blocks: dict[int, HeldBlock],
) -> int:
    """The winners' allocations, each of the units its bid won, all at the clearing price;
    returns how many. A reserved winner's allocation is its block's cores x the window's hours,
    under the id its reservation was named for. On PostgreSQL, a preemptible offer's in one
    `INSERT ... SELECT FROM unnest(...)`: at ten thousand winners, building and rendering
    model objects took longer than the database took to write the rows."""
    price = clearing.price
    if not winners or price is None:
        return 0
    if connection.vendor != "postgresql" or offer.is_reserved:
        Allocation.objects.bulk_create(
            [_allocation_won(offer, bid, clearing, price, blocks.get(bid.pk)) for bid in winners],
            batch_size=1_000,
        )
        return len(winners)
    _allocations_insert(
        {
            "offer": offer.pk,
            "cluster": offer.cluster_id,
            "partition": offer.partition_id,
            "resource": offer.resource,
            "window_start": offer.window_start,
            "window_end": offer.window_end,
            "capacity": offer.capacity,
            "source": Allocation.Source.AUCTION,
            "unit_price": price,
            "now": now,
            "bids": [bid.pk for bid in winners],
            "organizations": [bid.organization_id for bid in winners],
            "units": [clearing.fills[bid.pk] for bid in winners],
            "holds": [bid.hold_id for bid in winners],
        }
    )
    return len(winners)


def _allocations_insert(constants: dict[str, Any]) -> None:
    """One INSERT of the allocations of the winners listed in `constants` (PostgreSQL)."""
    column = {field.name: str(field.column) for field in Allocation._meta.concrete_fields}
    names = [
        "uuid", "created_at", "updated_at", "offer", "cluster", "partition", "resource",
        "window_start", "window_end", "capacity", "source", "unit_price", "used", "reserved",
        "reservation", "reservation_problem", "bid", "organization", "quantity", "hold",
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(Allocation._meta.db_table)} "  # noqa: S608
            f"({', '.join(column[name] for name in names)}) "
            "SELECT gen_random_uuid(), %(now)s, %(now)s, %(offer)s, %(cluster)s, %(partition)s, "
            "%(resource)s, %(window_start)s, %(window_end)s, %(capacity)s, %(source)s, "
            "%(unit_price)s, 0, 0, '', '', win.bid, win.organization, win.quantity, win.hold "
            "FROM unnest(%(bids)s::bigint[], %(organizations)s::bigint[], %(units)s::integer[], "
            "%(holds)s::bigint[]) AS win(bid, organization, quantity, hold) ORDER BY win.bid",
            constants,
        )


def _allocation_won(
    offer: Offer, bid: BidRow, clearing: Clearing, price: Decimal, block: HeldBlock | None
) -> Allocation:
    won = clearing.fills[bid.pk]
    reserved: dict[str, Any] = {}
    if offer.is_reserved:
        assert block is not None and block.quantity == won
        reserved = {"uuid": block.allocation_uuid, "block": won, "reservation": block.name}
    return allocation_of(
        offer,
        organization_id=bid.organization_id,
        source=Allocation.Source.AUCTION,
        bid_id=bid.pk,
        quantity=won * offer.unit_hours,
        unit_price=price,
        hold_id=bid.hold_id,
        **reserved,
    )


# --- Allocation windows ------------------------------------------------------------------------


@transaction.atomic
def allocation_close(*, allocation_id: int, now: datetime | None = None) -> bool:
    """Closes an allocation whose window has ended and releases what is left of its commitment
    hold to the team's available balance. Waits (returns False) while jobs still hold
    reservations on it: their settlement draws on the same hold. Idempotent."""
    now = now or timezone.now()
    allocation = (
        Allocation.objects.select_for_update(of=("self",))
        .select_related("cluster")
        .get(pk=allocation_id)
    )
    if allocation.closed_at is not None or now < allocation.window_end:
        return False
    if allocation.reserved > 0:
        return False
    billing.hold_release(hold=allocation.hold, memo="Allocation window closed")
    allocation.closed_at = now
    allocation.save(update_fields=["closed_at", "updated_at"])
    # On a managed cluster the team's limit there drops to what it used of this allocation.
    slurm_accounts_follow(allocation.cluster, {allocation.organization_id})
    if allocation.reservation:
        # Slurm ends it at the window's end by itself; taken back here in case the window was
        # cut short, and so that nothing of the block outlives the allocation.
        transaction.on_commit(lambda: allocation_reservation_remove(allocation))
    return True
