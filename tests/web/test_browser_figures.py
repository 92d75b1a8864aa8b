"""Money as a person reads it on the pages (issue 30), in headless Chromium at a desktop's width
and a phone's: a job of seconds costs '< 0.01 USD' with its exact figure on hover, never
'0.00' nor '0.000095'; a chart's money axis is in cents, never '1.00000E-4'; an offer says its
price per core-hour, its total and a reserved block's price per core per day; an owner reads
what was sold beside what was earned. Each page keeps the console free of errors and never
pans sideways."""

import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing import services as billing
from marketplace import capacity, services
from marketplace.models import Offer
from organizations.models import Membership
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.portal.dashboard_data import DashboardData, dashboard_data
from tests.web.test_browser_dashboards import (
    assert_fits_and_no_errors,
    charts_drawn,
    log_in,
    sized_page,  # noqa: F401 (a fixture)
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOUR = timedelta(hours=1)
CENTS = re.compile(r"^(< 0\.01|-?[0-9][0-9,]*\.[0-9]{2})$")


def axis_labels(page: Page, chart: str) -> list[str]:
    """The labels Chart.js wrote on the y axis of the chart drawn from `chart`'s JSON."""
    return page.evaluate(
        "(id) => document.querySelector(`canvas[data-chart='${id}']`).chart.scales.y.ticks"
        ".map((tick) => tick.label)",
        chart,
    )


def test_a_job_of_seconds_costs_under_a_cent_and_the_axis_is_in_cents(
    sized_page: Page,  # noqa: F811
    live_server,
    no_worker_takes_the_tasks,
):
    # Given a team whose one job was charged 0.000095 today
    page = sized_page
    team = funded_organization("0", name="Seconds Lab")
    admin = MembershipFactory(organization=team, role=Membership.Role.ADMIN).user
    allocation = allocation_bought(team, quantity=10, price="0.02")
    billing.hold_capture(
        hold=allocation.hold,
        amount=Decimal("0.000095"),
        payee=allocation.cluster.organization,
        idempotency_reference=f"test-job-{uuid.uuid4()}",
        reference=uuid.uuid4(),
        memo="a job of seconds",
    )

    # When its admin logs in and reads the dashboard
    page.goto(f"{live_server.url}{reverse('login')}")
    log_in(page, admin.username)
    expect(page.get_by_role("heading", name="Dashboard: Seconds Lab")).to_be_visible()

    # Then the month's spending reads '< 0.01 USD', the exact figure on hover, and the spending
    # chart's axis is written in cents
    spent = page.locator("#budget-figures span[title='0.000095']")
    expect(spent).to_have_text("< 0.01 USD")
    expect(page.locator("#budget-figures")).to_contain_text("< 0.01 USD spent on jobs this month")
    assert charts_drawn(page) == ["spending-data"]
    labels = axis_labels(page, "spending-data")
    assert labels and all(CENTS.match(label) for label in labels), labels
    assert "0.01" in labels
    assert_fits_and_no_errors(page)

    # And the Money page says the same, never 'Spent 0.00'
    page.goto(f"{live_server.url}{reverse('organization-money', args=[team.uuid])}")
    summary = page.locator("#budget-spent")
    expect(summary).to_contain_text("Spent < 0.01 USD")
    expect(summary.locator("span[title='0.000095']")).to_have_count(1)
    assert_fits_and_no_errors(page)


def test_an_offer_says_its_price_per_core_hour_its_total_and_a_blocks_price_per_day(
    sized_page: Page,  # noqa: F811
    live_server,
):
    # Given a reserved block of 2 cores for 6 hours at 0.125 a core-hour
    page = sized_page
    phone = page.width_name == "phone"  # type: ignore[attr-defined]
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    block = OfferFactory(
        capacity="reserved",
        quantity=2,
        reserve_price=Decimal("0.125"),
        buy_now_price=None,
        auction_closes_at=start - timedelta(hours=1),
        window_start=start,
        window_end=start + timedelta(hours=6),
    )

    # When a visitor reads the offers (a table on a desktop, cards on a phone) and the offer
    page.goto(f"{live_server.url}{reverse('offer-list')}")
    listing = page.locator("#offer-cards" if phone else "#offers")
    reserve = listing.locator(f"[data-offer='{block.uuid}'] [data-field=reserve]")

    # Then each shows what buyers compare, and the total's exact figure on hover
    expect(reserve).to_contain_text("0.125 USD per core-hour")
    expect(reserve).to_contain_text("1.50 USD for 2 cores")
    expect(reserve).to_contain_text("3.00 USD per core per day")
    assert_fits_and_no_errors(page)
    page.goto(f"{live_server.url}{reverse('offer-detail', args=[block.uuid])}")
    detail = page.locator("#offer-reserve-price")
    expect(detail.locator("[data-field=per-hour]")).to_have_text("0.125 USD per core-hour")
    expect(detail.locator("[data-field=total]")).to_have_text("1.50 USD for 2 cores")
    expect(detail.locator("[data-field=per-day]")).to_have_text("3.00 USD per core per day")
    expect(page.locator("#offer-reserve-price [data-field=total] span")).to_have_attribute(
        "title", "1.50"
    )
    assert_fits_and_no_errors(page)


@pytest.fixture
def data(no_worker_takes_the_tasks: None) -> DashboardData:
    return dashboard_data()


def test_an_owner_reads_sold_beside_earned_and_the_earnings_axis_in_cents(
    sized_page: Page,  # noqa: F811
    live_server,
    data,
):
    page = sized_page
    page.goto(f"{live_server.url}{reverse('login')}")

    log_in(page, "olga")

    expect(page.get_by_role("heading", name="Dashboard: Fjord Compute")).to_be_visible()
    figures = page.locator("#sold-and-earned")
    expect(figures.locator("[data-field=sold]")).to_have_text("840.00 USD")
    expect(figures.locator("[data-field=earned]")).to_have_text(
        re.compile(r"^[0-9,]+\.[0-9]{2} USD$")
    )
    expect(page.locator("#pay-for-use")).to_contain_text("Teams pay for what they use")
    charts_drawn(page)
    labels = axis_labels(page, "earnings-data")
    assert labels and all(CENTS.match(label) for label in labels), labels
    assert_fits_and_no_errors(page)


def test_the_capacity_page_spreads_a_past_weeks_sale_and_tells_sold_from_listed(
    sized_page: Page,  # noqa: F811
    live_server,
):
    # Given a partition of 2 CPUs, an offer whose 160 sold core-hours were moved into the past
    # week after it was listed (as the demo's seed writes its history), its window ending in the
    # current hour, and an open offer of 24 core-hours from 10:00 to 22:00 tomorrow
    page = sized_page
    admin = MembershipFactory(role=Membership.Role.ADMIN)
    cluster = ClusterFactory(organization=admin.organization, name="aurora")
    PartitionFactory(cluster=cluster, name="local", cpus=2, gpus=0, nodes=1)
    now = timezone.now()
    this_hour = capacity.hour_floor(now)
    week = services.offer_create(
        actor=admin,
        cluster=cluster,
        partition="local",
        resource="cpu",
        quantity=160,
        window_start=this_hour + 2 * HOUR,
        window_end=this_hour + 2 * HOUR + timedelta(days=5),
        reserve_price="0.02",
        auction_closes_at=this_hour + HOUR,
    )
    window_end = this_hour + timedelta(minutes=1)
    Offer.objects.filter(pk=week.pk).update(
        auction_closes_at=window_end - timedelta(days=7, minutes=1),
        window_start=window_end - timedelta(days=7),
        window_end=window_end,
        status=Offer.Status.CLEARED,
        units_sold=160,
    )
    tomorrow = this_hour.replace(hour=10) + timedelta(days=1)
    services.offer_create(
        actor=admin,
        cluster=cluster,
        partition="local",
        resource="cpu",
        quantity=24,
        window_start=tomorrow,
        window_end=tomorrow + 12 * HOUR,
        reserve_price="0.02",
        auction_closes_at=tomorrow - HOUR,
    )

    # When the owner opens the cluster's capacity page
    page.goto(f"{live_server.url}{reverse('login')}")
    log_in(page, admin.user.username)
    page.goto(f"{live_server.url}{reverse('cluster-capacity', args=[cluster.uuid])}")

    # Then the week's sale counts about 0.95 an hour in its hours (its last minute here), never
    # 160 of 2; the open offer is listed, not sold
    calendar = page.locator('[data-partition="local"] [data-resource="cpu"] [data-field=calendar]')
    expect(calendar.locator(f"[data-hour='{this_hour.isoformat()}']")).to_have_attribute(
        "data-sold", "0.02"
    )
    listed = calendar.locator(f"[data-hour='{tomorrow.isoformat()}']")
    expect(listed).to_have_attribute("data-sold", "0.00")
    expect(listed).to_have_attribute("data-listed", "2.00")
    expect(listed).to_have_class(re.compile(r"\bcs-listed\b"))
    assert_fits_and_no_errors(page)
