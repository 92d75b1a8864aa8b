"""Every write of the webhooks app: endpoints, the outbox, and the delivery of each event.

Other apps call `event_record` (or `events_record` for many at once) inside the transaction of
the change they report. Delivery runs after the commit (a Celery task per batch, and a
periodic sweep that picks up retries that are due and anything whose wake-up message was
lost): a delivery is claimed under a row lock (`skip_locked`) and leased, posted outside any
transaction, and its answer recorded under the lock again. A delivered one is never sent again;
a later event of the same object waits for the earlier one to be delivered or given up."""

from __future__ import annotations

import json
import logging
import secrets
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from computeshare.errors import AddressNotAllowed, ValidationFailed
from computeshare.outbound import AddressDenied, OutboundPolicy, host_name_problem
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move
from hpc.batches import batched
from webhooks import sending
from webhooks.models import EventType, WebhookDelivery, WebhookEndpoint, WebhookEvent

logger = logging.getLogger(__name__)
SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix of generated secrets, not a secret
# A task takes this many deliveries at most: one slow endpoint holds up only its batch.
TASK_BATCH = 20


def outbound_policy() -> OutboundPolicy:
    """The outbound rules with `WEBHOOK_ALLOWED_NETWORKS` (not the clusters' networks: an
    operator who lets owners' clusters sit on the private network need not let webhooks in)."""
    return OutboundPolicy.from_networks(settings.WEBHOOK_ALLOWED_NETWORKS)


# --- Events ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """An event to record: what happened (`type`), to which organization's object
    (`object_key`, e.g. `job:<uuid>`), with what the receiver is told (`data`, JSON-able)."""

    organization_id: int
    type: str
    object_key: str
    data: dict[str, Any]
    # At most one event of this type per organization and object (`allocation.starting`).
    once: bool = False


def organizations_listening(organization_ids: Iterable[int], type: str) -> set[int]:
    """Which of these organizations have an enabled endpoint that wants `type`: a caller about
    to build many events (an auction's bids) asks first and builds only theirs."""
    # Filtered here, not with a JSON `contains` lookup, which SQLite (the demo) does not have.
    found = WebhookEndpoint.objects.filter(
        organization_id__in=set(organization_ids), is_enabled=True
    ).values_list("organization_id", "events")
    return {organization_id for organization_id, events in found if type in events}


def event_record(
    *, organization_id: int, type: str, object_key: str, data: dict[str, Any], once: bool = False
) -> None:
    """Records one event in the current transaction (see `events_record`)."""
    events_record([Event(organization_id, type, object_key, data, once)])


def events_record(events: Sequence[Event]) -> int:
    """Records events in the outbox and a delivery for each enabled endpoint of the event's
    organization that wants its type, in the caller's transaction: nothing is recorded for a
    change that rolls back, and nothing committed is lost. An organization without such an
    endpoint gets no row at all (one query for the whole batch). The deliveries are handed to
    a worker after the commit. Returns how many deliveries were made."""
    if not events:
        return 0
    for event in events:
        if event.type not in EventType.values:
            raise ValueError(f"unknown webhook event type {event.type!r}")
    wanted = _targets(events)
    if not wanted:
        return 0
    now = timezone.now()
    rows = [
        WebhookEvent(
            uuid=uuid.uuid4(),
            created_at=now,
            organization_id=event.organization_id,
            type=event.type,
            object_key=event.object_key[:100],
            data=json.loads(json.dumps(event.data, cls=DjangoJSONEncoder)),
            is_once=event.once,
        )
        for event, _ in wanted
    ]
    recorded = _events_insert(list(zip(rows, (targets for _, targets in wanted), strict=True)))
    retry_until = now + timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS)
    deliveries = WebhookDelivery.objects.bulk_create(
        [
            WebhookDelivery(
                endpoint=endpoint,
                event=row,
                object_key=row.object_key,
                retry_until=retry_until,
                next_attempt_at=now,
            )
            for row, targets in recorded
            for endpoint in targets
        ]
    )
    _hand_over([delivery.pk for delivery in deliveries])
    return len(deliveries)


def _targets(events: Sequence[Event]) -> list[tuple[Event, list[WebhookEndpoint]]]:
    """Each event with the enabled endpoints of its organization that want its type, in one
    query for the whole batch; events nobody wants are left out."""
    endpoints: dict[int, list[WebhookEndpoint]] = defaultdict(list)
    for endpoint in WebhookEndpoint.objects.filter(
        organization_id__in={event.organization_id for event in events}, is_enabled=True
    ).only("pk", "organization_id", "events"):
        endpoints[endpoint.organization_id].append(endpoint)
    wanted = [
        (event, [each for each in endpoints[event.organization_id] if event.type in each.events])
        for event in events
    ]
    return [(event, targets) for event, targets in wanted if targets]


Targeted = tuple[WebhookEvent, list[WebhookEndpoint]]


def _events_insert(rows: list[Targeted]) -> list[Targeted]:
    """Inserts the events in the order given (deliveries of one object go out in the outbox's
    order): runs of plain events in one statement, each `once` event alone in a savepoint,
    left out when it was recorded before. Returns those inserted."""
    recorded: list[Targeted] = []
    run: list[Targeted] = []
    for row, targets in rows:
        if not row.is_once:
            run.append((row, targets))
            continue
        WebhookEvent.objects.bulk_create([each for each, _ in run])
        recorded += run
        run = []
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError:
            continue  # recorded before: once per object
        recorded.append((row, targets))
    WebhookEvent.objects.bulk_create([each for each, _ in run])
    return recorded + run


def _hand_over(delivery_ids: Sequence[int]) -> None:
    for batch in batched(delivery_ids, TASK_BATCH):
        enqueue_after_commit(
            "webhooks.tasks.webhook_deliveries_send_task",
            list(batch),
            recovered_by="webhooks.tasks.webhook_deliveries_due_task sends it",
        )


# --- Endpoints ---------------------------------------------------------------------------------


def _clean_url(url: Any) -> str:
    text = str(url or "").strip()
    try:
        _, host, port, _ = sending.url_parts(text)
    except ValueError:
        raise ValidationFailed(
            fields={"url": ["An http:// or https:// URL with a host."]}
        ) from None
    if problem := host_name_problem(host):
        raise ValidationFailed(fields={"url": [problem]})
    if "@" in text.split("//", 1)[1].split("/", 1)[0]:
        raise ValidationFailed(fields={"url": ["No user name or password in the URL."]})
    if len(text) > 2000:
        raise ValidationFailed(fields={"url": ["At most 2000 characters."]})
    try:
        outbound_policy().resolve(host, port)
    except AddressDenied as error:
        raise AddressNotAllowed(
            fields={
                "url": [
                    f"{host} resolves to {error.address}, an address the platform does not "
                    "connect to (loopback, private, link-local or reserved)."
                ]
            }
        ) from error
    except OSError:
        pass  # a name that does not resolve now: every delivery resolves and checks it again
    return text


def _clean_events(events: Any) -> list[str]:
    if not isinstance(events, list | tuple) or not events:
        raise ValidationFailed(fields={"events": ["A non-empty list of event types."]})
    unknown = [str(each) for each in events if each not in EventType.values]
    if unknown:
        raise ValidationFailed(
            fields={
                "events": [
                    f"Unknown event types: {', '.join(unknown)}. "
                    f"Known: {', '.join(EventType.values)}."
                ]
            }
        )
    return sorted(set(events))


def _new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


@transaction.atomic
def endpoint_create(
    *, organization: Any, url: Any, events: Any, description: str = "", enabled: bool = True
) -> WebhookEndpoint:
    """A new endpoint with a fresh secret (readable on the returned object, and only ever
    shown then). Its address must pass the outbound rules."""
    return WebhookEndpoint.objects.create(
        organization=organization,
        url=_clean_url(url),
        events=_clean_events(events),
        description=str(description or "")[:500],
        is_enabled=bool(enabled),
        secret=_new_secret(),
    )


@transaction.atomic
def endpoint_update(*, endpoint: WebhookEndpoint, **changes: Any) -> WebhookEndpoint:
    """Changes `url`, `events`, `description` or `enabled`; a new URL is checked again."""
    locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    if "url" in changes:
        locked.url = _clean_url(changes["url"])
    if "events" in changes:
        locked.events = _clean_events(changes["events"])
    if "description" in changes:
        locked.description = str(changes["description"] or "")[:500]
    if "enabled" in changes:
        locked.is_enabled = bool(changes["enabled"])
    locked.save()
    return locked


def endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    """Deletes the endpoint and its delivery log; nothing more is sent to it."""
    WebhookEndpoint.objects.filter(pk=endpoint.pk).delete()


@transaction.atomic
def endpoint_secret_rotate(*, endpoint: WebhookEndpoint) -> WebhookEndpoint:
    """A new secret; every delivery from now on is signed with it, the old one at once
    forgotten."""
    locked = WebhookEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    locked.secret = _new_secret()
    locked.save(update_fields=["secret", "updated_at"])
    return locked


@transaction.atomic
def delivery_redeliver(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Sends the delivery's event again, now, with a fresh retry window: an admin's explicit
    request, whatever became of the earlier attempts (a delivered event is sent once more)."""
    locked = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
    now = timezone.now()
    status_move(locked, WebhookDelivery.Status.PENDING)
    locked.next_attempt_at = now
    locked.retry_until = now + timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS)
    locked.delivered_at = None
    locked.save()
    _hand_over([locked.pk])
    return locked


# --- Delivery ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claim:
    url: str
    secret: str
    body: bytes
    event_id: str
    is_enabled: bool


def event_body(event: WebhookEvent) -> bytes:
    """What is posted: `{"id", "type", "created", "data"}`, the same bytes at every attempt."""
    return json.dumps(
        {
            "id": event.public_id,
            "type": event.type,
            "created": int(event.created_at.timestamp()),
            "data": event.data,
        },
        separators=(",", ":"),
        sort_keys=True,
    ).encode()


def _lease_seconds() -> float:
    # Longer than any attempt can take (connect, send and read each wait at most the time-out).
    return 3 * float(settings.WEBHOOK_TIMEOUT_SECONDS) + 30


@transaction.atomic
def _claim(delivery_id: int, now: datetime) -> _Claim | None:
    delivery = (
        WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("endpoint", "event")
        .filter(pk=delivery_id, status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now)
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lte=now))
        .first()
    )
    if delivery is None:
        return None  # done, not due, or another worker has it
    earlier = WebhookDelivery.objects.filter(
        endpoint_id=delivery.endpoint_id,
        object_key=delivery.object_key,
        status=WebhookDelivery.Status.PENDING,
        event_id__lt=delivery.event_id,
    ).exists()
    if earlier:
        return None  # waits: the earlier one's end hands this one over
    delivery.leased_until = now + timedelta(seconds=_lease_seconds())
    delivery.save(update_fields=["leased_until", "updated_at"])
    return _Claim(
        url=delivery.endpoint.url,
        secret=delivery.endpoint.secret,
        body=event_body(delivery.event),
        event_id=delivery.event.public_id,
        is_enabled=delivery.endpoint.is_enabled,
    )


def retry_delay(attempt_count: int) -> timedelta:
    """Exponential: the base after the first failure, doubling, at most the cap."""
    base = float(settings.WEBHOOK_RETRY_BASE_SECONDS)
    cap = float(settings.WEBHOOK_RETRY_MAX_INTERVAL_SECONDS)
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempt_count - 1)))


@transaction.atomic
def _record(delivery_id: int, answer: sending.Answer) -> WebhookDelivery | None:
    delivery = (
        WebhookDelivery.objects.select_for_update(of=("self",)).filter(pk=delivery_id).first()
    )
    if delivery is None:
        return None  # its endpoint was deleted meanwhile
    now = timezone.now()
    delivery.attempt_count += 1
    delivery.last_attempt_at = now
    delivery.last_status_code = answer.status_code
    delivery.last_error = answer.error[:500]
    delivery.last_response_excerpt = answer.excerpt[:500]
    delivery.leased_until = None
    if delivery.status != WebhookDelivery.Status.PENDING:
        # Ended by another worker after this attempt's lease ran out: the attempt is recorded,
        # that end stands (an end moves only back to pending, by a redelivery).
        delivery.save()
        return delivery
    if answer.is_success:
        status_move(delivery, WebhookDelivery.Status.DELIVERED)
        delivery.delivered_at = now
        delivery.next_attempt_at = None
    else:
        if not answer.error:
            delivery.last_error = f"answered {answer.status_code}"
        retry_at = now + retry_delay(delivery.attempt_count)
        if retry_at > delivery.retry_until:
            status_move(delivery, WebhookDelivery.Status.FAILED)
            delivery.next_attempt_at = None
        else:
            delivery.next_attempt_at = retry_at
    delivery.save()
    if delivery.status == WebhookDelivery.Status.PENDING:
        _retry_enqueue(delivery)
    else:
        # The next event of the same object to the same endpoint no longer waits.
        following = (
            WebhookDelivery.objects.filter(
                endpoint_id=delivery.endpoint_id,
                object_key=delivery.object_key,
                status=WebhookDelivery.Status.PENDING,
                event_id__gt=delivery.event_id,
            )
            .order_by("event_id")
            .values_list("pk", flat=True)[:1]
        )
        _hand_over(list(following))
    return delivery


def _retry_enqueue(delivery: WebhookDelivery) -> None:
    """A retry due soon is sent with a countdown; a later one is left to the sweep (a message
    held by the broker for hours would outlive its visibility time-out)."""
    assert delivery.next_attempt_at is not None
    wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
    if wait > settings.WEBHOOK_COUNTDOWN_MAX_SECONDS:
        return
    enqueue_after_commit(
        "webhooks.tasks.webhook_deliveries_send_task",
        [delivery.pk],
        countdown=wait,
        recovered_by="the sweep sends it",
    )


def delivery_attempt(*, delivery_id: int) -> str:
    """One attempt at one delivery, if it is pending, due, not leased by another worker and
    not waiting for an earlier event of its object. Returns what happened: `skipped`,
    `delivered`, `retry` or `failed`. The POST happens outside any transaction."""
    claim = _claim(delivery_id, timezone.now())
    if claim is None:
        return "skipped"
    if not claim.is_enabled:
        answer = sending.Answer(None, error="not sent: the endpoint is disabled")
    else:
        answer = sending.post(
            url=claim.url,
            body=claim.body,
            secret=claim.secret,
            event_id=claim.event_id,
            policy=outbound_policy(),
            timeout=float(settings.WEBHOOK_TIMEOUT_SECONDS),
        )
    delivery = _record(delivery_id, answer)
    if delivery is None:
        return "skipped"
    if delivery.status == WebhookDelivery.Status.DELIVERED:
        return "delivered"
    return "retry" if delivery.status == WebhookDelivery.Status.PENDING else "failed"


def deliveries_send(delivery_ids: Iterable[int]) -> dict[str, int]:
    """Attempts each delivery in order; counts of what happened."""
    counts: dict[str, int] = defaultdict(int)
    for delivery_id in delivery_ids:
        counts[delivery_attempt(delivery_id=delivery_id)] += 1
    return dict(counts)


def deliveries_due(limit: int = 500) -> list[int]:
    """Pending deliveries whose attempt is due and that no live lease holds, oldest event
    first (what the sweep sends: retries, and anything whose wake-up message was lost)."""
    now = timezone.now()
    return list(
        WebhookDelivery.objects.filter(
            status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now
        )
        .filter(Q(leased_until__isnull=True) | Q(leased_until__lte=now))
        .order_by("event_id", "pk")
        .values_list("pk", flat=True)[:limit]
    )
