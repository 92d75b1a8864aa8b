"""Owners' Stripe Connect accounts and the payouts of their earnings to them."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from computeshare.models import BaseModel


class ConnectedAccount(BaseModel):
    """An owner organization's Stripe Connect (Express) account, where its payouts go. Our row
    exists before Stripe's account; its state follows Stripe's `account.updated` events, the
    newest applied last (`stripe_updated`, the event's creation time)."""

    class Status(models.TextChoices):
        ONBOARDING = "onboarding", "Onboarding"
        ACTIVE = "active", "Active"
        RESTRICTED = "restricted", "Restricted"

    TRANSITIONS = {
        Status.ONBOARDING: {Status.ACTIVE, Status.RESTRICTED},
        Status.ACTIVE: {Status.RESTRICTED},
        Status.RESTRICTED: {Status.ACTIVE},
    }

    organization = models.OneToOneField(
        "organizations.Organization", on_delete=models.PROTECT, related_name="connected_account"
    )
    stripe_account = models.CharField(max_length=255, unique=True, null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ONBOARDING)
    details_submitted = models.BooleanField(default=False)
    payouts_enabled = models.BooleanField(default=False)
    transfers_active = models.BooleanField(default=False)
    requirements_due = models.JSONField(default=list, blank=True)
    stripe_updated = models.BigIntegerField(
        default=0, help_text="When Stripe created the last event applied (Unix seconds)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["onboarding", "active", "restricted"]),
                name="connected_account_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"Stripe account {self.stripe_account or '(not created)'} of {self.organization}"

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE


class Payout(BaseModel):
    """Payable earnings sent to the organization's connected account by a Stripe transfer. The
    ledger moves the money out of `earnings` when the row is made (so two payouts never pay
    the same earnings); a transfer Stripe refuses puts it back. The transfer's idempotency key
    is derived from the row, so a retry after a lost answer transfers once."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        PAID = "paid", "Paid"
        FAILED = "failed", "Failed"

    TRANSITIONS = {
        Status.PENDING: {Status.PAID, Status.FAILED},
        Status.PAID: set(),
        Status.FAILED: set(),
    }

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.PROTECT, related_name="payouts"
    )
    connected_account = models.ForeignKey(
        ConnectedAccount, on_delete=models.PROTECT, related_name="payouts"
    )
    amount = models.DecimalField(max_digits=14, decimal_places=2)
    currency = models.CharField(max_length=3)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    stripe_transfer = models.CharField(max_length=255, unique=True, null=True, blank=True)
    failure_reason = models.CharField(max_length=500, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    # NULL, not "": unique only when given.
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "paid", "failed"]), name="payout_status_valid"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="payout_amount_positive"),
            models.UniqueConstraint(
                fields=["created_by", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="payout_unique_idempotency_key",
            ),
        ]

    def __str__(self) -> str:
        return f"Payout {self.uuid} of {self.amount} {self.currency} ({self.status})"

    @property
    def amount_minor(self) -> int:
        return int(self.amount * 100)
