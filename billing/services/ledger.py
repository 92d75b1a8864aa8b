"""The ledger: its accounts, the posting of balanced transactions, and the wallet movements
that are not holds (credits, debits, adjustments, earnings paid out). Holds move money through
the same posting, one at a time in `holds` and many at once in `bulk_settlement`; together
these three modules are the only writes that move money.

Every service of the three is one database transaction that
- locks what it changes in one fixed order, so that two services never wait on each other in a
  cycle: the hold first; then the wallet accounts it debits or checks (`available`, `held`) by
  primary key; last, just before the entries are written, the accounts it only credits
  (`earnings` and the platform's `fees`, `stripe_clearing`, `adjustments`) by primary key.
  Those last ones are shared by many payers, so they are held for the shortest time; each
  platform account is several rows (`platform_shard`, ADR 10), so that no one row is locked
  by every charge;
- refuses (`InsufficientFunds`, `BudgetExceeded`, ...) before it writes anything;
- posts one `Transaction` whose entries sum to zero and updates the cached balances with them;
- is a replay when given an `idempotency_reference` already posted: it returns what the first
  call made and writes nothing.
"""

import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from billing.errors import (
    AmountNotPayable,
    InsufficientFunds,
    OutstandingDebt,
)
from billing.models import ZERO, Account, Entry, Hold, ReferenceKind, Transaction
from billing.selectors import debt_owed, earnings_split
from computeshare.errors import ValidationFailed
from computeshare.models import User
from computeshare.numbers import MICRO_PLACES, MICRO_UNIT
from organizations.models import Organization

# What the ledger's columns hold: 20 digits, 6 of them after the point.
LARGEST = Decimal(10) ** 14

AccountKey = tuple[int | None, str]
# An account the caller has locked, or the key of a credit-only account that `ledger_post` locks.
Line = tuple[Account | AccountKey, str, Decimal]


def money(value: Any, *, field: str = "amount", places: int = MICRO_PLACES) -> Decimal:
    """`value` as a finite Decimal with no more places than `places`, or `ValidationFailed`.
    Never rounds: a caller with more precision must decide how to round."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError) as error:
        raise ValidationFailed(fields={field: ["Not a decimal number."]}) from error
    if not amount.is_finite():
        raise ValidationFailed(fields={field: ["Not a decimal number."]})
    if abs(amount) >= LARGEST:
        raise ValidationFailed(fields={field: [f"Must be less than {LARGEST:,}."]})
    if amount != amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):
        raise ValidationFailed(fields={field: [f"At most {places} decimal places."]})
    return amount


def money_positive(value: Any, field: str = "amount") -> Decimal:
    amount = money(value, field=field)
    if amount <= 0:
        raise ValidationFailed(fields={field: ["Must be more than zero."]})
    return amount


def platform_fee(amount: Decimal) -> Decimal:
    """The platform's share of a charge, `PLATFORM_FEE_PERCENT` of it to the micro-unit."""
    fee = amount * Decimal(settings.PLATFORM_FEE_PERCENT) / 100
    return fee.quantize(MICRO_UNIT, rounding=ROUND_HALF_UP)


# --- Accounts and posting ----------------------------------------------------------------------


def platform_shard(organization_id: int) -> int:
    """Which row of each platform account a transaction about this organization posts to
    (ADR 10). By the organization, not at random: a team's charges already wait on each other
    for its own `held` account, so two teams share a platform row only when they share a
    shard, and each organization's platform lines stay on one row."""
    return organization_id % Account.PLATFORM_SHARDS


def _key_filter(keys: Iterable[AccountKey], shard: int) -> Q:
    kinds_of: dict[int | None, list[str]] = {}
    for organization_id, kind in keys:
        kinds_of.setdefault(organization_id, []).append(kind)
    condition = Q()
    for organization_id, kinds in kinds_of.items():
        if organization_id is None:
            condition |= Q(organization__isnull=True, kind__in=kinds, shard=shard)
        else:
            condition |= Q(organization_id=organization_id, kind__in=kinds)
    return condition


def accounts_open(keys: Sequence[AccountKey], shard: int = 0) -> None:
    """Creates the accounts that do not exist yet (concurrent callers are harmless); platform
    accounts (organization None) as their row `shard`."""
    Account.objects.bulk_create(
        [
            Account(
                organization_id=organization_id,
                kind=kind,
                currency=settings.PLATFORM_CURRENCY,
                shard=shard if organization_id is None else 0,
            )
            for organization_id, kind in keys
        ],
        ignore_conflicts=True,
    )


def wallet_open(organization: Organization) -> None:
    """Opens an organization's accounts ahead of their first movement (which opens them itself
    in `accounts_lock`): for seeds, benchmarks and tests that want the rows in place.
    Organizations are created below billing, without it; every read answers zero for accounts
    not opened yet."""
    accounts_open([(organization.pk, kind) for kind in Account.ORGANIZATION_KINDS])


def accounts_lock(keys: Sequence[AccountKey], shard: int = 0) -> dict[AccountKey, Account]:
    """Locks the accounts in primary-key order, creating any that are missing first; of a
    platform account, its row `shard`. A transaction calls it at most once for the accounts it
    debits and once, in `ledger_post`, for those it only credits."""
    keys = list(dict.fromkeys(keys))
    if not keys:  # an empty filter would lock every account
        return {}
    condition = _key_filter(keys, shard)
    accounts = list(Account.objects.select_for_update().filter(condition).order_by("id"))
    if len(accounts) < len(keys):
        accounts_open(keys, shard)
        accounts = list(Account.objects.select_for_update().filter(condition).order_by("id"))
    return {(account.organization_id, account.kind): account for account in accounts}


def transaction_replayed(idempotency_reference: str | None) -> Transaction | None:
    if idempotency_reference is None:
        return None
    return (
        Transaction.objects.select_related("hold")
        .filter(idempotency_reference=idempotency_reference)
        .first()
    )


def ledger_post(
    *,
    kind: str,
    organization: Organization,
    lines: Sequence[Line],
    reference_kind: str,
    reference: UUID | None = None,
    hold: Hold | None = None,
    idempotency_reference: str | None = None,
    memo: str = "",
    created_by: User | None = None,
    source: UUID | None = None,
    source_name: str = "",
) -> Transaction:
    """Writes one balanced transaction. Accounts given as objects are locked by the caller
    (and checked here before anything is written); accounts given as keys only receive money
    and are locked here, last. Lines of zero are left out (an entry always moves money)."""
    lines = [line for line in lines if line[2] != 0]
    _lines_check(lines)
    posted = Transaction.objects.create(
        kind=kind,
        organization=organization,
        hold=hold,
        reference_kind=reference_kind,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo[:255],
        created_by=created_by,
        source=source,
        source_name=source_name[:200],
    )
    late = accounts_lock(
        [target for target, _, _ in lines if not isinstance(target, Account)],
        platform_shard(organization.pk),
    )
    changed = _entries_write(posted, lines, late)
    _balances_store(changed)
    return posted


def _lines_check(lines: Sequence[Line]) -> None:
    """Refuses, before anything is written, lines that do not balance or that would take an
    account that never goes negative below zero (`InsufficientFunds` for a wallet's
    `available`; any other is a bug)."""
    if sum((amount for _, _, amount in lines), ZERO) != 0:
        raise AssertionError(f"Unbalanced transaction: {lines!r}")
    for target, _, amount in lines:
        if isinstance(target, Account):
            if target.kind in Account.NEVER_NEGATIVE and target.balance + amount < 0:
                if target.kind == Account.Kind.AVAILABLE:
                    raise InsufficientFunds(
                        extra={"available": str(target.balance), "currency": target.currency}
                    )
                raise AssertionError(f"{target} would go below zero")
        elif amount < 0 and target[1] in Account.NEVER_NEGATIVE:
            raise AssertionError(f"{target} is only credited; it was given {amount}")


def _entries_write(
    posted: Transaction, lines: Sequence[Line], late: Mapping[AccountKey, Account]
) -> list[Account]:
    """The transaction's entries, each with its account's balance after it; returns the
    accounts whose balances changed (in memory, not saved yet)."""
    entries = []
    changed: dict[int, Account] = {}
    for target, entry_kind, amount in lines:
        account = target if isinstance(target, Account) else late[target]
        account.balance += amount
        changed[account.pk] = account
        entries.append(
            Entry(
                transaction=posted,
                account=account,
                kind=entry_kind,
                amount=amount,
                balance_after=account.balance,
            )
        )
    Entry.objects.bulk_create(entries)
    return list(changed.values())


def _balances_store(accounts: list[Account]) -> None:
    now = timezone.now()
    if connection.vendor == "postgresql" and len(accounts) > 1:
        # One round trip for the two or three balances, not one each.
        balances_write(
            [account.pk for account in accounts], [account.balance for account in accounts], now
        )
    else:
        for account in accounts:
            Account.objects.filter(pk=account.pk).update(balance=account.balance, updated_at=now)


def wallet_keys(organization: Organization) -> list[AccountKey]:
    return [(organization.pk, Account.Kind.AVAILABLE), (organization.pk, Account.Kind.HELD)]


# --- Wallet credits ----------------------------------------------------------------------------


def _available_from_platform(
    *,
    organization: Organization,
    amount: Decimal,
    platform_kind: str,
    kind: str,
    reference_kind: str,
    idempotency_reference: str | None,
    memo: str,
    reference: UUID | None = None,
    created_by: User | None = None,
) -> Transaction:
    """Moves `amount` from a platform account to the organization's available balance (a
    negative amount the other way, never past what is available). Money in repays what the
    organization owes the platform first (its `debt` account), the rest becomes available."""
    key, debt_key = (organization.pk, Account.Kind.AVAILABLE), (organization.pk, Account.Kind.DEBT)
    accounts = accounts_lock([key, debt_key])
    available, debt = accounts[key], accounts[debt_key]
    if (done := transaction_replayed(idempotency_reference)) is not None:
        return done
    repaid = min(amount, -debt.balance) if amount > 0 else ZERO
    # Entry kinds share the transaction kinds' names: a top-up's lines are `top_up`, an
    # adjustment's `adjustment`.
    return ledger_post(
        kind=kind,
        organization=organization,
        lines=[
            ((None, platform_kind), kind, -amount),
            (debt, kind, repaid),
            (available, kind, amount - repaid),
        ],
        reference_kind=reference_kind,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
        created_by=created_by,
    )


@transaction.atomic
def wallet_credit(
    *,
    organization: Organization,
    amount: Any,
    idempotency_reference: str,
    reference: UUID | None = None,
    memo: str = "",
    kind: str = Transaction.Kind.TOP_UP,
) -> Transaction:
    """Credits money paid in through Stripe to the organization's available balance, from the
    Stripe clearing account: a top-up, or a won dispute's money back (`kind` `dispute`). Once
    per `idempotency_reference` (one per PaymentIntent, one per dispute)."""
    if kind not in (Transaction.Kind.TOP_UP, Transaction.Kind.DISPUTE):
        raise AssertionError(f"wallet_credit is for top-ups and disputes, not {kind}")
    return _available_from_platform(
        organization=organization,
        amount=money_positive(amount),
        platform_kind=Account.Kind.STRIPE_CLEARING,
        kind=kind,
        reference_kind=ReferenceKind.TOP_UP
        if kind == Transaction.Kind.TOP_UP
        else ReferenceKind.DISPUTE,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
    )


@transaction.atomic
def wallet_debit(
    *,
    organization: Organization,
    amount: Any,
    kind: str,
    idempotency_reference: str,
    reference: UUID | None = None,
    memo: str = "",
) -> Transaction:
    """Gives money paid in through Stripe back to Stripe (a refund, a dispute's withdrawal):
    from the organization's available balance as far as it goes, the rest recorded as owed to
    the platform (its `debt` account), which refuses new commitments until it is repaid. Money
    already held for bids and allocations is not touched. Once per `idempotency_reference`."""
    amount = money_positive(amount)
    if kind not in (Transaction.Kind.REFUND, Transaction.Kind.DISPUTE):
        raise AssertionError(f"wallet_debit is for refunds and disputes, not {kind}")
    key, debt_key = (organization.pk, Account.Kind.AVAILABLE), (organization.pk, Account.Kind.DEBT)
    accounts = accounts_lock([key, debt_key])
    if (done := transaction_replayed(idempotency_reference)) is not None:
        return done
    available, debt = accounts[key], accounts[debt_key]
    taken = min(amount, max(available.balance, ZERO))
    return ledger_post(
        kind=kind,
        organization=organization,
        lines=[
            ((None, Account.Kind.STRIPE_CLEARING), kind, amount),
            (available, kind, -taken),
            (debt, kind, taken - amount),
        ],
        reference_kind=ReferenceKind.TOP_UP
        if kind == Transaction.Kind.REFUND
        else ReferenceKind.DISPUTE,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
    )


def debt_refuse(organization: Organization) -> None:
    """`OutstandingDebt` while the organization owes the platform anything."""
    owed = debt_owed(organization)
    if owed > 0:
        raise OutstandingDebt(extra={"owed": str(owed), "currency": settings.PLATFORM_CURRENCY})


# --- Earnings and payouts ----------------------------------------------------------------------


def earnings_pay_out(
    *,
    organization: Organization,
    amount: Decimal | None,
    reference_for: Callable[[Decimal], UUID],
    memo: str,
) -> tuple[Transaction, Decimal]:
    """In the caller's transaction: moves `amount` (all that is payable when None) out of the
    organization's earnings towards Stripe, refused with `AmountNotPayable` past what is
    payable now. `reference_for(amount)` makes the caller's row (the payout) once the amount is
    known, under the earnings' lock, so that two payouts never pay the same earnings."""
    if not connection.in_atomic_block:
        raise AssertionError("earnings_pay_out needs the caller's transaction")
    key = (organization.pk, Account.Kind.EARNINGS)
    earnings = accounts_lock([key])[key]
    _held, payable = earnings_split(organization, earnings.balance)
    paying = payable if amount is None else amount
    minimum = settings.PAYOUT_MINIMUM
    if paying > payable or paying < minimum:
        raise AmountNotPayable(
            extra={
                "payable": str(payable),
                "minimum": str(minimum),
                "currency": settings.PLATFORM_CURRENCY,
            }
        )
    reference = reference_for(paying)
    posted = ledger_post(
        kind=Transaction.Kind.PAYOUT,
        organization=organization,
        lines=[
            (earnings, Entry.Kind.PAYOUT, -paying),
            ((None, Account.Kind.STRIPE_CLEARING), Entry.Kind.PAYOUT, paying),
        ],
        reference_kind=ReferenceKind.PAYOUT,
        reference=reference,
        idempotency_reference=f"payout:{reference}",
        memo=memo,
    )
    return posted, paying


@transaction.atomic
def earnings_pay_out_reverse(
    *, organization: Organization, amount: Decimal, reference: UUID, memo: str
) -> Transaction:
    """Puts a payout Stripe refused back into the organization's earnings, once per payout;
    payable at once (it is not new earnings)."""
    # The earnings first, the platform's row last: the order `earnings_pay_out` takes them in.
    key = (organization.pk, Account.Kind.EARNINGS)
    earnings = accounts_lock([key])[key]
    if (done := transaction_replayed(f"payout-reversal:{reference}")) is not None:
        return done
    return ledger_post(
        kind=Transaction.Kind.PAYOUT,
        organization=organization,
        lines=[
            ((None, Account.Kind.STRIPE_CLEARING), Entry.Kind.PAYOUT, -amount),
            (earnings, Entry.Kind.PAYOUT, amount),
        ],
        reference_kind=ReferenceKind.PAYOUT,
        reference=reference,
        idempotency_reference=f"payout-reversal:{reference}",
        memo=memo,
    )


@transaction.atomic
def wallet_adjust(
    *,
    organization: Organization,
    amount: Any,
    memo: str,
    actor: User | None,
    idempotency_reference: str | None = None,
) -> Transaction:
    """A correction by staff: a new balanced transaction between the platform's adjustments
    account and the organization's available balance, never an edit. A negative amount takes
    money back, but never more than is available."""
    amount = money(amount)
    if amount == 0:
        raise ValidationFailed(fields={"amount": ["An adjustment moves money: not zero."]})
    memo = " ".join((memo or "").split())
    if not memo:
        raise ValidationFailed(fields={"memo": ["Say why: the memo is on the statement."]})
    return _available_from_platform(
        organization=organization,
        amount=amount,
        platform_kind=Account.Kind.ADJUSTMENTS,
        kind=Transaction.Kind.ADJUSTMENT,
        reference_kind=ReferenceKind.ADJUSTMENT,
        idempotency_reference=idempotency_reference,
        memo=memo,
        created_by=actor,
    )


def balances_write(ids: list[int], balances: list[Decimal], now: datetime.datetime) -> None:
    """Writes the cached balances of many locked accounts in one `UPDATE ... FROM unnest(...)`
    (PostgreSQL): Django's `bulk_update` spends longer building its CASE in Python than the
    database spends running it."""
    if not ids:
        return
    table = Account._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET balance = new.balance, updated_at = %s "  # noqa: S608 - our own table name
            "FROM unnest(%s::bigint[], %s::numeric[]) AS new(id, balance) "
            f"WHERE {table}.id = new.id",
            [now, ids, balances],
        )
