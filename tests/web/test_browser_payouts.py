"""An owner's payouts page in headless Chromium at phone width against the local Stripe
server: connecting Stripe through the server's onboarding page, the account made active by the
signed account.updated, payable earnings, and a payout paid by a Stripe transfer."""

import datetime
import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.conf import settings as django_settings
from django.urls import reverse
from playwright.sync_api import ConsoleMessage, Page, expect

from billing import selectors
from billing.models import ConnectedAccount, Payout
from organizations.models import Membership
from tests.billing.stripe_flows import earn
from tests.factories import MembershipFactory, OrganizationFactory
from tests.localstripe import LocalStripe
from tests.web.test_browser_money import NOWHERE, WEBHOOK_PATH, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WEBHOOK_NAME = "browser-payouts"
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def stripe_webhook(localstripe: LocalStripe, live_server) -> Iterator[str]:
    url = live_server.url + WEBHOOK_PATH
    localstripe.register_webhook(url, django_settings.STRIPE_WEBHOOK_SECRET, WEBHOOK_NAME)
    yield url
    localstripe.register_webhook(NOWHERE, django_settings.STRIPE_WEBHOOK_SECRET, WEBHOOK_NAME)


def fits_the_width(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_an_owner_connects_stripe_sees_payable_earnings_and_pays_out(
    page: Page, live_server, stripe_webhook: str, localstripe: LocalStripe, settings
):
    settings.PAYOUT_HOLDING_PERIOD = datetime.timedelta(0)
    owner = OrganizationFactory(name="Dune Cluster Co")
    admin = MembershipFactory(organization=owner, role=Membership.Role.ADMIN).user
    earn(owner, "40.00")
    errors: list[str] = []
    page.on("console", lambda message: _keep_errors(errors, message))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_viewport_size(PHONE)
    payouts_url = f"{live_server.url}{reverse('organization-payouts', args=[owner.uuid])}"

    log_in(page, live_server.url, admin.username)
    page.goto(payouts_url)
    expect(page.get_by_role("heading", name="Payouts of Dune Cluster Co")).to_be_visible()
    expect(page.locator("#payable")).to_have_text(re.compile(r"^\s*36\.00\s+USD\s*$"))
    expect(page.locator("#payout-form")).to_have_count(0)
    assert fits_the_width(page)

    page.locator("#connect-stripe").click()
    expect(page.get_by_role("heading", name="Set up payouts")).to_be_visible()
    assert page.url.startswith(localstripe.api_base)
    page.get_by_role("button", name="Agree and submit").click()

    # Back on our page; it waits for Stripe's account.updated and reloads itself.
    expect(page.locator("#stripe-account-status")).to_have_text("Active", timeout=20_000)
    expect(page.locator("#payout-form")).to_be_visible()
    assert fits_the_width(page)
    page.locator("#pay-out").click()

    expect(page.locator(".alert-success")).to_contain_text("36.00 USD sent to Stripe.")
    expect(page.locator("#payable")).to_have_text(re.compile(r"^\s*0\.00\s+USD\s*$"))
    history = page.locator("#payouts .payout")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text("36.00 USD")
    expect(history.first.locator(".badge")).to_have_text("Paid")
    assert fits_the_width(page)

    account = ConnectedAccount.objects.get(organization=owner)
    payout = Payout.objects.get()
    assert (account.status, payout.status, payout.amount) == ("active", "paid", Decimal("36.00"))
    transfer = localstripe.client().v1.transfers.retrieve(str(payout.stripe_transfer))
    assert (transfer.amount, transfer.destination) == (3600, account.stripe_account)
    assert selectors.ledger_verify() == []
    assert errors == []


def _keep_errors(errors: list[str], message: ConsoleMessage) -> None:
    if message.type == "error":
        errors.append(message.text)


@pytest.mark.parametrize("width", [1280, 390])
def test_what_stripe_still_needs_reads_as_what_to_do(page: Page, live_server, width):
    """Issue 30: the page listed "business_type, tos_acceptance.date"."""
    owners = OrganizationFactory(name="Fjord Compute")
    admin = MembershipFactory(organization=owners, role=Membership.Role.ADMIN).user
    ConnectedAccount.objects.create(
        organization=owners,
        stripe_account="acct_browser_words",
        created_by=admin,
        requirements_due=["business_type", "tos_acceptance.date", "external_account"],
    )
    page.set_viewport_size({"width": width, "height": 900})

    log_in(page, live_server.url, admin.username)
    page.goto(f"{live_server.url}{reverse('organization-payouts', args=[owners.uuid])}")

    expect(page.locator("#stripe-requirements li")).to_have_text(
        [
            "Say what kind of business the organization is (a company, an individual…)",
            "Accept Stripe's terms of service",
            "Add the bank account that payouts go to",
        ]
    )
    expect(page.locator("#stripe-account")).not_to_contain_text("tos_acceptance")
    assert fits_the_width(page)
