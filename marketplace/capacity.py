"""The capacity calendar's arithmetic, as pure functions (no database).

An offer sells `quantity` core-hours (or GPU-hours) of a partition over its window. The market
spreads them evenly over the part of the window that could still be sold when the offer was
listed (`max(window_start, listed at)` to `window_end`): an offer of 240 core-hours over a day
takes 10 cores in each hour. A partition with `cpus` CPUs has `cpus` core-hours in each hour;
no hour may carry more than that, summed over every offer open or sold on the partition (a
cleared offer counts what it sold, a cancelled one nothing). The same rule, alone, is the one
`offer_create` always had: an offer's quantity fits the hours of its window."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Load:
    """`units` spread evenly from `start` to `end`."""

    start: datetime
    end: datetime
    units: int
    bought: int = 0
    """Of `units`, what buyers bought (an auction's clearing, buy-now); the rest is listed."""


@dataclass(frozen=True)
class Hour:
    start: datetime
    capacity: int
    sold: Fraction
    """What the offers already listed take in this hour."""
    asked: Fraction = Fraction(0)
    """What the offer being checked would add."""
    bought: Fraction = Fraction(0)
    """Of `sold`, what buyers bought; the rest is listed and not sold yet. The capacity rule
    counts both (`sold`); an owner's page tells them apart."""

    @property
    def is_over(self) -> bool:
        return self.sold + self.asked > self.capacity

    @property
    def free(self) -> Fraction:
        return max(Fraction(self.capacity) - self.sold, Fraction(0))


def hour_floor(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The starts of the hours that [start, end) touches."""
    hours = []
    hour = hour_floor(start)
    while hour < end:
        hours.append(hour)
        hour += HOUR
    return hours


def _microseconds(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def spread(load: Load, hours: Iterable[datetime]) -> dict[datetime, Fraction]:
    """How much of `load` falls into each of `hours`, exactly."""
    length = _microseconds(load.end - load.start)
    shares: dict[datetime, Fraction] = {}
    if length <= 0 or load.units <= 0:
        return shares
    for hour in hours:
        overlap = min(load.end, hour + HOUR) - max(load.start, hour)
        if overlap > timedelta(0):
            shares[hour] = Fraction(load.units * _microseconds(overlap), length)
    return shares


def calendar(
    loads: Iterable[Load],
    capacity: int,
    start: datetime,
    end: datetime,
    asked: Load | None = None,
) -> list[Hour]:
    """Every hour from `start` to `end` with what `loads` take of it (and what `asked` would)."""
    hours = hours_between(start, end)
    sold = dict.fromkeys(hours, Fraction(0))
    bought = dict.fromkeys(hours, Fraction(0))
    for load in loads:
        for hour, share in spread(load, hours).items():
            sold[hour] += share
            if load.bought:
                bought[hour] += share * Fraction(load.bought, load.units)
    extra = spread(asked, hours) if asked is not None else {}
    return [
        Hour(
            start=hour,
            capacity=capacity,
            sold=sold[hour],
            asked=extra.get(hour, Fraction(0)),
            bought=bought[hour],
        )
        for hour in hours
    ]


def clashes(loads: Iterable[Load], capacity: int, asked: Load) -> list[Hour]:
    """The hours of `asked` in which it would take the partition past its capacity."""
    return [
        hour
        for hour in calendar(loads, capacity, asked.start, asked.end, asked=asked)
        if hour.is_over
    ]


def units_text(value: Fraction) -> str:
    """A share of units as the API writes it: a decimal string with two places."""
    decimal = Decimal(value.numerator) / Decimal(value.denominator)
    return str(decimal.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
