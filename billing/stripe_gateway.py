"""The one module that talks to Stripe (DESIGN.md: "Only one module talks to Stripe").

It knows Stripe's wire format and nothing of our models: callers pass amounts in minor units
and their own idempotency keys, and get plain records back."""

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

import stripe
from django.conf import settings

# Stripe's own default: a signed event older than five minutes is refused as a replay.
WEBHOOK_TOLERANCE_SECONDS = 300
REQUEST_TIMEOUT_SECONDS = 15


class StripeUnavailable(Exception):
    """Stripe could not be reached or refused the request; nothing was charged."""


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


def webhook_event_verify(payload: bytes, signature_header: str | None) -> dict[str, Any]:
    """The event, once its signature over the raw body verifies against
    `STRIPE_WEBHOOK_SECRET` within the tolerance; `StripeSignatureInvalid` otherwise."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret or not signature_header:
        raise StripeSignatureInvalid("No signature, or no signing secret configured.")
    try:
        stripe.WebhookSignature.verify_header(
            payload, signature_header, secret, tolerance=WEBHOOK_TOLERANCE_SECONDS
        )
    except stripe.SignatureVerificationError as error:
        raise StripeSignatureInvalid(str(error)) from error
    try:
        event = json.loads(payload)
    except ValueError as error:
        raise StripeSignatureInvalid("The signed body is not JSON.") from error
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise StripeSignatureInvalid("The signed body is not a Stripe event.")
    return event
