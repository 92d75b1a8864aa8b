"""The only writes that move money: wallet credits and adjustments, and holds (place, resize,
capture, release).

Every service here is one database transaction that
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
from django.db.models import F, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from billing.errors import (
    AmountNotPayable,
    HoldNotOpen,
    HoldTooSmall,
    InsufficientFunds,
    OutstandingDebt,
)
from billing.models import ZERO, Account, Entry, Hold, HoldReleaseBatch, ReferenceKind, Transaction
from billing.selectors import debt_owed, earnings_split
from billing.services import budgets
from computeshare.errors import ValidationFailed
from computeshare.models import User
from computeshare.numbers import MICRO_PLACES, MICRO_UNIT
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move, status_move_all
from hpc.batches import batched
from organizations.models import Organization

# What the ledger's columns hold: 20 digits, 6 of them after the point.
LARGEST = Decimal(10) ** 14

AccountKey = tuple[int | None, str]
# An account the caller has locked, or the key of a credit-only account that `_post` locks.
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


def _positive(value: Any, field: str = "amount") -> Decimal:
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
    in `_lock`): for seeds, benchmarks and tests that want the rows in place. Organizations are
    created below billing, without it; every read answers zero for accounts not opened yet."""
    accounts_open([(organization.pk, kind) for kind in Account.ORGANIZATION_KINDS])


def _lock(keys: Sequence[AccountKey], shard: int = 0) -> dict[AccountKey, Account]:
    """Locks the accounts in primary-key order, creating any that are missing first; of a
    platform account, its row `shard`. A transaction calls it at most once for the accounts it
    debits and once, in `_post`, for those it only credits."""
    keys = list(dict.fromkeys(keys))
    if not keys:  # an empty filter would lock every account
        return {}
    condition = _key_filter(keys, shard)
    accounts = list(Account.objects.select_for_update().filter(condition).order_by("id"))
    if len(accounts) < len(keys):
        accounts_open(keys, shard)
        accounts = list(Account.objects.select_for_update().filter(condition).order_by("id"))
    return {(account.organization_id, account.kind): account for account in accounts}


def _replayed(idempotency_reference: str | None) -> Transaction | None:
    if idempotency_reference is None:
        return None
    return (
        Transaction.objects.select_related("hold")
        .filter(idempotency_reference=idempotency_reference)
        .first()
    )


def _post(
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
    late = _lock(
        [target for target, _, _ in lines if not isinstance(target, Account)],
        platform_shard(organization.pk),
    )
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
    now = timezone.now()
    if connection.vendor == "postgresql" and len(changed) > 1:
        # One round trip for the two or three balances, not one each.
        _balances_write_rows(list(changed), [account.balance for account in changed.values()], now)
    else:
        for account in changed.values():
            Account.objects.filter(pk=account.pk).update(balance=account.balance, updated_at=now)
    return posted


def _wallet_keys(organization: Organization) -> list[AccountKey]:
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
    accounts = _lock([key, debt_key])
    available, debt = accounts[key], accounts[debt_key]
    if (done := _replayed(idempotency_reference)) is not None:
        return done
    repaid = min(amount, -debt.balance) if amount > 0 else ZERO
    # Entry kinds share the transaction kinds' names: a top-up's lines are `top_up`, an
    # adjustment's `adjustment`.
    return _post(
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
        amount=_positive(amount),
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
    amount = _positive(amount)
    if kind not in (Transaction.Kind.REFUND, Transaction.Kind.DISPUTE):
        raise AssertionError(f"wallet_debit is for refunds and disputes, not {kind}")
    key, debt_key = (organization.pk, Account.Kind.AVAILABLE), (organization.pk, Account.Kind.DEBT)
    accounts = _lock([key, debt_key])
    if (done := _replayed(idempotency_reference)) is not None:
        return done
    available, debt = accounts[key], accounts[debt_key]
    taken = min(amount, max(available.balance, ZERO))
    return _post(
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
    earnings = _lock([key])[key]
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
    posted = _post(
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
    earnings = _lock([key])[key]
    if (done := _replayed(f"payout-reversal:{reference}")) is not None:
        return done
    return _post(
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


# --- Holds -------------------------------------------------------------------------------------


@transaction.atomic
def hold_place(
    *,
    organization: Organization,
    amount: Any,
    reference_kind: str,
    reference: UUID | None = None,
    idempotency_reference: str | None = None,
    memo: str = "",
) -> Hold:
    """Moves `amount` from the organization's available balance to held. Refused, writing
    nothing, with `InsufficientFunds` when available is short and `BudgetExceeded` when this
    month's committed plus spent money would pass the budget."""
    return hold_place_within(
        organization=organization,
        amount=amount,
        reference_kind=reference_kind,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
    )


def hold_place_within(
    *,
    organization: Organization,
    amount: Any,
    reference_kind: str,
    reference: UUID | None = None,
    idempotency_reference: str | None = None,
    memo: str = "",
) -> Hold:
    """`hold_place` in the caller's open transaction, without a savepoint of its own (two
    round trips less, for a bid): a refusal rolls back the caller's transaction with it, so
    only for a caller that lets the error end its transaction."""
    if not connection.in_atomic_block:
        raise AssertionError("hold_place_within needs the caller's transaction")
    amount = _positive(amount)
    accounts = _lock(_wallet_keys(organization))
    if (done := _replayed(idempotency_reference)) is not None:
        assert done.hold is not None
        return done.hold
    available = accounts[(organization.pk, Account.Kind.AVAILABLE)]
    held = accounts[(organization.pk, Account.Kind.HELD)]
    _commit(organization, available, held, amount)
    hold = Hold.objects.create(
        organization=organization,
        amount=amount,
        placed=amount,
        reference_kind=reference_kind,
        reference=reference,
        memo=memo[:255],
    )
    _post(
        kind=Transaction.Kind.HOLD,
        organization=organization,
        hold=hold,
        lines=[(available, Entry.Kind.HOLD, -amount), (held, Entry.Kind.HOLD, amount)],
        reference_kind=reference_kind,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
    )
    return hold


def _commit(organization: Organization, available: Account, held: Account, amount: Decimal) -> None:
    """Refuses a new commitment of `amount` (debt first, then funds, then the budget), or
    admits it and records the budget alerts it causes. The caller holds both accounts' locks,
    and with them any debt being recorded (`wallet_debit` locks `available` too)."""
    debt_refuse(organization)
    if available.balance < amount:
        raise InsufficientFunds(
            extra={
                "available": str(available.balance),
                "required": str(amount),
                "currency": available.currency,
            }
        )
    budgets.budget_commit(organization=organization, held=held.balance, additional=amount)


def _lock_hold(hold: Hold) -> Hold:
    holds = Hold.objects.select_related("organization").select_for_update(of=("self",))
    return holds.get(pk=hold.pk)


@transaction.atomic
def hold_resize(
    *, hold: Hold, amount: Any, idempotency_reference: str | None = None, memo: str = ""
) -> Hold:
    """Sets what the hold keeps to `amount`: more is taken from available (with the same
    refusals as `hold_place`), less is released."""
    target = money(amount)
    if target < 0:
        raise ValidationFailed(fields={"amount": ["Must not be negative."]})
    hold = _lock_hold(hold)
    organization = hold.organization
    accounts = _lock(_wallet_keys(organization))
    if (done := _replayed(idempotency_reference)) is not None:
        assert done.hold is not None
        return done.hold
    if not hold.is_open:
        raise HoldNotOpen(extra={"hold": str(hold.uuid)})
    change = target - hold.amount
    if change == 0:
        return hold
    available = accounts[(organization.pk, Account.Kind.AVAILABLE)]
    held = accounts[(organization.pk, Account.Kind.HELD)]
    if change > 0:
        _commit(organization, available, held, change)
        hold.placed += change
        kind, entry_kind = Transaction.Kind.HOLD, Entry.Kind.HOLD
    else:
        hold.released += -change
        kind, entry_kind = Transaction.Kind.RELEASE, Entry.Kind.RELEASE
    hold.amount = target
    hold.save(update_fields=["amount", "placed", "released", "updated_at"])
    _post(
        kind=kind,
        organization=organization,
        hold=hold,
        lines=[(available, entry_kind, -change), (held, entry_kind, change)],
        reference_kind=hold.reference_kind,
        reference=hold.reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
    )
    return hold


@transaction.atomic
def hold_release(
    *,
    hold: Hold,
    amount: Any = None,
    idempotency_reference: str | None = None,
    memo: str = "",
) -> Hold:
    """Gives `amount` of the hold (all of it when not given) back to available. Releasing all
    closes the hold; releasing a closed hold again is a no-op."""
    hold = _lock_hold(hold)
    organization = hold.organization
    accounts = _lock(_wallet_keys(organization))
    if (done := _replayed(idempotency_reference)) is not None:
        assert done.hold is not None
        return done.hold
    if not hold.is_open:
        if amount is None:
            return hold
        raise HoldNotOpen(extra={"hold": str(hold.uuid)})
    release = hold.amount if amount is None else _positive(amount)
    if release > hold.amount:
        raise HoldTooSmall(extra={"held": str(hold.amount), "requested": str(release)})
    hold.amount -= release
    hold.released += release
    if amount is None:
        status_move(hold, Hold.Status.CLOSED)
    hold.save(update_fields=["amount", "released", "status", "updated_at"])
    if release == 0:  # closing a hold that was all captured: no money moves
        return hold
    _post(
        kind=Transaction.Kind.RELEASE,
        organization=organization,
        hold=hold,
        lines=[
            (accounts[(organization.pk, Account.Kind.HELD)], Entry.Kind.RELEASE, -release),
            (accounts[(organization.pk, Account.Kind.AVAILABLE)], Entry.Kind.RELEASE, release),
        ],
        reference_kind=hold.reference_kind,
        reference=hold.reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
    )
    return hold


@transaction.atomic
def hold_capture(
    *,
    hold: Hold,
    amount: Any,
    payee: Organization,
    idempotency_reference: str,
    reference_kind: str = ReferenceKind.JOB,
    reference: UUID | None = None,
    memo: str = "",
    source: UUID | None = None,
    source_name: str = "",
) -> Transaction | None:
    """Charges `amount` of the hold: the payee's earnings get it minus the platform fee
    (`PLATFORM_FEE_PERCENT`), the platform's fees account gets the fee. Exactly once per
    `idempotency_reference`. A charge of zero writes nothing and returns None."""
    amount = money(amount)
    if amount < 0:
        raise ValidationFailed(fields={"amount": ["Must not be negative."]})
    hold = _lock_hold(hold)
    held_key = (hold.organization_id, Account.Kind.HELD)
    held = _lock([held_key])[held_key]
    if (done := _replayed(idempotency_reference)) is not None:
        return done
    if amount == 0:
        return None
    if not hold.is_open:
        raise HoldNotOpen(extra={"hold": str(hold.uuid)})
    if amount > hold.amount:
        raise HoldTooSmall(extra={"held": str(hold.amount), "requested": str(amount)})
    fee = platform_fee(amount)
    hold.amount -= amount
    hold.captured += amount
    hold.save(update_fields=["amount", "captured", "updated_at"])
    return _post(
        kind=Transaction.Kind.CHARGE,
        organization=hold.organization,
        hold=hold,
        lines=[
            (held, Entry.Kind.CHARGE, -amount),
            ((payee.pk, Account.Kind.EARNINGS), Entry.Kind.EARNING, amount - fee),
            ((None, Account.Kind.FEES), Entry.Kind.FEE, fee),
        ],
        reference_kind=reference_kind,
        reference=reference,
        idempotency_reference=idempotency_reference,
        memo=memo,
        source=source,
        source_name=source_name,
    )


@transaction.atomic
def holds_settle(
    *,
    holds: QuerySet[Hold],
    keep: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID,
    memo: str,
    release_after_commit: bool = False,
) -> int:
    """Settles many holds at once, as an auction's clearing does: each hold of `holds` keeps
    `keep[hold.pk]` (nothing when absent) and gives the rest back to available; a hold that
    keeps nothing closes. Posts one release transaction per organization (the holds themselves
    keep the per-hold detail), so that a clearing of many bids costs a few set-based statements
    rather than a transaction per bid. Returns the number of holds settled.

    With `release_after_commit`, the holds that keep nothing are not released here: they move
    to `releasing` (still held, on the hold and on the wallet) and are listed in one
    `HoldReleaseBatch`, which a task releases after the commit (`hold_release_batch_apply`), or
    the periodic sweep when the task is lost. The caller's transaction then writes one row
    for them instead of their ledger lines.

    Locks the holds, then the wallets' accounts, in primary-key order: the order every hold
    service uses."""
    rows = list(
        holds.select_for_update(of=("self",))
        .order_by("pk")
        .values_list("pk", "organization_id", "amount", "status")
    )
    if not rows:
        return 0
    released_by_organization: dict[int, Decimal] = {}
    settled: list[tuple[int, Decimal]] = []  # (hold, what it keeps), settled now
    later: list[int] = []  # holds released after the commit
    for pk, organization_id, amount, status in rows:
        if status != Hold.Status.OPEN:
            raise HoldNotOpen(extra={"hold": pk})
        keeping = keep.get(pk, ZERO)
        if not ZERO <= keeping <= amount:
            raise HoldTooSmall(extra={"held": str(amount), "requested": str(keeping)})
        if release_after_commit and not keeping:
            later.append(pk)
            continue
        settled.append((pk, keeping))
        released_by_organization[organization_id] = (
            released_by_organization.get(organization_id, ZERO) + amount - keeping
        )
    if missing := set(keep) - {row[0] for row in rows}:
        raise AssertionError(f"holds to keep that are not being settled: {sorted(missing)}")

    now = timezone.now()
    _holds_keep(settled, now)
    if later:
        _holds_release_after_commit(later, reference_kind, reference, memo, now)
    organizations = sorted(pk for pk, total in released_by_organization.items() if total)
    _releases_post(
        organizations,
        released_by_organization,
        reference_kind,
        reference,
        memo,
        now,
        prefix=f"settle:{reference}:",
    )
    return len(rows)


def _holds_keep(settled: list[tuple[int, Decimal]], now: datetime.datetime) -> None:
    """Each hold keeps its amount and releases the rest; one that keeps nothing closes."""
    if not settled:
        return
    if connection.vendor == "postgresql":
        _holds_keep_sql([pk for pk, _ in settled], [keeping for _, keeping in settled], now)
        if closing := [pk for pk, keeping in settled if not keeping]:
            status_move_all(
                Hold.objects.filter(pk__in=_ids(closing)), Hold.Status.CLOSED, updated_at=now
            )
        return
    kept: dict[Decimal, list[int]] = {}
    for pk, keeping in settled:
        kept.setdefault(keeping, []).append(pk)
    # Holds grouped by what they keep: an auction's winners keep `price x units won`, so there
    # are only as many groups as distinct quantities won, and one UPDATE serves each.
    for keeping, pks in kept.items():
        for batch in batched(pks, 10_000):
            if keeping:
                Hold.objects.filter(pk__in=batch).update(
                    amount=keeping, released=F("released") + F("amount") - keeping, updated_at=now
                )
            else:
                status_move_all(
                    Hold.objects.filter(pk__in=batch),
                    Hold.Status.CLOSED,
                    released=F("released") + F("amount"),
                    amount=0,
                    updated_at=now,
                )


def _ids(ids: list[int]) -> Any:
    """`pk__in` of many ids: on PostgreSQL one array parameter (`IN (SELECT unnest(...))`);
    rendering ten thousand placeholders cost more than the UPDATE that used them."""
    if connection.vendor != "postgresql":
        return ids
    return RawSQL("SELECT unnest(%s::bigint[])", [ids])


def _holds_release_after_commit(
    hold_ids: list[int], reference_kind: str, reference: UUID, memo: str, now: datetime.datetime
) -> None:
    """Moves the (locked, open) holds to `releasing` and writes the batch that releases them,
    whose task is sent after the commit."""
    for batch in batched(hold_ids, 10_000):
        moved = status_move_all(
            Hold.objects.filter(pk__in=_ids(batch)),
            Hold.Status.RELEASING,
            from_statuses=[Hold.Status.OPEN],
            updated_at=now,
        )
        if moved != len(batch):
            raise AssertionError("a locked open hold did not move to releasing")
    release = HoldReleaseBatch.objects.create(
        hold_ids=hold_ids, reference_kind=reference_kind, reference=reference, memo=memo[:255]
    )
    enqueue_after_commit(
        "billing.tasks.hold_release_batch_apply_task",
        release.pk,
        recovered_by="the periodic sweep of hold release batches (hold_release_batches_due_task)",
    )


@transaction.atomic
def hold_release_batch_apply(*, batch_id: int) -> int:
    """Releases a `HoldReleaseBatch`: each of its holds still `releasing` closes and gives its
    whole amount back to available, each organization gets one release transaction for the
    sum, and the batch is deleted, all in one transaction under the batch's row lock. Another
    task (or the sweep) for the same batch skips it while it is being applied (SKIP LOCKED) and
    finds it gone afterwards; the holds move only from `releasing` (compare-and-set), and the
    release transactions' idempotency references name the batch: so a batch is applied once,
    however many tasks and workers are sent to it. Returns the number of holds released.

    Locks the batch, then its holds, then the wallets' accounts, in primary-key order."""
    release = (
        HoldReleaseBatch.objects.select_for_update(skip_locked=True).filter(pk=batch_id).first()
    )
    if release is None:
        return 0
    rows: list[tuple[int, int, Decimal]] = []
    for batch in batched(sorted(release.hold_ids), 10_000):
        rows += (
            Hold.objects.select_for_update()
            .filter(pk__in=batch, status=Hold.Status.RELEASING)
            .order_by("pk")
            .values_list("pk", "organization_id", "amount")
        )
    released_by_organization: dict[int, Decimal] = {}
    for _, organization_id, amount in rows:
        released_by_organization[organization_id] = (
            released_by_organization.get(organization_id, ZERO) + amount
        )
    now = timezone.now()
    for batch in batched([row[0] for row in rows], 10_000):
        status_move_all(
            Hold.objects.filter(pk__in=_ids(batch)),
            Hold.Status.CLOSED,
            from_statuses=[Hold.Status.RELEASING],
            released=F("released") + F("amount"),
            amount=0,
            updated_at=now,
        )
    organizations = sorted(pk for pk, total in released_by_organization.items() if total)
    _releases_post(
        organizations,
        released_by_organization,
        release.reference_kind,
        release.reference,
        release.memo,
        now,
        prefix=f"release:{release.uuid}:",
    )
    release.delete()
    return len(rows)


def _releases_post(
    organizations: Sequence[int],
    released_by_organization: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID | None,
    memo: str,
    now: datetime.datetime,
    *,
    prefix: str,
) -> None:
    """One release transaction per organization, for what its holds gave back; each one's
    idempotency reference is `prefix` and the organization's id."""
    if not organizations:
        return
    post = _releases_post_sql if connection.vendor == "postgresql" else _releases_post_orm
    post(organizations, released_by_organization, reference_kind, reference, memo, now, prefix)


def _holds_keep_sql(ids: list[int], keeps: list[Decimal], now: datetime.datetime) -> None:
    """Every settled hold in one `UPDATE ... FROM unnest(...)`: each keeps its amount and
    releases the rest (PostgreSQL). The caller closes those that keep nothing."""
    table = Hold._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET amount = new.keep, "  # noqa: S608 - our own table name
            f"released = {table}.released + {table}.amount - new.keep, updated_at = %s "
            "FROM unnest(%s::bigint[], %s::numeric[]) AS new(id, keep) "
            f"WHERE {table}.id = new.id",
            [now, ids, keeps],
        )


def _wallets_lock(organizations: Sequence[int]) -> dict[AccountKey, tuple[int, Decimal]]:
    """Locks the `available` and `held` accounts of many organizations in primary-key order
    and returns each one's id and balance (plain rows: no model objects for thousands)."""
    locked: dict[AccountKey, tuple[int, Decimal]] = {}
    for batch in batched(organizations, 10_000):
        found = (
            Account.objects.select_for_update()
            .filter(organization_id__in=batch, kind__in=[Account.Kind.AVAILABLE, Account.Kind.HELD])
            .order_by("id")
            .values_list("id", "organization_id", "kind", "balance")
        )
        locked.update({(org, kind): (pk, balance) for pk, org, kind, balance in found})
    return locked


def _releases_post_sql(
    organizations: Sequence[int],
    released_by_organization: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID | None,
    memo: str,
    now: datetime.datetime,
    prefix: str,
) -> None:
    """`holds_settle`'s release transactions on PostgreSQL: one statement writes every
    organization's transaction and its two entries (data-modifying CTE over arrays), one more
    every cached balance. Two round trips for any number of organizations, and no model object
    built per line: at a thousand teams, Django's bulk_create spent more time building and
    rendering objects than the database spent writing them."""
    if not organizations:
        return
    accounts = _wallets_lock(organizations)
    columns: dict[str, list[Any]] = {
        name: [] for name in ("org", "released", "held", "held_after", "available", "avail_after")
    }
    balances: dict[int, Decimal] = {}
    for organization_id in organizations:
        released = released_by_organization[organization_id]
        held_id, held_balance = accounts[(organization_id, Account.Kind.HELD)]
        available_id, available_balance = accounts[(organization_id, Account.Kind.AVAILABLE)]
        if held_balance < released:
            raise AssertionError(
                f"organization {organization_id} holds less than its holds release"
            )
        balances[held_id] = held_balance - released
        balances[available_id] = available_balance + released
        for name, value in zip(
            columns,
            (
                organization_id,
                released,
                held_id,
                balances[held_id],
                available_id,
                balances[available_id],
            ),
            strict=True,
        ):
            columns[name].append(value)
    with connection.cursor() as cursor:
        cursor.execute(
            _RELEASES_SQL,
            {
                **columns,
                "now": now,
                "kind": Transaction.Kind.RELEASE,
                "entry_kind": Entry.Kind.RELEASE,
                "reference_kind": reference_kind,
                "reference": reference,
                "prefix": prefix,
                "memo": memo[:255],
            },
        )
    _balances_write_rows(list(balances), list(balances.values()), now)


# Column names are the models' own (billing_transaction, billing_entry); `moves` is one row per
# organization. Entries go in transaction order, held before available, as `_post` writes them.
_RELEASES_SQL = """
WITH moves AS (
    SELECT * FROM unnest(
        %(org)s::bigint[], %(released)s::numeric[], %(held)s::bigint[],
        %(held_after)s::numeric[], %(available)s::bigint[], %(avail_after)s::numeric[]
    ) AS m(organization_id, released, held_id, held_after, available_id, available_after)
), posted AS (
    INSERT INTO billing_transaction (
        uuid, created_at, updated_at, kind, organization_id, hold_id, reference_kind, reference,
        idempotency_reference, memo, created_by_id, source, source_name
    )
    SELECT gen_random_uuid(), %(now)s, %(now)s, %(kind)s, organization_id, NULL,
        %(reference_kind)s, %(reference)s, %(prefix)s || organization_id, %(memo)s, NULL, NULL, ''
    FROM moves ORDER BY organization_id
    RETURNING id, organization_id
)
INSERT INTO billing_entry (
    uuid, created_at, updated_at, transaction_id, account_id, kind, amount, balance_after
)
SELECT gen_random_uuid(), %(now)s, %(now)s, posted.id, line.account_id, %(entry_kind)s,
    line.amount, line.balance_after
FROM posted JOIN moves USING (organization_id)
CROSS JOIN LATERAL (VALUES
    (1, moves.held_id, -moves.released, moves.held_after),
    (2, moves.available_id, moves.released, moves.available_after)
) AS line(position, account_id, amount, balance_after)
ORDER BY posted.id, line.position
"""


def _releases_post_orm(
    organizations: Sequence[int],
    released_by_organization: Mapping[int, Decimal],
    reference_kind: str,
    reference: UUID | None,
    memo: str,
    now: datetime.datetime,
    prefix: str,
) -> None:
    """`holds_settle`'s release transactions with the ORM, for SQLite (the embedded demo)."""
    accounts: dict[AccountKey, Account] = {}
    for batch in batched(organizations, 10_000):
        found = (
            Account.objects.select_for_update()
            .filter(organization_id__in=batch, kind__in=[Account.Kind.AVAILABLE, Account.Kind.HELD])
            .order_by("id")
        )
        accounts.update({(account.organization_id, account.kind): account for account in found})
    postings = Transaction.objects.bulk_create(
        [
            Transaction(
                kind=Transaction.Kind.RELEASE,
                organization_id=organization_id,
                reference_kind=reference_kind,
                reference=reference,
                idempotency_reference=f"{prefix}{organization_id}",
                memo=memo[:255],
            )
            for organization_id in organizations
        ],
        batch_size=5_000,
    )
    entries = []
    for posted in postings:
        released = released_by_organization[posted.organization_id]
        held = accounts[(posted.organization_id, Account.Kind.HELD)]
        available = accounts[(posted.organization_id, Account.Kind.AVAILABLE)]
        if held.balance < released:
            raise AssertionError(f"{held} holds less than the holds release")
        for account, amount in ((held, -released), (available, released)):
            account.balance += amount
            account.updated_at = now
            entries.append(
                Entry(
                    transaction=posted,
                    account=account,
                    kind=Entry.Kind.RELEASE,
                    amount=amount,
                    balance_after=account.balance,
                )
            )
    Entry.objects.bulk_create(entries, batch_size=5_000)
    Account.objects.bulk_update(
        list(accounts.values()), ["balance", "updated_at"], batch_size=2_000
    )


def _balances_write_rows(ids: list[int], balances: list[Decimal], now: datetime.datetime) -> None:
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
