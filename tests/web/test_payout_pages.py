"""The payouts page with Django's test client: who may see it, the connect button sending the
admin to Stripe's onboarding, and pay-out forms that are refused with nothing written."""

import datetime
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from billing.models import ConnectedAccount, Payout, Transaction
from tests.billing.stripe_flows import connected_and_active, earn, stripe_events
from tests.billing.test_localstripe_server import WebhookReceiver
from tests.conftest import OrganizationWithPeople
from tests.localstripe import LocalStripe
from tests.web.test_money_pages import html

__all__ = ["stripe_events"]

pytestmark = pytest.mark.django_db


def page_of(team: OrganizationWithPeople) -> str:
    return reverse("organization-payouts", args=[team.organization.uuid])


@pytest.mark.parametrize(("who", "status"), [("admin", 200), ("member", 403), ("outsider", 404)])
def test_only_admins_see_the_payouts_page(client: Client, team, who, status):
    client.force_login(getattr(team, who))

    answer = client.get(page_of(team))

    assert answer.status_code == status
    if status == 200:
        assert b'id="connect-stripe"' in answer.content
        assert b'id="payout-form"' not in answer.content


def test_connect_sends_the_admin_to_stripes_onboarding_page(
    client: Client, localstripe: LocalStripe, team
):
    client.force_login(team.admin)

    answer = client.post(page_of(team), {"connect": "1"})

    assert answer.status_code == 302
    assert answer["Location"].startswith(f"{localstripe.api_base}/connect/onboarding/")
    assert ConnectedAccount.objects.get(organization=team.organization).status == "onboarding"


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ({"amount": "NaN"}, 400, b"Not a decimal number."),
        ({"amount": "100.00"}, 409, b"more than the earnings payable now"),
        ({"amount": "1.001"}, 400, b"At most 2 decimal places."),
        ({"amount": "5", "payout_key": "not-a-key\x00"}, 400, b"This form is out of date"),
    ],
)
def test_a_refused_payout_form_writes_nothing(
    client: Client, stripe_events: WebhookReceiver, settings, team, fields, status, message
):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(0)
    connected_and_active(client, stripe_events, team.organization, team.admin)
    earn(team.organization, "10.00")
    client.force_login(team.admin)

    answer = client.post(page_of(team), {"payout_key": str(uuid.uuid4()), **fields})

    assert answer.status_code == status
    assert message in answer.content
    assert Payout.objects.count() == 0
    assert Transaction.objects.filter(kind="payout").count() == 0


def test_the_same_form_sent_twice_pays_out_once(
    client: Client, stripe_events: WebhookReceiver, settings, team
):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(0)
    connected_and_active(client, stripe_events, team.organization, team.admin)
    earn(team.organization, "10.00")
    client.force_login(team.admin)
    form = {"payout_key": str(uuid.uuid4()), "amount": ""}

    answers = [client.post(page_of(team), form) for _ in range(2)]

    assert [answer.status_code for answer in answers] == [302, 302]
    assert list(Payout.objects.values_list("amount", "status")) == [(Decimal("9.00"), "paid")]
    page = client.get(page_of(team))
    assert b"9.00 USD sent to Stripe." in page.content


def test_what_stripe_still_needs_is_said_in_words_with_the_payouts_statuses(client: Client, team):
    """Issue 30: the page listed Stripe's field names ("business_type, tos_acceptance.date")."""
    account = ConnectedAccount.objects.create(
        organization=team.organization,
        stripe_account="acct_words",
        created_by=team.admin,
        requirements_due=[
            "business_type",
            "tos_acceptance.date",
            "tos_acceptance.ip",
            "individual.address.city",
            "individual.address.line1",
            "company.structure",
        ],
    )
    Payout.objects.create(
        organization=team.organization,
        connected_account=account,
        amount=Decimal("12.00"),
        currency="USD",
        status=Payout.Status.FAILED,
        created_by=team.admin,
    )
    client.force_login(team.admin)

    answer = client.get(page_of(team))

    page = html(answer)
    assert [item.text() for item in page.by_id("stripe-requirements").find_all("li")] == [
        "Say what kind of business the organization is (a company, an individual…)",
        "Accept Stripe's terms of service",
        "Give your address",
        "Stripe asks for: company structure",
    ]
    assert "tos_acceptance" not in page.by_id("stripe-account").text()
    [payout] = page.by_id("payouts").find_all("li")
    assert payout.find("span", css_class="badge").text() == "Failed"
