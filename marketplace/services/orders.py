"""Orders on offers: buy-now purchases and sealed bids (listing offers is `offers`).

Lock order, shared with the auction's clearing: the offer row first, then the bid, then the
organization's row (a purchase's tenant lease, a capped bid), then billing's locks (holds, then
wallet accounts). Holding the offer's lock while a purchase is checked and written is what keeps
`units_sold <= quantity` when many teams act at once.

A bid changes nothing the offer's row says about what is sold, so it takes the offer's lock in
share mode (`FOR KEY SHARE`): bids in an auction's closing rush run side by side, while the
clearing, a purchase, a withdrawal or a cancellation (`FOR UPDATE`) waits for the bids in
flight and is waited for by the next ones. A bid counts itself in its shard's `OfferDemand`
row; the offer's public `bid_count` and `units_bid` are those rows summed, copied onto the offer
after the bid's commit (`_demand_publish`)."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing import services as billing
from billing.models import ReferenceKind
from computeshare.errors import Conflict, FieldErrors, PermissionDenied
from computeshare.figures import price_text
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move
from hpc.errors import ReservationRefused
from marketplace import errors
from marketplace.models import (
    Allocation,
    Bid,
    Capacity,
    Cluster,
    Offer,
    OfferDemand,
    PendingReservation,
)
from marketplace.services.inputs import (
    admin_required,
    given,
    offer_lock,
    price_of,
    whole_units,
)
from marketplace.services.reservations import (
    HeldBlock,
    block_hold,
    block_pending,
    block_refusal,
    block_release,
    tenant_name,
)
from marketplace.services.slurm_accounts import slurm_account_plan
from marketplace.services.tenants import tenant_lease_take
from organizations.models import Membership, Organization


def _open_for_orders(offer: Offer, actor: Membership) -> None:
    if actor.organization_id == offer.cluster.organization_id:
        fields = FieldErrors()
        fields.add("organization", "An organization cannot buy its own capacity.")
        fields.raise_if_any()
    if not offer.accepts_orders_at(timezone.now()):
        raise errors.OfferNotOpen(
            extra={"status": offer.status, "auction_closes_at": offer.auction_closes_at.isoformat()}
        )
    if offer.cluster.status in Cluster.UNAVAILABLE_STATUSES:
        # A cluster that may not be the owner's any more (its host key changed) or that the
        # operators took off the market sells nothing until it is sorted out.
        raise errors.OfferNotOpen(
            "This offer's cluster is not available for sale now.",
            extra={"status": offer.status, "cluster_status": offer.cluster.status},
        )


def allocation_of(offer: Offer, **fields: Any) -> Allocation:
    """An unsaved allocation of `offer`, with what it copies from the offer (cluster,
    partition, resource, kind of capacity, window) filled in."""
    return Allocation(
        offer=offer,
        cluster_id=offer.cluster_id,
        partition_id=offer.partition_id,
        resource=offer.resource,
        capacity=offer.capacity,
        window_start=offer.window_start,
        window_end=offer.window_end,
        **fields,
    )


def hold_amount(price: Decimal, units: int, *, unit_hours: int) -> Decimal:
    """What an order holds on the wallet: `price x units x unit_hours` (a bid's price and
    quantity, a purchase's buy-now price and quantity, a winner's clearing price and units won;
    `unit_hours` is the offer's, the window's hours for a reserved block, whose price is per
    core-hour). The one place this is worked out; 400 on `quantity` past what the ledger can
    hold."""
    amount = price * units * unit_hours
    if amount >= billing.LARGEST_AMOUNT:
        fields = FieldErrors()
        fields.add("quantity", "Price times quantity is more than the ledger can hold.")
        fields.raise_if_any()
    return amount


def _check_cap(offer: Offer, actor: Membership, units: int) -> None:
    if offer.max_per_buyer is None:
        return
    bid = Bid.objects.filter(
        offer=offer, organization_id=actor.organization_id, status=Bid.Status.OPEN
    ).aggregate(units=Sum("quantity"))["units"]
    # In the offer's units: a reserved allocation's block, not its core-hours.
    bought = Allocation.objects.filter(
        offer=offer, organization_id=actor.organization_id
    ).aggregate(units=Sum(Coalesce("block", "quantity")))["units"]
    already = (bid or 0) + (bought or 0)
    if already + units > offer.max_per_buyer:
        raise errors.MaxPerBuyerExceeded(
            extra={"max_per_buyer": offer.max_per_buyer, "already": already, "asked": units}
        )


def slurm_accounts_follow(cluster: Cluster, organization_ids: set[int]) -> None:
    """Plans the buyers' managed Slurm accounts on the cluster (in this transaction) and syncs
    them with the cluster after the commit. Nothing on clusters that are not managed."""
    if cluster.account_mode != Cluster.AccountMode.MANAGED:
        return
    account_ids = []
    for organization in Organization.objects.filter(pk__in=organization_ids).order_by("pk"):
        account = slurm_account_plan(cluster=cluster, organization=organization)
        if account is not None:
            account_ids.append(account.pk)
    if account_ids:
        enqueue_after_commit(
            "marketplace.tasks.slurm_accounts_sync_task",
            cluster.pk,
            account_ids,
            recovered_by="the periodic reconciliation of Slurm accounts syncs them",
        )


def offer_buy(
    *, actor: Membership, offer: Offer, quantity: Any, block: HeldBlock | None = None
) -> Allocation:
    """Buys `quantity` units now at the buy-now price, from what is unsold, while the auction is
    open. Holds `buy-now price x units` (x the window's hours for a reserved block) on the
    buyer's wallet for the window (402 when the wallet or the budget cannot take it) and makes
    the allocation.

    A reserved block is held by the scheduler before any money moves (409
    `reservation_refused` when it will not): called outside a transaction, this does the three
    steps of `marketplace.services.reservations`; a caller that runs the last step in a
    transaction of its own (the API, for its idempotency record) holds the block first with
    `purchase_block` and passes it here."""
    if offer.capacity == Capacity.RESERVED and block is None:
        with purchase_block(actor=actor, offer=offer, quantity=quantity) as held:
            return offer_buy(actor=actor, offer=offer, quantity=quantity, block=held)
    return _purchase_write(actor=actor, offer=offer, quantity=quantity, block=block)


@transaction.atomic
def _purchase_write(
    *, actor: Membership, offer: Offer, quantity: Any, block: HeldBlock | None
) -> Allocation:
    offer = offer_lock(offer)
    units = _purchase_check(actor, offer, quantity)
    # The team's tenant account on the cluster, kept for as long as it has an allocation or a
    # job there: 409 when every account is another team's (before any money is held).
    tenant_lease_take(cluster=offer.cluster, organization_id=actor.organization_id)
    allocation_id, reservation = uuid.uuid4(), ""
    if offer.is_reserved:
        if block is None or (block.offer_id, block.quantity) != (offer.pk, units):
            raise ValueError("a reserved purchase writes the block that purchase_block held")
        allocation_id, reservation = block.allocation_uuid, block.name
        PendingReservation.objects.filter(name=block.name).delete()
    assert offer.buy_now_price is not None
    hold = billing.hold_place(
        organization=actor.organization,
        amount=hold_amount(offer.buy_now_price, units, unit_hours=offer.unit_hours),
        reference_kind=ReferenceKind.ALLOCATION,
        reference=allocation_id,
        memo=f"Bought {units} {offer.resource} units on {offer}",
    )
    allocation = allocation_of(
        offer,
        uuid=allocation_id,
        organization=actor.organization,
        source=Allocation.Source.BUY_NOW,
        quantity=units * offer.unit_hours,
        block=units if offer.is_reserved else None,
        reservation=reservation,
        unit_price=offer.buy_now_price,
        hold=hold,
    )
    allocation.save()
    Offer.objects.filter(pk=offer.pk).update(
        units_sold=F("units_sold") + units, updated_at=timezone.now()
    )
    slurm_accounts_follow(offer.cluster, {actor.organization_id})
    return allocation


def _purchase_check(actor: Membership, offer: Offer, quantity: Any) -> int:
    """A purchase's checks against the locked offer; returns the units."""
    admin_required(actor, "buy capacity")
    _open_for_orders(offer, actor)
    if offer.buy_now_price is None:
        raise errors.BuyNowNotOffered()
    fields = FieldErrors()
    units = whole_units(fields, "quantity", quantity)
    fields.raise_if_any()
    assert units is not None
    if units > offer.remaining:
        raise errors.InsufficientQuantity(extra={"remaining": offer.remaining, "asked": units})
    _check_cap(offer, actor, units)
    return units


@contextmanager
def purchase_block(*, actor: Membership, offer: Offer, quantity: Any) -> Iterator[HeldBlock | None]:
    """For a purchase of a reserved offer, outside any transaction: checks the purchase, takes
    the team's lease and has the scheduler hold the block (steps 1 and 2 of
    `marketplace.services.reservations`), then yields it for the purchase to be written. On
    the way out, a block that no allocation took is given back. Yields None for a preemptible
    offer (nothing to hold)."""
    if offer.capacity != Capacity.RESERVED:
        yield None
        return
    with transaction.atomic():
        locked = offer_lock(offer)
        units = _purchase_check(actor, locked, quantity)
        lease = tenant_lease_take(cluster=locked.cluster, organization_id=actor.organization_id)
        block = block_pending(offer=locked, organization_id=actor.organization_id, quantity=units)
    try:
        block_hold(locked, block, tenant=tenant_name(lease))
    except ReservationRefused as refusal:
        raise block_refusal(refusal) from refusal
    try:
        yield block
    finally:
        if not Allocation.objects.filter(reservation=block.name).exists():
            block_release(locked.cluster, [block])


# --- Bids --------------------------------------------------------------------------------------


def bid_place(
    *, actor: Membership, offer: Offer, quantity: Any, price: Any, min_quantity: Any = None
) -> Bid:
    """Places a sealed bid of `price` per unit for up to `quantity` units (at least
    `min_quantity`), holding `price x quantity` on the wallet until the auction clears or the
    bid is withdrawn. The price must reach the reserve.

    In its own transaction, the offer's demand figures are published right after the commit;
    inside a caller's transaction, in it (the caller's commit decides)."""
    in_callers_transaction = connection.in_atomic_block
    with transaction.atomic():
        bid = _bid_write(
            actor=actor, offer=offer, quantity=quantity, price=price, min_quantity=min_quantity
        )
        if in_callers_transaction:
            _demand_publish(bid.offer_id)
    if not in_callers_transaction:
        _demand_publish_soon(bid.offer_id)
    return bid


def _share_offer(offer: Offer) -> Offer:
    """The offer, read after taking its row lock in share mode (`FOR KEY SHARE`: bids do not
    wait on each other, the clearing's `FOR UPDATE` waits on them). Elsewhere than on
    PostgreSQL, the exclusive lock."""
    if connection.vendor != "postgresql":
        return offer_lock(offer)
    table = Offer._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {table} WHERE id = %s FOR KEY SHARE",  # noqa: S608 - our own table
            [offer.pk],
        )
    return Offer.objects.select_related("cluster", "partition").get(pk=offer.pk)


def _bid_write(
    *, actor: Membership, offer: Offer, quantity: Any, price: Any, min_quantity: Any
) -> Bid:
    admin_required(actor, "bid")
    offer = _share_offer(offer)
    _open_for_orders(offer, actor)
    fields = FieldErrors()
    units = whole_units(fields, "quantity", quantity)
    if units is not None and units > offer.quantity:
        fields.add("quantity", f"The offer has {offer.quantity} units.")
    minimum = whole_units(fields, "min_quantity", min_quantity) if given(min_quantity) else 1
    if units is not None and minimum is not None and minimum > units:
        fields.add("min_quantity", "Must not be more than the quantity.")
    bid_price = price_of(fields, "price", price)
    if bid_price is not None and bid_price < offer.reserve_price:
        fields.add(
            "price",
            "Must be at least the reserve price, "
            f"{price_text(offer.reserve_price, settings.PLATFORM_CURRENCY)} "
            f"per {offer.price_unit}.",
        )
    fields.raise_if_any()
    assert units is not None and minimum is not None and bid_price is not None
    if offer.max_per_buyer is not None:
        # Bids share the offer's lock: one team's bids on a capped offer wait for each other
        # here, on the team's row, so that two of them never both fit under the cap (NO KEY
        # UPDATE, as `tenant_lease_take`'s: the team's holds still refer to the row meanwhile).
        Organization.objects.select_for_update(no_key=True).filter(pk=actor.organization_id).first()
    _check_cap(offer, actor, units)
    bid_id = uuid.uuid4()
    # Inside this service's own atomic block: a refusal ends it, no savepoint needed.
    hold = billing.hold_place_within(
        organization=actor.organization,
        amount=hold_amount(bid_price, units, unit_hours=offer.unit_hours),
        reference_kind=ReferenceKind.BID,
        reference=bid_id,
        memo=f"Bid {units} x {bid_price} on {offer.cluster.name}/{offer.partition.name}",
    )
    bid = Bid.objects.create(
        uuid=bid_id,
        offer=offer,
        organization=actor.organization,
        placed_by=actor.user,
        price=bid_price,
        quantity=units,
        min_quantity=minimum,
        hold=hold,
    )
    _demand_add(offer.pk, actor.organization_id, units)
    return bid


def _demand_add(offer_id: int, organization_id: int, units: int) -> None:
    """Counts one more bid of `units` in the row of the organization's shard (creating it)."""
    table = OfferDemand._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (offer_id, shard, bid_count, units_bid) "  # noqa: S608
            "VALUES (%s, %s, 1, %s) ON CONFLICT (offer_id, shard) DO UPDATE SET "
            f"bid_count = {table}.bid_count + 1, "
            f"units_bid = {table}.units_bid + EXCLUDED.units_bid",
            [offer_id, organization_id % OfferDemand.SHARDS, units],
        )


def _demand_publish(offer_id: int) -> None:
    """Copies the sum of the offer's demand rows onto the open offer. The offer's row is
    locked first and summed by the next statement, which therefore sees every bid committed
    before the lock was granted: publishers write in lock order, each a sum at least as recent
    as the one before, so the last one leaves the exact figures."""
    locked = (
        Offer.objects.select_for_update(no_key=True)
        .filter(pk=offer_id, status=Offer.Status.OPEN)
        .values_list("pk", flat=True)
        .first()
    )
    if locked is None:  # cleared (the clearing counts its bids itself) or cancelled
        return
    rows = OfferDemand.objects.filter(offer_id=OuterRef("pk")).values("offer_id")
    Offer.objects.filter(pk=offer_id).update(
        bid_count=Coalesce(Subquery(rows.annotate(total=Sum("bid_count")).values("total")), 0),
        units_bid=Coalesce(Subquery(rows.annotate(total=Sum("units_bid")).values("total")), 0),
        updated_at=timezone.now(),
    )


def _demand_publish_soon(offer_id: int) -> None:
    """`_demand_publish` in a transaction of its own that does not wait for the disk
    (`synchronous_commit = off`): it holds the offer's row only for the update, not for a
    flush, so a rush of bids is not serialised here. The figures are derived from the demand
    rows, which are durable with the bids: should a crash lose this commit, the next bid,
    withdrawal or the clearing writes them again."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        with transaction.atomic():
            _demand_publish(offer_id)
        return
    # On PostgreSQL in one round trip: the three statements of one simple query run as one
    # (implicit) transaction, each with a snapshot of its own, so the UPDATE sums what was
    # committed before the lock was granted. The row is held for the server's time only.
    with connection.cursor() as cursor:
        cursor.execute(_PUBLISH_SQL, {"offer": offer_id, "now": timezone.now()})


_PUBLISH_SQL = """
SET LOCAL synchronous_commit = off;
SELECT 1 FROM marketplace_offer WHERE id = %(offer)s AND status = 'open' FOR NO KEY UPDATE;
UPDATE marketplace_offer
SET bid_count = coalesce(demand.bids, 0), units_bid = coalesce(demand.units, 0),
    updated_at = %(now)s
FROM (
    SELECT sum(bid_count) AS bids, sum(units_bid) AS units
    FROM marketplace_offerdemand WHERE offer_id = %(offer)s
) AS demand
WHERE marketplace_offer.id = %(offer)s AND marketplace_offer.status = 'open'
"""


@transaction.atomic
def bid_withdraw(*, actor: Membership, bid: Bid) -> Bid:
    """Withdraws an open bid before the auction closes and releases its whole hold."""
    if actor.organization_id != bid.organization_id:
        raise PermissionDenied("Only the bidding organization can withdraw its bid.")
    admin_required(actor, "withdraw bids")
    offer = offer_lock(bid.offer)
    bid = Bid.objects.select_for_update().get(pk=bid.pk)
    _bid_withdrawal_check(bid, offer, timezone.now())
    assert bid.hold is not None
    billing.hold_release(hold=bid.hold, memo="Bid withdrawn")
    status_move(bid, Bid.Status.WITHDRAWN)
    bid.withdrawn_at = timezone.now()
    bid.save(update_fields=["status", "withdrawn_at", "updated_at"])
    OfferDemand.objects.filter(offer=offer, shard=bid.organization_id % OfferDemand.SHARDS).update(
        bid_count=F("bid_count") - 1, units_bid=F("units_bid") - bid.quantity
    )
    _demand_publish(offer.pk)
    return bid


def _bid_withdrawal_check(bid: Bid, offer: Offer, now: datetime) -> None:
    """409 unless the bid is open and its offer's auction still takes orders."""
    if not bid.is_open:
        raise errors.BidNotOpen(extra={"status": bid.status})
    if not offer.accepts_orders_at(now):
        raise errors.OfferNotOpen(extra={"status": offer.status})


def bid_is_withdrawable(*, bid: Bid, offer: Offer, now: datetime | None = None) -> bool:
    """Whether `bid_withdraw` would accept the bid's and its offer's state now (the pages show
    the button only then); who may withdraw is the caller's to check."""
    try:
        _bid_withdrawal_check(bid, offer, now or timezone.now())
    except Conflict:
        return False
    return True
