"""Reads of billing. Each takes the organization the caller was already allowed to see (the
marketplace checks memberships; billing does not know them) and never writes."""

import datetime
import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, DecimalField, F, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce, TruncDate, TruncMonth
from django.utils import timezone

from billing.models import (
    DEFAULT_ALERT_THRESHOLDS,
    ZERO,
    Account,
    Budget,
    BudgetAlert,
    ConnectedAccount,
    Debt,
    Entry,
    HoldReleaseBatch,
    Payout,
    ReferenceKind,
    TopUp,
    Transaction,
)
from organizations.models import Organization


@dataclass(frozen=True)
class Wallet:
    available: Decimal
    held: Decimal
    earnings: Decimal
    currency: str


def wallet_get(organization: Organization) -> Wallet:
    return _wallet_of(
        dict(Account.objects.filter(organization=organization).values_list("kind", "balance"))
    )


def wallet_list(organization_ids: Iterable[int]) -> dict[int, Wallet]:
    """The wallets of several organizations, by organization id, in one query (an offer page
    shows one per organization the user can buy for)."""
    balances: dict[int, dict[str, Decimal]] = {pk: {} for pk in organization_ids}
    rows = Account.objects.filter(organization_id__in=balances).values_list(
        "organization_id", "kind", "balance"
    )
    for organization_id, kind, balance in rows:
        balances[organization_id][kind] = balance
    return {pk: _wallet_of(kinds) for pk, kinds in balances.items()}


def _wallet_of(balances: dict[str, Decimal]) -> Wallet:
    return Wallet(
        available=balances.get(Account.Kind.AVAILABLE, ZERO),
        held=balances.get(Account.Kind.HELD, ZERO),
        earnings=balances.get(Account.Kind.EARNINGS, ZERO),
        currency=settings.PLATFORM_CURRENCY,
    )


def platform_balance(kind: str) -> Decimal:
    """The platform's balance of one of its accounts (`fees`, `stripe_clearing`,
    `adjustments`): the sum of the account's shards (ADR 10)."""
    total = Account.objects.filter(organization__isnull=True, kind=kind).aggregate(
        total=Sum("balance")
    )["total"]
    return total if total is not None else ZERO


def month_start(moment: datetime.datetime | None = None) -> datetime.datetime:
    local = timezone.localtime(moment or timezone.now())
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def spent_since(organization: Organization, since: datetime.datetime) -> Decimal:
    """Charged from the organization's holds since `since`."""
    total = Entry.objects.filter(
        account__organization=organization,
        account__kind=Account.Kind.HELD,
        kind=Entry.Kind.CHARGE,
        created_at__gte=since,
    ).aggregate(total=Sum("amount"))["total"]
    return -(total or ZERO)


def budget_get(organization: Organization) -> Budget:
    """The organization's budget; an unsaved one with no limit and the default thresholds
    when it never set one (a GET never writes)."""
    budget = Budget.objects.filter(organization=organization).first()
    if budget is None:
        budget = Budget(
            organization=organization,
            monthly_limit=None,
            alert_thresholds=list(DEFAULT_ALERT_THRESHOLDS),
        )
    return budget


@dataclass(frozen=True)
class BudgetStatus:
    monthly_limit: Decimal | None
    alert_thresholds: list[int]
    spent_this_month: Decimal
    committed: Decimal
    currency: str

    @property
    def committed_and_spent(self) -> Decimal:
        return self.committed + self.spent_this_month

    @property
    def remaining(self) -> Decimal | None:
        if self.monthly_limit is None:
            return None
        return max(ZERO, self.monthly_limit - self.committed_and_spent)

    @property
    def used_percent(self) -> int | None:
        if not self.monthly_limit:
            return None
        used = self.committed_and_spent * 100 / self.monthly_limit
        return int(used.to_integral_value(rounding=ROUND_HALF_UP))


def budget_status(organization: Organization, wallet: Wallet | None = None) -> BudgetStatus:
    """The budget and this month's use of it; pass the `wallet` when it was read already."""
    budget = budget_get(organization)
    return BudgetStatus(
        monthly_limit=budget.monthly_limit,
        alert_thresholds=list(budget.alert_thresholds),
        spent_this_month=spent_since(organization, month_start()),
        committed=(wallet or wallet_get(organization)).held,
        currency=settings.PLATFORM_CURRENCY,
    )


def budget_alert_list_open(organization: Organization) -> QuerySet[BudgetAlert]:
    return BudgetAlert.objects.filter(organization=organization, dismissed_at__isnull=True)


def top_up_list(organization: Organization) -> QuerySet[TopUp]:
    return TopUp.objects.filter(organization=organization).order_by("-created_at", "-id")


def top_up_get(organization: Organization, top_up_uuid: uuid.UUID) -> TopUp | None:
    return TopUp.objects.filter(organization=organization, uuid=top_up_uuid).first()


def ledger_entry_list(
    organization: Organization,
    *,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
    kinds: list[str] | None = None,
) -> QuerySet[Entry]:
    """The organization's own entries (available, held, earnings), newest first."""
    entries = Entry.objects.filter(account__organization=organization)
    if since is not None:
        entries = entries.filter(created_at__gte=since)
    if until is not None:
        entries = entries.filter(created_at__lt=until)
    if kinds:
        entries = entries.filter(kind__in=kinds)
    return entries.select_related("account", "transaction").order_by("-created_at", "-id")


# --- Earnings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EarningsRow:
    month: datetime.date
    source: uuid.UUID | None
    source_name: str
    gross: Decimal
    fees: Decimal
    net: Decimal


def earnings_list(
    organization: Organization,
    *,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
) -> list[EarningsRow]:
    """What the organization earned as an owner, per month and per source (cluster): the
    charges (gross), the platform's fees from them, and its net earnings."""
    earnings = Entry.objects.filter(
        account__organization=organization,
        account__kind=Account.Kind.EARNINGS,
        kind=Entry.Kind.EARNING,
    )
    if since is not None:
        earnings = earnings.filter(created_at__gte=since)
    if until is not None:
        earnings = earnings.filter(created_at__lt=until)
    fee_of_transaction = (
        Entry.objects.filter(transaction=OuterRef("transaction"), kind=Entry.Kind.FEE)
        .values("transaction")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    rows = (
        earnings.annotate(
            month=TruncMonth("created_at"),
            source=F("transaction__source"),
            source_name=F("transaction__source_name"),
            fee=Subquery(fee_of_transaction),
        )
        .values("month", "source", "source_name", "amount", "fee")
        .order_by()
    )
    totals: dict[tuple[Any, Any, str], list[Decimal]] = defaultdict(lambda: [ZERO, ZERO])
    for row in rows:
        key = (row["month"], row["source"], row["source_name"])
        totals[key][0] += row["amount"]
        totals[key][1] += row["fee"] or ZERO
    result = [
        EarningsRow(
            month=timezone.localtime(month).date()
            if isinstance(month, datetime.datetime)
            else month,
            source=source,
            source_name=source_name,
            gross=net + fees,
            fees=fees,
            net=net,
        )
        for (month, source, source_name), (net, fees) in totals.items()
    ]
    return sorted(
        result, key=lambda row: (row.month, row.source_name, str(row.source)), reverse=True
    )


@dataclass(frozen=True)
class Earnings:
    currency: str
    gross: Decimal
    fees: Decimal
    net: Decimal
    results: list[EarningsRow]


def earnings_summary(
    organization: Organization,
    *,
    since: datetime.datetime | None = None,
    until: datetime.datetime | None = None,
) -> Earnings:
    """`earnings_list` with its totals."""
    rows = earnings_list(organization, since=since, until=until)
    gross = sum((row.gross for row in rows), start=ZERO)
    fees = sum((row.fees for row in rows), start=ZERO)
    return Earnings(
        currency=settings.PLATFORM_CURRENCY, gross=gross, fees=fees, net=gross - fees, results=rows
    )


# --- Payouts -----------------------------------------------------------------------------------


def debt_owed(organization: Organization) -> Decimal:
    """What the organization owes the platform (positive), from its `debt` account."""
    balance = (
        Account.objects.filter(organization=organization, kind=Account.Kind.DEBT)
        .values_list("balance", flat=True)
        .first()
    )
    return -balance if balance else ZERO


def earnings_split(organization: Organization, balance: Decimal) -> tuple[Decimal, Decimal]:
    """(held, payable) of an earnings balance: what was earned within the holding period
    (`PAYOUT_HOLDING_PERIOD`, time for a dispute to arrive) is held, the rest is payable,
    in whole cents as money leaves through Stripe."""
    recent = (
        Entry.objects.filter(
            account__organization=organization,
            account__kind=Account.Kind.EARNINGS,
            kind=Entry.Kind.EARNING,
            created_at__gt=timezone.now() - settings.PAYOUT_HOLDING_PERIOD,
        ).aggregate(total=Sum("amount"))["total"]
        or ZERO
    )
    held = min(max(balance, ZERO), recent)
    payable = (balance - held).quantize(Decimal("0.01"), rounding=ROUND_DOWN)
    return balance - payable, max(payable, ZERO)


@dataclass(frozen=True)
class PayoutBalance:
    earnings: Decimal
    held: Decimal
    payable: Decimal
    owed: Decimal
    holding_days: int
    minimum: Decimal
    currency: str


def payout_balance(organization: Organization) -> PayoutBalance:
    """The organization's earnings split into what is still held (earned within the holding
    period) and what is payable now, and what it owes the platform (no payout until repaid)."""
    earnings = (
        Account.objects.filter(organization=organization, kind=Account.Kind.EARNINGS)
        .values_list("balance", flat=True)
        .first()
    ) or ZERO
    held, payable = earnings_split(organization, earnings)
    return PayoutBalance(
        earnings=earnings,
        held=held,
        payable=payable,
        owed=debt_owed(organization),
        holding_days=settings.PAYOUT_HOLDING_PERIOD.days,
        minimum=settings.PAYOUT_MINIMUM,
        currency=settings.PLATFORM_CURRENCY,
    )


def connected_account_get(organization: Organization) -> ConnectedAccount | None:
    return ConnectedAccount.objects.filter(organization=organization).first()


def payout_list(organization: Organization) -> QuerySet[Payout]:
    return Payout.objects.filter(organization=organization).order_by("-created_at", "-id")


def payout_get(organization: Organization, payout_uuid: uuid.UUID) -> Payout | None:
    return Payout.objects.filter(organization=organization, uuid=payout_uuid).first()


def debt_list() -> QuerySet[Debt]:
    """Every organization that owes the platform, most owed first (for the operators)."""
    return (
        Debt.objects.filter(kind=Account.Kind.DEBT, balance__lt=0)
        .select_related("organization")
        .order_by("balance", "id")
    )


# --- Statements --------------------------------------------------------------------------------


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


# --- Checks ------------------------------------------------------------------------------------


def ledger_verify() -> list[str]:
    """Everything in the ledger that breaks an invariant, as sentences (empty when sound):
    a transaction whose entries do not sum to zero, an account whose cached balance differs
    from the sum of its entries or from the balance its last entry recorded."""
    problems = []
    unbalanced = (
        Transaction.objects.annotate(
            total=Coalesce(Sum("entries__amount"), ZERO, output_field=DecimalField()),
            lines=Count("entries"),
        )
        .filter(~Q(total=0) | Q(lines__lt=2))
        .values_list("uuid", "total", "lines")
    )
    problems += [
        f"transaction {uuid} has {lines} entries summing to {total}"
        for uuid, total, lines in unbalanced
    ]
    last_balance = (
        Entry.objects.filter(account=OuterRef("pk"))
        .order_by("-created_at", "-id")
        .values("balance_after")[:1]
    )
    for account in Account.objects.annotate(
        total=Sum("entries__amount"), last=Subquery(last_balance)
    ):
        total = account.total or ZERO
        last = account.last if account.last is not None else ZERO
        if not account.balance == total == last:
            problems.append(
                f"account {account} caches {account.balance}, its entries sum to {total}, "
                f"its last entry left {last}"
            )
    return problems


def budget_alerts_unmailed(*, older_than: datetime.timedelta) -> list[int]:
    """Alerts recorded more than `older_than` ago whose mail has not gone: their message was
    lost (the broker down) or every try to send it failed."""
    return list(
        BudgetAlert.objects.filter(
            notified_at__isnull=True, created_at__lt=timezone.now() - older_than
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


# --- Dashboards: money per day -----------------------------------------------------------------


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


def hold_release_batches_due() -> list[int]:
    """The hold release batches still waiting: their task was lost (a crash after the commit,
    a broker that did not take it), or is applying them now (the sweep skips those)."""
    return list(HoldReleaseBatch.objects.order_by("pk").values_list("pk", flat=True)[:100])
