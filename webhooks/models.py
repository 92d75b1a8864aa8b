"""Endpoints, the event outbox and the deliveries of each event to each endpoint."""

from typing import ClassVar

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q

from computeshare.fields import EncryptedTextField
from computeshare.models import BaseModel


class EventType(models.TextChoices):
    JOB_ENDED = "job.ended", "A job ended"
    JOB_PREEMPTED = "job.preempted", "A job's run was preempted by the owner's own work"
    BID_OUTBID = "bid.outbid", "A bid lost units at clearing"
    AUCTION_CLEARED = "auction.cleared", "An auction cleared"
    ALLOCATION_STARTING = "allocation.starting", "An allocation's window opened"
    ALLOCATION_ENDING = "allocation.ending", "An allocation's window ends soon"
    BUDGET_THRESHOLD = "budget.threshold", "A budget threshold was crossed"
    TOP_UP_SUCCEEDED = "top_up.succeeded", "A top-up succeeded"
    TOP_UP_FAILED = "top_up.failed", "A top-up failed"
    PAYOUT_PAID = "payout.paid", "A payout reached the owner's Stripe account"


class WebhookEndpoint(BaseModel):
    """An address of an organization's that wants some event types, with the secret that
    signs what is sent to it (encrypted at rest, shown to the admin only when made)."""

    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list)
    description = models.CharField(max_length=500, blank=True)
    is_enabled = models.BooleanField(default=True)
    secret = EncryptedTextField()

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return self.url


class WebhookEvent(models.Model):
    """The outbox: one row per event, written in the transaction of the change it reports, so
    that a committed change always has its event and a rolled-back one never does. Append-only.
    `object_key` names the object the event is about (`job:<uuid>`): deliveries of one object
    go out in the order of these rows. An event that may happen only once per object
    (`is_once`) is unique per organization, type and object."""

    uuid = models.UUIDField(unique=True, editable=False)
    created_at = models.DateTimeField(db_index=True)
    organization = models.ForeignKey(
        "organizations.Organization", on_delete=models.CASCADE, related_name="webhook_events"
    )
    type = models.CharField(max_length=32, choices=EventType.choices)
    object_key = models.CharField(max_length=100)
    data = models.JSONField(encoder=DjangoJSONEncoder)
    is_once = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(type__in=EventType.values), name="webhook_event_type"
            ),
            models.UniqueConstraint(
                fields=["organization", "type", "object_key"],
                condition=Q(is_once=True),
                name="webhook_event_once_per_object",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.object_key}"

    @property
    def public_id(self) -> str:
        return f"evt_{self.uuid.hex}"


class WebhookDelivery(BaseModel):
    """One event to one endpoint: pending until a 2xx answer (delivered) or until the retry
    window has passed (failed). `leased_until` keeps a second worker off a delivery being sent;
    a delivered one is never sent again (unless an admin asks for a redelivery)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    # A delivery ends delivered or failed; an admin's redelivery makes any delivery pending
    # again (`services.delivery_redeliver`).
    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.PENDING: {Status.DELIVERED, Status.FAILED},
        Status.DELIVERED: {Status.PENDING},
        Status.FAILED: {Status.PENDING},
    }

    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries"
    )
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    # Copied from the event: the order check reads it with the endpoint, on one index.
    object_key = models.CharField(max_length=100)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempt_count = models.PositiveIntegerField(default=0)
    # When retrying stops: the retry window counted from the first try (or a redelivery).
    retry_until = models.DateTimeField()
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    leased_until = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    last_response_excerpt = models.CharField(max_length=500, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "delivered", "failed"]),
                name="webhook_delivery_status",
            ),
            models.UniqueConstraint(fields=["endpoint", "event"], name="webhook_delivery_once"),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="webhook_delivery_due",
            ),
            models.Index(
                fields=["endpoint", "object_key", "event"],
                condition=Q(status="pending"),
                name="webhook_delivery_order",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.endpoint}"
