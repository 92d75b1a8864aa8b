"""Monthly statements: each account's opening and closing balance and the lines between."""

import datetime
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models.functions import TruncMonth
from django.utils import timezone

from billing.models import (
    ZERO,
    Account,
    Entry,
    ReferenceKind,
)
from organizations.models import Organization


@dataclass
class AccountStatement:
    kind: str
    label: str
    opening: Decimal = ZERO
    closing: Decimal = ZERO
    totals: dict[str, Decimal] = field(default_factory=dict)

    @property
    def labelled_totals(self) -> list[tuple[str, str, Decimal]]:
        """(kind, label, total) of each kind of entry: "Top-up", never "Top_up"."""
        return [(kind, Entry.Kind(kind).label, total) for kind, total in self.totals.items()]


@dataclass
class StatementLine:
    """A line of the statement page: one entry, or all the entries of one job on one account
    and of one kind (an array's tasks are charged and released one by one: a thousand-task
    array would be a thousand lines of fractions of a cent), with the entries behind it."""

    entries: list[Entry]

    @property
    def first(self) -> Entry:
        return self.entries[0]

    @property
    def amount(self) -> Decimal:
        return sum((entry.amount for entry in self.entries), ZERO)

    @property
    def is_job(self) -> bool:
        transaction = self.first.transaction
        return transaction.reference_kind == ReferenceKind.JOB and transaction.reference is not None

    @property
    def is_own_job(self) -> bool:
        """A job of the organization itself (its wallet paid), whose page it may open; an
        owner's earnings come from other teams' jobs."""
        return self.is_job and self.first.account.kind in (
            Account.Kind.AVAILABLE,
            Account.Kind.HELD,
        )


def statement_lines(entries: list[Entry]) -> list[StatementLine]:
    """The entries in order, a job's entries of one account and kind as one line where the
    first of them is."""
    lines: list[StatementLine] = []
    by_job: dict[tuple[Any, str, str], StatementLine] = {}
    for entry in entries:
        transaction = entry.transaction
        if transaction.reference_kind != ReferenceKind.JOB or transaction.reference is None:
            lines.append(StatementLine([entry]))
            continue
        key = (transaction.reference, entry.account.kind, entry.kind)
        line = by_job.get(key)
        if line is None:
            line = by_job[key] = StatementLine([entry])
            lines.append(line)
        else:
            line.entries.append(entry)
    return lines


@dataclass
class Statement:
    organization: Organization
    period_start: datetime.datetime
    period_end: datetime.datetime
    currency: str
    accounts: list[AccountStatement]
    entries: list[Entry]

    @property
    def lines(self) -> list[StatementLine]:
        return statement_lines(self.entries)


def month_bounds(year: int, month: int) -> tuple[datetime.datetime, datetime.datetime]:
    start = timezone.make_aware(datetime.datetime(year, month, 1))
    following = datetime.datetime(year + month // 12, month % 12 + 1, 1)
    return start, timezone.make_aware(following)


def statement_build(organization: Organization, year: int, month: int) -> Statement:
    """The month's statement: per account the opening balance, the totals per kind of entry,
    the closing balance, and every entry. `opening + sum(entries) == closing` exactly."""
    start, end = month_bounds(year, month)
    accounts = {
        account.kind: account for account in Account.objects.filter(organization=organization)
    }
    entries = list(
        Entry.objects.filter(account__organization=organization, created_at__gte=start)
        .filter(created_at__lt=end)
        .select_related("account", "transaction")
        .order_by("created_at", "id")
    )
    summaries = []
    for kind in Account.ORGANIZATION_KINDS:
        summary = AccountStatement(kind=kind, label=Account.Kind(kind).label)
        account = accounts.get(kind)
        if account is not None:
            before = (
                Entry.objects.filter(account=account, created_at__lt=start)
                .order_by("-created_at", "-id")
                .values_list("balance_after", flat=True)
                .first()
            )
            summary.opening = before if before is not None else ZERO
        summary.closing = summary.opening
        for entry in entries:
            if entry.account.kind == kind:
                summary.totals[entry.kind] = summary.totals.get(entry.kind, ZERO) + entry.amount
                summary.closing += entry.amount
        if kind == Account.Kind.DEBT and not (summary.opening or summary.totals):
            continue  # an organization that never owed anything has no such line
        summaries.append(summary)
    return Statement(
        organization=organization,
        period_start=start,
        period_end=end,
        currency=settings.PLATFORM_CURRENCY,
        accounts=summaries,
        entries=entries,
    )


def statement_months(organization: Organization) -> list[datetime.date]:
    """The months in which the organization has entries, newest first."""
    months = (
        Entry.objects.filter(account__organization=organization)
        .annotate(month=TruncMonth("created_at"))
        .values_list("month", flat=True)
        .distinct()
        .order_by("-month")
    )
    return [timezone.localtime(m).date() if isinstance(m, datetime.datetime) else m for m in months]
