"""Owners' payouts through Stripe Connect: the organization's Express account, its onboarding,
its state from `account.updated`, and transfers of payable earnings.

The order that makes a payout safe, as for a top-up: our row and its ledger transaction
(earnings out, under the earnings' lock, so that two payouts never pay the same money) are
committed first; the transfer is made afterwards, outside any transaction, with an idempotency
key derived from our row. A transfer Stripe refuses puts the money back into earnings; one
whose answer is lost stays pending and is sent again with the same key."""

import datetime
import logging
from decimal import Decimal
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing import stripe_gateway, webhook_events
from billing.errors import (
    PaymentProviderRefused,
    PaymentProviderUnavailable,
    PayoutsNotEnabled,
)
from billing.models import ConnectedAccount, Payout
from billing.services.ledger import (
    debt_refuse,
    earnings_pay_out,
    earnings_pay_out_reverse,
    money,
)
from computeshare.errors import IdempotencyKeyReused, ValidationFailed
from computeshare.models import User
from computeshare.states import can_move, status_move, status_move_all
from organizations.models import Organization

logger = logging.getLogger(__name__)


# --- The connected account ---------------------------------------------------------------------


def _connected_account_row(*, organization: Organization, actor: User) -> ConnectedAccount:
    existing = ConnectedAccount.objects.filter(organization=organization).first()
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            return ConnectedAccount.objects.create(organization=organization, created_by=actor)
    except IntegrityError:  # another admin, at the same moment: one row per organization
        return ConnectedAccount.objects.get(organization=organization)


def connected_account_onboard(
    *, organization: Organization, actor: User, return_url: str, refresh_url: str
) -> stripe_gateway.AccountLinkRecord:
    """The organization's Express account (made on first use, once, however often this is
    called) and a fresh single-use onboarding link to send the admin to. It calls Stripe:
    never call it inside a transaction."""
    account = _connected_account_row(organization=organization, actor=actor)
    try:
        if not account.stripe_account:
            record = stripe_gateway.connected_account_create(
                idempotency_key=f"computeshare-account-{account.uuid}",
                metadata={
                    "organization": str(organization.uuid),
                    "connected_account": str(account.uuid),
                },
            )
            ConnectedAccount.objects.filter(pk=account.pk, stripe_account__isnull=True).update(
                stripe_account=record.id,
                requirements_due=record.requirements_due,
                updated_at=timezone.now(),
            )
            account.refresh_from_db()
        assert account.stripe_account is not None
        return stripe_gateway.account_link_create(
            account=account.stripe_account, refresh_url=refresh_url, return_url=return_url
        )
    except stripe_gateway.StripeUnavailable as error:
        raise PaymentProviderUnavailable() from error
    except stripe_gateway.StripeRefused as error:
        raise PaymentProviderRefused(extra={"reason": str(error)}) from error


def _status_of(record: stripe_gateway.ConnectedAccountRecord) -> str:
    if record.transfers_active and record.payouts_enabled:
        return ConnectedAccount.Status.ACTIVE
    if record.details_submitted:
        return ConnectedAccount.Status.RESTRICTED
    return ConnectedAccount.Status.ONBOARDING


def account_updated(event: dict[str, Any]) -> str:
    """`account.updated`: the account's state as of the event, unless a newer event was
    applied already (Stripe does not promise order)."""
    account = (event.get("data") or {}).get("object") or {}
    if not isinstance(account, dict) or not isinstance(account.get("id"), str):
        return "ignored: no account in the event"
    row = ConnectedAccount.objects.select_for_update().filter(stripe_account=account["id"]).first()
    if row is None:
        return "ignored: unknown account"
    created = event.get("created")
    created = created if isinstance(created, int) else 0
    if created < row.stripe_updated:
        return "ignored: older than the state we have"
    record = stripe_gateway.connected_account_record(account)
    status = _status_of(record)
    if status != row.status and not can_move(row, status):
        return f"ignored: {row.status} does not become {status}"
    status_move(row, status)
    row.details_submitted = record.details_submitted
    row.payouts_enabled = record.payouts_enabled
    row.transfers_active = record.transfers_active
    row.requirements_due = record.requirements_due
    row.stripe_updated = created
    row.save(
        update_fields=[
            "status",
            "details_submitted",
            "payouts_enabled",
            "transfers_active",
            "requirements_due",
            "stripe_updated",
            "updated_at",
        ]
    )
    return f"account {status}"


# --- Payouts -----------------------------------------------------------------------------------


def _clean_amount(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    amount = money(value, places=2)
    if amount <= 0:
        raise ValidationFailed(fields={"amount": ["Must be more than zero."]})
    return amount


def _payout_replay(
    *, organization: Organization, actor: User, amount: Decimal | None, idempotency_key: str
) -> Payout | None:
    existing = Payout.objects.filter(created_by=actor, idempotency_key=idempotency_key).first()
    if existing is None:
        return None
    if existing.organization_id != organization.pk or (
        amount is not None and existing.amount != amount
    ):
        raise IdempotencyKeyReused(extra={"key": idempotency_key})
    return existing


def _payout_reserve(
    *, organization: Organization, actor: User, amount: Decimal | None, idempotency_key: str | None
) -> Payout:
    """The payout's row and its ledger transaction, in one transaction."""
    with transaction.atomic():
        account = (
            ConnectedAccount.objects.filter(organization=organization).select_for_update().first()
        )
        if account is None or not account.is_active:
            raise PayoutsNotEnabled(
                extra={"status": account.status if account is not None else "not_connected"}
            )
        debt_refuse(organization)
        payout: Payout | None = None

        def payout_row(paying: Decimal) -> UUID:
            nonlocal payout
            payout = Payout.objects.create(
                organization=organization,
                connected_account=account,
                amount=paying,
                currency=settings.PLATFORM_CURRENCY,
                idempotency_key=idempotency_key,
                created_by=actor,
            )
            return payout.uuid

        earnings_pay_out(
            organization=organization,
            amount=amount,
            reference_for=payout_row,
            memo=f"Payout to Stripe account {account.stripe_account}",
        )
        assert payout is not None
        return payout


def payout_create(
    *,
    organization: Organization,
    actor: User,
    amount: Any = None,
    idempotency_key: str | None = None,
) -> Payout:
    """Pays out `amount` of the organization's payable earnings (all of it when not given) to
    its connected account. Refused with `PayoutsNotEnabled` until the account is active,
    `OutstandingDebt` while it owes the platform, `AmountNotPayable` past what is payable. The
    same `idempotency_key` gives the same payout back (and sends a pending one again). It
    calls Stripe: never call it inside a transaction."""
    if idempotency_key and len(idempotency_key) > 255:
        raise ValidationFailed(fields={"Idempotency-Key": ["At most 255 characters."]})
    cleaned = _clean_amount(amount)
    payout = None
    if idempotency_key:
        payout = _payout_replay(
            organization=organization,
            actor=actor,
            amount=cleaned,
            idempotency_key=idempotency_key,
        )
    if payout is None:
        try:
            payout = _payout_reserve(
                organization=organization,
                actor=actor,
                amount=cleaned,
                idempotency_key=idempotency_key or None,
            )
        except IntegrityError:  # the same key, concurrently: the other request's payout
            if not idempotency_key:
                raise
            payout = Payout.objects.get(created_by=actor, idempotency_key=idempotency_key)
    if payout.status == Payout.Status.PENDING:
        payout = payout_transfer(payout_id=payout.pk)
    return payout


def payout_transfer(*, payout_id: int) -> Payout:
    """Sends a pending payout's transfer (again, with the same key, after a lost answer).
    Paid when Stripe makes the transfer; failed, its money back in earnings, when Stripe
    refuses it; still pending when Stripe cannot be reached."""
    payout = Payout.objects.select_related("connected_account", "organization").get(pk=payout_id)
    if payout.status != Payout.Status.PENDING:
        return payout
    destination = payout.connected_account.stripe_account
    assert destination is not None
    try:
        transfer = stripe_gateway.transfer_create(
            amount_minor=payout.amount_minor,
            currency=payout.currency,
            destination=destination,
            idempotency_key=f"computeshare-payout-{payout.uuid}",
            transfer_group=f"payout-{payout.uuid}",
            metadata={"payout": str(payout.uuid), "organization": str(payout.organization.uuid)},
        )
    except stripe_gateway.StripeUnavailable as error:
        logger.warning("Payout %s: Stripe could not be reached: %s", payout.uuid, error)
        return payout
    except stripe_gateway.StripeRefused as error:
        return _payout_fail(payout, f"Stripe refused the transfer: {error}")
    with transaction.atomic():
        # A compare-and-set: of two sends of the same pending payout (the request and the
        # sweep), one moves it and tells the owner's endpoints.
        moved = status_move_all(
            Payout.objects.filter(pk=payout.pk),
            Payout.Status.PAID,
            stripe_transfer=transfer.id,
            paid_at=timezone.now(),
        )
        payout.refresh_from_db()
        if moved:
            webhook_events.payout_paid(payout)
    return payout


@transaction.atomic
def _payout_fail(payout: Payout, reason: str) -> Payout:
    locked = Payout.objects.select_for_update().get(pk=payout.pk)
    if locked.status != Payout.Status.PENDING:
        return locked
    status_move(locked, Payout.Status.FAILED)
    locked.failure_reason = reason[:500]
    locked.save(update_fields=["status", "failure_reason", "updated_at"])
    earnings_pay_out_reverse(
        organization=payout.organization,
        amount=locked.amount,
        reference=locked.uuid,
        memo=f"Payout {locked.uuid} refused by Stripe: back in earnings",
    )
    return locked


def payouts_pending_send(*, older_than: datetime.timedelta) -> int:
    """Sends again the payouts left pending longer than `older_than` (Stripe unreachable, or
    a crash between our commit and the transfer). Returns how many it tried."""
    pending = Payout.objects.filter(
        status=Payout.Status.PENDING, created_at__lt=timezone.now() - older_than
    ).values_list("pk", flat=True)
    count = 0
    for payout_id in list(pending[:200]):
        payout_transfer(payout_id=payout_id)
        count += 1
    return count
