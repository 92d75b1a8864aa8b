"""Inputs the hostile-input suite (test_hostile_inputs.py) found answered with a 500; each is a
refusal now, and writes nothing."""

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from billing.models import StripeEvent, TopUp
from computeshare.models import User
from organizations.models import Membership, Organization
from tests.factories import ClusterFactory, MembershipFactory, PartitionFactory
from webhooks.models import WebhookEndpoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin() -> Membership:
    return MembershipFactory(role=Membership.Role.ADMIN)


def api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize(
    "body", [b"[" * 5_000 + b"]" * 5_000, b'{"name":' * 5_000 + b"1" + b"}" * 5_000]
)
def test_json_nested_past_the_recursion_limit_is_malformed(admin, body):
    answer = api(admin.user).post("/api/v1/organizations/", body, content_type="application/json")

    assert answer.status_code == 400
    assert answer.json()["code"] == "malformed_request"
    assert Organization.objects.count() == 1


def test_a_lone_surrogate_is_malformed_json(admin):
    answer = api(admin.user).post(
        "/api/v1/organizations/", b'{"name": "lab \\ud800"}', content_type="application/json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "malformed_request"
    assert Organization.objects.count() == 1


def test_surrogate_pairs_are_still_fine(admin):
    answer = api(admin.user).post(
        "/api/v1/organizations/", b'{"name": "lab \\ud83d\\ude80"}', content_type="application/json"
    )

    assert answer.status_code == 201, answer.json()
    assert answer.json()["name"] == "lab \U0001f680"


def test_a_top_up_idempotency_key_past_255_characters_is_refused(admin):
    answer = api(admin.user).post(
        f"/api/v1/organizations/{admin.organization.uuid}/top-ups/",
        {"amount": "10.00"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k" * 256,
    )

    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"] == {"Idempotency-Key": ["At most 255 characters."]}
    assert TopUp.objects.count() == 0


def test_a_tenant_account_named_with_a_nul_byte_is_not_found(admin):
    cluster = ClusterFactory(organization=admin.organization)
    path = f"/clusters/{cluster.uuid}/tenant-accounts/a%00b/scrub/"

    answer = api(admin.user).post(f"/api/v1{path}")
    page = Client()
    page.force_login(admin.user)
    page_answer = page.post(path)

    assert answer.status_code == 404 and answer.json()["code"] == "not_found"
    assert page_answer.status_code == 404


def test_django_refusals_under_the_api_are_in_the_api_shape(admin, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    client = api(admin.user)

    too_big = client.post("/api/v1/organizations/", {"name": "x" * 200}, format="json")
    unknown_host = client.get("/api/v1/me/", HTTP_HOST="evil.example")
    page = Client().get("/login/", HTTP_HOST="evil.example")

    for answer in (too_big, unknown_host):
        assert answer.status_code == 400
        assert answer.json() == {
            "detail": "The request is malformed.",
            "code": "malformed_request",
            "extra": {},
        }
    assert page.status_code == 400 and b"Bad Request (400)" in page.content
    assert Organization.objects.count() == 1


def test_an_offers_page_past_any_offset_postgresql_takes_is_not_found(admin):
    """The offers list reads a page's rows by OFFSET without counting first: a page number of
    2,000 digits was an OFFSET past PostgreSQL's bigint, a 500 before."""
    answer = api(admin.user).get("/api/v1/offers/", {"page": "9" * 2_000})

    assert answer.status_code == 404
    assert answer.json()["code"] == "not_found"


# --- Issue 29: the last 500s found from outside -------------------------------------------------


def test_a_stripe_webhook_body_that_is_not_utf8_is_refused_without_logging_in(settings):
    settings.STRIPE_WEBHOOK_SECRET = "whsec_test"
    answer = Client().post(
        "/api/v1/billing/stripe/webhook/",
        b'{"id": "evt_\xff\xfe"}',
        content_type="application/json",
        HTTP_STRIPE_SIGNATURE="t=1,v1=00",
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid_signature"
    assert StripeEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://a..b/", "Each part of a host name has 1 to 63 characters"),
        ("http://" + "a" * 70 + ".example/", "Each part of a host name has 1 to 63 characters"),
        ("http://" + "a." * 130 + "example/", "A host name has 1 to 253 characters."),
    ],
)
def test_a_webhook_url_whose_host_cannot_be_a_name_is_refused_on_post_patch_and_the_form(
    admin, settings, url, message
):
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    organization = admin.organization
    base = f"/api/v1/organizations/{organization.uuid}/webhook-endpoints/"
    client = api(admin.user)
    made = client.post(base, {"url": "http://127.0.0.1:9/", "events": ["job.ended"]}, format="json")
    assert made.status_code == 201
    endpoint = WebhookEndpoint.objects.get()

    posted = client.post(base, {"url": url, "events": ["job.ended"]}, format="json")
    patched = client.patch(f"{base}{endpoint.uuid}/", {"url": url}, format="json")
    page = Client()
    page.force_login(admin.user)
    formed = page.post(
        reverse("organization-webhooks", args=[organization.uuid]),
        {"url": url, "events": ["job.ended"], "enabled": "on"},
    )

    for answer in (posted, patched):
        assert answer.status_code == 400
        assert answer.json()["code"] == "invalid"
        assert message in answer.json()["extra"]["fields"]["url"][0]
    assert formed.status_code == 400 and message in formed.content.decode()
    assert list(WebhookEndpoint.objects.values_list("url", flat=True)) == ["http://127.0.0.1:9/"]


@pytest.mark.parametrize("start", ["9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z"])
def test_a_calendar_start_at_the_ends_of_time_is_refused(admin, start):
    partition = PartitionFactory(cluster=ClusterFactory(organization=admin.organization))

    answer = api(admin.user).get(
        f"/api/v1/clusters/{partition.cluster.uuid}/partitions/{partition.name}/calendar/",
        {"start": start, "hours": 840},
    )

    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"]["start"] == ["A time from 2000 to 2999."]


@pytest.mark.parametrize("month", ["9999-12", "3000-01", "1999-12"])
def test_an_efficiency_month_at_the_ends_of_time_is_refused_by_the_api_and_the_page(admin, month):
    organization = admin.organization

    answer = api(admin.user).get(
        f"/api/v1/organizations/{organization.uuid}/efficiency/", {"month": month}
    )
    page = Client()
    page.force_login(admin.user)
    shown = page.get(reverse("organization-efficiency", args=[organization.uuid]), {"month": month})

    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"]["month"] == ["A month from 2000 to 2999."]
    assert shown.status_code == 400
    assert "A month from 2000 to 2999." in shown.content.decode()
