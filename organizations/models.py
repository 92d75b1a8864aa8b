"""Who people act as: organizations, their members, and invitations into them.

Below billing in the layers, so that money can name its owner (docs/adr/0019). The tables keep
their first names (`marketplace_*`): the models moved here without touching the database."""

from datetime import datetime
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower
from django.utils import timezone

from computeshare.models import BaseModel


class Organization(BaseModel):
    """A team that buys, an owner that sells, or both."""

    name = models.CharField(max_length=120)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        through="Membership",
        through_fields=("organization", "user"),
        related_name="organizations",
    )

    class Meta:
        db_table = "marketplace_organization"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(Lower("name"), name="organization_unique_name_ci"),
        ]

    def __str__(self) -> str:
        return self.name


class Membership(BaseModel):
    class Role(models.TextChoices):
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        db_table = "marketplace_membership"
        ordering = ["organization", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "user"], name="membership_unique_user_per_organization"
            ),
            models.CheckConstraint(
                condition=models.Q(role__in=["admin", "member"]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"

    @property
    def is_admin(self) -> bool:
        return self.role == self.Role.ADMIN


class Invitation(BaseModel):
    """An admin's invitation of a user into the organization, which the user accepts or declines.

    `username` is the name as the admin typed it. `invitee` is set only when that name was an
    active user who was not a member yet: only such an invitation can be accepted and is mailed.
    Every other name (unknown, inactive, already a member) is stored the same way without an
    invitee, so that the admin's answers and lists look alike whether a name exists or not
    (docs/adr/0008-invitations-do-not-tell-whether-a-name-exists.md)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        ACCEPTED = "accepted", "Accepted"
        DECLINED = "declined", "Declined"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Expired"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.PENDING: {Status.ACCEPTED, Status.DECLINED, Status.CANCELLED, Status.EXPIRED},
        Status.ACCEPTED: set(),
        Status.DECLINED: set(),
        Status.CANCELLED: set(),
        Status.EXPIRED: set(),
    }

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="invitations"
    )
    username = models.CharField(max_length=150)
    invitee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="invitations",
    )
    role = models.CharField(max_length=16, choices=Membership.Role.choices)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "marketplace_invitation"
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["invitee", "status"], name="invitation_invitee_status"),
            models.Index(fields=["organization", "status"], name="invitation_organization_status"),
        ]
        constraints = [
            # One pending invitation per organization and name, and per organization and user.
            models.UniqueConstraint(
                fields=["organization", "username"],
                condition=Q(status="pending"),
                name="invitation_one_pending_per_username",
            ),
            models.UniqueConstraint(
                fields=["organization", "invitee"],
                condition=Q(status="pending"),
                name="invitation_one_pending_per_invitee",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["pending", "accepted", "declined", "cancelled", "expired"]),
                name="invitation_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(role__in=["admin", "member"]), name="invitation_role_valid"
            ),
            models.CheckConstraint(
                condition=Q(status="pending") | Q(answered_at__isnull=False),
                name="invitation_answered_when_closed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username} to {self.organization} ({self.status})"

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())
