"""Times as people send them: within the years the platform counts in.

Python's datetime ends at 9999-12-31: a month's end, a window of hours or a day added to a time
near it overflows (`OverflowError`), and a time before 1970 has no Unix timestamp on some
platforms. Every time and month a request names is read here first, and one outside
FIRST_YEAR..LAST_YEAR is a 400 with this sentence, never an error deeper down."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

FIRST_YEAR = 2000
LAST_YEAR = 2999
YEARS_MESSAGE = f"A time from {FIRST_YEAR} to {LAST_YEAR}."
MONTH_MESSAGE = f"A month from {FIRST_YEAR} to {LAST_YEAR}."


def month_start(year: int, month: int) -> datetime:
    """The first instant of that UTC month; ValueError with MONTH_MESSAGE outside the years."""
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise ValueError(MONTH_MESSAGE)
    return datetime(year, month, 1, tzinfo=UTC)


def is_within_years(moment: datetime) -> bool:
    return FIRST_YEAR <= moment.year <= LAST_YEAR


class BoundedDateTimeField(serializers.DateTimeField):
    """DRF's DateTimeField, refusing a time outside FIRST_YEAR..LAST_YEAR (400)."""

    def to_internal_value(self, value: Any) -> datetime:
        moment = super().to_internal_value(value)
        if not is_within_years(moment):
            raise serializers.ValidationError(YEARS_MESSAGE)
        return moment
