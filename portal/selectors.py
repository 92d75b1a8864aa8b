"""The reads of the pages that span apps (ADR 0026).

An organization's dashboard, the page after log-in: its wallet and budget, its open
allocations, its unfinished jobs and its spending per day; and, when it owns clusters, its
earnings, the utilization of its clusters (listed, sold, used and idle units per day) and the
jobs running on them. An organization that owns clusters and has never bought is a seller
only: its page shows its own half, not an empty wallet.

An organization as its member sees it (the answers of `POST /organizations/` and
`GET /organizations/{id}/`): with its wallet and budget.

They sit here, above every app, because no app below may read them all: the dashboard shows
jobs beside the market and billing, and an organization's money is billing's, above it. Every
series is one query, whatever the number of days, jobs or allocations in it; the
membership passed in was found by `organizations.selectors.membership_get_for_user`, so
everything read is the organization's own (or, for an owner, about its clusters)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.db.models import Count, F, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing import selectors as billing_selectors
from marketplace import selectors as market_selectors
from marketplace.models import Allocation, Cluster, Resource
from organizations.models import Membership
from scheduler_bridge.models import ACTIVE_STATES, ENDED_STATES, Job, JobRun, JobState, RunState

DAYS = 30
LISTED = 10
CENT = Decimal("0.01")
UNFINISHED_STATES = (JobState.QUEUED, *sorted(ACTIVE_STATES))


def rounded(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass(frozen=True)
class Series:
    """One line or bar series of a chart, with its values by day (as many as the labels)."""

    label: str
    values: list[Decimal]

    @property
    def total(self) -> Decimal:
        return sum(self.values, start=Decimal(0))


@dataclass(frozen=True)
class Chart:
    """A chart's labels (UTC days) and series, drawn by Chart.js and shown as a table."""

    key: str
    title: str
    unit: str
    days: list[datetime.date]
    series: list[Series]
    stacked: bool = False
    is_money: bool = False
    """Amounts in `unit` (a currency): the table writes them as every amount is written, and
    the chart's axis in cents (static/js/charts.js)."""

    @property
    def data_id(self) -> str:
        return f"{self.key}-data"

    def as_data(self) -> dict[str, Any]:
        """What static/js/charts.js draws: JSON numbers are enough for a picture; the table
        beside it shows the exact figures."""
        return {
            "labels": [day.isoformat() for day in self.days],
            "unit": self.unit,
            "stacked": self.stacked,
            "money": self.is_money,
            "datasets": [
                {"label": series.label, "data": [float(value) for value in series.values]}
                for series in self.series
            ],
        }

    @property
    def rows(self) -> list[tuple[datetime.date, list[Decimal]]]:
        """The table: one row per day, newest first, one column per series."""
        return [
            (day, [series.values[index] for series in self.series])
            for index, day in reversed(list(enumerate(self.days)))
        ]


@dataclass(frozen=True)
class JobProgress:
    job: Job
    tasks_done: int
    team: str | None
    """The job's organization, shown on an owner's dashboard to its admins only."""

    @property
    def percent(self) -> int:
        """An array's share of tasks ended; a single job's share of its time limit used."""
        job = self.job
        if job.task_count > 1:
            return round(100 * self.tasks_done / job.task_count)
        if job.started_at is None or job.state != JobState.RUNNING:
            return 0
        elapsed = (timezone.now() - job.started_at).total_seconds()
        return max(0, min(100, round(100 * elapsed / (job.time_limit_minutes * 60))))

    @property
    def ends_by(self) -> datetime.datetime | None:
        """When Slurm's time limit ends the job at the latest (single running jobs)."""
        job = self.job
        if job.started_at is None or job.state != JobState.RUNNING:
            return None
        return job.started_at + datetime.timedelta(minutes=job.time_limit_minutes)


@dataclass
class Dashboard:
    membership: Membership
    since: datetime.datetime
    days: list[datetime.date]
    wallet: billing_selectors.Wallet
    budget: billing_selectors.BudgetStatus
    allocations: list[Allocation]
    allocation_count: int
    jobs: list[JobProgress]
    job_count: int
    spending: Chart
    is_owner: bool = False
    is_buyer: bool = True
    """Whether the organization buys time: an owner that has never bought an allocation
    sees its clusters, earnings and payouts first, not an empty wallet and allocations."""
    shows_teams: bool = False
    clusters: list[Cluster] = field(default_factory=list)
    earnings: Chart | None = None
    sold_value: Decimal = Decimal(0)
    """What teams bought on the clusters in these days, at their prices."""
    earned_value: Decimal = Decimal(0)
    """What the clusters earned in these days, net of the platform's fee."""
    utilization: list[Chart] = field(default_factory=list)
    capacity_kinds: Chart | None = None
    cluster_jobs: list[JobProgress] = field(default_factory=list)
    cluster_job_count: int = 0

    @property
    def charts(self) -> list[Chart]:
        charts = [self.spending]
        if self.earnings is not None:
            charts.append(self.earnings)
        if self.capacity_kinds is not None:
            charts.append(self.capacity_kinds)
        return charts + self.utilization


def dashboard_get(membership: Membership, *, days: int = DAYS) -> Dashboard:
    """The dashboard of the membership's organization over the last `days` UTC days, today
    included. Owners' admins see which team runs each job on their clusters; their members
    see the jobs without the teams' names."""
    organization = membership.organization
    today = timezone.now().astimezone(datetime.UTC).date()
    day_list = market_selectors.days_of(today - datetime.timedelta(days=days - 1), today)
    since = datetime.datetime.combine(day_list[0], datetime.time(), tzinfo=datetime.UTC)
    wallet = billing_selectors.wallet_get(organization)
    allocations = market_selectors.allocation_list_open(organization)
    jobs = _unfinished(Job.objects.filter(organization=organization))
    spent = billing_selectors.spending_by_day(organization, since=since)
    dashboard = Dashboard(
        membership=membership,
        since=since,
        days=day_list,
        wallet=wallet,
        budget=billing_selectors.budget_status(organization, wallet),
        allocations=list(allocations[:LISTED]),
        allocation_count=allocations.count(),
        jobs=[JobProgress(job, job.tasks_done, None) for job in jobs[:LISTED]],
        job_count=jobs.count(),
        spending=Chart(
            key="spending",
            title="Spending per day",
            unit=wallet.currency,
            is_money=True,
            days=day_list,
            series=[Series("Charged for jobs", [spent.get(day, Decimal(0)) for day in day_list])],
        ),
    )
    clusters = list(market_selectors.cluster_list_for_organization(organization))
    if clusters:
        _add_owner_view(dashboard, clusters)
        # Decided from what the organization did, not from a setting: one that sells and has
        # never bought is a seller only; its first purchase brings the buyer's half back.
        dashboard.is_buyer = Allocation.objects.filter(organization=organization).exists()
    return dashboard


def _unfinished(jobs: Any) -> Any:
    """Unfinished jobs, the latest first, each with its count of ended tasks (one query)."""
    return (
        jobs.filter(state__in=UNFINISHED_STATES)
        .select_related("allocation__partition", "cluster", "organization")
        .defer("script", "environment", "secret_environment")
        .annotate(tasks_done=Count("tasks", filter=Q(tasks__state__in=sorted(ENDED_STATES))))
        .order_by("-created_at", "-id")
    )


def _add_owner_view(dashboard: Dashboard, clusters: list[Cluster]) -> None:
    """The owner's half: earnings, utilization and capacity kinds per day, and the jobs on its
    clusters."""
    organization = dashboard.membership.organization
    dashboard.is_owner = True
    dashboard.clusters = clusters
    dashboard.shows_teams = dashboard.membership.is_admin
    _add_earnings(dashboard)
    dashboard.utilization = _utilization_charts(organization, dashboard.since, dashboard.days)
    dashboard.capacity_kinds = _kinds_chart(organization, dashboard.since, dashboard.days)
    _add_cluster_jobs(dashboard)


def _add_earnings(dashboard: Dashboard) -> None:
    """What the clusters earned per day, one series per cluster, and what teams bought on them
    in these days."""
    organization = dashboard.membership.organization
    days = dashboard.days
    earned = billing_selectors.earnings_by_day(organization, since=dashboard.since)
    dashboard.earnings = Chart(
        key="earnings",
        title="Net earnings per day and cluster",
        unit=dashboard.wallet.currency,
        is_money=True,
        days=days,
        stacked=True,
        series=[
            Series(source.source_name, [source.by_day.get(day, Decimal(0)) for day in days])
            for source in earned
        ],
    )
    dashboard.sold_value = market_selectors.owner_sold_value(organization, since=dashboard.since)
    dashboard.earned_value = sum(
        (series.total for series in dashboard.earnings.series), start=Decimal(0)
    )


def _utilization_charts(
    organization: Any, since: datetime.datetime, days: list[datetime.date]
) -> list[Chart]:
    """One chart per cluster and resource, by cluster name: units sold, used and listed but
    not sold, per day."""
    capacity = market_selectors.owner_capacity_by_day(organization, days)
    used = _used_by_day(organization, since)
    charts = []
    for key, entry in sorted(
        capacity.items(), key=lambda item: (item[1]["cluster_name"], item[1]["resource"])
    ):
        offered = [entry["offered"].get(day, Decimal(0)) for day in days]
        sold = [entry["sold"].get(day, Decimal(0)) for day in days]
        unit = "GPU-hours" if entry["resource"] == Resource.GPU else "core-hours"
        charts.append(
            Chart(
                key=f"utilization-{entry['cluster_uuid']}-{entry['resource']}",
                title=f"{entry['cluster_name']}: {unit} per day",
                unit=unit,
                days=days,
                series=[
                    Series("Sold", [rounded(value) for value in sold]),
                    Series("Used", [used.get((*key, day), Decimal(0)) for day in days]),
                    Series(
                        "Idle (listed, not sold)",
                        [
                            rounded(max(Decimal(0), o - s))
                            for o, s in zip(offered, sold, strict=True)
                        ],
                    ),
                ],
            )
        )
    return charts


def _add_cluster_jobs(dashboard: Dashboard) -> None:
    """The unfinished jobs on the owner's clusters, with their teams to its admins only."""
    jobs = _unfinished(Job.objects.filter(cluster__organization=dashboard.membership.organization))
    dashboard.cluster_jobs = [
        JobProgress(
            job,
            job.tasks_done,
            job.organization.name if dashboard.shows_teams else None,
        )
        for job in jobs[:LISTED]
    ]
    dashboard.cluster_job_count = jobs.count()


def _kinds_chart(organization: Any, since: datetime.datetime, days: list[datetime.date]) -> Chart:
    """What each kind of capacity cost the owner's own users, per day: how often their jobs
    took cores back from the market's (runs preempted, one query), and the cores held in
    reserved blocks for teams (on average over the day)."""
    preempted = {
        row["day"]: row["runs"]
        for row in JobRun.objects.filter(
            cluster__organization=organization, ended_at__gte=since, state=RunState.PREEMPTED
        )
        .annotate(day=TruncDate("ended_at", tzinfo=datetime.UTC))
        .values("day")
        .annotate(runs=Count("id"))
        .order_by()
    }
    reserved = market_selectors.owner_reserved_cores_by_day(organization, days)
    return Chart(
        key="capacity-kinds",
        title="Preemptions and reserved cores per day",
        unit="runs / cores",
        days=days,
        series=[
            Series(
                "Market runs preempted by your users",
                [Decimal(preempted.get(day, 0)) for day in days],
            ),
            Series(
                "Cores reserved for teams (average)",
                [rounded(reserved.get(day, Decimal(0))) for day in days],
            ),
        ],
    )


def _used_by_day(
    organization: Any, since: datetime.datetime
) -> dict[tuple[int, str, datetime.date], Decimal]:
    """Units charged for runs that ended on the organization's clusters per (cluster id,
    resource, UTC day), in one query."""
    rows = (
        JobRun.objects.filter(cluster__organization=organization, ended_at__gte=since)
        .annotate(
            day=TruncDate("ended_at", tzinfo=datetime.UTC),
            resource=F("task__job__allocation__resource"),
        )
        .values("cluster_id", "resource", "day")
        .annotate(total=Sum("units"))
        .order_by()
    )
    return {(row["cluster_id"], row["resource"], row["day"]): row["total"] for row in rows}


def organization_detail_get(membership: Membership) -> dict[str, Any]:
    """An organization as its member sees it, with its wallet and budget."""
    organization = membership.organization
    wallet = billing_selectors.wallet_get(organization)
    return {
        "id": organization.uuid,
        "name": organization.name,
        "role": membership.role,
        "created_at": organization.created_at,
        "wallet": wallet,
        "budget": billing_selectors.budget_status(organization, wallet),
    }
