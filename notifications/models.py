"""What a user is told (in the site and by mail) and how each user wants each kind told."""

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q

from computeshare.models import BaseModel


class Kind(models.TextChoices):
    BID_OUTBID = "bid_outbid", "Outbid or lost a bid"
    AUCTION_WON = "auction_won", "Auction won"
    AUCTION_CLEARED = "auction_cleared", "Your offer's auction cleared"
    ALLOCATION_STARTING = "allocation_starting", "Allocation starting"
    ALLOCATION_ENDING = "allocation_ending", "Allocation ending soon"
    JOB_ENDED = "job_ended", "Job ended"
    JOB_PREEMPTED = "job_preempted", "Job preempted by the owner's own work"
    RESERVATION_PROBLEM = "reservation_problem", "A reserved block's reservation went wrong"
    BUDGET_THRESHOLD = "budget_threshold", "Budget threshold reached"
    TOP_UP_SUCCEEDED = "top_up_succeeded", "Top-up succeeded"
    TOP_UP_FAILED = "top_up_failed", "Top-up failed"
    INVITATION = "invitation", "Invitation to an organization"


class Notification(BaseModel):
    """One event told to one user, at most once: `key` names the event (`job_ended:job:<uuid>`)
    and is unique per user, so that a retried task or a second run of a sweep adds nothing.
    `is_shown`: listed in the site (the user's in-site preference when it was made).
    `email_state`: `pending` until its mail went (`sent`), `none` when no mail is due from here
    (turned off, no address, or mailed by its own app: invitations, budget alerts)."""

    class EmailState(models.TextChoices):
        NONE = "none", "No mail"
        PENDING = "pending", "To be mailed"
        SENT = "sent", "Mailed"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    organization = models.ForeignKey(
        "organizations.Organization",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    key = models.CharField(max_length=200)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    link = models.CharField(max_length=500, blank=True)
    is_shown = models.BooleanField(default=True)
    read_at = models.DateTimeField(null=True, blank=True)
    # Made `none` or `pending`; a pending mail is sent once.
    EMAIL_STATE_TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        EmailState.PENDING: {EmailState.SENT},
    }
    email_state = models.CharField(
        max_length=16, choices=EmailState.choices, default=EmailState.NONE
    )
    emailed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-created_at", "-id"]
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["user", "key"], name="notification_once_per_user"),
            models.CheckConstraint(
                condition=Q(kind__in=Kind.values), name="notification_kind_known"
            ),
            models.CheckConstraint(
                condition=Q(email_state__in=["none", "pending", "sent"]),
                name="notification_email_state_known",
            ),
        ]
        indexes: ClassVar[list[models.Index]] = [
            models.Index(
                fields=["user", "created_at"],
                name="notification_unread",
                condition=Q(is_shown=True, read_at__isnull=True),
            ),
            models.Index(
                fields=["created_at"],
                name="notification_mail_pending",
                condition=Q(email_state="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} for user {self.user_id}"


class NotificationPreference(BaseModel):
    """A user's choice for one kind; a kind without a row is shown in the site and mailed."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    in_site = models.BooleanField(default=True)
    by_email = models.BooleanField(default=True)

    class Meta:
        constraints: ClassVar[list[models.BaseConstraint]] = [
            models.UniqueConstraint(fields=["user", "kind"], name="notification_preference_once"),
            models.CheckConstraint(
                condition=Q(kind__in=Kind.values), name="notification_preference_kind_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} for user {self.user_id}"


class NoticeBatch(BaseModel):
    """Events to tell after the commit of the change they report (an outbox, as the webhooks'
    events): written in that change's transaction, so a rolled-back change tells nobody, then
    recorded as notifications by a task after the commit and deleted in the transaction that
    records them, so a batch is told once. A batch whose task was lost (a crash between the
    commit and the task, a broker that did not take it) is recorded by the periodic sweep.
    `events`: the `NotificationEvent`s as JSON objects; or, when `source` is set, none, and the
    task asks that function (one of `settings.NOTICE_SOURCES`) for them with `arguments`."""

    events = models.JSONField()
    source = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        if self.source:
            return f"notice batch {self.pk} ({self.source} {self.arguments})"
        return f"notice batch {self.pk} ({len(self.events)} events)"
