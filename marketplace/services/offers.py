"""Offers, buy-now purchases and sealed bids.

Lock order, shared with the auction's clearing: the offer row first, then the bid, then the
organization's row (a purchase's tenant lease, a capped bid), then billing's locks (holds, then
wallet accounts). Holding the offer's lock while a purchase is checked and written is what keeps
`units_sold <= quantity` when many teams act at once. Listing or extending an offer takes the
partition's row lock first (then the offer's): the capacity calendar is checked and written
under it, so that no hour of a partition is sold twice however many listings run at once.

A bid changes nothing the offer's row says about what is sold, so it takes the offer's lock in
share mode (`FOR KEY SHARE`): bids in an auction's closing rush run side by side, while the
clearing, a purchase, a withdrawal or a cancellation (`FOR UPDATE`) waits for the bids in
flight and is waited for by the next ones. A bid counts itself in its shard's `OfferDemand`
row; the offer's public `bid_count` and `units_bid` are those rows summed, copied onto the offer
after the bid's commit (`_demand_publish`)."""

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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
from computeshare.errors import Conflict, FieldErrors, PermissionDenied, ValidationFailed
from computeshare.figures import price_text
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move
from hpc.errors import ReservationRefused
from marketplace import errors, selectors
from marketplace.capacity import Load, clashes, units_text
from marketplace.models import (
    Allocation,
    Bid,
    Capacity,
    Cluster,
    Offer,
    OfferDemand,
    Partition,
    PendingReservation,
    Resource,
    window_hours,
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


def _require_admin(actor: Membership, what: str) -> None:
    if not actor.is_admin:
        raise PermissionDenied(f"Only an admin of the organization can {what}.")


def _whole_units(fields: FieldErrors, field: str, value: Any, *, minimum: int = 1) -> int | None:
    """`value` as a whole number of units from `minimum` on, or None with the field's error."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        fields.add(field, "A whole number of units.")
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        number = Decimal("NaN")
    if not number.is_finite() or number != number.to_integral_value():
        fields.add(field, "A whole number of units.")
    elif number < minimum:
        fields.add(field, f"At least {minimum}.")
    elif number > 2_000_000_000:
        fields.add(field, "At most 2,000,000,000.")
    else:
        return int(number)
    return None


def _price(fields: FieldErrors, field: str, value: Any) -> Decimal | None:
    """`value` as a price per unit above zero, or None with the field's error."""
    try:
        price = billing.money(value, field=field)
    except ValidationFailed as error:
        for message in error.extra["fields"].get(field, []):
            fields.add(field, message)
        return None
    if price <= 0:
        fields.add(field, "Must be more than zero.")
        return None
    return price


def _aware(fields: FieldErrors, field: str, value: Any) -> datetime | None:
    """`value` as an aware date and time, or None with the field's error."""
    if not isinstance(value, datetime) or timezone.is_naive(value):
        fields.add(field, "A date and time with a time zone.")
        return None
    return value


def _given(value: Any) -> bool:
    return value not in (None, "")


# --- Offers ------------------------------------------------------------------------------------


@transaction.atomic
def offer_create(
    *,
    actor: Membership,
    cluster: Cluster,
    partition: str,
    resource: str,
    quantity: Any,
    window_start: datetime,
    window_end: datetime,
    reserve_price: Any,
    auction_closes_at: datetime,
    buy_now_price: Any = None,
    max_per_buyer: Any = None,
    capacity: Any = Capacity.PREEMPTIBLE,
) -> Offer:
    """Lists `quantity` units of a verified cluster's partition for sale: core- or GPU-hours
    of preemptible capacity, or whole cores (GPUs) for the whole window of reserved capacity,
    on a cluster whose verification found that kind held by Slurm. The window ends after it
    starts and after now; the auction closes in the future and before the window ends (a
    reserved block's, by the time it starts: it is sold for the whole window, a whole number of
    hours); the buy-now price, when there is one, is at least the reserve; the quantity fits
    what the partition has in every hour of the window."""
    _listing_allowed(actor, cluster, resource, capacity)
    fields = FieldErrors()
    terms = _offer_terms_parse(
        fields,
        capacity=capacity,
        resource=resource,
        quantity=quantity,
        window_start=window_start,
        window_end=window_end,
        reserve_price=reserve_price,
        auction_closes_at=auction_closes_at,
        buy_now_price=buy_now_price,
        max_per_buyer=max_per_buyer,
    )
    found = _partition_lock(fields, cluster, partition, resource)
    now = timezone.now()
    _offer_terms_check(fields, terms, now)
    if found is not None and "resource" not in fields:
        _window_capacity_check(fields, found, terms, now)
    fields.raise_if_any()
    assert found is not None
    return _offer_insert(actor, cluster, found, resource, terms, now)


def _offer_insert(
    actor: Membership,
    cluster: Cluster,
    partition: Partition,
    resource: str,
    terms: "OfferTerms",
    now: datetime,
) -> Offer:
    """The offer of checked terms, once the partition's calendar (locked) has room for it in
    every hour of its window."""
    assert terms.units is not None and terms.reserve is not None
    assert terms.start is not None and terms.end is not None and terms.closes is not None
    capacity_check(
        partition,
        resource,
        selectors.offer_load(
            window_start=terms.start,
            window_end=terms.end,
            listed_at=now,
            units=terms.units * terms.unit_hours,
        ),
    )
    return Offer.objects.create(
        cluster=cluster,
        partition=partition,
        resource=resource,
        capacity=terms.capacity,
        quantity=terms.units,
        window_start=terms.start,
        window_end=terms.end,
        reserve_price=terms.reserve,
        buy_now_price=terms.buy_now,
        auction_closes_at=terms.closes,
        max_per_buyer=terms.cap,
        created_by=actor.user,
    )


@dataclass(frozen=True)
class OfferTerms:
    """A listing's terms as parsed; None where the input was not valid (its field says why)."""

    capacity: str
    resource: str
    units: int | None
    start: datetime | None
    end: datetime | None
    closes: datetime | None
    reserve: Decimal | None
    buy_now: Decimal | None
    cap: int | None

    @property
    def is_reserved(self) -> bool:
        return self.capacity == Capacity.RESERVED

    @property
    def unit_hours(self) -> int:
        """As `Offer.unit_hours`: 1, or a reserved window's whole hours (1 while unknown)."""
        if not self.is_reserved or self.start is None or self.end is None:
            return 1
        return max(window_hours(self.start, self.end), 1)


def _listing_allowed(actor: Membership, cluster: Cluster, resource: str, capacity: Any) -> None:
    """Refuses a listing by anyone but the owners' admins, on a cluster that is not online, of
    a kind of capacity its verification found Slurm cannot hold, or of GPUs that the cluster's
    accounting would not meter."""
    if actor.organization_id != cluster.organization_id:
        raise PermissionDenied("Only the cluster's owners can list its capacity.")
    _require_admin(actor, "list offers")
    if not cluster.is_online:
        raise errors.ClusterNotOnline(
            extra={"cluster": str(cluster.uuid), "status": cluster.status}
        )
    if resource == "gpu" and cluster.backend == Cluster.Backend.SLURM and not cluster.tracks_gpus:
        # Slurm's accounting would record such jobs as using no GPU at all.
        raise errors.GpuNotMetered(extra={"cluster": str(cluster.uuid)})
    if capacity in Capacity.values and not cluster_sells(cluster, capacity):
        reason = (
            cluster.preemptible_refusal
            if capacity == Capacity.PREEMPTIBLE
            else cluster.reserved_refusal
        )
        raise errors.CapacityNotSold(
            f"{cluster.name} cannot sell {capacity} capacity: "
            f"{reason or 'its verification has not found it possible.'}",
            extra={"cluster": str(cluster.uuid), "capacity": capacity, "reason": reason},
        )


def cluster_sells(cluster: Cluster, capacity: str) -> bool:
    """Whether the cluster's last verification found `capacity` held by its scheduler."""
    if capacity == Capacity.RESERVED:
        return cluster.sells_reserved
    return cluster.sells_preemptible


def _offer_terms_parse(fields: FieldErrors, **given: Any) -> OfferTerms:
    """Each term of a listing parsed on its own, every error collected in `fields`."""
    resource = given["resource"]
    capacity = given["capacity"]
    terms = OfferTerms(
        capacity=capacity if capacity in Capacity.values else Capacity.PREEMPTIBLE,
        resource=resource,
        start=_aware(fields, "window_start", given["window_start"]),
        end=_aware(fields, "window_end", given["window_end"]),
        closes=_aware(fields, "auction_closes_at", given["auction_closes_at"]),
        units=_whole_units(fields, "quantity", given["quantity"]),
        reserve=_price(fields, "reserve_price", given["reserve_price"]),
        buy_now=_price(fields, "buy_now_price", given["buy_now_price"])
        if _given(given["buy_now_price"])
        else None,
        cap=_whole_units(fields, "max_per_buyer", given["max_per_buyer"])
        if _given(given["max_per_buyer"])
        else None,
    )
    if resource not in Resource.values:
        fields.add("resource", "Either `cpu` (core-hours) or `gpu` (GPU-hours).")
    if capacity not in Capacity.values:
        fields.add(
            "capacity",
            "Either `preemptible` (core- or GPU-hours, given back to the owner's own jobs) or "
            "`reserved` (whole cores or GPUs held for the whole window).",
        )
    return terms


def _partition_lock(
    fields: FieldErrors, cluster: Cluster, name: str, resource: str
) -> Partition | None:
    """The partition to list, up and with the resource, under its row lock: it serialises
    every listing on it, so that two offers checked at once cannot together sell an hour
    twice (marketplace/capacity.py)."""
    found = cluster.partitions.select_for_update().filter(name=name, is_up=True).first()
    if found is None:
        fields.add("partition", "The cluster has no partition of this name that is up.")
    elif resource == Resource.GPU and found.gpus == 0:
        fields.add("resource", "This partition has no GPUs.")
    return found


def _offer_terms_check(fields: FieldErrors, terms: OfferTerms, now: datetime) -> None:
    """The terms against each other and against now."""
    start, end, closes = terms.start, terms.end, terms.closes
    if start and end and end <= start:
        fields.add("window_end", "Must be after the window starts.")
    if end and end <= now:
        fields.add("window_end", "Must be in the future.")
    if closes and closes <= now:
        fields.add("auction_closes_at", "Must be in the future.")
    if closes and end and closes >= end:
        fields.add("auction_closes_at", "Must be before the window ends.")
    if terms.buy_now is not None and terms.reserve is not None and terms.buy_now < terms.reserve:
        fields.add("buy_now_price", "Must be at least the reserve price.")
    if terms.cap is not None and terms.units is not None and terms.cap > terms.units:
        fields.add("max_per_buyer", "Must not be more than the quantity.")
    if terms.is_reserved:
        _reserved_terms_check(fields, terms, now)


def _reserved_terms_check(fields: FieldErrors, terms: OfferTerms, now: datetime) -> None:
    """A reserved block is sold for its whole window: the window is a whole number of hours
    (the price is per core-hour, and the calendar counts whole cores per hour) and has not
    begun, and the auction (with it every buy-now) closes by the time it starts."""
    start, end, closes = terms.start, terms.end, terms.closes
    if start and end and end > start:
        length = end - start
        if length.total_seconds() % 3600 or length.total_seconds() < 3600:
            fields.add(
                "window_end",
                "A reserved window is a whole number of hours (at least one) from its start.",
            )
    if start and start <= now:
        fields.add("window_start", "A reserved window is sold before it starts: in the future.")
    if closes and start and closes > start:
        fields.add(
            "auction_closes_at",
            "A reserved block is sold for its whole window: the auction closes by its start.",
        )


def _window_capacity_check(
    fields: FieldErrors, partition: Partition, terms: OfferTerms, now: datetime
) -> None:
    """The quantity within what the partition has in the hours of the window still to come
    (hours already past cannot be sold)."""
    start, end = terms.start, terms.end
    if terms.units is None or not (start and end and end > max(start, now)):
        return
    if terms.is_reserved:
        _block_fits_check(fields, partition, terms.resource, terms.units)
        return
    capacity = _sellable(partition, terms.resource, start, end, now)
    if terms.units > capacity:
        fields.add(
            "quantity",
            f"The partition has at most {capacity} {terms.resource} units in this window.",
        )


def _block_fits_check(fields: FieldErrors, partition: Partition, resource: str, units: int) -> None:
    """A reserved block fits the partition in each hour; a GPU block is whole nodes' GPUs
    (Slurm reserves the nodes that carry them)."""
    per_hour = selectors.partition_capacity(partition, resource)
    noun = "GPUs" if resource == Resource.GPU else "cores"
    if units > per_hour:
        fields.add("quantity", f"The partition has {per_hour} {noun}.")
    if resource == Resource.GPU and (
        partition.gpus_per_node < 1 or units % partition.gpus_per_node
    ):
        fields.add(
            "quantity",
            "Reserved GPUs are sold in whole nodes: a multiple of the "
            f"{partition.gpus_per_node} GPUs each node of this partition has.",
        )


def _sellable(
    partition: Partition, resource: str, start: datetime, end: datetime, now: datetime
) -> int:
    """The units the partition has from `start` (or now, if later) to `end`."""
    per_hour = selectors.partition_capacity(partition, resource)
    return int(per_hour * (end - max(start, now)).total_seconds() // 3600)


# Hours named in a refusal at most: the rest are counted in `extra.hour_count`.
CLASH_HOURS_SHOWN = 48


def capacity_check(
    partition: Partition, resource: str, asked: Load, *, excluding: Offer | None = None
) -> None:
    """Refuses (409 `partition_capacity_exceeded`, with the hours) an offer whose units, spread
    over its window, would take any hour of the partition past what it has, counting every
    other offer open or sold there. The caller holds the partition's row lock."""
    loads = selectors.capacity_loads(
        partition, resource, asked.start, asked.end, excluding=excluding
    )
    per_hour = selectors.partition_capacity(partition, resource)
    clashing = clashes(loads, per_hour, asked)
    if not clashing:
        return
    raise errors.PartitionCapacityExceeded(
        f"This would sell more of {partition.cluster.name}/{partition.name} than it has in "
        f"{len(clashing)} hour{'' if len(clashing) == 1 else 's'}, from "
        f"{clashing[0].start:%Y-%m-%d %H:00} UTC: other offers already take "
        f"{units_text(clashing[0].sold)} of its {per_hour} {resource} units an hour there.",
        extra={
            "partition": partition.name,
            "resource": resource,
            "capacity_per_hour": per_hour,
            "hour_count": len(clashing),
            "hours": [
                {
                    "start": hour.start.isoformat(),
                    "sold": units_text(hour.sold),
                    "asked": units_text(hour.asked),
                    "capacity": hour.capacity,
                }
                for hour in clashing[:CLASH_HOURS_SHOWN]
            ],
        },
    )


@transaction.atomic
def offer_extend(
    *, actor: Membership, offer: Offer, quantity: Any = None, window_end: Any = None
) -> Offer:
    """Grows an open offer: more units (while its auction takes orders), or a later window end
    (only while nobody has bid or bought: they bid on the window as it was). Neither may
    shrink, and the grown offer must fit the partition's calendar like a new one."""
    if actor.organization_id != offer.cluster.organization_id:
        raise PermissionDenied("Only the cluster's owners can extend its offers.")
    _require_admin(actor, "extend offers")
    # The partition's lock first, as a listing takes it, then the offer's.
    partition = Partition.objects.select_for_update().get(pk=offer.partition_id)
    offer = _lock_offer(offer)
    now = timezone.now()
    if not offer.accepts_orders_at(now):
        raise errors.OfferNotExtendable(
            "Only an open offer whose auction has not closed can be extended.",
            extra={"status": offer.status},
        )
    units, end = _extension_parse(offer, quantity, window_end)
    if end != offer.window_end:
        bids = OfferDemand.objects.filter(offer=offer).aggregate(bids=Sum("bid_count"))["bids"]
        if bids or offer.units_sold:
            raise errors.OfferNotExtendable(
                "The window of an offer with bids or sales stays as its buyers bid on it.",
                extra={"bid_count": bids or 0, "units_sold": offer.units_sold},
            )
    unit_hours = _extension_fits(offer, partition, units, end, now)
    capacity_check(
        partition,
        offer.resource,
        selectors.offer_load(
            window_start=offer.window_start,
            window_end=end,
            listed_at=selectors.offer_listed_at(offer.created_at, offer.auction_closes_at),
            units=units * unit_hours,
        ),
        excluding=offer,
    )
    offer.quantity = units
    offer.window_end = end
    offer.save(update_fields=["quantity", "window_end", "updated_at"])
    return offer


def _extension_parse(offer: Offer, quantity: Any, window_end: Any) -> tuple[int, datetime]:
    """The grown quantity and window end asked for (each as it is when not given), neither
    smaller than now; 400 when neither is given."""
    fields = FieldErrors()
    units: int | None = offer.quantity
    end: datetime | None = offer.window_end
    if _given(quantity):
        units = _whole_units(fields, "quantity", quantity)
        if units is not None and units < offer.quantity:
            fields.add("quantity", f"At least {offer.quantity}: an offer only grows.")
    if _given(window_end):
        end = _aware(fields, "window_end", window_end)
        if end is not None and end < offer.window_end:
            fields.add("window_end", "Not before the window's end now: an offer only grows.")
    if not _given(quantity) and not _given(window_end):
        fields.add("quantity", "Give a larger quantity, a later window end, or both.")
    fields.raise_if_any()
    assert units is not None and end is not None
    return units, end


def _extension_fits(
    offer: Offer, partition: Partition, units: int, end: datetime, now: datetime
) -> int:
    """400 unless the grown offer fits its partition as a new one would (a reserved block
    whole nodes of GPUs and whole hours; preemptible units what the partition can sell in the
    window); the core-hours in one unit."""
    fields = FieldErrors()
    unit_hours = 1
    if offer.is_reserved:
        _block_fits_check(fields, partition, offer.resource, units)
        if (end - offer.window_start).total_seconds() % 3600:
            fields.add("window_end", "A reserved window is a whole number of hours.")
        unit_hours = window_hours(offer.window_start, end)
    else:
        sellable = _sellable(partition, offer.resource, offer.window_start, end, now)
        if units > sellable:
            fields.add(
                "quantity",
                f"The partition has at most {sellable} {offer.resource} units in this window.",
            )
    fields.raise_if_any()
    return unit_hours


def _lock_offer(offer: Offer) -> Offer:
    # `of=("self",)`: the offer's row only, not its cluster's, so that orders on one offer never
    # wait on another offer of the same cluster.
    return (
        Offer.objects.select_for_update(of=("self",))
        .select_related("cluster", "partition")
        .get(pk=offer.pk)
    )


@transaction.atomic
def offer_cancel(*, actor: Membership, offer: Offer) -> Offer:
    """Withdraws an open offer from sale; only while nobody has bid on it or bought from it."""
    if actor.organization_id != offer.cluster.organization_id:
        raise PermissionDenied("Only the cluster's owners can cancel its offers.")
    _require_admin(actor, "cancel offers")
    offer = _lock_offer(offer)
    _offer_cancellation_check(offer)
    status_move(offer, Offer.Status.CANCELLED)
    offer.save(update_fields=["status", "updated_at"])
    return offer


def _offer_cancellation_check(offer: Offer) -> None:
    """409 unless the offer is open and nobody has bid on it or bought from it."""
    if not offer.is_open:
        raise errors.OfferNotOpen(extra={"status": offer.status})
    # Counted from the demand rows, not the offer's published figure: a bid that has committed
    # may not have published it yet.
    bids = OfferDemand.objects.filter(offer=offer).aggregate(bids=Sum("bid_count"))["bids"] or 0
    if bids or offer.units_sold:
        raise errors.OfferHasBids(extra={"bid_count": bids, "units_sold": offer.units_sold})


def offer_is_cancellable(*, offer: Offer) -> bool:
    """Whether `offer_cancel` would accept the offer's state now (the pages show the button
    only then); who may cancel is the caller's to check."""
    try:
        _offer_cancellation_check(offer)
    except Conflict:
        return False
    return True


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
    offer = _lock_offer(offer)
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
    _require_admin(actor, "buy capacity")
    _open_for_orders(offer, actor)
    if offer.buy_now_price is None:
        raise errors.BuyNowNotOffered()
    fields = FieldErrors()
    units = _whole_units(fields, "quantity", quantity)
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
        locked = _lock_offer(offer)
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
        return _lock_offer(offer)
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
    _require_admin(actor, "bid")
    offer = _share_offer(offer)
    _open_for_orders(offer, actor)
    fields = FieldErrors()
    units = _whole_units(fields, "quantity", quantity)
    if units is not None and units > offer.quantity:
        fields.add("quantity", f"The offer has {offer.quantity} units.")
    minimum = _whole_units(fields, "min_quantity", min_quantity) if _given(min_quantity) else 1
    if units is not None and minimum is not None and minimum > units:
        fields.add("min_quantity", "Must not be more than the quantity.")
    bid_price = _price(fields, "price", price)
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
        # here, on the team's row, so that two of them never both fit under the cap.
        Organization.objects.select_for_update().filter(pk=actor.organization_id).first()
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
    _require_admin(actor, "withdraw bids")
    offer = _lock_offer(bid.offer)
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
