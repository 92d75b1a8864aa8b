"""The capacity calendar: what each partition has sold per hour (marketplace/capacity.py;
docs/design.md, The capacity calendar). Public, as the offers are."""

import datetime
from typing import Any

from django.db.models import Q

from computeshare.errors import NotFound
from marketplace import capacity
from marketplace.models import Capacity, Cluster, Offer, Partition, Resource, window_hours

# The calendar answers at most this many hours at once (five weeks).
CALENDAR_MAX_HOURS = 24 * 35


def capacity_loads(
    partition: Partition,
    resource: str,
    start: datetime.datetime,
    end: datetime.datetime,
    *,
    excluding: Offer | None = None,
) -> list[capacity.Load]:
    """What the partition's offers of `resource` take between `start` and `end`: an open offer
    its quantity, a cleared one what it sold, each spread over its window from when it was
    listed; cancelled offers nothing. A reserved offer takes its cores (GPUs) in every hour of
    its window; on the CPU calendar a reserved GPU block also takes the cores of the whole
    nodes it holds."""
    same_resource = Q(resource=resource)
    if resource == Resource.CPU:
        same_resource |= Q(resource=Resource.GPU, capacity=Capacity.RESERVED)
    offers = Offer.objects.filter(
        same_resource, partition=partition, window_end__gt=start, window_start__lt=end
    ).filter(Q(status=Offer.Status.OPEN) | Q(status=Offer.Status.CLEARED, units_sold__gt=0))
    if excluding is not None:
        offers = offers.exclude(pk=excluding.pk)
    return [_offer_row_load(partition, resource, row) for row in offers.values_list(*_LOAD_FIELDS)]


# What `capacity_loads` reads of each offer, in the order `_offer_row_load` takes them.
_LOAD_FIELDS = (
    "window_start",
    "window_end",
    "created_at",
    "auction_closes_at",
    "status",
    "quantity",
    "units_sold",
    "capacity",
    "resource",
)


def _offer_row_load(partition: Partition, resource: str, row: tuple[Any, ...]) -> capacity.Load:
    """One offer's load on the calendar of `resource`, from its `_LOAD_FIELDS`."""
    window_start, window_end, created_at, closes_at, status, quantity, units_sold, kind, of = row
    units = quantity if status == Offer.Status.OPEN else units_sold
    bought = units_sold
    if kind == Capacity.RESERVED:
        units *= window_hours(window_start, window_end)
        bought *= window_hours(window_start, window_end)
        if of != resource:  # a GPU block's nodes, on the CPU calendar
            units = units // max(partition.gpus_per_node, 1) * partition.cpus_per_node
            bought = bought // max(partition.gpus_per_node, 1) * partition.cpus_per_node
    return offer_load(
        window_start=window_start,
        window_end=window_end,
        listed_at=offer_listed_at(created_at, closes_at),
        units=units,
        bought=min(bought, units),
    )


def offer_load(
    *,
    window_start: datetime.datetime,
    window_end: datetime.datetime,
    listed_at: datetime.datetime,
    units: int,
    bought: int = 0,
) -> capacity.Load:
    """An offer's units, spread over the part of its window that could be sold when listed
    (from the hour it was listed in: the same for the check at listing and every later read)."""
    return capacity.Load(
        start=max(window_start, capacity.hour_floor(listed_at)),
        end=window_end,
        units=units,
        bought=bought,
    )


def offer_listed_at(
    created_at: datetime.datetime, auction_closes_at: datetime.datetime
) -> datetime.datetime:
    """When an offer was listed, for the calendar: its row's creation, and never after its
    auction closed (no offer is listed after that). A row whose times were moved back after it
    was written (the demo's history is written so) would otherwise count as listed in the last
    minutes of its window, and every unit it sold would fall into those minutes' hour."""
    return min(created_at, auction_closes_at)


def partition_capacity(partition: Partition, resource: str) -> int:
    """What the partition has in each hour: its CPUs, or its GPUs, as verification read them."""
    return partition.gpus if resource == Resource.GPU else partition.cpus


def partition_get(cluster: Cluster, name: str) -> Partition:
    # The name comes from the URL, where %00 reaches us: PostgreSQL refuses NUL in any text.
    partition = None if "\x00" in name else cluster.partitions.filter(name=name).first()
    if partition is None:
        raise NotFound("The cluster has no partition of this name.")
    return partition


def partition_calendar(
    partition: Partition, resource: str, start: datetime.datetime, end: datetime.datetime
) -> list[capacity.Hour]:
    """Each hour from `start` to `end` (at most `CALENDAR_MAX_HOURS`) with what is sold of the
    partition's `resource` and what it has: public, as the offers are."""
    end = min(end, capacity.hour_floor(start) + CALENDAR_MAX_HOURS * capacity.HOUR)
    return capacity.calendar(
        capacity_loads(partition, resource, start, end),
        partition_capacity(partition, resource),
        start,
        end,
    )
