"""The dashboards and public browsing in headless Chromium, at a desktop's width and at a
phone's (390 px): a team's member and an owner's admin land on their dashboards after log-in
and Chart.js draws their charts; a visitor browses the offers (cards on a phone, the filters
folded away), opens one and is sent to log in to bid, and comes back to it. Every page keeps
the console free of errors and never pans sideways.

With COMPUTESHARE_SCREENSHOTS=1 the desktop runs also save the README's screenshots of both
dashboards to docs/."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect

from tests.factories import PASSWORD
from tests.portal.dashboard_data import DashboardData, dashboard_data

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DOCS = Path(__file__).resolve().parents[2] / "docs"
WIDTHS = {"desktop": (1280, 900), "phone": (390, 844)}


@pytest.fixture(params=sorted(WIDTHS))
def sized_page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    width, height = WIDTHS[request.param]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(15_000)
    opened = context.new_page()
    opened.errors = []  # type: ignore[attr-defined]
    opened.on(
        "console",
        lambda message: (
            opened.errors.append(message.text)  # type: ignore[attr-defined]
            if message.type == "error"
            else None
        ),
    )
    opened.on("pageerror", lambda error: opened.errors.append(str(error)))  # type: ignore[attr-defined]
    opened.width_name = request.param  # type: ignore[attr-defined]
    yield opened
    context.close()


@pytest.fixture
def data(no_worker_takes_the_tasks: None) -> DashboardData:
    return dashboard_data()


def log_in(page: Page, username: str) -> None:
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def assert_fits_and_no_errors(page: Page) -> None:
    overflow = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page pans sideways by {overflow} px"
    assert page.errors == []  # type: ignore[attr-defined]


def charts_drawn(page: Page) -> list[str]:
    """The ids of the JSON each drawn chart was made from, once Chart.js drew them all."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('canvas[data-chart]')].every((c) => c.chart)"
    )
    return page.evaluate(
        "() => [...document.querySelectorAll('canvas[data-chart]')]"
        ".map((canvas) => canvas.dataset.chart)"
    )


def screenshot(page: Page, name: str) -> None:
    if os.environ.get("COMPUTESHARE_SCREENSHOTS") and page.width_name == "desktop":  # type: ignore[attr-defined]
        page.screenshot(path=str(DOCS / name), full_page=True)


def test_a_teams_member_lands_on_the_teams_dashboard(sized_page: Page, live_server, data):
    page = sized_page
    page.goto(f"{live_server.url}{reverse('login')}")

    log_in(page, "tom")

    expect(page.get_by_role("heading", name="Dashboard: Tidal Team")).to_be_visible()
    assert charts_drawn(page) == ["spending-data"]
    jobs = page.locator("#running-jobs")
    expect(jobs.locator("tr", has_text="parameter-sweep")).to_contain_text("6 of 10 tasks done")
    expect(jobs.locator("tr", has_text="train-model")).to_contain_text("Running")
    allocations = page.locator("#allocations")
    expect(allocations.locator("[data-field=status]")).to_have_text(["Active", "Upcoming"])
    expect(allocations).to_contain_text("starts in 2 days")
    expect(page.locator("#budget-gauge")).to_be_visible()
    screenshot(page, "screenshot-dashboard-team.png")
    # The numbers behind the chart, as a table.
    page.locator("#spending summary").click()
    expect(page.locator("[data-chart-table=spending] tbody tr")).to_have_count(30)
    assert_fits_and_no_errors(page)


def test_an_owners_admin_sees_earnings_utilization_and_the_jobs_on_the_cluster(
    sized_page: Page, live_server, data
):
    page = sized_page
    page.goto(f"{live_server.url}{reverse('login')}")

    log_in(page, "olga")

    expect(page.get_by_role("heading", name="Dashboard: Fjord Compute")).to_be_visible()
    # It only sells: its clusters, earnings and payouts first, no empty wallet nor spending.
    clusters = page.locator("#owner-clusters [data-cluster]")
    expect(clusters).to_have_count(1)
    expect(clusters.first).to_contain_text("fjord")
    expect(clusters.first.locator("[data-field=status]")).to_have_text("Online")
    expect(page.locator("#owner-earnings #owner-payouts")).to_be_visible()
    expect(page.locator("#wallet")).to_have_count(0)
    expect(page.get_by_text("Find an offer")).to_have_count(0)
    assert charts_drawn(page) == [
        "earnings-data",
        f"utilization-{data.cluster.uuid}-cpu-data",
        "capacity-kinds-data",
    ]
    expect(page.locator("#cluster-jobs [data-field=team]")).to_have_text(
        ["Tidal Team", "Tidal Team"]
    )
    expect(page.locator("#team-names-note")).to_contain_text("because you are an admin")
    assert_fits_and_no_errors(page)
    screenshot(page, "screenshot-dashboard-owner.png")


def test_a_visitor_browses_offers_and_is_asked_to_log_in_to_bid(
    sized_page: Page, live_server, data
):
    page = sized_page
    phone = page.width_name == "phone"  # type: ignore[attr-defined]

    page.goto(f"{live_server.url}{reverse('offer-list')}")

    expect(page.get_by_role("heading", name="Offers", exact=True)).to_be_visible()
    listing = page.locator("#offer-cards" if phone else "#offers")
    expect(listing).to_be_visible()
    expect(page.locator("#offer-cards" if not phone else "#offers")).to_be_hidden()
    expect(listing).to_contain_text("64 CPUs")
    fields = page.locator("#offer-filter-fields")
    if phone:
        # The filters are folded away until asked for; the search box stays.
        expect(fields).to_be_hidden()
        page.locator("#offer-filters-toggle").click()
        expect(fields).to_be_visible()
    else:
        expect(fields).to_be_visible()
    assert_fits_and_no_errors(page)

    search = page.get_by_placeholder("Search clusters, owners, GPU types, features")
    search.fill("fjord h100")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(listing).to_contain_text("No offer matches these filters.")
    search.fill("fjord avx2")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(listing.locator("[data-offer]")).to_have_count(3)
    listing.get_by_role("link", name="View").first.click()
    expect(page.locator("#offer-hardware")).to_contain_text("256 GB")
    expect(page.locator("#bid-form")).to_have_count(0)
    assert_fits_and_no_errors(page)

    offer_url = page.url
    page.get_by_role("link", name="Log in to bid").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    log_in(page, "tara")

    assert page.url == offer_url
    expect(page.locator("#bid-form")).to_be_visible()
    assert_fits_and_no_errors(page)
