"""The dashboard after log-in: a team's wallet, budget, allocations, unfinished jobs with their
progress and spending per day; an owner's earnings, utilization and the jobs on its clusters
(the teams named to its admins only); scoped to the user's organizations, in a number of
queries that does not grow with the rows."""

import datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing import selectors as billing_selectors
from billing import services as billing
from billing.models import Entry
from scheduler_bridge.models import Job
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    allocation_bought,
    funded_organization,
)
from tests.portal.dashboard_data import DashboardData, dashboard_data, settle, submit
from tests.web.test_money_pages import html

pytestmark = pytest.mark.django_db


@pytest.fixture
def data() -> DashboardData:
    return dashboard_data()


def last(values: list[Decimal], count: int = 7) -> list[Decimal]:
    return values[-count:]


def test_a_teams_dashboard(client, data):
    client.force_login(data.team_member.user)

    response = client.get(reverse("dashboard"))

    assert response.status_code == 200
    dashboard = response.context["dashboard"]
    assert dashboard.membership == data.team_member
    wallet = billing_selectors.wallet_get(data.team)
    assert (dashboard.wallet.available, dashboard.wallet.held) == (wallet.available, wallet.held)
    assert dashboard.budget.monthly_limit == Decimal("3000")
    assert [allocation.pk for allocation in dashboard.allocations] == [
        data.active.pk,
        data.upcoming.pk,
    ]
    assert [(item.job.name, item.tasks_done, item.percent) for item in dashboard.jobs] == [
        ("train-model", 0, 25),  # 45 of its 180 minutes
        ("parameter-sweep", 6, 60),
    ]
    # 8 cores for 1, 2 or 3 hours at 0.50 a core-hour on each of the last six days; today the
    # sweep's six ended tasks.
    sweep = Job.objects.get(pk=data.sweep.pk)
    spending = dashboard.spending.series[0].values
    assert len(spending) == 30
    assert last(spending) == [Decimal(n) for n in (4, 8, 12, 4, 8, 12)] + [sweep.cost]
    assert sum(spending[:-7]) == 0
    assert dashboard.is_owner is False
    page = response.content.decode()
    assert "6 of 10 tasks done" in page
    assert 'id="budget-gauge"' in page
    assert f'aria-valuenow="{dashboard.budget.used_percent}"' in page
    assert page.count("data-countdown>") >= 3  # two allocations and the running job
    assert 'id="spending-data"' in page
    assert 'id="utilization"' not in page


def test_an_owners_dashboard_names_the_teams_to_its_admins(client, data):
    client.force_login(data.owner_admin.user)

    response = client.get(reverse("dashboard"))

    assert response.status_code == 200
    dashboard = response.context["dashboard"]
    assert dashboard.is_owner and dashboard.shows_teams
    [earned] = dashboard.earnings.series
    assert earned.label == "fjord"
    # What the team paid less the 10 % fee; today the sweep's tasks, as the ledger has them.
    sweep_earnings = sum(
        Entry.objects.filter(
            kind=Entry.Kind.EARNING, transaction__reference=data.sweep.uuid
        ).values_list("amount", flat=True)
    )
    assert last(earned.values) == [
        Decimal(n) for n in ("3.6", "7.2", "10.8", "3.6", "7.2", "10.8")
    ] + [sweep_earnings]
    [utilization] = dashboard.utilization
    sold, used, idle = utilization.series
    assert (sold.label, used.label, idle.label) == ("Sold", "Used", "Idle (listed, not sold)")
    assert last(used.values)[:6] == [Decimal(n) for n in (8, 16, 24, 8, 16, 24)]
    # Three days ago only the first offer was on sale: 2,000 core-hours over its 27 days, of
    # which the team bought 1,500.
    assert sold.values[-4] == Decimal("55.56")
    assert idle.values[-4] == Decimal("18.52")
    assert [(item.job.scheduler_job_id, item.team) for item in dashboard.cluster_jobs] == [
        ("813", "Tidal Team"),
        ("812", "Tidal Team"),
    ]
    page = response.content.decode()
    assert '<td data-field="team">Tidal Team</td>' in page
    assert "You see which team runs each job" in page
    # Other teams' jobs are listed by their Slurm ids, never by name nor linked.
    assert "parameter-sweep" not in page
    assert reverse("job-detail", args=[data.sweep.uuid]) not in page


def test_an_organization_that_only_sells_sees_its_clusters_earnings_and_payouts_first(client, data):
    client.force_login(data.owner_admin.user)

    response = client.get(reverse("dashboard"))

    dashboard = response.context["dashboard"]
    assert dashboard.is_owner and not dashboard.is_buyer
    document = html(response)
    section = document.by_id("dashboard")
    # Its own half only: no empty wallet, spending or "Find an offer".
    for absent in ("wallet", "allocations", "running-jobs", "spending"):
        assert section.by_id(absent) is None, absent
    assert "Find an offer" not in section.text()
    headings = [node.attrs.get("id") for node in section.find_all("h2")]
    assert headings == ["dashboard-title", "owner-title"]
    clusters = section.by_id("owner-clusters")
    [row] = clusters.find_all("li")
    assert row.attrs["data-cluster"] == str(data.cluster.uuid)
    assert row.text() == "fjord Online Capacity"
    assert row.find("a").attrs["href"] == reverse("cluster-capacity", args=[data.cluster.uuid])
    earnings = section.by_id("owner-earnings")
    wallet = billing_selectors.wallet_get(data.owners)
    assert earnings.find(data_field="earnings").find("span").attrs["title"] == str(wallet.earnings)
    assert earnings.by_id("owner-payouts").attrs["href"] == reverse(
        "organization-payouts", args=[data.owners.uuid]
    )
    links = [node.text() for node in section.find("nav").find_all("a")]
    assert links == ["Money", "Clusters", "Offers of our clusters", "Payouts"]


def test_an_owners_member_is_told_that_its_admins_have_earnings_paid_out(client, data):
    client.force_login(data.owner_member.user)

    section = html(client.get(reverse("dashboard"))).by_id("dashboard")

    assert section.by_id("owner-payouts").text() == (
        "The admins of Fjord Compute have earnings paid out."
    )
    assert reverse("organization-payouts", args=[data.owners.uuid]) not in str(
        [node.attrs for node in section.find_all("a")]
    )


def test_an_organization_that_buys_and_sells_sees_both_halves_the_buyers_first(client, data):
    allocation_bought(data.owners, quantity=10)
    client.force_login(data.owner_admin.user)

    response = client.get(reverse("dashboard"))

    dashboard = response.context["dashboard"]
    assert dashboard.is_owner and dashboard.is_buyer
    section = html(response).by_id("dashboard")
    ids = [
        node.attrs["id"]
        for node in section.find_all()
        if node.attrs.get("id") in ("wallet", "allocations", "owner-clusters", "owner-earnings")
    ]
    assert ids == ["wallet", "allocations", "owner-clusters", "owner-earnings"]
    links = [node.text() for node in section.find("nav").find_all("a")]
    assert links == [
        "Money",
        "Allocations and bids",
        "Jobs",
        "Buy time",
        "Clusters",
        "Offers of our clusters",
        "Payouts",
    ]


def test_an_owners_members_see_the_jobs_on_its_clusters_without_the_teams(client, data):
    client.force_login(data.owner_member.user)

    response = client.get(reverse("dashboard"))

    dashboard = response.context["dashboard"]
    assert dashboard.is_owner and not dashboard.shows_teams
    assert [item.team for item in dashboard.cluster_jobs] == [None, None]
    page = response.content.decode()
    assert "Tidal Team" not in page
    assert "Only the admins of Fjord Compute see which team runs each job." in page


def test_a_member_of_several_organizations_picks_the_dashboard(client, data):
    user = data.team_member.user
    data.owners.memberships.create(user=user, role="member")
    client.force_login(user)

    first = client.get(reverse("dashboard"))
    chosen = client.get(reverse("dashboard"), {"organization": str(data.team.uuid)})
    by_path = client.get(reverse("organization-dashboard", args=[data.team.uuid]))

    # The first by name unless another is asked for.
    assert first.context["dashboard"].membership.organization == data.owners
    assert chosen.context["dashboard"].membership.organization == data.team
    assert by_path.context["dashboard"].membership.organization == data.team
    assert 'id="dashboard-switch"' in first.content.decode()


@pytest.mark.parametrize("organization", ["other", "not-a-uuid"])
def test_another_organizations_dashboard_is_404(client, data, organization):
    other = OrganizationFactory(name="Elsewhere")
    asked = str(other.uuid) if organization == "other" else organization
    client.force_login(data.team_member.user)

    assert client.get(reverse("dashboard"), {"organization": asked}).status_code == 404
    assert client.get(reverse("organization-dashboard", args=[other.uuid])).status_code == 404


def queries_of(client, user) -> int:
    client.force_login(user)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("dashboard")).status_code == 200
    return len(queries)


def test_the_dashboards_queries_do_not_grow_with_jobs_allocations_or_days(client, data):
    team_queries = queries_of(client, data.team_member.user)
    owner_queries = queries_of(client, data.owner_admin.user)

    # Five more unfinished jobs, three of them settled in part, on a second allocation.
    for index in range(5):
        job = submit(
            data.team_member, data.active, f"more-{index}", slurm_id=f"90{index}", array="0-3"
        )
        if index < 3:
            settle(job, list(job.tasks.all())[:2], ended=data.now, elapsed=600)

    assert queries_of(client, data.team_member.user) == team_queries
    assert queries_of(client, data.owner_admin.user) == owner_queries
    # 15 and 22 today, the session, the menu's counts and the notifications' bell included.
    assert team_queries <= 20
    assert owner_queries <= 28


def test_the_spending_table_lists_each_day_newest_first(client, data):
    client.force_login(data.team_member.user)

    chart = client.get(reverse("dashboard")).context["dashboard"].spending

    [(today, _), (yesterday, [spent_yesterday]), *_] = chart.rows
    assert today - yesterday == datetime.timedelta(days=1)
    assert spent_yesterday == Decimal(12)
    assert chart.as_data()["datasets"][0]["data"][-2] == 12.0


def test_a_new_organizations_dashboard_with_a_zero_limit_says_so(client):
    organization = funded_organization("0", name="Fresh Team")
    member = MembershipFactory(organization=organization, role="admin")
    billing.budget_set(organization=organization, monthly_limit=Decimal("0"), alert_thresholds=[])
    client.force_login(member.user)

    response = client.get(reverse("dashboard"))

    assert response.status_code == 200
    page = response.content.decode()
    assert "The monthly limit is 0 USD: no new bid or purchase is accepted." in page
    assert 'id="budget-gauge"' not in page
    assert "No allocation is upcoming or active." in page
    assert "No job of this organization is queued or running." in page
    assert response.context["dashboard"].spending.series[0].total == 0


def test_an_owner_reads_what_was_sold_beside_what_was_earned(client, data):
    # Given the team bought 1,500 core-hours at 0.50 and 200 at 0.45 on the owner's cluster,
    # and ran jobs on them
    client.force_login(data.owner_admin.user)

    # When the owner opens the dashboard
    response = client.get(reverse("dashboard"))

    # Then it shows both figures side by side, and that teams pay only for what they use
    dashboard = response.context["dashboard"]
    earned = sum(Entry.objects.filter(kind=Entry.Kind.EARNING).values_list("amount", flat=True))
    assert dashboard.sold_value == Decimal("840.00")
    assert dashboard.earned_value == earned
    page = html(response)
    figures = page.by_id("sold-and-earned")
    assert figures.find(data_field="sold").text() == "840.00 USD"
    assert figures.find(data_field="earned").text() == f"{earned:.2f} USD"
    assert page.by_id("pay-for-use").text().startswith("Teams pay for what they use")
