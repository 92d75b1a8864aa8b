"""The money page in headless Chromium against the local Stripe server: a top-up paid with a
card through Stripe.js and credited by the signed webhook, a declined card, an amount below
the minimum, and what a plain member sees."""

import datetime
import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.conf import settings
from django.urls import reverse
from playwright.sync_api import Page, expect

from billing import selectors
from billing.models import Account, Entry, StripeEvent, TopUp, Transaction
from organizations.models import Membership
from tests.conftest import wait_for
from tests.factories import PASSWORD, MembershipFactory, OrganizationFactory
from tests.localstripe import LocalStripe

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WEBHOOK_NAME = "browser-money"
WEBHOOK_PATH = "/api/v1/billing/stripe/webhook/"
# A loopback port that refuses connections: where the webhook points once a test is done, so
# that later tests' payments are not delivered into someone else's database.
NOWHERE = "http://127.0.0.1:9/"
GOOD_CARD = "4242424242424242"
DECLINED_CARD = "4000000000000002"


@pytest.fixture
def stripe_webhook(localstripe: LocalStripe, live_server) -> Iterator[str]:
    url = live_server.url + WEBHOOK_PATH
    localstripe.register_webhook(url, settings.STRIPE_WEBHOOK_SECRET, WEBHOOK_NAME)
    yield url
    localstripe.register_webhook(NOWHERE, settings.STRIPE_WEBHOOK_SECRET, WEBHOOK_NAME)


@pytest.fixture
def organization():
    return OrganizationFactory(name="Fusion Lab")


@pytest.fixture
def admin(organization):
    return MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user


def log_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}{reverse('login')}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()


def open_money_page(page: Page, base: str, organization) -> None:
    page.goto(f"{base}{reverse('organization-money', args=[organization.uuid])}")
    expect(page.get_by_role("heading", name=f"Money of {organization.name}")).to_be_visible()


def type_card(page: Page, number: str) -> None:
    """Types into the inputs localstripe's Stripe.js renders inside #card-element."""
    card = page.locator("#card-element")
    expect(card.locator("input")).to_have_count(5)
    card.get_by_placeholder("number", exact=True).fill(number)
    card.get_by_placeholder("exp_month", exact=True).fill("12")
    card.get_by_placeholder("exp_year", exact=True).fill(
        f"{(datetime.date.today().year + 3) % 100:02d}"
    )
    card.get_by_placeholder("cvc", exact=True).fill("123")
    card.get_by_placeholder("postal_code", exact=True).fill("75001")


def pay(page: Page, amount: str, number: str) -> None:
    page.locator("#top-up-amount").fill(amount)
    type_card(page, number)
    page.locator("#top-up-submit").click()


def test_an_admin_tops_up_with_a_card_and_the_webhook_credits_the_wallet(
    page: Page, live_server, stripe_webhook: str, organization, admin
):
    log_in(page, live_server.url, admin.username)
    open_money_page(page, live_server.url, organization)
    expect(page.locator("#wallet-available")).to_have_text(re.compile(r"^\s*0\.00\s+USD\s*$"))

    pay(page, "25.00", GOOD_CARD)

    status = page.locator("#top-up-status")
    expect(status).to_have_text("25.00 USD was added to the wallet.")
    expect(status).to_have_class(re.compile(r"\balert-success\b"))
    # The page reloads itself and shows the wallet from the server.
    expect(page.locator("#wallet-available")).to_have_text(
        re.compile(r"^\s*25\.00\s+USD\s*$"), timeout=10_000
    )
    expect(page.locator("#top-up-status")).to_have_text("")
    rows = page.locator("#top-ups tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("25.00 USD")
    expect(rows.first.locator(".badge")).to_have_text("Succeeded")
    ledger = page.locator("#ledger tbody tr")
    expect(ledger).to_have_count(1)
    expect(ledger.first).to_contain_text("Top-up")

    top_up = TopUp.objects.get()
    assert top_up.organization == organization
    assert top_up.created_by == admin
    assert top_up.status == TopUp.Status.SUCCEEDED
    assert top_up.amount == Decimal("25.00")
    assert top_up.succeeded_at is not None
    assert top_up.payment_intent and top_up.payment_intent.startswith("pi_")
    assert selectors.wallet_get(organization).available == Decimal("25.00")
    assert selectors.wallet_get(organization).held == Decimal("0")
    posted = Transaction.objects.get(kind=Transaction.Kind.TOP_UP)
    assert Transaction.objects.count() == 1
    assert posted.organization == organization
    assert posted.reference == top_up.uuid
    entries = sorted(
        (entry.account.kind, entry.account.organization_id, entry.kind, entry.amount)
        for entry in posted.entries.select_related("account")
    )
    assert entries == [
        (Account.Kind.AVAILABLE, organization.pk, Entry.Kind.TOP_UP, Decimal("25")),
        (Account.Kind.STRIPE_CLEARING, None, Entry.Kind.TOP_UP, Decimal("-25")),
    ]
    assert (
        StripeEvent.objects.get(
            type="payment_intent.succeeded", payload__data__object__id=top_up.payment_intent
        ).outcome
        == "credited"
    )
    assert selectors.ledger_verify() == []


def test_a_declined_card_is_refused_on_the_page_and_the_top_up_fails_unpaid(
    page: Page, live_server, stripe_webhook: str, organization, admin
):
    log_in(page, live_server.url, admin.username)
    open_money_page(page, live_server.url, organization)

    pay(page, "30.00", DECLINED_CARD)

    status = page.locator("#top-up-status")
    expect(status).to_have_text("Your card was declined.")
    expect(status).to_have_class(re.compile(r"\balert-danger\b"))
    expect(page.locator("#top-up-submit")).to_be_enabled()
    expect(page.locator("#wallet-available")).to_have_text(re.compile(r"^\s*0\.00\s+USD\s*$"))

    # Stripe's payment_intent.payment_failed arrives about a second later.
    top_up = wait_for(lambda: TopUp.objects.filter(status=TopUp.Status.FAILED).first(), timeout=15)
    assert top_up.organization == organization
    assert top_up.amount == Decimal("30.00")
    assert top_up.failure_reason == "Your card was declined."
    assert (
        StripeEvent.objects.get(
            type="payment_intent.payment_failed", payload__data__object__id=top_up.payment_intent
        ).outcome
        == "marked failed"
    )
    assert top_up.succeeded_at is None
    assert TopUp.objects.count() == 1
    assert selectors.wallet_get(organization).available == Decimal("0")
    assert not Transaction.objects.exists()
    assert not Entry.objects.exists()
    assert selectors.ledger_verify() == []

    page.reload()
    row = page.locator("#top-ups tbody tr")
    expect(row).to_have_count(1)
    expect(row.first.locator(".badge")).to_have_text("Failed")
    expect(row.first).to_contain_text("Your card was declined.")
    expect(page.locator("#wallet-available")).to_have_text(re.compile(r"^\s*0\.00\s+USD\s*$"))


def test_an_amount_below_the_minimum_is_refused_beside_the_field(
    page: Page, live_server, organization, admin
):
    log_in(page, live_server.url, admin.username)
    open_money_page(page, live_server.url, organization)

    page.locator("#top-up-amount").fill("4.99")
    page.locator("#top-up-submit").click()

    error = page.locator("#top-up-amount-error")
    expect(error).to_have_text("From 5.00 to 50000.00 USD.")
    expect(error).to_be_visible()
    expect(page.locator("#top-up-amount")).to_have_class(re.compile(r"\bis-invalid\b"))
    expect(page.locator("#top-up-status")).to_have_text("The input is not valid.")
    expect(page.locator("#top-up-submit")).to_be_enabled()
    assert not TopUp.objects.exists()

    # A valid amount clears the error before anything else happens.
    page.locator("#top-up-amount").fill("5.00")
    page.locator("#top-up-submit").click()
    expect(page.locator("#top-up-status")).to_have_text("Your card number is incomplete.")
    expect(error).to_have_text("")
    expect(error).to_be_hidden()


def test_a_member_sees_the_wallet_but_neither_the_top_up_form_nor_the_ledger(
    page: Page, live_server, organization
):
    member = MembershipFactory(organization=organization, role=Membership.Role.MEMBER).user

    log_in(page, live_server.url, member.username)
    open_money_page(page, live_server.url, organization)

    expect(page.locator("#wallet-available")).to_have_text(re.compile(r"^\s*0\.00\s+USD\s*$"))
    expect(page.locator("#wallet-held")).to_be_visible()
    expect(
        page.get_by_text(
            "Only an admin of Fusion Lab can top up, set the budget and read the ledger."
        )
    ).to_be_visible()
    expect(page.locator("#top-up-form")).to_have_count(0)
    expect(page.locator("#card-element")).to_have_count(0)
    expect(page.locator("#budget-form")).to_have_count(0)
    expect(page.locator("#ledger")).to_have_count(0)
    expect(page.locator("#top-ups")).to_have_count(0)
    assert page.evaluate("typeof Stripe") == "undefined"


def test_on_a_phone_a_card_typed_as_printed_pays_and_the_page_logs_no_error(
    browser, live_server, stripe_webhook: str, organization, admin
):
    # The card as printed ("4242 4242 4242 4242") with a four-digit year, on a 390 px phone
    # whose menu must open: localstripe's Stripe.js used to replace the page's global
    # `Element`, so Bootstrap threw on every click and the menu stayed shut.
    context = browser.new_context(viewport={"width": 390, "height": 844})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        log_in(page, live_server.url, admin.username)
        open_money_page(page, live_server.url, organization)
        assert page.evaluate("window.Element === Object.getPrototypeOf(HTMLElement)")
        page.locator(".navbar-toggler").click()
        expect(page.locator("#main-nav").get_by_role("link", name="Jobs")).to_be_visible()
        expect(page.locator("#main-nav")).to_have_class(re.compile(r"\bshow\b"))
        page.locator(".navbar-toggler").click()
        expect(page.locator("#main-nav")).to_be_hidden()

        page.locator("#top-up-amount").fill("12.50")
        card = page.locator("#card-element")
        card.get_by_label("Card number").fill("4242 4242 4242 4242")
        card.get_by_label("Expiry month").fill("12")
        card.get_by_label("Expiry year").fill(str(datetime.date.today().year + 3))
        card.get_by_label("Security code (CVC)").fill("123")
        card.get_by_label("Postal code").fill("75001")
        page.locator("#top-up-submit").click()

        expect(page.locator("#top-up-status")).to_have_text("12.50 USD was added to the wallet.")
        top_up = TopUp.objects.get()
        assert (top_up.status, top_up.amount) == (TopUp.Status.SUCCEEDED, Decimal("12.50"))
        assert selectors.wallet_get(organization).available == Decimal("12.50")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        assert errors == []
    finally:
        context.close()


@pytest.mark.parametrize("width", [1280, 390])
def test_the_top_ups_table_says_each_status_in_words(
    page: Page, live_server, organization, admin, width
):
    """Issue 30: the table showed "pending" and "expired"."""
    for status in (TopUp.Status.EXPIRED, TopUp.Status.PENDING):
        TopUp.objects.create(
            organization=organization,
            created_by=admin,
            amount=Decimal("25.00"),
            currency="USD",
            status=status,
        )
    page.set_viewport_size({"width": width, "height": 900})

    log_in(page, live_server.url, admin.username)
    open_money_page(page, live_server.url, organization)

    expect(page.locator("#top-ups tbody .badge")).to_have_text(["Pending", "Expired"])
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
