"""The payout endpoints: who may call them, a payout through the API with an Idempotency-Key,
the refusals with their codes and nothing written, and the OpenAPI schema."""

import datetime
from decimal import Decimal

import pytest
from django.test import Client
from rest_framework.test import APIClient

from billing.models import Payout, Transaction
from tests.billing.stripe_flows import connected_and_active, earn, stripe_events
from tests.billing.test_localstripe_server import WebhookReceiver
from tests.conftest import OrganizationWithPeople, client_for

__all__ = ["stripe_events"]

pytestmark = pytest.mark.django_db


def url(team: OrganizationWithPeople, tail: str) -> str:
    return f"/api/v1/organizations/{team.organization.uuid}/{tail}"


def written() -> tuple[int, int]:
    return Payout.objects.count(), Transaction.objects.filter(kind="payout").count()


@pytest.mark.parametrize(
    ("method", "tail"),
    [
        ("get", "payout-account/"),
        ("post", "payout-account/onboarding/"),
        ("get", "payouts/"),
        ("post", "payouts/"),
        ("get", "payouts/00000000-0000-0000-0000-000000000000/"),
    ],
)
@pytest.mark.parametrize(
    ("who", "status"), [("member", 403), ("outsider", 404), ("anonymous", 401)]
)
def test_only_the_organizations_admins_reach_payouts(team, method, tail, who, status):
    client = APIClient() if who == "anonymous" else client_for(getattr(team, who))

    answer = getattr(client, method)(url(team, tail), {}, format="json")

    assert answer.status_code == status
    assert written() == (0, 0)


def test_an_admin_connects_and_pays_out_through_the_api(
    client: Client, stripe_events: WebhookReceiver, settings, team
):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(0)
    api = client_for(team.admin)
    before = api.get(url(team, "payout-account/")).json()
    link = api.post(url(team, "payout-account/onboarding/"))
    refused = api.post(url(team, "payouts/"), {}, format="json")

    connected_and_active(client, stripe_events, team.organization, team.admin)
    earn(team.organization, "30.00")
    account = api.get(url(team, "payout-account/")).json()
    paid = api.post(
        url(team, "payouts/"), {"amount": "20.00"}, format="json", HTTP_IDEMPOTENCY_KEY="p1"
    )
    again = api.post(
        url(team, "payouts/"), {"amount": "20.00"}, format="json", HTTP_IDEMPOTENCY_KEY="p1"
    )
    reused = api.post(
        url(team, "payouts/"), {"amount": "1.00"}, format="json", HTTP_IDEMPOTENCY_KEY="p1"
    )
    too_much = api.post(url(team, "payouts/"), {"amount": "7.01"}, format="json")
    bad = api.post(url(team, "payouts/"), {"amount": 5}, format="json")
    listed = api.get(url(team, "payouts/")).json()

    assert before["connected_account"] is None
    assert before["payable"] == "0.000000"
    assert link.status_code == 200 and link.json()["url"].startswith("http://127.0.0.1:")
    assert (refused.status_code, refused.json()["code"]) == (409, "payouts_not_enabled")
    assert account["connected_account"]["status"] == "active"
    assert (account["payable"], account["held"]) == ("27.000000", "0.000000")
    assert paid.status_code == 201
    assert (paid.json()["status"], paid.json()["amount"]) == ("paid", "20.00")
    assert paid.json()["stripe_transfer"].startswith("tr_")
    assert again.json()["id"] == paid.json()["id"]
    assert (reused.status_code, reused.json()["code"]) == (409, "idempotency_key_reused")
    assert (too_much.status_code, too_much.json()["code"]) == (409, "amount_not_payable")
    assert too_much.json()["extra"]["payable"] == "7.00"
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid")
    assert [row["id"] for row in listed["results"]] == [paid.json()["id"]]
    assert api.get(url(team, f"payouts/{paid.json()['id']}/")).json()["amount"] == "20.00"
    assert written() == (1, 1)
    assert api.get(url(team, "payout-account/")).json()["payable"] == "7.000000"
    assert Decimal(account["earnings"]) == Decimal("27")


def test_the_schema_documents_the_payout_endpoints(client: Client):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = schema["paths"]

    organization = "/api/v1/organizations/{organization_id}/"
    assert set(paths[f"{organization}payouts/"]) == {"get", "post"}
    assert set(paths[f"{organization}payout-account/"]) == {"get"}
    assert set(paths[f"{organization}payout-account/onboarding/"]) == {"post"}
    assert set(paths[f"{organization}payouts/{{payout_id}}/"]) == {"get"}
