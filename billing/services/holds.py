"""Holds, one at a time: money of an organization set aside for a purpose (a bid, an
allocation's commitment), placed, resized, captured (charged, with the platform's fee) or
released. Each service posts through the ledger (`ledger.ledger_post`) and keeps its rules
(`ledger`'s docstring): the hold is locked first, then the wallet."""

from decimal import Decimal
from typing import Any
from uuid import UUID

from django.db import connection, transaction

from billing.errors import (
    HoldNotOpen,
    HoldTooSmall,
    InsufficientFunds,
)
from billing.models import Account, Entry, Hold, ReferenceKind, Transaction
from billing.services import budgets
from billing.services.ledger import (
    accounts_lock,
    debt_refuse,
    ledger_post,
    money,
    money_positive,
    platform_fee,
    transaction_replayed,
    wallet_keys,
)
from computeshare.errors import ValidationFailed
from computeshare.states import status_move
from organizations.models import Organization


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
    amount = money_positive(amount)
    accounts = accounts_lock(wallet_keys(organization))
    if (done := transaction_replayed(idempotency_reference)) is not None:
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
    ledger_post(
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
    accounts = accounts_lock(wallet_keys(organization))
    if (done := transaction_replayed(idempotency_reference)) is not None:
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
    ledger_post(
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
    accounts = accounts_lock(wallet_keys(organization))
    if (done := transaction_replayed(idempotency_reference)) is not None:
        assert done.hold is not None
        return done.hold
    if not hold.is_open:
        if amount is None:
            return hold
        raise HoldNotOpen(extra={"hold": str(hold.uuid)})
    release = hold.amount if amount is None else money_positive(amount)
    if release > hold.amount:
        raise HoldTooSmall(extra={"held": str(hold.amount), "requested": str(release)})
    hold.amount -= release
    hold.released += release
    if amount is None:
        status_move(hold, Hold.Status.CLOSED)
    hold.save(update_fields=["amount", "released", "status", "updated_at"])
    if release == 0:  # closing a hold that was all captured: no money moves
        return hold
    ledger_post(
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
    held = accounts_lock([held_key])[held_key]
    if (done := transaction_replayed(idempotency_reference)) is not None:
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
    return ledger_post(
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
