"""The one module that talks to Stripe (docs/design.md, Apps and their direction).

It knows Stripe's wire format and nothing of our models: callers pass amounts in minor units
and their own idempotency keys, and get plain records back."""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

import stripe
from django.conf import settings

# Stripe's own default: a signed event older than five minutes is refused as a replay.
WEBHOOK_TOLERANCE_SECONDS = 300
REQUEST_TIMEOUT_SECONDS = 15

_T = TypeVar("_T")


class StripeUnavailable(Exception):
    """Stripe could not be reached or refused the request; nothing was charged."""


class StripeRefused(Exception):
    """Stripe answered and refused the request (a 4xx): retrying the same request cannot
    succeed, and nothing was done."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class StripeSignatureInvalid(Exception):
    """A webhook whose signature is missing, wrong or too old."""


@dataclass(frozen=True)
class PaymentIntentRecord:
    id: str
    client_secret: str
    status: str


@cache
def _client(api_key: str, api_base: str) -> stripe.StripeClient:
    return stripe.StripeClient(
        api_key,
        base_addresses={"api": api_base},
        max_network_retries=2,
        http_client=stripe.RequestsClient(timeout=REQUEST_TIMEOUT_SECONDS),
    )


def client() -> stripe.StripeClient:
    return _client(settings.STRIPE_SECRET_KEY, settings.STRIPE_API_BASE)


def payment_intent_create(
    *,
    amount_minor: int,
    currency: str,
    idempotency_key: str,
    metadata: dict[str, str],
) -> PaymentIntentRecord:
    """Creates a card PaymentIntent. The same `idempotency_key` gives the same PaymentIntent
    back from Stripe, so a retry after a lost answer never makes a second one."""
    try:
        intent = client().v1.payment_intents.create(
            params={
                "amount": amount_minor,
                "currency": currency.lower(),
                "metadata": metadata,
            },
            options={"idempotency_key": idempotency_key},
        )
    except stripe.StripeError as error:
        raise StripeUnavailable(str(error.user_message or error)) from error
    return PaymentIntentRecord(
        id=intent.id, client_secret=intent.client_secret or "", status=intent.status
    )


# --- Connect, transfers and refunds --------------------------------------------------------------


@dataclass(frozen=True)
class ConnectedAccountRecord:
    id: str
    details_submitted: bool
    payouts_enabled: bool
    transfers_active: bool
    requirements_due: list[str]


@dataclass(frozen=True)
class AccountLinkRecord:
    url: str
    expires_at: int


@dataclass(frozen=True)
class TransferRecord:
    id: str
    amount_minor: int
    destination: str


@dataclass(frozen=True)
class RefundRecord:
    id: str
    charge: str
    amount_minor: int
    status: str


def _call(request: Callable[[], _T]) -> _T:
    """Runs one request: a refusal (4xx) is `StripeRefused`, anything else that failed
    (network, 5xx, rate limit after the client's retries) `StripeUnavailable`."""
    try:
        return request()
    except (
        stripe.InvalidRequestError,
        stripe.CardError,
        stripe.PermissionError,
        stripe.IdempotencyError,
    ) as error:
        raise StripeRefused(str(error.user_message or error), error.code or "") from error
    except stripe.StripeError as error:
        raise StripeUnavailable(str(error.user_message or error)) from error


def connected_account_record(account: Mapping[str, Any]) -> ConnectedAccountRecord:
    """An account object (from the API or an `account.updated` event) as our record."""
    capabilities = account.get("capabilities") or {}
    requirements = account.get("requirements") or {}
    due = requirements.get("currently_due") if isinstance(requirements, Mapping) else None
    return ConnectedAccountRecord(
        id=str(account.get("id", "")),
        details_submitted=account.get("details_submitted") is True,
        payouts_enabled=account.get("payouts_enabled") is True,
        transfers_active=isinstance(capabilities, Mapping)
        and capabilities.get("transfers") == "active",
        requirements_due=[str(item) for item in due] if isinstance(due, list) else [],
    )


def connected_account_create(
    *, idempotency_key: str, metadata: dict[str, str]
) -> ConnectedAccountRecord:
    """An Express account that can receive transfers; the same key gives the same account."""
    account = _call(
        lambda: client().v1.accounts.create(
            params={
                "type": "express",
                "capabilities": {"transfers": {"requested": True}},
                "metadata": metadata,
            },
            options={"idempotency_key": idempotency_key},
        )
    )
    return connected_account_record(account.to_dict())


def account_link_create(*, account: str, refresh_url: str, return_url: str) -> AccountLinkRecord:
    """A single-use onboarding link (Stripe's expire after minutes: make one per visit)."""
    link = _call(
        lambda: client().v1.account_links.create(
            params={
                "account": account,
                "type": "account_onboarding",
                "refresh_url": refresh_url,
                "return_url": return_url,
            }
        )
    )
    return AccountLinkRecord(url=link.url, expires_at=link.expires_at)


def transfer_create(
    *,
    amount_minor: int,
    currency: str,
    destination: str,
    idempotency_key: str,
    transfer_group: str,
    metadata: dict[str, str],
) -> TransferRecord:
    """Moves money from the platform's Stripe balance to a connected account, once per
    `idempotency_key`."""
    transfer = _call(
        lambda: client().v1.transfers.create(
            params={
                "amount": amount_minor,
                "currency": currency.lower(),
                "destination": destination,
                "transfer_group": transfer_group,
                "metadata": metadata,
            },
            options={"idempotency_key": idempotency_key},
        )
    )
    destination_id = transfer.destination
    return TransferRecord(
        id=transfer.id,
        amount_minor=transfer.amount,
        destination=destination_id if isinstance(destination_id, str) else str(destination_id),
    )


def refund_create(
    *, payment_intent: str, amount_minor: int, idempotency_key: str, metadata: dict[str, str]
) -> RefundRecord:
    """Refunds part or all of a PaymentIntent's charge, once per `idempotency_key`."""
    refund = _call(
        lambda: client().v1.refunds.create(
            params={
                "payment_intent": payment_intent,
                "amount": amount_minor,
                "metadata": metadata,
            },
            options={"idempotency_key": idempotency_key},
        )
    )
    charge = refund.charge
    return RefundRecord(
        id=refund.id,
        charge=charge if isinstance(charge, str) else getattr(charge, "id", ""),
        amount_minor=refund.amount,
        status=str(refund.status),
    )


def webhook_event_verify(payload: bytes, signature_header: str | None) -> dict[str, Any]:
    """The event, once its signature over the raw body verifies against
    `STRIPE_WEBHOOK_SECRET`, or `STRIPE_CONNECT_WEBHOOK_SECRET` (Stripe signs the Connect
    endpoint's events, `account.updated`, with that endpoint's own secret), within the
    tolerance; `StripeSignatureInvalid` otherwise."""
    secrets = [
        secret
        for secret in (settings.STRIPE_WEBHOOK_SECRET, settings.STRIPE_CONNECT_WEBHOOK_SECRET)
        if secret
    ]
    if not secrets or not signature_header:
        raise StripeSignatureInvalid("No signature, or no signing secret configured.")
    try:
        # Stripe's library decodes the body itself, and raises on bytes that are not UTF-8:
        # Stripe sends JSON in UTF-8 only, so such a body is no event of its.
        payload.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StripeSignatureInvalid("The body is not UTF-8: it is no Stripe event.") from error
    for number, secret in enumerate(secrets, start=1):
        try:
            stripe.WebhookSignature.verify_header(
                payload, signature_header, secret, tolerance=WEBHOOK_TOLERANCE_SECONDS
            )
        except stripe.SignatureVerificationError as error:
            if number == len(secrets):
                raise StripeSignatureInvalid(str(error)) from error
        else:
            break
    try:
        event = json.loads(payload)
    except ValueError as error:
        raise StripeSignatureInvalid("The signed body is not JSON.") from error
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise StripeSignatureInvalid("The signed body is not a Stripe event.")
    return event
