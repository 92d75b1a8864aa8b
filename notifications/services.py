"""Every write of notifications: recording them once per event and user, reading them, the
users' preferences, and their mails.

Other apps call `notifications_record` (one call per event site) inside the transaction of the
change they report: a rolled-back change notifies nobody. A change that holds a busy lock (an
auction's clearing) calls `notifications_record_after_commit` instead: one row of the events in
its transaction, recorded by a task after the commit (`notice_batch_record`), or, with
`notifications_record_after_commit_from`, one row naming the function that reads them from the
committed change. Each notification is unique per user and event key, so a second call for the
same event (a retried task, a sweep that runs again) adds nothing. Mails go after the commit,
from a Celery task; a mail is marked sent under the row's lock in the transaction that sends it,
so a retried or duplicated task sends none twice."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any, cast

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.module_loading import import_string

from computeshare import figures
from computeshare.errors import ValidationFailed
from computeshare.models import User
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move
from notifications import selectors
from notifications.models import Kind, NoticeBatch, Notification, NotificationPreference


@dataclass(frozen=True)
class NotificationEvent:
    """An event to tell: to `user_ids` when given, else to the members (or only the admins) of
    `organization_id`. `key` names the event for once-only (`job_ended:job:<uuid>`); `link` is
    a path of the site. `is_mailed_here`: False for the kinds whose app mails them itself."""

    kind: str
    key: str
    title: str
    body: str = ""
    link: str = ""
    organization_id: int | None = None
    admins_only: bool = False
    user_ids: Sequence[int] = field(default_factory=tuple)
    is_mailed_here: bool = True


def money_text(amount: Decimal | str | None) -> str:
    """An amount as a person reads it in a notice, with the currency, as the pages write it
    (computeshare/figures.py): to the cent (`2.50 USD`), `< 0.01 USD` under a cent."""
    if amount is None:
        return "—"
    return figures.amount_text(amount, settings.PLATFORM_CURRENCY)


def price_text(price: Decimal | str | None) -> str:
    """A price per unit in a notice, with the currency: to the cent when that is exact
    (`2.50 USD`), else every significant digit (`0.0125 USD`), as the market's prices."""
    if price is None:
        return "—"
    return figures.price_text(price, settings.PLATFORM_CURRENCY)


def _organization_recipients(
    events: Sequence[NotificationEvent],
) -> dict[tuple[int, bool], list[int]]:
    """The users of each (organization, admins only) the events name, in a query per flag."""
    # Notifications sit below the market (imports go one way); settings name who knows members.
    lookup = cast(
        Callable[[Iterable[int], bool], Mapping[int, Sequence[int]]],
        import_string(settings.NOTIFICATIONS_RECIPIENTS),
    )
    found: dict[tuple[int, bool], list[int]] = {}
    for admins_only in (False, True):
        wanted = {
            event.organization_id
            for event in events
            if event.organization_id is not None
            and not event.user_ids
            and event.admins_only == admins_only
        }
        if wanted:
            for organization_id, users in lookup(wanted, admins_only).items():
                found[(organization_id, admins_only)] = list(users)
    return found


def _kinds_check(events: Sequence[NotificationEvent]) -> None:
    for event in events:
        if event.kind not in Kind.values:
            raise ValueError(f"unknown notification kind {event.kind!r}")


def notifications_record_after_commit(events: Sequence[NotificationEvent]) -> None:
    """Records the events as `notifications_record` would, after the caller's transaction
    commits: in it, only one row with the events (a rolled-back change tells nobody); after it,
    a task records them (`notice_batch_record`), or the sweep when the task was lost. For a
    change that holds a busy lock: finding recipients, preferences and writing a row per user
    took most of a 100,000-bid clearing while the offer stayed locked."""
    if not events:
        return
    _kinds_check(events)
    # Field by field rather than dataclasses.asdict, which deep-copies every value.
    names = [item.name for item in fields(NotificationEvent)]
    _batch_write(
        events=[
            {**{name: getattr(event, name) for name in names}, "user_ids": list(event.user_ids)}
            for event in events
        ]
    )


def notifications_record_after_commit_from(source: str, **arguments: Any) -> None:
    """As `notifications_record_after_commit`, for events that the caller's transaction would
    spend too long writing out (an auction's, one per bidding team, under the offer's lock):
    the batch names `source`, a function of `settings.NOTICE_SOURCES` that reads the events
    from the committed change, and the task calls it with `arguments` (JSON values)."""
    if source not in settings.NOTICE_SOURCES:
        raise ValueError(f"{source!r} is not in settings.NOTICE_SOURCES")
    _batch_write(events=[], source=source, arguments=arguments)


def _batch_write(**values: Any) -> None:
    batch = NoticeBatch.objects.create(**values)
    enqueue_after_commit(
        "notifications.tasks.notice_batch_record_task",
        batch.pk,
        recovered_by="the periodic sweep of notice batches (notice_batches_due_task)",
    )


@transaction.atomic
def notice_batch_record(*, batch_id: int) -> int:
    """Records a batch's notifications and deletes the batch, in one transaction under the
    batch's row lock: a second task (or the sweep) for the same batch waits, then finds it gone
    and records nothing. Returns how many notifications were written."""
    batch = NoticeBatch.objects.select_for_update().filter(pk=batch_id).first()
    if batch is None:
        return 0
    written = notifications_record(_batch_events(batch))
    batch.delete()
    return written


def _batch_events(batch: NoticeBatch) -> list[NotificationEvent]:
    """The batch's events: those it holds, or those its source reads now."""
    if batch.source:
        if batch.source not in settings.NOTICE_SOURCES:
            raise ValueError(f"{batch.source!r} is not in settings.NOTICE_SOURCES")
        read = cast(Callable[..., Sequence[NotificationEvent]], import_string(batch.source))
        return list(read(**batch.arguments))
    return [
        NotificationEvent(**{**values, "user_ids": tuple(values["user_ids"])})
        for values in batch.events
    ]


def notifications_record(events: Sequence[NotificationEvent]) -> int:
    """Records a notification per event and recipient in the caller's transaction, as each
    recipient's preference for the kind says (nothing for one who turned both off), at most one
    per user and event key; mails are handed to a worker after the commit. Returns how many
    rows were written now."""
    if not events:
        return 0
    _kinds_check(events)
    members = _organization_recipients(events)
    recipients: list[tuple[NotificationEvent, list[int]]] = []
    for event in events:
        users = list(event.user_ids)
        if event.organization_id is not None and not users:
            users = members.get((event.organization_id, event.admins_only), [])
        recipients.append((event, sorted(set(users))))
    rows = _notification_rows(events, recipients)
    if not rows:
        return 0
    # ON CONFLICT DO NOTHING: an event told before keeps its row (read or not, mailed or not).
    written = Notification.objects.bulk_create(rows, ignore_conflicts=True)
    if any(row.email_state == Notification.EmailState.PENDING for row in rows):
        pending = list(
            Notification.objects.filter(
                key__in={row.key for row in rows},
                user_id__in={row.user_id for row in rows},
                email_state=Notification.EmailState.PENDING,
            ).values_list("pk", flat=True)
        )
        if pending:
            enqueue_after_commit(
                "notifications.tasks.notification_emails_send_task",
                pending,
                recovered_by="the periodic sweep of unmailed notifications",
            )
    return len(written)


def _notification_rows(
    events: Sequence[NotificationEvent], recipients: list[tuple[NotificationEvent, list[int]]]
) -> list[Notification]:
    """A row per event and active recipient, shown and mailed as the recipient's preference
    for the kind says (both, by default); none for a recipient who turned both off."""
    every_user = {user_id for _, users in recipients for user_id in users}
    if not every_user:
        return []
    preferences = selectors.preferences_of_users(every_user, {e.kind for e in events})
    addresses = dict(
        User.objects.filter(pk__in=every_user, is_active=True).values_list("pk", "email")
    )
    rows = []
    for event, users in recipients:
        for user_id in users:
            if user_id not in addresses:
                continue  # deactivated
            preference = preferences.get((user_id, event.kind))
            in_site = preference.in_site if preference else True
            by_email = preference.by_email if preference else True
            mailed = by_email and event.is_mailed_here and bool(addresses[user_id])
            if not in_site and not mailed:
                continue
            rows.append(
                Notification(
                    user_id=user_id,
                    organization_id=event.organization_id,
                    kind=event.kind,
                    key=event.key[:200],
                    title=event.title[:200],
                    body=event.body,
                    link=event.link[:500],
                    is_shown=in_site,
                    email_state=(
                        Notification.EmailState.PENDING if mailed else Notification.EmailState.NONE
                    ),
                )
            )
    return rows


def notification_emails_send(notification_ids: Iterable[int]) -> int:
    """Mails each pending notification once: marked `sent` under its row lock in the
    transaction that sends it (a failed send rolls the mark back for the retry; a second task
    with the same ids finds nothing pending). Returns how many mails went."""
    sent = 0
    for notification_id in notification_ids:
        with transaction.atomic():
            notification = (
                Notification.objects.select_for_update()
                .select_related("user")
                .filter(pk=notification_id, email_state=Notification.EmailState.PENDING)
                .first()
            )
            if notification is None:
                continue
            status_move(notification, Notification.EmailState.SENT, field="email_state")
            notification.emailed_at = timezone.now()
            notification.save(update_fields=["email_state", "emailed_at", "updated_at"])
            if not notification.user.email:
                continue
            context = {"notification": notification, "site_url": settings.SITE_URL}
            send_mail(
                subject=notification.title,
                message=render_to_string("notifications/email/notification.txt", context),
                from_email=None,
                recipient_list=[notification.user.email],
            )
            sent += 1
    return sent


@transaction.atomic
def notification_mark_read(*, user: User, notification: Notification) -> Notification:
    """Marks one of the user's notifications read (already read: unchanged)."""
    if notification.user_id != user.pk:
        raise ValueError("a notification is marked read only by its user")
    if notification.read_at is None:
        notification.read_at = timezone.now()
        notification.save(update_fields=["read_at", "updated_at"])
    return notification


@transaction.atomic
def notifications_mark_all_read(*, user: User) -> int:
    """Marks every unread notification of the user read; returns how many."""
    return Notification.objects.filter(user=user, is_shown=True, read_at__isnull=True).update(
        read_at=timezone.now(), updated_at=timezone.now()
    )


def _flag(value: Any, kind: str, name: str) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(fields={f"{kind}.{name}": ["true or false."]})
    return value


@transaction.atomic
def notification_preferences_update(
    *, user: User, changes: dict[str, dict[str, Any]]
) -> list[selectors.Preference]:
    """Sets the user's choices per kind (`{kind: {"in_site": bool, "by_email": bool}}`, either
    flag may be left out). An unknown kind or a flag that is not a boolean is refused whole,
    before anything is written. Returns every kind's choice."""
    unknown = sorted(set(changes) - set(Kind.values))
    if unknown:
        raise ValidationFailed(fields={kind: ["Not a kind of notification."] for kind in unknown})
    cleaned: dict[str, dict[str, bool]] = {}
    for kind, flags in changes.items():
        if not isinstance(flags, dict) or set(flags) - {"in_site", "by_email"}:
            raise ValidationFailed(
                fields={kind: ['An object with "in_site" and/or "by_email" booleans.']}
            )
        cleaned[kind] = {name: _flag(value, kind, name) for name, value in flags.items()}
    for kind, flags in cleaned.items():
        preference, _ = NotificationPreference.objects.select_for_update().get_or_create(
            user=user, kind=kind
        )
        for name, value in flags.items():
            setattr(preference, name, value)
        preference.save()
    return selectors.preferences_for_user(user)
