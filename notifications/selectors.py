"""Reads of notifications, always of the user who asks."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from computeshare.errors import NotFound
from computeshare.models import User
from hpc.batches import batched
from notifications.models import Kind, NoticeBatch, Notification, NotificationPreference


def notification_list_for_user(user: User, *, unread_only: bool = False) -> QuerySet[Notification]:
    """The user's notifications shown in the site, newest first."""
    found = Notification.objects.filter(user=user, is_shown=True)
    if unread_only:
        found = found.filter(read_at__isnull=True)
    return found.order_by("-created_at", "-id")


def notification_get_for_user(user: User, notification_id: str | uuid.UUID) -> Notification:
    try:
        wanted = uuid.UUID(str(notification_id))
    except ValueError:
        raise NotFound("No such notification.") from None
    found = Notification.objects.filter(user=user, is_shown=True, uuid=wanted).first()
    if found is None:
        raise NotFound("No such notification.")
    return found


def notification_unread_count(user: User) -> int:
    return Notification.objects.filter(user=user, is_shown=True, read_at__isnull=True).count()


@dataclass(frozen=True)
class Preference:
    kind: str
    label: str
    in_site: bool
    by_email: bool


def preferences_for_user(user: User) -> list[Preference]:
    """Every kind with the user's choice (shown and mailed unless the user said otherwise)."""
    chosen = {
        row.kind: row
        for row in NotificationPreference.objects.filter(user=user).only(
            "kind", "in_site", "by_email"
        )
    }
    return [
        Preference(
            kind=kind.value,
            label=str(kind.label),
            in_site=chosen[kind.value].in_site if kind.value in chosen else True,
            by_email=chosen[kind.value].by_email if kind.value in chosen else True,
        )
        for kind in Kind
    ]


def preferences_of_users(
    user_ids: Iterable[int], kinds: Iterable[str]
) -> dict[tuple[int, str], NotificationPreference]:
    """The rows of these users for these kinds, by (user id, kind); a missing pair means the
    defaults (in the site and by mail)."""
    return {
        (row.user_id, row.kind): row
        for row in NotificationPreference.objects.filter(
            user_id__in=set(user_ids), kind__in=set(kinds)
        )
    }


def users_wanting_email(user_ids: Iterable[int], kind: str) -> set[int]:
    """Which of these users have not turned off mail of `kind` (for the apps that mail a kind
    themselves: invitations, budget alerts)."""
    wanted = set(user_ids)
    refused = NotificationPreference.objects.filter(
        user_id__in=wanted, kind=kind, by_email=False
    ).values_list("user_id", flat=True)
    return wanted - set(refused)


def addresses_wanting_email(addresses: Iterable[str], kind: str) -> list[str]:
    """These addresses without those of users who turned off mail of `kind`, in their order."""
    addresses = list(addresses)
    refused = set(
        NotificationPreference.objects.filter(
            user__email__in=addresses, kind=kind, by_email=False
        ).values_list("user__email", flat=True)
    )
    return [address for address in addresses if address not in refused]


def notification_emails_due(now: datetime | None = None, grace_seconds: float = 60.0) -> list[int]:
    """Mails still pending a while after their notification was made: their task was lost or
    failed for good (the sweep sends them)."""
    before = (now or timezone.now()) - timedelta(seconds=grace_seconds)
    return list(
        Notification.objects.filter(
            email_state=Notification.EmailState.PENDING, created_at__lte=before
        )
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )


def keys_recorded(keys: Iterable[str]) -> set[str]:
    """Which of these event keys have been told to someone already (a sweep skips them)."""
    wanted = sorted(set(keys))
    found: set[str] = set()
    for batch in batched(wanted, 1000):
        found.update(Notification.objects.filter(key__in=batch).values_list("key", flat=True))
    return found


def notice_batches_due(now: datetime | None = None, grace_seconds: float = 60.0) -> list[int]:
    """Notice batches still waiting a while after their change committed: their task was lost
    (a crash after the commit, a broker that did not take it); the sweep records them."""
    before = (now or timezone.now()) - timedelta(seconds=grace_seconds)
    return list(
        NoticeBatch.objects.filter(created_at__lte=before)
        .order_by("pk")
        .values_list("pk", flat=True)[:100]
    )
