"""Idle time and the offers suggested from it."""

import dataclasses
import datetime
from decimal import Decimal

from django.utils import timezone

from computeshare.numbers import MICRO_UNIT
from marketplace import capacity
from marketplace.models import Partition, PartitionIdleHour, Resource
from marketplace.selectors.calendar import partition_calendar
from marketplace.selectors.offers import price_history

IDLE_PATTERN_DAYS = 28
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclasses.dataclass(frozen=True)
class IdleCell:
    """One hour of the week over the last weeks: the mean idle units in it, as a share of what
    the partition had, over `samples` samples."""

    weekday: int
    hour: int
    samples: int
    mean_idle: float
    share: float


def idle_pattern(
    partition: Partition, resource: str, now: datetime.datetime | None = None
) -> list[list[IdleCell | None]]:
    """The partition's idle CPUs (or GPUs) by weekday (Monday first) and hour (UTC) over the
    last `IDLE_PATTERN_DAYS` days; None where no sample fell."""
    now = now or timezone.now()
    sums: dict[tuple[int, int], list[float]] = {}
    rows = PartitionIdleHour.objects.filter(
        partition=partition, hour__gte=now - datetime.timedelta(days=IDLE_PATTERN_DAYS)
    ).values_list("hour", "samples", "idle_cpus", "idle_gpus", "cpus", "gpus")
    is_gpu = resource == Resource.GPU
    for hour, samples, idle_cpus, idle_gpus, cpus, gpus in rows:
        key = (hour.weekday(), hour.hour)
        total = sums.setdefault(key, [0, 0.0, 0.0])
        total[0] += samples
        total[1] += idle_gpus if is_gpu else idle_cpus
        total[2] += samples * (gpus if is_gpu else cpus)
    grid: list[list[IdleCell | None]] = [[None] * 24 for _ in range(7)]
    for (weekday, hour_of_day), (sampled, idle, had) in sums.items():
        grid[weekday][hour_of_day] = IdleCell(
            weekday=weekday,
            hour=hour_of_day,
            samples=int(sampled),
            mean_idle=idle / sampled,
            share=idle / had if had else 0.0,
        )
    return grid


@dataclasses.dataclass(frozen=True)
class OfferSuggestion:
    """An offer for the partition's next idle window: `per_hour` units in each of its hours
    (what was idle at least, on average, in those hours of the week, and is not sold yet),
    at the reserve price the price history suggests."""

    partition: Partition
    resource: str
    window_start: datetime.datetime
    window_end: datetime.datetime
    per_hour: int
    quantity: int
    auction_closes_at: datetime.datetime
    reserve_price: Decimal | None
    price_basis: str


# An hour counts as idle when, on average over the last weeks, at least this share of the
# partition was idle in it; a suggested window is at most a day, and starts at least two hours
# ahead, so that its auction has an hour.
IDLE_SHARE = 0.25
SUGGESTION_MAX_HOURS = 24
SUGGESTION_LEAD = datetime.timedelta(hours=2)
PRICE_SAMPLE = 10


def reserve_price_suggestion(partition: Partition, resource: str) -> tuple[Decimal | None, str]:
    """The median clearing price of the partition's last `PRICE_SAMPLE` auctions that sold
    something; without any, of the last auctions of this resource anywhere on the market."""
    for scope, offers in (
        (
            "this partition",
            price_history(cluster=partition.cluster, partition=partition.name, resource=resource),
        ),
        (f"every {resource} offer on the market", price_history(resource=resource)),
    ):
        prices = sorted(
            offers.filter(clearing_price__isnull=False)
            .order_by("-auction_closes_at", "-pk")
            .values_list("clearing_price", flat=True)[:PRICE_SAMPLE]
        )
        if prices:
            middle = len(prices) // 2
            median = (
                prices[middle]
                if len(prices) % 2
                else ((prices[middle - 1] + prices[middle]) / 2).quantize(MICRO_UNIT)
            )
            return median, (
                f"the median clearing price of the last {len(prices)} "
                f"auction{'s' if len(prices) != 1 else ''} of {scope}"
            )
    return None, "no auction has cleared on the market yet: set a reserve price yourself"


def offer_suggestion(
    partition: Partition, resource: str, now: datetime.datetime | None = None
) -> OfferSuggestion | None:
    """The next window, within a week, of consecutive hours in which the partition was idle
    over the last weeks (`IDLE_SHARE`), at most a day long, sized to what was idle in its
    leanest hour and is not sold yet; None when no such hour comes."""
    now = now or timezone.now()
    pattern = idle_pattern(partition, resource, now)
    first = capacity.hour_floor(now + SUGGESTION_LEAD)
    hours = [first + index * capacity.HOUR for index in range(24 * 7)]
    free = {
        hour.start: hour.free
        for hour in partition_calendar(partition, resource, first, hours[-1] + capacity.HOUR)
    }

    def idle_units(hour: datetime.datetime) -> int:
        cell = pattern[hour.weekday()][hour.hour]
        if cell is None or cell.share < IDLE_SHARE:
            return 0
        return int(min(cell.mean_idle, free.get(hour, 0)))

    window: list[tuple[datetime.datetime, int]] = []
    for hour in hours:
        units = idle_units(hour)
        if units >= 1:
            window.append((hour, units))
            if len(window) == SUGGESTION_MAX_HOURS:
                break
        elif window:
            break
    if not window:
        return None
    per_hour = min(units for _, units in window)
    start, end = window[0][0], window[-1][0] + capacity.HOUR
    price, basis = reserve_price_suggestion(partition, resource)
    return OfferSuggestion(
        partition=partition,
        resource=resource,
        window_start=start,
        window_end=end,
        per_hour=per_hour,
        quantity=per_hour * len(window),
        auction_closes_at=start - capacity.HOUR,
        reserve_price=price,
        price_basis=basis,
    )
