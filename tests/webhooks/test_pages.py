"""The organization's webhook pages: an admin adds an endpoint and sees its secret once, edits
it (the outbound rules apply), reads the delivery log, redelivers, makes a new secret and
removes it; members are refused, outsiders see nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from webhooks import services
from webhooks.models import WebhookDelivery, WebhookEndpoint


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_an_admin_manages_endpoints_from_the_pages(team, settings):
    admin = logged_in(team.admin)
    organization = team.organization
    listing = reverse("organization-webhooks", args=[organization.uuid])

    assert (
        "webhooks-link"
        in admin.get(reverse("organization-detail", args=[organization.uuid])).content.decode()
    )
    added = admin.post(
        listing,
        {
            "url": "http://127.0.0.1:9/hook",
            "description": "CI",
            "events": ["job.ended", "top_up.failed"],
            "enabled": "on",
        },
    )

    assert added.status_code == 200
    endpoint = WebhookEndpoint.objects.get()
    page = added.content.decode()
    assert endpoint.secret in page and "new-secret" in page
    assert added.headers["Cache-Control"].startswith("max-age=0")
    assert endpoint.events == ["job.ended", "top_up.failed"]
    # Shown once: the list and the endpoint's page never show it again.
    detail = reverse("organization-webhook", args=[organization.uuid, endpoint.uuid])
    assert endpoint.secret not in admin.get(listing).content.decode()
    services.event_record(
        organization_id=organization.pk, type="job.ended", object_key="job:1", data={}
    )
    shown = admin.get(detail).content.decode()
    assert endpoint.secret not in shown
    delivery = WebhookDelivery.objects.get()
    assert delivery.event.public_id in shown and "pending" in shown

    settings.WEBHOOK_ALLOWED_NETWORKS = []
    refused = admin.post(detail, {"url": "http://10.0.0.1/", "events": ["job.ended"]})
    assert refused.status_code == 400
    assert "an address the platform does not connect to" in refused.content.decode()
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    saved = admin.post(detail, {"url": "http://127.0.0.2/x", "events": ["bid.outbid"]})
    assert saved.status_code == 302
    endpoint.refresh_from_db()
    assert (endpoint.url, endpoint.events, endpoint.is_enabled) == (
        "http://127.0.0.2/x",
        ["bid.outbid"],
        False,
    )

    redeliver = reverse(
        "organization-webhook-redeliver", args=[organization.uuid, endpoint.uuid, delivery.uuid]
    )
    assert admin.post(redeliver).status_code == 302
    old_secret = endpoint.secret
    rotated = admin.post(
        reverse("organization-webhook-rotate-secret", args=[organization.uuid, endpoint.uuid])
    )
    endpoint.refresh_from_db()
    assert endpoint.secret != old_secret and endpoint.secret in rotated.content.decode()
    removed = admin.post(
        reverse("organization-webhook-remove", args=[organization.uuid, endpoint.uuid])
    )
    assert removed.status_code == 302
    assert WebhookEndpoint.objects.count() == 0


@pytest.mark.django_db
def test_members_are_refused_and_outsiders_see_nothing(team):
    endpoint = services.endpoint_create(
        organization=team.organization, url="http://127.0.0.1:9/", events=["job.ended"]
    )
    pages = [
        ("get", reverse("organization-webhooks", args=[team.organization.uuid])),
        ("post", reverse("organization-webhooks", args=[team.organization.uuid])),
        ("get", reverse("organization-webhook", args=[team.organization.uuid, endpoint.uuid])),
        (
            "post",
            reverse("organization-webhook-remove", args=[team.organization.uuid, endpoint.uuid]),
        ),
    ]
    for user, status in ((team.member, 403), (team.outsider, 404)):
        client = logged_in(user)
        for method, url in pages:
            assert getattr(client, method)(url).status_code == status, (user, method, url)
    assert (
        "webhooks-link"
        not in logged_in(team.member)
        .get(reverse("organization-detail", args=[team.organization.uuid]))
        .content.decode()
    )
    assert WebhookEndpoint.objects.count() == 1
