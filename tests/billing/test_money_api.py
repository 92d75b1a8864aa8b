"""The money endpoints of docs/api.md: who may do what, refusals that change nothing, budgets,
ledger filters, earnings, and top-ups against the local Stripe server."""

import datetime
import time
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from billing import selectors, services
from billing.models import Budget, Entry, Hold, ReferenceKind, TopUp, Transaction
from tests.conftest import OrganizationWithPeople, client_for
from tests.factories import MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


def url(team: OrganizationWithPeople, tail: str = "") -> str:
    return f"/api/v1/organizations/{team.organization.uuid}/{tail}"


def ledger_state() -> tuple[int, int, int, int]:
    return (
        Transaction.objects.count(),
        Entry.objects.count(),
        Hold.objects.count(),
        TopUp.objects.count(),
    )


# --- Who may do what ---------------------------------------------------------------------------

ENDPOINTS = [
    ("get", "", {}, {"admin": 200, "member": 200}),
    ("get", "budget/", {}, {"admin": 200, "member": 200}),
    (
        "put",
        "budget/",
        {"monthly_limit": "100.00", "alert_thresholds": [50]},
        {"admin": 200, "member": 403},
    ),
    ("get", "top-ups/", {}, {"admin": 200, "member": 403}),
    ("post", "top-ups/", {"amount": "10.00"}, {"admin": 201, "member": 403}),
    ("get", "ledger/", {}, {"admin": 200, "member": 403}),
    ("get", "earnings/", {}, {"admin": 200, "member": 403}),
]


@pytest.mark.parametrize(("method", "tail", "body", "expected"), ENDPOINTS)
@pytest.mark.parametrize("who", ["admin", "member", "outsider", "anonymous"])
def test_authorization_matrix(team: OrganizationWithPeople, method, tail, body, expected, who):
    client = APIClient() if who == "anonymous" else client_for(getattr(team, who))
    before = ledger_state()

    answer = getattr(client, method)(url(team, tail), body, format="json")

    status = expected.get(who, 404 if who == "outsider" else 401)
    assert answer.status_code == status, answer.content
    if status >= 400:
        assert (
            answer.json()["code"]
            == {
                401: "not_authenticated",
                403: "permission_denied",
                404: "not_found",
            }[status]
        )
        assert ledger_state() == before
        assert not Budget.objects.exists()


def test_organization_detail_shows_wallet_and_budget(team: OrganizationWithPeople):
    services.wallet_credit(
        organization=team.organization, amount=Decimal("50"), idempotency_reference="credit"
    )
    services.hold_place(
        organization=team.organization, amount=Decimal("12.5"), reference_kind=ReferenceKind.BID
    )

    answer = client_for(team.member).get(url(team))

    assert answer.json()["wallet"] == {
        "available": "37.500000",
        "held": "12.500000",
        "currency": "USD",
    }
    assert answer.json()["budget"] == {
        "monthly_limit": None,
        "spent_this_month": "0.000000",
        "committed": "12.500000",
        "remaining": None,
        "alert_thresholds": [50, 80, 100],
        "currency": "USD",
    }


# --- Budgets -----------------------------------------------------------------------------------


def test_budget_update_then_a_hold_past_it_is_refused(team: OrganizationWithPeople):
    services.wallet_credit(
        organization=team.organization, amount=Decimal("500"), idempotency_reference="credit"
    )

    answer = client_for(team.admin).put(
        url(team, "budget/"),
        {"monthly_limit": "100.00", "alert_thresholds": [80, 50, 80]},
        format="json",
    )

    assert answer.status_code == 200
    assert answer.json()["monthly_limit"] == "100.00"
    assert answer.json()["alert_thresholds"] == [50, 80]
    services.hold_place(
        organization=team.organization, amount=Decimal("60"), reference_kind=ReferenceKind.BID
    )
    before = ledger_state()
    with pytest.raises(Exception) as refusal:
        services.hold_place(
            organization=team.organization,
            amount=Decimal("40.000001"),
            reference_kind=ReferenceKind.BID,
        )
    assert getattr(refusal.value, "code", None) == "budget_exceeded"
    assert getattr(refusal.value, "status_code", None) == 402
    assert ledger_state() == before
    assert selectors.wallet_get(team.organization).available == Decimal("440")


@pytest.mark.parametrize(
    "body",
    [
        {"monthly_limit": "-1", "alert_thresholds": [50]},
        {"monthly_limit": "10.001", "alert_thresholds": [50]},
        {"monthly_limit": "ten", "alert_thresholds": [50]},
        {"monthly_limit": "10", "alert_thresholds": [0]},
        {"monthly_limit": "10", "alert_thresholds": [101]},
        {"monthly_limit": "10", "alert_thresholds": "50"},
        {"monthly_limit": "10", "alert_thresholds": list(range(1, 13))},
        {"alert_thresholds": [50]},
    ],
)
def test_bad_budgets_are_refused_and_change_nothing(team: OrganizationWithPeople, body):
    answer = client_for(team.admin).put(url(team, "budget/"), body, format="json")

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert answer.json()["extra"]["fields"]
    assert not Budget.objects.exists()


def test_no_limit_is_null(team: OrganizationWithPeople):
    client = client_for(team.admin)
    client.put(url(team, "budget/"), {"monthly_limit": "5", "alert_thresholds": []}, format="json")

    answer = client.put(
        url(team, "budget/"), {"monthly_limit": None, "alert_thresholds": [100]}, format="json"
    )

    assert answer.json()["monthly_limit"] is None
    assert answer.json()["remaining"] is None


# --- Top-ups -----------------------------------------------------------------------------------


def test_top_up_creates_our_row_and_a_payment_intent(team: OrganizationWithPeople, localstripe):
    answer = client_for(team.admin).post(url(team, "top-ups/"), {"amount": "25.00"}, format="json")

    assert answer.status_code == 201
    body = answer.json()
    top_up = TopUp.objects.get()
    assert body["id"] == str(top_up.uuid)
    assert (body["amount"], body["currency"], body["status"]) == ("25.00", "USD", "pending")
    assert body["client_secret"].startswith(f"{top_up.payment_intent}_secret_")
    intent = localstripe.client().v1.payment_intents.retrieve(top_up.payment_intent)
    assert (intent.amount, intent.currency) == (2500, "usd")
    assert intent.metadata["top_up"] == str(top_up.uuid)
    # Nothing is credited before Stripe says so.
    assert Entry.objects.count() == 0


def test_top_up_with_the_same_idempotency_key_is_the_same_top_up(team: OrganizationWithPeople):
    client = client_for(team.admin)
    headers = {"HTTP_IDEMPOTENCY_KEY": "top-up-1"}

    first = client.post(url(team, "top-ups/"), {"amount": "30.00"}, format="json", **headers)
    again = client.post(url(team, "top-ups/"), {"amount": "30.00"}, format="json", **headers)
    other = client.post(url(team, "top-ups/"), {"amount": "31.00"}, format="json", **headers)

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert other.status_code == 409
    assert other.json()["code"] == "idempotency_key_reused"
    assert TopUp.objects.count() == 1


@pytest.mark.parametrize("amount", ["4.99", "50000.01", "10.001", "-5", "abc", None])
def test_bad_top_up_amounts_are_refused(team: OrganizationWithPeople, amount):
    before = ledger_state()

    answer = client_for(team.admin).post(url(team, "top-ups/"), {"amount": amount}, format="json")

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert "amount" in answer.json()["extra"]["fields"]
    assert ledger_state() == before


def test_stripe_unreachable_is_502_and_the_top_up_is_marked_failed(
    team: OrganizationWithPeople, settings: Any
):
    settings.STRIPE_API_BASE = "http://127.0.0.1:9"

    answer = client_for(team.admin).post(url(team, "top-ups/"), {"amount": "10.00"}, format="json")

    assert answer.status_code == 502
    assert answer.json()["code"] == "payment_provider_unavailable"
    top_up = TopUp.objects.get()
    assert top_up.status == "failed"
    assert top_up.failure_reason.startswith("Stripe could not be reached")
    assert Entry.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_top_up_journey_against_the_local_stripe_server(live_server, localstripe, settings):
    """Create the top-up through the API, pay it with a test card at the local Stripe server,
    which signs and delivers `payment_intent.succeeded` to our webhook on the live server."""
    organization = OrganizationFactory(name="Journey Lab")
    admin = MembershipFactory(organization=organization, role="admin").user
    localstripe.register_webhook(
        f"{live_server.url}/api/v1/billing/stripe/webhook/",
        settings.STRIPE_WEBHOOK_SECRET,
        name="journey",
    )
    client = client_for(admin)

    created = client.post(
        f"/api/v1/organizations/{organization.uuid}/top-ups/", {"amount": "75.50"}, format="json"
    )
    top_up = TopUp.objects.get(uuid=created.json()["id"])
    status = localstripe.pay(top_up.payment_intent)

    assert status == "succeeded"
    deadline = timezone.now() + datetime.timedelta(seconds=20)
    while TopUp.objects.get(pk=top_up.pk).status == "pending" and timezone.now() < deadline:
        time.sleep(0.2)
    top_up.refresh_from_db()
    assert top_up.status == "succeeded"
    assert selectors.wallet_get(organization).available == Decimal("75.50")
    listed = client.get(f"/api/v1/organizations/{organization.uuid}/top-ups/").json()
    assert [(row["id"], row["status"]) for row in listed["results"]] == [
        (str(top_up.uuid), "succeeded")
    ]
    ledger = client.get(f"/api/v1/organizations/{organization.uuid}/ledger/").json()
    assert [(row["kind"], row["account"], row["amount"]) for row in ledger["results"]] == [
        ("top_up", "available", "75.500000")
    ]
    assert ledger["results"][0]["reference"] == str(top_up.uuid)
    assert selectors.ledger_verify() == []


# --- Ledger and earnings -----------------------------------------------------------------------


@pytest.fixture
def busy_month(team: OrganizationWithPeople) -> OrganizationWithPeople:
    """A top-up, a hold, a charge to an owner and a release."""
    owner = OrganizationFactory(name="Aurora HPC Lab")
    services.wallet_credit(
        organization=team.organization, amount=Decimal("100"), idempotency_reference="t"
    )
    hold = services.hold_place(
        organization=team.organization, amount=Decimal("30"), reference_kind=ReferenceKind.BID
    )
    services.hold_capture(
        hold=hold,
        amount=Decimal("12.345678"),
        payee=owner,
        idempotency_reference="job-1",
        source_name="aurora",
    )
    services.hold_release(hold=hold)
    team.owner = owner  # type: ignore[attr-defined]
    return team


def test_ledger_lists_the_organizations_entries_newest_first(busy_month: OrganizationWithPeople):
    answer = client_for(busy_month.admin).get(url(busy_month, "ledger/"))

    rows = [(row["account"], row["kind"], row["amount"]) for row in answer.json()["results"]]
    assert rows == [
        ("available", "release", "17.654322"),
        ("held", "release", "-17.654322"),
        ("held", "charge", "-12.345678"),
        ("held", "hold", "30.000000"),
        ("available", "hold", "-30.000000"),
        ("available", "top_up", "100.000000"),
    ]
    assert answer.json()["count"] == 6


def test_ledger_filters_by_kind_and_time(busy_month: OrganizationWithPeople):
    client = client_for(busy_month.admin)
    later = (timezone.now() + datetime.timedelta(minutes=1)).isoformat()

    by_kind = client.get(url(busy_month, "ledger/"), {"kind": ["charge", "top_up"]})
    none_after = client.get(url(busy_month, "ledger/"), {"from": later})
    all_before = client.get(url(busy_month, "ledger/"), {"to": later})

    assert sorted(row["kind"] for row in by_kind.json()["results"]) == ["charge", "top_up"]
    assert none_after.json()["count"] == 0
    assert all_before.json()["count"] == 6


@pytest.mark.parametrize(
    "query",
    [{"kind": "bonus"}, {"from": "yesterday"}, {"from": "2026-11-02", "to": "2026-11-01"}],
)
def test_bad_ledger_filters_are_400(busy_month: OrganizationWithPeople, query):
    answer = client_for(busy_month.admin).get(url(busy_month, "ledger/"), query)

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"


def test_ledger_query_count_does_not_grow_with_entries(
    busy_month: OrganizationWithPeople, django_assert_max_num_queries
):
    for index in range(20):
        services.wallet_credit(
            organization=busy_month.organization,
            amount=Decimal(1),
            idempotency_reference=f"x{index}",
        )
    client = client_for(busy_month.admin)

    with django_assert_max_num_queries(6):
        answer = client.get(url(busy_month, "ledger/"))

    assert answer.json()["count"] == 26


def test_earnings_of_the_owner(busy_month: OrganizationWithPeople):
    owner_admin = busy_month.admin
    MembershipFactory(organization=busy_month.owner, user=owner_admin, role="admin")  # type: ignore[attr-defined]

    answer = client_for(owner_admin).get(
        f"/api/v1/organizations/{busy_month.owner.uuid}/earnings/"  # type: ignore[attr-defined]
    )

    month = timezone.localtime().strftime("%Y-%m")
    assert answer.json() == {
        "currency": "USD",
        "gross": "12.345678",
        "fees": "1.234568",
        "net": "11.111110",
        "results": [
            {
                "month": month,
                "cluster": None,
                "cluster_name": "aurora",
                "gross": "12.345678",
                "fees": "1.234568",
                "net": "11.111110",
            }
        ],
    }
    buyer = client_for(owner_admin).get(url(busy_month, "earnings/"))
    assert buyer.json()["results"] == []


def test_top_up_list_query_count_does_not_grow(
    team: OrganizationWithPeople, django_assert_max_num_queries
):
    for index in range(15):
        TopUp.objects.create(
            organization=team.organization,
            created_by=team.admin,
            amount=Decimal(10 + index),
            currency="USD",
        )
    client = client_for(team.admin)

    with django_assert_max_num_queries(5):
        answer = client.get(url(team, "top-ups/"))

    assert answer.json()["count"] == 15
    assert [row["amount"] for row in answer.json()["results"]][:2] == ["24.00", "23.00"]
