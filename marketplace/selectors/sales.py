"""What an owner listed and sold, per day: the owners' dashboard reads these."""

import datetime
from decimal import Decimal
from typing import Any

from django.db.models import F, Sum

from marketplace.models import Allocation, Capacity, Offer, window_hours
from organizations.models import Organization


def days_of(since: datetime.date, until: datetime.date) -> list[datetime.date]:
    """Every day from `since` to `until`, both included."""
    return [since + datetime.timedelta(days=index) for index in range((until - since).days + 1)]


def spread_over_days(
    quantity: Any, start: datetime.datetime, end: datetime.datetime, days: list[datetime.date]
) -> dict[datetime.date, Decimal]:
    """`quantity` units usable evenly from `start` to `end`, as the share of them in each UTC
    day of `days`: an allocation of 240 core-hours over ten days is 24 a day."""
    seconds = Decimal((end - start).total_seconds())
    if seconds <= 0:
        return {}
    shares = {}
    for day in days:
        day_start = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)
        overlap = min(end, day_start + ONE_DAY) - max(start, day_start)
        if overlap.total_seconds() > 0:
            shares[day] = Decimal(quantity) * Decimal(overlap.total_seconds()) / seconds
    return shares


ONE_DAY = datetime.timedelta(days=1)


def owner_capacity_by_day(
    organization: Organization, days: list[datetime.date]
) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (cluster id, resource) of the organization's clusters: the units its offers listed
    and its allocations sold in each of `days`, each spread evenly over its window. Two
    queries (offers, allocations), whatever their number; cancelled offers listed nothing."""
    if not days:
        return {}
    first = datetime.datetime.combine(days[0], datetime.time(), tzinfo=datetime.UTC)
    last = datetime.datetime.combine(days[-1], datetime.time(), tzinfo=datetime.UTC) + ONE_DAY
    overlapping = {"window_start__lt": last, "window_end__gt": first}
    series: dict[tuple[int, str], dict[str, Any]] = {}

    def add(rows: Any, kind: str) -> None:
        for row in rows:
            key = (row["cluster_id"], row["resource"])
            entry = series.setdefault(
                key,
                {
                    "cluster_name": row["cluster__name"],
                    "cluster_uuid": row["cluster__uuid"],
                    "resource": row["resource"],
                    "offered": {},
                    "sold": {},
                },
            )
            units = row["quantity"]
            if row.get("capacity") == Capacity.RESERVED:  # an offer's cores, each for the window
                units *= window_hours(row["window_start"], row["window_end"])
            shares = spread_over_days(units, row["window_start"], row["window_end"], days)
            for day, share in shares.items():
                entry[kind][day] = entry[kind].get(day, Decimal(0)) + share

    fields = ("cluster_id", "cluster__name", "cluster__uuid", "resource", "quantity")
    add(
        Offer.objects.filter(cluster__organization=organization, **overlapping)
        .exclude(status=Offer.Status.CANCELLED)
        .values(*fields, "window_start", "window_end", "capacity")
        .order_by(),
        "offered",
    )
    add(
        Allocation.objects.filter(cluster__organization=organization, **overlapping)
        .values(*fields, "window_start", "window_end")
        .order_by(),
        "sold",
    )
    return series


def owner_sold_value(organization: Organization, *, since: datetime.datetime) -> Decimal:
    """What teams bought on the organization's clusters since `since` (allocations, by when they
    were bought), at their prices: what the owner sold, of which teams pay only what they use.
    One query."""
    total = Allocation.objects.filter(
        cluster__organization=organization, created_at__gte=since
    ).aggregate(total=Sum(F("quantity") * F("unit_price")))["total"]
    return total or Decimal(0)


def owner_reserved_cores_by_day(
    organization: Organization, days: list[datetime.date]
) -> dict[datetime.date, Decimal]:
    """The cores (GPUs) the organization's clusters held in reserved blocks for teams, on
    average over each UTC day of `days` (a block of 4 cores for 6 hours is 1 that day). One
    query."""
    if not days:
        return {}
    first = datetime.datetime.combine(days[0], datetime.time(), tzinfo=datetime.UTC)
    last = datetime.datetime.combine(days[-1], datetime.time(), tzinfo=datetime.UTC) + ONE_DAY
    held: dict[datetime.date, Decimal] = {}
    rows = Allocation.objects.filter(
        cluster__organization=organization,
        capacity=Capacity.RESERVED,
        window_start__lt=last,
        window_end__gt=first,
    ).values_list("quantity", "window_start", "window_end")
    for core_hours, start, end in rows:
        for day, share in spread_over_days(core_hours, start, end, days).items():
            held[day] = held.get(day, Decimal(0)) + share / 24
    return held
