"""Deliveries to a real receiver on loopback: signed as the README says (checked with the
README's own snippet), retried after 500s and time-outs, never sent again once delivered (also
with workers racing), in order per object, only to allowed addresses; and events recorded only
with the change that causes them."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from tests.conftest import wait_for
from tests.webhooks.receiver import Receiver, readme_verify_signature, receiver_running
from webhooks import services
from webhooks.models import EventType, WebhookDelivery, WebhookEndpoint, WebhookEvent

verify_signature = readme_verify_signature()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiver_running() as running:
        yield running


@pytest.fixture
def quick(settings: Any) -> Any:
    settings.WEBHOOK_TIMEOUT_SECONDS = 0.5
    settings.WEBHOOK_RETRY_BASE_SECONDS = 0.01
    settings.WEBHOOK_RETRY_MAX_INTERVAL_SECONDS = 0.05
    return settings


@pytest.fixture
def endpoint(team: Any, receiver: Receiver, quick: Any) -> WebhookEndpoint:
    return services.endpoint_create(
        organization=team.organization, url=receiver.url, events=EventType.values
    )


def record(endpoint: WebhookEndpoint, key: str = "job:1", **data: Any) -> WebhookDelivery:
    with transaction.atomic():
        services.event_record(
            organization_id=endpoint.organization_id,
            type="job.ended",
            object_key=key,
            data=data or {"state": "completed"},
        )
    return WebhookDelivery.objects.filter(endpoint=endpoint).order_by("-pk").first()  # type: ignore[return-value]


def attempt_when_due(delivery: WebhookDelivery) -> str:
    delivery.refresh_from_db()
    if delivery.next_attempt_at is not None:
        time.sleep(max(0.0, (delivery.next_attempt_at - _now()).total_seconds()) + 0.01)
    return services.delivery_attempt(delivery_id=delivery.pk)


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


@pytest.mark.django_db
def test_a_delivery_is_signed_as_the_readme_says_and_its_snippet_verifies_it(endpoint, receiver):
    delivery = record(endpoint, "job:42", state="completed", cost="1.250000")

    assert services.delivery_attempt(delivery_id=delivery.pk) == "delivered"

    [request] = receiver.received
    assert request.path == "/hooks/computeshare?source=test"
    assert request.headers["Host"] == f"127.0.0.1:{receiver.port}"
    assert request.headers["Content-Type"] == "application/json"
    header = request.headers["ComputeShare-Signature"]
    assert verify_signature(request.body, header, endpoint.secret) is True
    body = json.loads(request.body)
    event = WebhookEvent.objects.get()
    assert body == {
        "id": f"evt_{event.uuid.hex}",
        "type": "job.ended",
        "created": int(event.created_at.timestamp()),
        "data": {"state": "completed", "cost": "1.250000"},
    }
    assert request.headers["ComputeShare-Event-Id"] == body["id"]
    assert endpoint.secret.startswith("whsec_")
    # The snippet refuses a changed body, another secret, and a stale or future timestamp.
    assert verify_signature(request.body + b" ", header, endpoint.secret) is False
    assert verify_signature(request.body, header, "whsec_other") is False
    old = int(header.split(",")[0][2:]) - 301
    stale = services.sending.signature_header(endpoint.secret, request.body, old)
    assert verify_signature(request.body, stale, endpoint.secret) is False
    assert verify_signature(request.body, "v1=deadbeef", endpoint.secret) is False
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempt_count, delivery.last_status_code) == (
        "delivered",
        1,
        200,
    )
    assert delivery.delivered_at is not None and delivery.next_attempt_at is None


@pytest.mark.django_db
def test_a_500_and_a_time_out_are_retried_with_the_same_event_and_then_never_sent_again(
    endpoint, receiver
):
    receiver.answers[:] = [500, 1.5, 200]
    delivery = record(endpoint)

    outcomes = [attempt_when_due(delivery) for _ in range(3)]

    assert outcomes == ["retry", "retry", "delivered"]
    assert len(receiver.received) == 3
    assert len(set(receiver.bodies())) == 1  # the same bytes each time
    for request in receiver.received:
        assert verify_signature(
            request.body, request.headers["ComputeShare-Signature"], endpoint.secret
        )
    delivery.refresh_from_db()
    assert delivery.status == "delivered" and delivery.attempt_count == 3
    # Nothing more goes out for it, however often a worker or the sweep is asked.
    assert services.delivery_attempt(delivery_id=delivery.pk) == "skipped"
    assert services.deliveries_due() == []
    assert len(receiver.received) == 3


@pytest.mark.django_db
def test_what_the_log_keeps_of_a_failure_and_the_backoff_grows(endpoint, receiver, quick):
    quick.WEBHOOK_RETRY_BASE_SECONDS = 60
    quick.WEBHOOK_RETRY_MAX_INTERVAL_SECONDS = 100
    receiver.answers[:] = [503]
    delivery = record(endpoint)

    assert services.delivery_attempt(delivery_id=delivery.pk) == "retry"

    delivery.refresh_from_db()
    assert delivery.last_status_code == 503
    assert delivery.last_error == "answered 503"
    assert len(delivery.last_response_excerpt) == 500  # of the 2000 bytes it answered
    wait = (delivery.next_attempt_at - delivery.last_attempt_at).total_seconds()
    assert 59 <= wait <= 61
    assert [services.retry_delay(n).total_seconds() for n in (1, 2, 3)] == [60, 100, 100]
    # Not due yet: neither a worker nor the sweep sends it.
    assert services.delivery_attempt(delivery_id=delivery.pk) == "skipped"
    assert services.deliveries_due() == []


@pytest.mark.django_db
def test_a_delivery_past_its_retry_window_is_failed(endpoint, receiver, quick):
    quick.WEBHOOK_RETRY_WINDOW_SECONDS = 0
    receiver.answers[:] = [500]
    delivery = record(endpoint)

    assert services.delivery_attempt(delivery_id=delivery.pk) == "failed"

    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.next_attempt_at is None
    assert services.delivery_attempt(delivery_id=delivery.pk) == "skipped"
    assert len(receiver.received) == 1


@pytest.mark.django_db
def test_a_later_event_of_the_same_object_waits_for_the_earlier_one(endpoint, receiver):
    receiver.answers[:] = [500]
    first = record(endpoint, "job:7", step=1)
    second = record(endpoint, "job:7", step=2)
    other = record(endpoint, "job:8", step=1)

    assert services.delivery_attempt(delivery_id=first.pk) == "retry"
    # The second event of job 7 waits; job 8's goes.
    assert services.delivery_attempt(delivery_id=second.pk) == "skipped"
    assert services.delivery_attempt(delivery_id=other.pk) == "delivered"
    assert attempt_when_due(first) == "delivered"
    assert services.delivery_attempt(delivery_id=second.pk) == "delivered"

    steps = [(json.loads(body)["data"]["step"]) for body in receiver.bodies()]
    assert steps == [1, 1, 1, 2]  # job 7 (500), job 8, job 7 again, then job 7's second


@pytest.mark.django_db
def test_an_event_of_a_rolled_back_change_is_never_recorded(endpoint, receiver):
    with pytest.raises(RuntimeError), transaction.atomic():
        services.event_record(
            organization_id=endpoint.organization_id, type="job.ended", object_key="job:1", data={}
        )
        raise RuntimeError("the change fails")

    assert WebhookEvent.objects.count() == 0 and WebhookDelivery.objects.count() == 0


@pytest.mark.django_db
def test_only_enabled_endpoints_that_want_the_type_get_deliveries(team, receiver, quick):
    wants = services.endpoint_create(
        organization=team.organization, url=receiver.url, events=["job.ended"]
    )
    services.endpoint_create(
        organization=team.organization, url=receiver.url, events=["top_up.failed"]
    )
    services.endpoint_create(
        organization=team.organization, url=receiver.url, events=["job.ended"], enabled=False
    )

    record(wants)
    services.event_record(
        organization_id=team.organization.pk,
        type="job.ended",
        object_key="job:1",
        data={},
        once=True,
    )
    services.event_record(
        organization_id=team.organization.pk,
        type="job.ended",
        object_key="job:1",
        data={},
        once=True,
    )

    assert list(WebhookDelivery.objects.values_list("endpoint_id", flat=True)) == [wants.pk] * 2
    assert WebhookEvent.objects.count() == 2  # the second `once` event of job 1 was not


@pytest.mark.django_db
def test_a_denied_address_is_not_connected_to_at_delivery(endpoint, receiver, quick):
    delivery = record(endpoint)
    quick.WEBHOOK_ALLOWED_NETWORKS = []  # loopback is denied again

    assert services.delivery_attempt(delivery_id=delivery.pk) == "retry"

    delivery.refresh_from_db()
    assert delivery.last_status_code is None
    assert "127.0.0.1" in delivery.last_error and "not sent" in delivery.last_error
    assert receiver.received == []


@pytest.mark.django_db
def test_a_redirect_is_not_followed(team, quick):
    with receiver_running() as redirecting:
        redirecting.answers[:] = [302]
        endpoint = services.endpoint_create(
            organization=team.organization, url=redirecting.url, events=["job.ended"]
        )
        delivery = record(endpoint)

        assert services.delivery_attempt(delivery_id=delivery.pk) == "retry"

        assert len(redirecting.received) == 1
        delivery.refresh_from_db()
        assert delivery.last_status_code == 302


@pytest.mark.django_db(transaction=True)
def test_workers_racing_send_each_event_once(team, receiver, quick):
    services.endpoint_create(organization=team.organization, url=receiver.url, events=["job.ended"])
    receiver.answers[:] = [0.1] * 12  # each answer takes a while: the workers overlap
    with transaction.atomic():
        services.events_record(
            [
                services.Event(team.organization.pk, "job.ended", f"job:{n}", {"n": n})
                for n in range(12)
            ]
        )
    ids = list(WebhookDelivery.objects.order_by("pk").values_list("pk", flat=True))
    start = threading.Barrier(4)
    outcomes: list[dict[str, int]] = []

    def worker(order: list[int]) -> None:
        from django.db import connection

        start.wait()
        try:
            outcomes.append(services.deliveries_send(order))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=worker, args=(ids if n % 2 else ids[::-1],)) for n in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    sent = sorted(json.loads(body)["data"]["n"] for body in receiver.bodies())
    assert sent == list(range(12))
    # The session's Celery worker, when it runs, races too (the commit handed it the batch).
    assert sum(outcome.get("delivered", 0) for outcome in outcomes) <= 12
    assert {kind for outcome in outcomes for kind in outcome} <= {"delivered", "skipped"}
    # A delivery the Celery worker leased may still be writing its answer when the threads end.
    wait_for(
        lambda: set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"},
        timeout=10,
    )
    assert set(WebhookDelivery.objects.values_list("attempt_count", flat=True)) == {1}
    WebhookEndpoint.objects.all().delete()


@pytest.mark.django_db
def test_a_name_is_resolved_and_checked_once_and_kept_in_the_host_header(team, receiver, quick):
    # `localhost` resolves to loopback, allowed in the tests: the connection goes to the checked
    # address, and the request still names the host it was given.
    endpoint = services.endpoint_create(
        organization=team.organization,
        url=f"http://localhost:{receiver.port}/hook",
        events=["job.ended"],
    )
    delivery = record(endpoint)

    assert services.delivery_attempt(delivery_id=delivery.pk) == "delivered"

    [request] = receiver.received
    assert request.headers["Host"] == f"localhost:{receiver.port}"
    assert request.path == "/hook"
