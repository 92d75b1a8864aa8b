"""Money that goes back through Stripe: refunds of top-ups and disputes (chargebacks).

An operator asks for a refund (`top_up_refund`); the wallet is debited when Stripe's
`charge.refunded` says the money left, as a top-up is credited only by
`payment_intent.succeeded`, so that a refund made in Stripe's dashboard is debited too. Each
event carries the charge's running total of refunds, so the debit is that total less what was
debited before: a replayed or late event moves nothing.

A dispute takes the money from the wallet when Stripe withdraws it from the platform
(`charge.dispute.created`) and gives it back when the dispute is won
(`charge.dispute.closed`); a close that arrives first settles on its own. What the available
balance cannot cover is recorded as owed to the platform (`wallet_debit`), and new commitments
are refused until it is repaid."""

import logging
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from billing import stripe_gateway
from billing.errors import (
    PaymentProviderRefused,
    PaymentProviderUnavailable,
    RefundPending,
    TopUpNotRefundable,
)
from billing.models import Account, Dispute, TopUp, TopUpRefund, Transaction
from billing.services.ledger import money, wallet_credit, wallet_debit
from computeshare.errors import ValidationFailed
from computeshare.models import User
from computeshare.states import status_move, status_move_all

logger = logging.getLogger(__name__)

CENT = Decimal("0.01")


def _from_minor(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return (Decimal(value) * CENT).quantize(CENT)


def _object_of(event: dict[str, Any]) -> dict[str, Any]:
    obj = (event.get("data") or {}).get("object") or {}
    return obj if isinstance(obj, dict) else {}


def _top_up_of(obj: dict[str, Any]) -> TopUp | None:
    """Our top-up for a charge or dispute, locked: by its PaymentIntent, never by metadata."""
    intent = obj.get("payment_intent")
    if not isinstance(intent, str) or not intent:
        return None
    return TopUp.objects.select_for_update().filter(payment_intent=intent).first()


# --- Refunds -----------------------------------------------------------------------------------


def _refund_row(*, top_up: TopUp, amount: Decimal | None, actor: User, reason: str) -> TopUpRefund:
    with transaction.atomic():
        locked = TopUp.objects.select_for_update().get(pk=top_up.pk)
        pending = locked.refunds.filter(status=TopUpRefund.Status.PENDING).first()
        if pending is not None:
            # Stripe's answer to it was lost: the same row, so the same idempotency key.
            if amount is not None and amount != pending.amount:
                raise RefundPending(
                    extra={"refund": str(pending.uuid), "amount": str(pending.amount)}
                )
            return pending
        asked = sum(
            (r.amount for r in locked.refunds.filter(status=TopUpRefund.Status.SUCCEEDED)),
            start=Decimal(0),
        )
        left = locked.amount - max(asked, locked.amount_refunded)
        refunding = left if amount is None else amount
        if locked.status != TopUp.Status.SUCCEEDED or not 0 < refunding <= left:
            raise TopUpNotRefundable(
                extra={"status": locked.status, "refundable": str(max(left, Decimal(0)))}
            )
        return TopUpRefund.objects.create(
            top_up=locked, amount=refunding, reason=reason, created_by=actor
        )


def top_up_refund(*, top_up: TopUp, actor: User, reason: str, amount: Any = None) -> TopUpRefund:
    """Asks Stripe to refund `amount` of a succeeded top-up (all that is not refunded yet when
    not given). The wallet is debited when Stripe's `charge.refunded` arrives. Asking again
    while Stripe's answer is missing sends the same refund again. It calls Stripe: never call
    it inside a transaction."""
    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationFailed(fields={"reason": ["Say why: the team sees it on its statement."]})
    cleaned = None if amount in (None, "") else money(amount, places=2)
    if cleaned is not None and cleaned <= 0:
        raise ValidationFailed(fields={"amount": ["Must be more than zero."]})
    refund = _refund_row(top_up=top_up, amount=cleaned, actor=actor, reason=reason[:255])
    assert top_up.payment_intent is not None
    try:
        record = stripe_gateway.refund_create(
            payment_intent=top_up.payment_intent,
            amount_minor=int(refund.amount * 100),
            idempotency_key=f"computeshare-refund-{refund.uuid}",
            metadata={"top_up": str(top_up.uuid), "refund": str(refund.uuid)},
        )
    except stripe_gateway.StripeUnavailable as error:
        raise PaymentProviderUnavailable(extra={"refund": str(refund.uuid)}) from error
    except stripe_gateway.StripeRefused as error:
        status_move_all(
            TopUpRefund.objects.filter(pk=refund.pk),
            TopUpRefund.Status.FAILED,
            failure_reason=str(error)[:500],
        )
        raise PaymentProviderRefused(extra={"reason": str(error), "code": error.code}) from error
    status_move_all(
        TopUpRefund.objects.filter(pk=refund.pk),
        TopUpRefund.Status.SUCCEEDED,
        stripe_refund=record.id,
    )
    refund.refresh_from_db()
    return refund


def _owed_note(posted: Transaction) -> str:
    owed = -sum(
        posted.entries.filter(account__kind=Account.Kind.DEBT).values_list("amount", flat=True),
        start=Decimal(0),
    )
    return f"; {owed} recorded as owed" if owed else ""


def charge_refunded(event: dict[str, Any]) -> str:
    """`charge.refunded`: debits what was refunded since the last event we applied."""
    charge = _object_of(event)
    top_up = _top_up_of(charge)
    if top_up is None:
        return "ignored: not a top-up's charge"
    refunded = _from_minor(charge.get("amount_refunded"))
    currency = str(charge.get("currency", "")).upper()
    if refunded is None or currency != top_up.currency or refunded > top_up.amount:
        logger.error("charge.refunded %s does not fit top-up %s", charge.get("id"), top_up.uuid)
        return "refused: amount or currency does not fit the top-up"
    if refunded <= top_up.amount_refunded:
        return "ignored: refunds already recorded"
    posted = wallet_debit(
        organization=top_up.organization,
        amount=refunded - top_up.amount_refunded,
        kind=Transaction.Kind.REFUND,
        idempotency_reference=f"stripe-charge-refunded:{charge.get('id')}:{charge['amount_refunded']}",
        reference=top_up.uuid,
        memo=f"Refund of top-up {top_up.uuid} through Stripe",
    )
    top_up.amount_refunded = refunded
    top_up.save(update_fields=["amount_refunded", "updated_at"])
    return "debited" + _owed_note(posted)


# --- Disputes ----------------------------------------------------------------------------------


def _dispute_row(dispute: dict[str, Any], top_up: TopUp) -> Dispute | None:
    """Our row for the dispute, locked (made on the first event about it, whichever)."""
    dispute_id = dispute.get("id")
    amount = _from_minor(dispute.get("amount"))
    if not isinstance(dispute_id, str) or not dispute_id or amount is None or amount == 0:
        return None
    if str(dispute.get("currency", "")).upper() != top_up.currency:
        return None
    row, _created = Dispute.objects.select_for_update().get_or_create(
        stripe_dispute=dispute_id,
        defaults={
            "top_up": top_up,
            # Never more than the top-up: our row says what was paid in.
            "amount": min(amount, top_up.amount),
            "reason": str(dispute.get("reason") or "")[:64],
        },
    )
    return row if row.top_up_id == top_up.pk else None


def _withdraw(row: Dispute, top_up: TopUp) -> str:
    posted = wallet_debit(
        organization=top_up.organization,
        amount=row.amount,
        kind=Transaction.Kind.DISPUTE,
        idempotency_reference=f"stripe-dispute-withdrawal:{row.stripe_dispute}",
        reference=row.uuid,
        memo=f"Dispute {row.stripe_dispute} of top-up {top_up.uuid}: withdrawn by Stripe",
    )
    row.is_withdrawn = True
    return "withdrawn" + _owed_note(posted)


def dispute_created(event: dict[str, Any]) -> str:
    """`charge.dispute.created`: Stripe withdraws the money (an inquiry, `warning_*`, does
    not), and the wallet gives it back."""
    dispute = _object_of(event)
    top_up = _top_up_of(dispute)
    if top_up is None:
        return "ignored: not a top-up's dispute"
    row = _dispute_row(dispute, top_up)
    if row is None:
        return "refused: the dispute does not fit the top-up"
    if row.status != Dispute.Status.OPEN:
        return f"ignored: dispute already {row.status}"
    if str(dispute.get("status", "")).startswith("warning_") or row.is_withdrawn:
        return "recorded"
    outcome = _withdraw(row, top_up)
    row.save(update_fields=["is_withdrawn", "updated_at"])
    return outcome


def dispute_closed(event: dict[str, Any]) -> str:
    """`charge.dispute.closed`: won (or an inquiry closed) gives back what was withdrawn; lost
    keeps it withdrawn, withdrawing it now if the close came before the creation."""
    dispute = _object_of(event)
    top_up = _top_up_of(dispute)
    if top_up is None:
        return "ignored: not a top-up's dispute"
    row = _dispute_row(dispute, top_up)
    if row is None:
        return "refused: the dispute does not fit the top-up"
    if row.status != Dispute.Status.OPEN:
        return f"ignored: dispute already {row.status}"
    stripe_status = dispute.get("status")
    if stripe_status == "lost":
        status_move(row, Dispute.Status.LOST)
        outcome = "lost" if row.is_withdrawn else "lost; " + _withdraw(row, top_up)
    elif stripe_status in ("won", "warning_closed"):
        status_move(row, Dispute.Status.WON)
        outcome = "won"
        if row.is_withdrawn:
            wallet_credit(
                organization=top_up.organization,
                amount=row.amount,
                idempotency_reference=f"stripe-dispute-reinstatement:{row.stripe_dispute}",
                reference=row.uuid,
                memo=f"Dispute {row.stripe_dispute} of top-up {top_up.uuid} won: reinstated",
                kind=Transaction.Kind.DISPUTE,
            )
            outcome = "won; reinstated"
    else:
        return f"ignored: closed as {stripe_status!r}"
    row.closed_at = timezone.now()
    row.save(update_fields=["status", "is_withdrawn", "closed_at", "updated_at"])
    return outcome
