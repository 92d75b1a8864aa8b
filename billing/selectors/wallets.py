"""Wallets and budgets: balances, what was spent this month, the budget's state, top-ups and the
ledger's entries."""

import datetime
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db.models import QuerySet, Sum
from django.utils import timezone

from billing.models import (
    DEFAULT_ALERT_THRESHOLDS,
    ZERO,
    Account,
    Budget,
    BudgetAlert,
    Entry,
    TopUp,
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
