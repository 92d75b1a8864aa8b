"""What the periodic tasks read: the ledger's invariants, budget alerts not yet mailed, hold release
batches due."""

import datetime

from django.db.models import Count, DecimalField, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from billing.models import (
    ZERO,
    Account,
    BudgetAlert,
    Entry,
    HoldReleaseBatch,
    Transaction,
)


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


def hold_release_batches_due() -> list[int]:
    """The hold release batches still waiting: their task was lost (a crash after the commit,
    a broker that did not take it), or is applying them now (the sweep skips those)."""
    return list(HoldReleaseBatch.objects.order_by("pk").values_list("pk", flat=True)[:100])
