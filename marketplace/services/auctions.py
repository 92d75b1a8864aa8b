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
from marketplace.auction import SealedBid, uniform_price_clear
from marketplace.models import Allocation, Bid, Offer
from marketplace.services.offers import allocation_of, slurm_accounts_follow
from marketplace.services.tenants import tenant_seats_lock


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

    open_bids = Bid.objects.filter(offer=offer, status=Bid.Status.OPEN)
    rows = list(
        open_bids.order_by("-price", "created_at", "pk").values_list(
            "pk", "price", "quantity", "min_quantity", "created_at", "hold_id", "organization_id"
        )
    )
    # A team that would need a tenant account the cluster does not have cannot win: the
    # accounts this clearing may give out are locked now, with the teams that hold one already.
    seats = tenant_seats_lock(cluster=offer.cluster, organization_ids={row[6] for row in rows})
    clearing = uniform_price_clear(
        offer.remaining,
        offer.reserve_price,
        (
            SealedBid(
                key=pk,
                price=price,
                quantity=quantity,
                min_quantity=minimum,
                placed_at=placed_at,
                sequence=pk,
                buyer=organization_id,
            )
            for pk, price, quantity, minimum, placed_at, _, organization_id in rows
        ),
        seats=None if seats is None else len(seats.free),
        seated=frozenset() if seats is None else seats.held,
    )
    price = clearing.price
    winners = {row[0]: row for row in rows if row[0] in clearing.fills}
    keep = {}
    if price is not None:
        keep = {row[5]: price * clearing.fills[pk] for pk, row in winners.items()}
    billing.holds_settle(
        holds=Hold.objects.filter(bid__offer=offer, bid__status=Bid.Status.OPEN),
        keep=keep,
        reference_kind=ReferenceKind.OFFER,
        reference=offer.uuid,
        memo=f"Auction cleared on {offer.cluster.name}: bids released"[:255],
    )

    # Set-wise: every full winner in one statement, the one partly filled bid (there is at
    # most one: the bid that used up the supply) in another, and then every bid still open lost.
    full = [pk for pk, row in winners.items() if clearing.fills[pk] == row[2]]
    partial = [pk for pk in winners if clearing.fills[pk] != winners[pk][2]]
    for batch in batched(full, 10_000):
        status_move_all(
            Bid.objects.filter(pk__in=batch),
            Bid.Status.WON,
            quantity_won=F("quantity"),
            price_paid=price,
            updated_at=now,
        )
    for pk in partial:
        status_move_all(
            Bid.objects.filter(pk=pk),
            Bid.Status.PARTIALLY_WON,
            quantity_won=clearing.fills[pk],
            price_paid=price,
            updated_at=now,
        )
    status_move_all(open_bids, Bid.Status.LOST, quantity_won=0, updated_at=now)
    allocations = _allocations_create(
        offer,
        price,
        [(pk, row[6], clearing.fills[pk], row[5]) for pk, row in winners.items()],
        now,
    )
    if seats is not None:
        seats.leases_for_all(offer.cluster, (row[6] for row in winners.values()))
    status_move(offer, Offer.Status.CLEARED)
    offer.clearing_price = price
    offer.units_sold += clearing.units_sold
    offer.units_sold_at_auction = clearing.units_sold
    offer.cleared_at = now
    # The demand figures as the bids have them: bids publish theirs after their commit, and one
    # that committed just before this clearing may not have yet.
    offer.bid_count = len(rows)
    offer.units_bid = sum(row[2] for row in rows)
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
    webhook_events.auction_cleared(offer, rows, clearing.fills, price)
    notices.auction_cleared(offer, rows, clearing.fills, price)
    if allocations and offer.cluster.account_mode == offer.cluster.AccountMode.MANAGED:
        slurm_accounts_follow(offer.cluster, {row[6] for row in winners.values()})
    return AuctionOutcome(
        offer_id=offer_id,
        cleared=True,
        price=price,
        units_sold=clearing.units_sold,
        winners=len(winners),
        bids=len(rows),
    )


def _allocations_create(
    offer: Offer, price: Decimal | None, wins: list[tuple[int, int, int, int]], now: datetime
) -> int:
    """The winners' allocations, from (bid, organization, units won, hold) each, all at the
    clearing price; returns how many. On PostgreSQL one `INSERT ... SELECT FROM unnest(...)`:
    at ten thousand winners, building and rendering model objects took longer than the
    database took to write the rows."""
    if not wins or price is None:
        return 0
    if connection.vendor != "postgresql":
        Allocation.objects.bulk_create(
            [
                allocation_of(
                    offer,
                    organization_id=organization_id,
                    source=Allocation.Source.AUCTION,
                    bid_id=bid_id,
                    quantity=units,
                    unit_price=price,
                    hold_id=hold_id,
                )
                for bid_id, organization_id, units, hold_id in wins
            ],
            batch_size=1_000,
        )
        return len(wins)
    column = {field.name: str(field.column) for field in Allocation._meta.concrete_fields}
    bids, organizations, units, holds = (list(values) for values in zip(*wins, strict=True))
    constants: dict[str, Any] = {
        "offer": offer.pk,
        "cluster": offer.cluster_id,
        "partition": offer.partition_id,
        "resource": offer.resource,
        "window_start": offer.window_start,
        "window_end": offer.window_end,
        "source": Allocation.Source.AUCTION,
        "unit_price": price,
        "now": now,
        "bids": bids,
        "organizations": organizations,
        "units": units,
        "holds": holds,
    }
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
    return len(wins)


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
