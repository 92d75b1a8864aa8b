"""The header and footer in Chromium at a desktop's width and at a phone's (390 px): the menu's
Dashboard, Organizations and Money items (the wallet's balance in the Money item), the
organizations' list, the Status page behind the footer's link, the API docs inside the site's
page with a way back, and no favicon 404. Each page passes axe, fits the width and logs no
console error."""

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect

from billing import services as billing
from organizations.models import Membership
from tests.factories import PASSWORD, MembershipFactory, OrganizationFactory, UserFactory
from tests.web.pagecheck import ConsoleErrors, axe_violations, panning, settled, with_axe

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = {"desktop": (1280, 800), "phone": (390, 844)}


@pytest.fixture(params=sorted(WIDTHS))
def sized_page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    width, height = WIDTHS[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(15_000)
    with_axe(context)
    opened = context.new_page()
    opened.console = ConsoleErrors(opened)  # type: ignore[attr-defined]
    opened.is_phone = request.param == "phone"  # type: ignore[attr-defined]
    yield opened
    context.close()


def checked(page: Page) -> None:
    """No serious axe violation, nothing past the viewport's edge, no console error."""
    settled(page)
    assert axe_violations(page) + panning(page) + page.console.take() == []  # type: ignore[attr-defined]


def log_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}{reverse('login')}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(lambda url: "/login/" not in url)


def menu(page: Page):
    """The main menu, opened first on a phone (it folds behind the toggler there)."""
    if page.is_phone:  # type: ignore[attr-defined]
        page.locator(".navbar-toggler").click()
        expect(page.locator("#main-nav")).to_be_visible()
    return page.locator("#main-nav")


@pytest.fixture
def member() -> str:
    first = OrganizationFactory(name="Alpha Team")
    billing.wallet_open(first)
    billing.wallet_adjust(organization=first, amount=Decimal("1234.5"), memo="F", actor=None)
    second = OrganizationFactory(name="Beta Team")
    billing.wallet_open(second)
    user = UserFactory(username="nina")
    MembershipFactory(organization=first, user=user, role=Membership.Role.ADMIN)
    MembershipFactory(organization=second, user=user, role=Membership.Role.MEMBER)
    return user.username


def test_the_menu_leads_to_the_organizations_and_the_money_with_its_balance(
    sized_page: Page, live_server, member: str
):
    page = sized_page
    log_in(page, live_server.url, member)

    expect(page.get_by_role("heading", name="Dashboard: Alpha Team")).to_be_visible()
    navigation = menu(page)
    expect(navigation.locator("#nav-wallet")).to_be_visible()
    expect(navigation.locator("#nav-wallet")).to_have_text("Alpha Team has 1,234.50 USD")
    checked(page)

    navigation.get_by_role("link", name="Organizations").click()
    expect(page.get_by_role("heading", name="Your organizations")).to_be_visible()
    rows = page.locator("#organization-list li")
    expect(rows).to_have_count(2)
    expect(rows.nth(1).locator("[data-field=role]")).to_have_text("Member")
    checked(page)

    # On Beta Team's page, the Money item is Beta Team's.
    rows.nth(1).get_by_role("link", name="Beta Team", exact=True).click()
    expect(page.get_by_role("heading", name="Beta Team", exact=True)).to_be_visible()
    navigation = menu(page)
    expect(navigation.locator("#nav-wallet")).to_have_text("Beta Team has 0.00 USD")
    navigation.locator("#nav-money").click()
    expect(page.get_by_role("heading", name="Money of Beta Team")).to_be_visible()
    checked(page)


def test_the_footers_status_link_opens_the_status_page(sized_page: Page, live_server):
    page = sized_page
    page.goto(f"{live_server.url}/")

    page.locator("footer").get_by_role("link", name="Status").click()

    expect(page).to_have_url(f"{live_server.url}{reverse('status')}")
    expect(page.locator("#status-summary")).to_have_text(
        "ComputeShare is working: every part answered."
    )
    expect(page.locator("#status-parts [data-field=state]")).to_have_text(["Working", "Working"])
    checked(page)


def test_the_api_docs_have_the_sites_header_and_a_way_back(
    sized_page: Page, live_server, member: str
):
    page = sized_page
    log_in(page, live_server.url, member)
    page.goto(f"{live_server.url}{reverse('api-docs')}")

    expect(page.get_by_role("heading", name="ComputeShare API")).to_be_visible()
    expect(page.locator("nav.navbar .navbar-brand")).to_be_visible()
    expect(page.locator("footer")).to_contain_text("Status")
    # Swagger UI's own page passes axe with its own contrast; what is checked here is that it
    # fits and logs no error, inside the site's page.
    settled(page)
    assert panning(page) + page.console.take() == []  # type: ignore[attr-defined]

    page.locator("#api-docs-back").click()
    expect(page.get_by_role("heading", name="Dashboard: Alpha Team")).to_be_visible()


def test_no_page_asks_for_a_favicon_in_vain(sized_page: Page, live_server):
    page = sized_page
    missing: list[str] = []
    page.on("response", lambda response: response.status >= 400 and missing.append(response.url))

    page.goto(f"{live_server.url}{reverse('healthz')}")  # JSON: the browser asks /favicon.ico
    icon = page.request.get(f"{live_server.url}/favicon.ico")
    page.goto(f"{live_server.url}/")
    settled(page)

    assert icon.status == 200
    assert icon.headers["content-type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    assert missing == []
