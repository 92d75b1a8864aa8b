"""An owner's earnings (per allocation and in sum) and what of them can be paid out: debts, payouts,
the connected account."""

import datetime
import uuid
from collections import defaultdict
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.conf import settings
from django.db.models import F, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import TruncMonth
from django.utils import timezone

from billing.models import (
    ZERO,
    Account,
    ConnectedAccount,
    Debt,
    Entry,
    Payout,
)
from organizations.models import Organization


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
