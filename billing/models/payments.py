"""Money in and back out through Stripe: top-ups (PaymentIntents), the webhook events that settle
them, refunds an operator asks for, and disputes (chargebacks)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from billing.models.ledger import ZERO
from computeshare.models import BaseModel


class TopUp(BaseModel):
    """Money a team pays in through Stripe. Our row exists before the PaymentIntent; only the
    signed webhook moves it to `succeeded` and credits the wallet."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        # Never paid: left pending for TOP_UP_PENDING_EXPIRY_MINUTES (the card form closed, a
        # card Stripe.js refused before asking Stripe).
        EXPIRED = "expired", "Expired"

    # A failed payment can still succeed when the team retries with another card; so can an
    # expired one if Stripe does take the money after all (it is credited, never lost); a
    # success is final.
    TRANSITIONS = {
        Status.PENDING: {Status.SUCCEEDED, Status.FAILED, Status.EXPIRED},
        Status.FAILED: {Status.SUCCEEDED},
        Status.EXPIRED: {Status.SUCCEEDED, Status.FAILED},
        Status.SUCCEEDED: set(),
    }

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.PROTECT, related_name="top_ups"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # NULL, not "": unique only when given.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    payment_intent = models.CharField(max_length=255, unique=True, null=True, blank=True)
    client_secret = models.CharField(max_length=255, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True)
    succeeded_at = models.DateTimeField(null=True, blank=True)
    # What Stripe's `charge.refunded` events said was refunded, and the ledger debited: each
    # event carries the charge's running total, so a replayed or late event changes nothing.
    amount_refunded = models.DecimalField(max_digits=14, decimal_places=2, default=ZERO)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "succeeded", "failed", "expired"]),
                name="top_up_status_valid",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="top_up_amount_positive"),
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="top_up_unique_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"Top-up {self.uuid} of {self.amount} {self.currency} ({self.status})"

    @property
    def amount_minor(self) -> int:
        """The amount in the currency's minor unit, as Stripe counts it."""
        return int(self.amount * 100)


class StripeEvent(models.Model):
    """Every verified webhook event, stored by its Stripe id before it is acted on."""

    event_id = models.CharField(max_length=255, unique=True)
    type = models.CharField(max_length=128)
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    deliveries = models.PositiveIntegerField(default=1)
    processed_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["-received_at", "-id"]

    def __str__(self) -> str:
        return f"{self.type} {self.event_id}"


class TopUpRefund(BaseModel):
    """A refund an operator asked Stripe for. The wallet is debited by Stripe's
    `charge.refunded`, as a top-up is credited only by `payment_intent.succeeded`; this row is
    who asked, why, and Stripe's answer. Its idempotency key is derived from the row, so that
    asking again after a lost answer refunds once."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    TRANSITIONS = {
        Status.PENDING: {Status.SUCCEEDED, Status.FAILED},
        Status.SUCCEEDED: set(),
        Status.FAILED: set(),
    }

    top_up = models.ForeignKey(TopUp, on_delete=models.PROTECT, related_name="refunds")
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    reason = models.CharField(max_length=255)
    stripe_refund = models.CharField(max_length=255, unique=True, null=True, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "succeeded", "failed"]),
                name="top_up_refund_status_valid",
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="top_up_refund_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"Refund {self.uuid} of {self.amount} ({self.status})"


class Dispute(BaseModel):
    """A chargeback of a top-up, from Stripe's `charge.dispute.*` events. `withdrawn` says the
    wallet gave the money back (Stripe took it from the platform); a won dispute returns it."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        WON = "won", "Won"
        LOST = "lost", "Lost"

    TRANSITIONS = {
        Status.OPEN: {Status.WON, Status.LOST},
        Status.WON: set(),
        Status.LOST: set(),
    }

    top_up = models.ForeignKey(TopUp, on_delete=models.PROTECT, related_name="disputes")
    stripe_dispute = models.CharField(max_length=255, unique=True)
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    reason = models.CharField(max_length=64, blank=True)
    is_withdrawn = models.BooleanField(default=False)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "won", "lost"]), name="dispute_status_valid"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="dispute_amount_positive"),
        ]

    def __str__(self) -> str:
        return f"Dispute {self.stripe_dispute} of {self.amount} ({self.status})"
