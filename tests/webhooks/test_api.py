"""The webhook endpoints' API: admins only (members 403, outsiders 404), the secret shown
once, the outbound rules at registration (400 `address_not_allowed`, nothing written), the
delivery log and redelivery."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.conftest import client_for
from tests.webhooks.receiver import Receiver, readme_verify_signature, receiver_running
from webhooks import services
from webhooks.models import WebhookDelivery, WebhookEndpoint


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiver_running() as running:
        yield running


def base(team: Any) -> str:
    return f"/api/v1/organizations/{team.organization.uuid}/webhook-endpoints/"


def create(client: APIClient, team: Any, headers: dict[str, str] | None = None, **body: Any) -> Any:
    return client.post(
        base(team),
        {"url": body.pop("url", "http://127.0.0.1:9/hook"), "events": ["job.ended"], **body},
        format="json",
        **(headers or {}),
    )


@pytest.mark.django_db
def test_an_admin_registers_an_endpoint_and_sees_its_secret_only_then(team):
    admin = client_for(team.admin)

    made = create(admin, team, {"HTTP_IDEMPOTENCY_KEY": "k1"}, description="CI")
    again = admin.post(
        base(team),
        {"url": "http://127.0.0.1:9/hook", "events": ["job.ended"], "description": "CI"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )

    assert made.status_code == 201, made.json()
    body = made.json()
    assert body["secret"].startswith("whsec_") and len(body["secret"]) > 40
    assert {k: body[k] for k in ("url", "events", "description", "enabled")} == {
        "url": "http://127.0.0.1:9/hook",
        "events": ["job.ended"],
        "description": "CI",
        "enabled": True,
    }
    assert again.status_code == 201 and again.json()["id"] == body["id"]
    assert WebhookEndpoint.objects.count() == 1
    listed = admin.get(base(team)).json()
    assert listed["count"] == 1 and "secret" not in listed["results"][0]
    one = admin.get(f"{base(team)}{body['id']}/").json()
    assert "secret" not in one and one["id"] == body["id"]
    # At rest the secret is encrypted.
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM webhooks_webhookendpoint")
        assert body["secret"] not in cursor.fetchone()[0]


@pytest.mark.django_db
def test_members_are_refused_and_outsiders_do_not_see_the_endpoints(team):
    endpoint = services.endpoint_create(
        organization=team.organization, url="http://127.0.0.1:9/", events=["job.ended"]
    )
    detail = f"{base(team)}{endpoint.uuid}/"
    requests = [
        ("get", base(team)),
        ("post", base(team)),
        ("get", detail),
        ("patch", detail),
        ("delete", detail),
        ("post", f"{detail}rotate-secret/"),
        ("get", f"{detail}deliveries/"),
    ]
    for who, expected in ((team.member, 403), (team.outsider, 404)):
        client = client_for(who)
        for method, url in requests:
            answer = getattr(client, method)(url, {"url": "http://127.0.0.1:9/"}, format="json")
            assert answer.status_code == expected, (who, method, url)
            assert answer.json()["code"] == (
                "permission_denied" if expected == 403 else "not_found"
            )
    assert APIClient().get(base(team)).status_code == 401
    # Another organization's admin asking through their own organization: 404.
    own = team.outsider.memberships.get().organization.uuid
    other = f"/api/v1/organizations/{own}/webhook-endpoints/{endpoint.uuid}/"
    assert client_for(team.outsider).get(other).status_code == 404
    endpoint.refresh_from_db()
    assert endpoint.url == "http://127.0.0.1:9/" and WebhookEndpoint.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", ["http://10.1.2.3/hook", "https://169.254.169.254/latest", "http://localhost:8000/"]
)
def test_an_address_the_platform_does_not_connect_to_is_refused_at_registration(
    team, settings, url
):
    settings.WEBHOOK_ALLOWED_NETWORKS = []

    answer = create(client_for(team.admin), team, url=url)

    assert answer.status_code == 400
    assert answer.json()["code"] == "address_not_allowed"
    assert "url" in answer.json()["extra"]["fields"]
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.org/"}, "url"),
        ({"url": "http://user:pw@127.0.0.1/"}, "url"),
        ({"events": []}, "events"),
        ({"events": ["job.started"]}, "events"),
    ],
)
def test_bad_input_is_400_and_writes_nothing(team, body, field):
    answer = create(client_for(team.admin), team, **body)

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert any(key.startswith(field) for key in answer.json()["extra"]["fields"])
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.django_db
def test_update_rotate_and_delete(team, settings):
    admin = client_for(team.admin)
    made = create(admin, team).json()
    detail = f"{base(team)}{made['id']}/"

    changed = admin.patch(
        detail, {"events": ["top_up.failed", "payout.paid"], "enabled": False}, format="json"
    )
    rotated = admin.post(f"{detail}rotate-secret/")
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    refused = admin.patch(detail, {"url": "http://127.0.0.2/"}, format="json")

    assert changed.status_code == 200
    assert changed.json()["events"] == ["payout.paid", "top_up.failed"]
    assert changed.json()["enabled"] is False
    assert rotated.status_code == 200
    assert (
        rotated.json()["secret"].startswith("whsec_") and rotated.json()["secret"] != made["secret"]
    )
    assert WebhookEndpoint.objects.get().secret == rotated.json()["secret"]
    assert refused.status_code == 400 and refused.json()["code"] == "address_not_allowed"
    assert WebhookEndpoint.objects.get().url == "http://127.0.0.1:9/hook"
    assert admin.delete(detail).status_code == 204
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.django_db
def test_the_delivery_log_and_a_redelivery(team, receiver, settings):
    admin = client_for(team.admin)
    made = create(admin, team, url=receiver.url).json()
    endpoint = WebhookEndpoint.objects.get()
    for n in range(3):
        services.event_record(
            organization_id=team.organization.pk, type="job.ended", object_key=f"job:{n}", data={}
        )
    first = WebhookDelivery.objects.order_by("pk").first()
    assert services.delivery_attempt(delivery_id=first.pk) == "delivered"
    log_url = f"{base(team)}{made['id']}/deliveries/"

    with CaptureQueriesContext(connection) as queries:
        log = admin.get(log_url)

    assert log.status_code == 200
    assert log.json()["count"] == 3
    assert len(queries) <= 8  # no query per delivery
    newest_first = log.json()["results"]
    assert newest_first[-1]["status"] == "delivered" and newest_first[-1]["last_status_code"] == 200
    assert newest_first[-1]["event_id"].startswith("evt_")
    assert newest_first[0]["status"] == "pending" and newest_first[0]["type"] == "job.ended"

    redelivered = admin.post(f"{log_url}{first.uuid}/redeliver/")

    assert redelivered.status_code == 202
    assert redelivered.json()["status"] == "pending"
    assert services.delivery_attempt(delivery_id=first.pk) == "delivered"
    assert len(receiver.received) == 2
    assert receiver.received[0].body == receiver.received[1].body
    verify = readme_verify_signature()
    assert verify(
        receiver.received[1].body,
        receiver.received[1].headers["ComputeShare-Signature"],
        endpoint.secret,
    )
    assert (
        admin.post(f"{log_url}00000000-0000-0000-0000-000000000000/redeliver/").status_code == 404
    )
