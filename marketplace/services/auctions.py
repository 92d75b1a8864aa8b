"""Clearing auctions and closing allocation windows."""

from dataclasses import dataclass
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
from marketplace import notices, webhook_events
from marketplace.auction import BidRow, Clearing, SealedBid, uniform_price_clear
from marketplace.models import Allocation, Bid, Offer
from marketplace.services.offers import allocation_of, hold_amount, slurm_accounts_follow
from marketplace.services.tenants import TenantSeats, tenant_seats_lock


@dataclass(frozen=True)
class AuctionOutcome:
    offer_id: int
    cleared: bool  # False: not due, or cleared or cancelled before (nothing changed)
    price: Decimal | None = None
    units_sold: int = 0
    winners: int = 0
    bids: int = 0


@transaction.atomic
def auction_clear(*, offer_id: int, now: datetime | None = None) -> AuctionOutcome:
    """Clears one offer whose auction has closed, in one transaction: ranks its open bids,
    fills them at one uniform price (`marketplace.auction`), resizes each winner's hold to
    `price x units won` and releases every other hold, makes the winners' allocations and
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
    _holds_settle(offer, winners, clearing)
    _bids_settle(offer, winners, clearing, now)
    allocations = _allocations_create(offer, clearing, winners, now)
    if seats is not None:
        seats.leases_for_all(offer.cluster, (bid.organization_id for bid in winners))
    _offer_record(offer, bids, clearing, now)
    webhook_events.auction_cleared(offer, bids, clearing.fills, clearing.price)
    notices.auction_cleared(offer, bids, clearing.fills, clearing.price)
    if allocations and offer.cluster.account_mode == offer.cluster.AccountMode.MANAGED:
        slurm_accounts_follow(offer.cluster, {bid.organization_id for bid in winners})
    return AuctionOutcome(
        offer_id=offer_id,
        cleared=True,
        price=clearing.price,
        units_sold=clearing.units_sold,
        winners=len(winners),
        bids=len(bids),
    )


def _open_bids_ranked(offer: Offer) -> list[BidRow]:
    """The offer's open bids as plain rows, best first (off the `bid_ranking` index)."""
    rows = (
        Bid.objects.filter(offer=offer, status=Bid.Status.OPEN)
        .order_by("-price", "created_at", "pk")
        .values_list(*BidRow._fields)
    )
    return [BidRow(*row) for row in rows]


def _clearing_of(offer: Offer, bids: list[BidRow], seats: TenantSeats | None) -> Clearing:
    """The uniform-price clearing of what is unsold among `bids`, within the seats left."""
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
    )


def _holds_settle(offer: Offer, winners: list[BidRow], clearing: Clearing) -> None:
    """Each winner's hold down to what it won at the clearing price; every other open bid's
    hold released."""
    keep = {}
    if clearing.price is not None:
        keep = {bid.hold_id: hold_amount(clearing.price, clearing.fills[bid.pk]) for bid in winners}
    billing.holds_settle(
        holds=Hold.objects.filter(bid__offer=offer, bid__status=Bid.Status.OPEN),
        keep=keep,
        reference_kind=ReferenceKind.OFFER,
        reference=offer.uuid,
        memo=f"Auction cleared on {offer.cluster.name}: bids released"[:255],
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
    offer: Offer, clearing: Clearing, winners: list[BidRow], now: datetime
) -> int:
    """The winners' allocations, each of the units its bid won, all at the clearing price;
    returns how many. On PostgreSQL one `INSERT ... SELECT FROM unnest(...)`: at ten thousand
    winners, building and rendering model objects took longer than the database took to
    write the rows."""
    price = clearing.price
    if not winners or price is None:
        return 0
    if connection.vendor != "postgresql":
        Allocation.objects.bulk_create(
            [
                allocation_of(
                    offer,
                    organization_id=bid.organization_id,
                    source=Allocation.Source.AUCTION,
                    bid_id=bid.pk,
                    quantity=clearing.fills[bid.pk],
                    unit_price=price,
                    hold_id=bid.hold_id,
                )
                for bid in winners
            ],
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
        "window_start", "window_end", "source", "unit_price", "used", "reserved",
        "bid", "organization", "quantity", "hold",
    ]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {connection.ops.quote_name(Allocation._meta.db_table)} "  # noqa: S608
            f"({', '.join(column[name] for name in names)}) "
            "SELECT gen_random_uuid(), %(now)s, %(now)s, %(offer)s, %(cluster)s, %(partition)s, "
            "%(resource)s, %(window_start)s, %(window_end)s, %(source)s, %(unit_price)s, 0, 0, "
            "win.bid, win.organization, win.quantity, win.hold "
            "FROM unnest(%(bids)s::bigint[], %(organizations)s::bigint[], %(units)s::integer[], "
            "%(holds)s::bigint[]) AS win(bid, organization, quantity, hold) ORDER BY win.bid",
            constants,
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
    return True
