"""Offers: listing one, extending it and cancelling it. Buy-now purchases and sealed bids on
them are `orders`.

Listing or extending an offer takes the partition's row lock first (then the offer's): the
capacity calendar is checked and written under it, so that no hour of a partition is sold twice
however many listings run at once."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from computeshare.errors import Conflict, FieldErrors, PermissionDenied
from computeshare.states import status_move
from marketplace import errors, selectors
from marketplace.capacity import Load, clashes, units_text
from marketplace.models import (
    Capacity,
    Cluster,
    Offer,
    OfferDemand,
    Partition,
    Resource,
    window_hours,
)
from marketplace.services.inputs import (
    admin_required,
    aware,
    given,
    offer_lock,
    price_of,
    whole_units,
)
from organizations.models import Membership

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
    admin_required(actor, "list offers")
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


def _offer_terms_parse(fields: FieldErrors, **sent: Any) -> OfferTerms:
    """Each term of a listing parsed on its own, every error collected in `fields`."""
    resource = sent["resource"]
    capacity = sent["capacity"]
    terms = OfferTerms(
        capacity=capacity if capacity in Capacity.values else Capacity.PREEMPTIBLE,
        resource=resource,
        start=aware(fields, "window_start", sent["window_start"]),
        end=aware(fields, "window_end", sent["window_end"]),
        closes=aware(fields, "auction_closes_at", sent["auction_closes_at"]),
        units=whole_units(fields, "quantity", sent["quantity"]),
        reserve=price_of(fields, "reserve_price", sent["reserve_price"]),
        buy_now=price_of(fields, "buy_now_price", sent["buy_now_price"])
        if given(sent["buy_now_price"])
        else None,
        cap=whole_units(fields, "max_per_buyer", sent["max_per_buyer"])
        if given(sent["max_per_buyer"])
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
    admin_required(actor, "extend offers")
    # The partition's lock first, as a listing takes it, then the offer's.
    partition = Partition.objects.select_for_update().get(pk=offer.partition_id)
    offer = offer_lock(offer)
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
    if given(quantity):
        units = whole_units(fields, "quantity", quantity)
        if units is not None and units < offer.quantity:
            fields.add("quantity", f"At least {offer.quantity}: an offer only grows.")
    if given(window_end):
        end = aware(fields, "window_end", window_end)
        if end is not None and end < offer.window_end:
            fields.add("window_end", "Not before the window's end now: an offer only grows.")
    if not given(quantity) and not given(window_end):
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


@transaction.atomic
def offer_cancel(*, actor: Membership, offer: Offer) -> Offer:
    """Withdraws an open offer from sale; only while nobody has bid on it or bought from it."""
    if actor.organization_id != offer.cluster.organization_id:
        raise PermissionDenied("Only the cluster's owners can cancel its offers.")
    admin_required(actor, "cancel offers")
    offer = offer_lock(offer)
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
