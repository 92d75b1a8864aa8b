"""Top-ups through Stripe PaymentIntents and the webhook that settles them.

The order that makes a top-up safe: our row is committed first; the PaymentIntent is created
afterwards, outside any transaction, with an idempotency key derived from our row; the wallet
is credited only by a verified `payment_intent.succeeded`, once per PaymentIntent, for the
amount of our row (never the amount an event claims)."""

import datetime
import logging
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from billing import notices, stripe_gateway, webhook_events
from billing.errors import InvalidSignature, PaymentProviderUnavailable
from billing.models import StripeEvent, TopUp
from billing.services import chargebacks, payouts
from billing.services.ledger import money, wallet_credit
from computeshare.errors import IdempotencyKeyReused, ValidationFailed
from computeshare.models import User
from computeshare.states import can_move, status_move, status_move_all
from organizations.models import Organization

logger = logging.getLogger(__name__)


def _clean_amount(value: Any) -> Decimal:
    amount = money(value, places=2)
    minimum, maximum = settings.TOP_UP_MINIMUM, settings.TOP_UP_MAXIMUM
    if not minimum <= amount <= maximum:
        raise ValidationFailed(
            fields={
                "amount": [
                    f"From {minimum} to {maximum} {settings.PLATFORM_CURRENCY}.",
                ]
            },
            extra={"minimum": str(minimum), "maximum": str(maximum)},
        )
    return amount


def _top_up_row(
    *, organization: Organization, actor: User, amount: Decimal, idempotency_key: str | None
) -> TopUp:
    if idempotency_key:
        existing = TopUp.objects.filter(created_by=actor, idempotency_key=idempotency_key).first()
        if existing is not None:
            if existing.organization_id != organization.pk or existing.amount != amount:
                raise IdempotencyKeyReused(extra={"key": idempotency_key})
            return existing
    try:
        with transaction.atomic():
            return TopUp.objects.create(
                organization=organization,
                created_by=actor,
                amount=amount,
                currency=settings.PLATFORM_CURRENCY,
                idempotency_key=idempotency_key or None,
            )
    except IntegrityError:  # the same key, concurrently: the other request's row wins
        return _top_up_row(
            organization=organization, actor=actor, amount=amount, idempotency_key=idempotency_key
        )


def top_up_create(
    *, organization: Organization, actor: User, amount: Any, idempotency_key: str | None = None
) -> TopUp:
    """Creates the top-up and its PaymentIntent; the caller gives `client_secret` to Stripe.js.
    With the same `idempotency_key` the same top-up comes back. When Stripe cannot be reached
    the top-up is marked failed with the reason and `PaymentProviderUnavailable` raised.
    It calls Stripe: never call it inside a transaction."""
    if idempotency_key and len(idempotency_key) > 255:
        raise ValidationFailed(fields={"Idempotency-Key": ["At most 255 characters."]})
    top_up = _top_up_row(
        organization=organization,
        actor=actor,
        amount=_clean_amount(amount),
        idempotency_key=idempotency_key,
    )
    if top_up.payment_intent:
        return top_up
    try:
        intent = stripe_gateway.payment_intent_create(
            amount_minor=top_up.amount_minor,
            currency=top_up.currency,
            idempotency_key=f"computeshare-top-up-{top_up.uuid}",
            metadata={"top_up": str(top_up.uuid), "organization": str(organization.uuid)},
        )
    except stripe_gateway.StripeUnavailable as error:
        status_move_all(
            TopUp.objects.filter(pk=top_up.pk),
            TopUp.Status.FAILED,
            from_statuses=[TopUp.Status.PENDING],
            failure_reason=f"Stripe could not be reached: {error}"[:500],
        )
        raise PaymentProviderUnavailable(extra={"top_up": str(top_up.uuid)}) from error
    TopUp.objects.filter(pk=top_up.pk, payment_intent__isnull=True).update(
        payment_intent=intent.id, client_secret=intent.client_secret, updated_at=timezone.now()
    )
    top_up.refresh_from_db()
    return top_up


# --- The webhook -------------------------------------------------------------------------------


def stripe_webhook_receive(*, payload: bytes, signature_header: str | None) -> StripeEvent:
    """Verifies, stores (once per event id) and processes one webhook delivery. Bad or stale
    signatures raise `InvalidSignature` and store nothing."""
    try:
        event = stripe_gateway.webhook_event_verify(payload, signature_header)
    except stripe_gateway.StripeSignatureInvalid as error:
        raise InvalidSignature(extra={"reason": str(error)}) from error
    with transaction.atomic():
        stored, created = StripeEvent.objects.get_or_create(
            event_id=event["id"],
            defaults={"type": str(event.get("type", ""))[:128], "payload": event},
        )
        if not created:
            StripeEvent.objects.filter(pk=stored.pk).update(deliveries=F("deliveries") + 1)
    return stripe_event_process(event_pk=stored.pk)


@transaction.atomic
def stripe_event_process(*, event_pk: int) -> StripeEvent:
    """Acts on a stored event once: concurrent deliveries of the same event wait on its row
    lock and then find it processed. Events we do not act on are kept and marked ignored."""
    stored = StripeEvent.objects.select_for_update().get(pk=event_pk)
    if stored.processed_at is not None:
        return stored
    handler = _HANDLERS.get(stored.type)
    outcome = handler(stored.payload) if handler else "ignored: not an event we act on"
    stored.processed_at = timezone.now()
    stored.outcome = outcome[:255]
    stored.save(update_fields=["processed_at", "outcome"])
    return stored


def _intent_of(event: dict[str, Any]) -> dict[str, Any]:
    intent = (event.get("data") or {}).get("object") or {}
    return intent if isinstance(intent, dict) else {}


def _top_up_for(intent: dict[str, Any]) -> TopUp | None:
    """Our row for the PaymentIntent, locked. Found by the PaymentIntent id we stored; by the
    metadata only while our row has no PaymentIntent yet (the answer of the create call can be
    lost), and then only when the two agree."""
    intent_id = intent.get("id")
    if not isinstance(intent_id, str) or not intent_id:
        return None
    top_up = TopUp.objects.select_for_update().filter(payment_intent=intent_id).first()
    if top_up is not None:
        return top_up
    try:
        top_up_uuid = uuid.UUID(str((intent.get("metadata") or {}).get("top_up")))
    except ValueError:  # no metadata, or not ours
        return None
    return (
        TopUp.objects.select_for_update()
        .filter(uuid=top_up_uuid, payment_intent__isnull=True)
        .first()
    )


def _payment_succeeded(event: dict[str, Any]) -> str:
    intent = _intent_of(event)
    top_up = _top_up_for(intent)
    if top_up is None:
        logger.warning("payment_intent.succeeded for an unknown PaymentIntent %s", intent.get("id"))
        return "ignored: unknown PaymentIntent"
    if not can_move(top_up, TopUp.Status.SUCCEEDED):
        return "ignored: top-up already succeeded"
    paid = intent.get("amount_received", intent.get("amount"))
    currency = str(intent.get("currency", "")).upper()
    if paid != top_up.amount_minor or currency != top_up.currency:
        # Never credit what an event claims: our row says what was asked for.
        logger.error(
            "PaymentIntent %s paid %s %s for top-up %s of %s %s: not credited",
            intent.get("id"), paid, currency, top_up.uuid, top_up.amount, top_up.currency,
        )  # fmt: skip
        return "refused: amount or currency differs from the top-up"
    top_up.payment_intent = intent["id"]
    status_move(top_up, TopUp.Status.SUCCEEDED)
    top_up.succeeded_at = timezone.now()
    top_up.failure_reason = ""
    top_up.save(
        update_fields=["payment_intent", "status", "succeeded_at", "failure_reason", "updated_at"]
    )
    wallet_credit(
        organization=top_up.organization,
        amount=top_up.amount,
        idempotency_reference=f"stripe-payment-intent:{intent['id']}",
        reference=top_up.uuid,
        memo=f"Top-up through Stripe ({intent['id']})",
    )
    webhook_events.top_up_ended(top_up)
    notices.top_up_ended(top_up)
    return "credited"


def _payment_failed(event: dict[str, Any]) -> str:
    intent = _intent_of(event)
    top_up = _top_up_for(intent)
    if top_up is None:
        return "ignored: unknown PaymentIntent"
    if not can_move(top_up, TopUp.Status.FAILED):
        # A late failure of an earlier attempt must not undo a success.
        return f"ignored: top-up is {top_up.status}"
    error = intent.get("last_payment_error") or {}
    reason = error.get("message") if isinstance(error, dict) else None
    status_move(top_up, TopUp.Status.FAILED)
    top_up.failure_reason = str(reason or "The payment failed.")[:500]
    top_up.payment_intent = intent["id"]
    top_up.save(update_fields=["status", "failure_reason", "payment_intent", "updated_at"])
    webhook_events.top_up_ended(top_up)
    notices.top_up_ended(top_up)
    return "marked failed"


_HANDLERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "payment_intent.succeeded": _payment_succeeded,
    "payment_intent.payment_failed": _payment_failed,
    "charge.refunded": chargebacks.charge_refunded,
    "charge.dispute.created": chargebacks.dispute_created,
    "charge.dispute.closed": chargebacks.dispute_closed,
    "account.updated": payouts.account_updated,
}


def top_ups_expire_abandoned(*, older_than: datetime.timedelta) -> int:
    """Marks `expired` the top-ups still pending `older_than` after they were made: paid for by
    nobody (the page was closed, or Stripe.js refused the card before asking Stripe), they
    would show as pending for ever. Nothing was credited for them, so nothing moves; a payment
    that does arrive later is still credited (expired -> succeeded). Returns how many."""
    cutoff = timezone.now() - older_than
    minutes = int(older_than.total_seconds() // 60)
    return status_move_all(
        TopUp.objects.filter(created_at__lt=cutoff),
        TopUp.Status.EXPIRED,
        failure_reason=f"Not paid within {minutes} minutes: abandoned.",
    )


def stripe_events_process_pending() -> int:
    """Processes the stored events that no delivery finished processing (a crash between
    storing and processing). Returns how many it processed."""
    pending = StripeEvent.objects.filter(processed_at__isnull=True).values_list("pk", flat=True)
    count = 0
    for event_pk in list(pending[:500]):
        try:
            stripe_event_process(event_pk=event_pk)
        except Exception:  # one bad event must not keep the others waiting
            logger.exception("Stripe event %s could not be processed", event_pk)
            continue
        count += 1
    return count
