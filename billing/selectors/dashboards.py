"""Money per day, for the dashboards: a team's spending, an owner's earnings by source."""

import datetime
import uuid
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import F, Sum
from django.db.models.functions import TruncDate

from billing.models import (
    ZERO,
    Account,
    Entry,
)
from organizations.models import Organization


def spending_by_day(
    organization: Organization, *, since: datetime.datetime
) -> dict[datetime.date, Decimal]:
    """What was charged from the organization's holds (its jobs' costs) per UTC day since
    `since`, in one query; days without a charge are absent."""
    rows = (
        Entry.objects.filter(
            account__organization=organization,
            account__kind=Account.Kind.HELD,
            kind=Entry.Kind.CHARGE,
            created_at__gte=since,
        )
        .annotate(day=TruncDate("created_at", tzinfo=datetime.UTC))
        .values("day")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    return {row["day"]: -row["total"] for row in rows}


@dataclass(frozen=True)
class SourceEarnings:
    source: uuid.UUID | None
    source_name: str
    by_day: dict[datetime.date, Decimal]


def earnings_by_day(
    organization: Organization, *, since: datetime.datetime
) -> list[SourceEarnings]:
    """The organization's net earnings as an owner per source (cluster) and UTC day since
    `since`, in one query, sorted by the source's name."""
    rows = (
        Entry.objects.filter(
            account__organization=organization,
            account__kind=Account.Kind.EARNINGS,
            kind=Entry.Kind.EARNING,
            created_at__gte=since,
        )
        .annotate(
            day=TruncDate("created_at", tzinfo=datetime.UTC),
            source=F("transaction__source"),
            source_name=F("transaction__source_name"),
        )
        .values("day", "source", "source_name")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    sources: dict[uuid.UUID | None, SourceEarnings] = {}
    for row in rows:
        earned = sources.setdefault(
            row["source"], SourceEarnings(row["source"], row["source_name"], {})
        )
        earned.by_day[row["day"]] = earned.by_day.get(row["day"], ZERO) + row["total"]
    return sorted(sources.values(), key=lambda earned: (earned.source_name, str(earned.source)))
