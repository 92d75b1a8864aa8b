"""Reads of jobs, always scoped to who is asking: members see their organizations' jobs and
nobody else's. At the end, the work the periodic tasks find (clusters to poll, leases to end,
results to collect...): the platform's own reads, with no one asking."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import (
    Count,
    Exists,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
)
from django.utils import timezone

from computeshare.errors import NotFound
from computeshare.ids import id_prefix_q
from computeshare.models import User
from computeshare.numbers import MICRO_UNIT
from marketplace.models import Allocation, Cluster, PendingReservation, Resource, TenantLease
from organizations.models import Membership, Organization
from scheduler_bridge import sizing
from scheduler_bridge.job_requests import JobSize, job_units
from scheduler_bridge.models import (
    ACTIVE_STATES,
    ENDED_STATES,
    RESULTS_FINAL,
    SECONDS_PER_HOUR,
    Job,
    JobEvent,
    JobFile,
    JobRun,
    JobState,
    JobTask,
    Sweep,
    SweepJob,
    SweepRow,
    money_of,
)
from scheduler_bridge.sizing import SizingAdvice


def job_list_for_user(user: User) -> QuerySet[Job]:
    return (
        Job.objects.filter(
            organization__in=Membership.objects.filter(user=user).values("organization")
        )
        .select_related("allocation__partition", "cluster", "organization")
        .defer("script", "environment", "secret_environment")
        .order_by("-created_at", "-id")
    )


def job_list_filtered(
    user: User,
    *,
    states: list[str] | None = None,
    allocation: Any = None,
    organization: Any = None,
    id_prefix: str | None = None,
) -> QuerySet[Job]:
    # An array's progress on the list ("6 of 10 tasks done"), counted in the same query.
    jobs = job_list_for_user(user).annotate(
        tasks_done=Count("tasks", filter=Q(tasks__state__in=ENDED_STATES))
    )
    if states:
        jobs = jobs.filter(state__in=states)
    if allocation is not None:
        jobs = jobs.filter(allocation__uuid=allocation)
    if organization is not None:
        jobs = jobs.filter(organization__uuid=organization)
    if id_prefix:
        jobs = jobs.filter(id_prefix_q(id_prefix))
    return jobs


# What a job's detail shows beside the job: its tasks and its history, in order.
_DETAIL_PREFETCHES = (
    Prefetch("tasks", queryset=JobTask.objects.order_by("array_task_id")),
    Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")),
)


def job_get_for_user(user: User, job_uuid: Any) -> Job:
    """One job with its tasks and history; `NotFound` for anyone outside its organization."""
    try:
        return (
            Job.objects.filter(
                organization__in=Membership.objects.filter(user=user).values("organization")
            )
            .select_related("allocation__partition", "cluster", "organization", "submitted_by")
            .prefetch_related(*_DETAIL_PREFETCHES)
            .get(uuid=job_uuid)
        )
    except (Job.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such job.") from error


def job_detail_of_accepted(
    job: Job, *, tasks: list[JobTask], events: list[JobEvent], input_files: list[JobFile]
) -> Job:
    """The job `job_accept` just accepted, with its tasks, history and input files as
    `job_get_for_user` reads them: the job's own row, the rows it points to and those beside
    it are the rows the submission wrote (the tasks by index, as `_DETAIL_PREFETCHES` orders
    them), so nothing is read back (it was five queries, then three). They are put where
    `prefetch_related` puts what it reads."""
    job._prefetched_objects_cache = {  # type: ignore[attr-defined]  # Django's own cache
        "tasks": _read_already(job.tasks.all(), tasks),
        "events": _read_already(job.events.all(), events),
        "files": _read_already(job.files.all(), input_files),
    }
    return job


def _read_already(queryset: QuerySet[Any], rows: list[Any]) -> QuerySet[Any]:
    """`queryset` as if evaluated into `rows`, as `prefetch_related_objects` leaves one."""
    queryset._result_cache = rows
    queryset._prefetch_done = True  # type: ignore[attr-defined]  # set by prefetch_related too
    return queryset


def job_input_file_list(job: Job) -> list[JobFile]:
    """The job's input files by name. A job known to have none (the answer to a submission
    without files, `job_detail_of_accepted`) reads nothing; otherwise they are read, in the
    database's order of names (its collation's, not Python's)."""
    cache: dict[str, QuerySet[JobFile]] = getattr(job, "_prefetched_objects_cache", {})
    if "files" in cache and not cache["files"]:
        return []
    return list(job.files.filter(kind=JobFile.Kind.INPUT).order_by("name"))


def job_run_list(job: Job) -> QuerySet[JobRun]:
    """The job's runs as accounting recorded them and as they were charged, task by task: more
    than one per task when the job requeued or resized itself (every run is charged). The job
    was fetched through `job_get_for_user`: the caller may see it."""
    return (
        JobRun.objects.filter(task__job=job)
        .select_related("task")
        .order_by("task__array_task_id", "submit_time", "id")
    )


def job_usage_list(
    organization: Organization, *, since: datetime | None = None, until: datetime | None = None
) -> QuerySet[Job]:
    """The organization's jobs that ran, for its usage report: ended in the range (or still
    running), oldest first; those the team's own jobs submitted on the cluster among them, with
    their `origin` and Slurm id. A job that ran is one with a start or a charge: one that ran
    for less than accounting's whole second was charged 0 units and is a row too (its start is
    accounting's, `RunRecord.has_run`); one cancelled before it started is not."""
    jobs = (
        Job.objects.filter(organization=organization)
        .exclude(state__in=[JobState.QUEUED])
        .exclude(started_at__isnull=True, units=0)
        .select_related("cluster", "allocation__partition")
        .only(
            "uuid",
            "name",
            "state",
            "units",
            "cost",
            "started_at",
            "ended_at",
            "created_at",
            "origin",
            "scheduler_job_id",
            "partition_name",
            "cluster__name",
            "allocation__partition__name",
        )
        .order_by("created_at", "id")
    )
    if since is not None:
        jobs = jobs.filter(Q(ended_at__gte=since) | Q(ended_at__isnull=True))
    if until is not None:
        jobs = jobs.filter(
            Q(started_at__lt=until) | Q(started_at__isnull=True, created_at__lt=until)
        )
    return jobs


def job_result_files(job: Job) -> QuerySet[JobFile]:
    """The result files of a job kept in storage, by name."""
    return (
        JobFile.objects.filter(job=job, kind=JobFile.Kind.RESULT)
        .exclude(stored="")
        .order_by("name")
    )


def job_result_file(job: Job, name: str) -> JobFile:
    """One result file of the job by its path in the job's folder; `NotFound` otherwise (a
    name that escapes the folder is simply not among them, nor one with a NUL, which no stored
    name has and PostgreSQL would refuse to compare)."""
    if "\x00" in name:
        raise NotFound("The job has no such result file.")
    row = job_result_files(job).filter(name=name).first()
    if row is None:
        raise NotFound("The job has no such result file.")
    return row


# --- Sweeps ----------------------------------------------------------------------------------


def sweep_list_for_user(user: User) -> QuerySet[Sweep]:
    """The sweeps of the caller's organizations, newest first."""
    return (
        Sweep.objects.filter(
            organization__in=Membership.objects.filter(user=user).values("organization")
        )
        .select_related("allocation", "organization")
        .defer("script")
        .order_by("-created_at", "-id")
    )


def sweep_get_for_user(user: User, sweep_uuid: Any) -> Sweep:
    """One sweep with its jobs; `NotFound` for anyone outside its organization."""
    try:
        return (
            Sweep.objects.filter(
                organization__in=Membership.objects.filter(user=user).values("organization")
            )
            .select_related("allocation__cluster", "organization", "submitted_by")
            .prefetch_related(
                Prefetch(
                    "sweep_jobs",
                    queryset=SweepJob.objects.select_related("job").order_by("attempt"),
                )
            )
            .get(uuid=sweep_uuid)
        )
    except (Sweep.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such sweep.") from error


def sweep_rows(sweep: Sweep) -> QuerySet[SweepRow]:
    """The sweep's rows in table order, each with the task that ran it last and its job (the
    sweep was fetched through `sweep_get_for_user`: the caller may see it)."""
    return (
        SweepRow.objects.filter(sweep=sweep)
        .select_related("task__job")
        .only(
            "index",
            "values",
            "attempts",
            "result_state",
            "result",
            "result_detail",
            "task__array_task_id",
            "task__state",
            "task__exit_code",
            "task__cost",
            "task__elapsed_seconds",
            "task__job__uuid",
        )
        .order_by("index")
    )


@dataclass(frozen=True)
class Estimate:
    """The most a job can cost: what it reserves (`units`, for every task) at the allocation's
    unit price, beside the allocation's unreserved units. `problem` says why there is no figure
    while the sizes are not whole numbers yet."""

    unreserved: Decimal
    unit_price: Decimal
    task_count: int = 1
    units: Decimal | None = None
    cost: Decimal | None = None
    problem: str = ""

    @property
    def is_over(self) -> bool:
        return self.units is not None and self.units > self.unreserved


def job_estimate(
    *,
    allocation: Allocation,
    size: JobSize | None = None,
    task_count: int = 1,
    problem: str = "",
) -> Estimate:
    """What `job_submit` would reserve for `size` with `task_count` tasks (`job_units`, as
    `job_request_sized` reserves and the API's quote counts), so that the submission page's
    figure is the reservation and the quote's to the micro-unit. Without a size, no figure,
    and `problem` says why."""
    if size is None:
        return Estimate(
            unreserved=allocation.remaining, unit_price=allocation.unit_price, problem=problem
        )
    units = job_units(resource=allocation.resource, size=size, task_count=task_count)
    return Estimate(
        unreserved=allocation.remaining,
        unit_price=allocation.unit_price,
        task_count=task_count,
        units=units,
        cost=money_of(units, allocation.unit_price),
    )


def job_sizing_advice(job: Job) -> SizingAdvice | None:
    """The right-sizing advice on a job the caller may see (`job_get_for_user`), from its
    settled runs; None before it ended or when it never ran. A job that has not ended has no
    advice whatever its runs, so they are not read: every detail of an active job skips that
    query."""
    runs = list(job_run_list(job)) if job.is_ended else []
    return sizing.job_sizing_advice(job, runs, str(settings.PLATFORM_CURRENCY))


def job_latest_sized(
    organization_id: int, *, template: str = "", partition_id: int | None = None
) -> Job | None:
    """The organization's newest ended job started from `template`: the one whose use the
    form started from that template again offers as sizes."""
    jobs = Job.objects.filter(
        organization_id=organization_id,
        template=template,
        state__in=[state.value for state in ENDED_STATES],
        elapsed_seconds__gt=0,
    ).select_related("allocation")
    if partition_id is not None:
        jobs = jobs.filter(allocation__partition_id=partition_id)
    return jobs.order_by("-ended_at", "-id").first()


@dataclass(frozen=True)
class EfficiencyJob:
    """One job's share of the month's waste."""

    job: Job
    idle_core_hours: Decimal
    idle_cost: Decimal
    unused_reserved_units: Decimal
    unused_reserved_value: Decimal


@dataclass(frozen=True)
class EfficiencyReport:
    """A team's month: what its jobs were charged for cores that sat idle (allocated cores x
    elapsed, less the CPU time they used, at what those runs cost), and what they reserved of
    their allocations without using it (time limit far above the run). Reservations are not
    charged, but they hold allocation units other jobs could not use meanwhile; their value is
    the allocation's unit price."""

    organization: Organization
    month_start: datetime
    month_end: datetime
    currency: str
    jobs_count: int
    core_hours: Decimal  # allocated core-hours of the CPU runs
    used_core_hours: Decimal  # their CPU time, in hours
    idle_core_hours: Decimal
    cost: Decimal  # what the CPU runs were charged
    idle_cost: Decimal
    reserved_units: Decimal  # what the month's ended jobs reserved
    unused_reserved_units: Decimal
    unused_reserved_value: Decimal
    worst_jobs: list[EfficiencyJob]

    @property
    def efficiency(self) -> Decimal | None:
        if not self.core_hours:
            return None
        return (self.used_core_hours / self.core_hours).quantize(Decimal("0.0001"))


EFFICIENCY_WORST_JOBS = 10


def organization_efficiency_report(
    organization: Organization, month_start: datetime
) -> EfficiencyReport:
    """The report of the month that starts at `month_start` (UTC, first day 00:00) over the
    organization's jobs that ended in it; the caller is a member (`membership_get_for_user`).
    GPU allocations' runs are left out of the idle cores: they are priced per GPU."""
    month_end = (month_start + timedelta(days=32)).replace(day=1)
    jobs = _jobs_ended_between(organization, month_start, month_end)
    runs = _cpu_runs_of(jobs)
    rows = [_efficiency_job(job, runs.idle.get(job.pk, (Decimal(0), Decimal(0)))) for job in jobs]
    worst = sorted(
        (row for row in rows if row.idle_cost or row.unused_reserved_units),
        key=lambda row: (row.idle_cost, row.unused_reserved_value),
        reverse=True,
    )[:EFFICIENCY_WORST_JOBS]
    return EfficiencyReport(
        organization=organization,
        month_start=month_start,
        month_end=month_end,
        currency=str(settings.PLATFORM_CURRENCY),
        jobs_count=len(jobs),
        core_hours=_hours(runs.core_seconds),
        used_core_hours=_hours(runs.used_seconds),
        idle_core_hours=_hours(runs.core_seconds - runs.used_seconds),
        cost=runs.cost,
        idle_cost=sum((row.idle_cost for row in rows), Decimal(0)),
        reserved_units=sum((job.reserved_units for job in jobs), Decimal(0)),
        unused_reserved_units=sum((row.unused_reserved_units for row in rows), Decimal(0)),
        unused_reserved_value=sum((row.unused_reserved_value for row in rows), Decimal(0)),
        worst_jobs=worst,
    )


@dataclass
class _CpuRuns:
    """A month's CPU runs: core-seconds allocated and used, their cost, and each job's idle."""

    core_seconds: Decimal = Decimal(0)
    used_seconds: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    idle: dict[int, tuple[Decimal, Decimal]] = field(default_factory=dict)


def _hours(seconds: Decimal) -> Decimal:
    return (seconds / SECONDS_PER_HOUR).quantize(MICRO_UNIT)


def _jobs_ended_between(organization: Organization, start: datetime, end: datetime) -> list[Job]:
    """The organization's jobs that ended in [start, end), with what the report needs."""
    return list(
        Job.objects.filter(organization=organization, ended_at__gte=start, ended_at__lt=end)
        .select_related("allocation")
        .only(
            "uuid",
            "name",
            "state",
            "reserved_units",
            "units",
            "cost",
            "ended_at",
            "allocation__unit_price",
            "allocation__resource",
        )
        .order_by("ended_at", "id")
    )


def _cpu_runs_of(jobs: list[Job]) -> _CpuRuns:
    """The jobs' CPU runs: a run's idle share of its core-seconds costs that share of its charge."""
    totals = _CpuRuns()
    runs = JobRun.objects.filter(
        task__job__in=[job.pk for job in jobs],
        task__job__allocation__resource=Resource.CPU,
        elapsed_seconds__gt=0,
    ).values_list("task__job_id", "allocated_cpus", "elapsed_seconds", "cpu_seconds", "cost")
    for job_id, cpus, elapsed, cpu, run_cost in runs.iterator(chunk_size=2000):
        allocated = Decimal(cpus * elapsed)
        if not allocated:
            continue
        used = min(cpu, allocated)
        share = (allocated - used) / allocated
        seconds, money = totals.idle.get(job_id, (Decimal(0), Decimal(0)))
        totals.idle[job_id] = (seconds + allocated - used, money + run_cost * share)
        totals.core_seconds += allocated
        totals.used_seconds += used
        totals.cost += run_cost
    return totals


def _efficiency_job(job: Job, idle: tuple[Decimal, Decimal]) -> EfficiencyJob:
    """One job's idle cores (seconds, money) and what it reserved without using."""
    seconds, money = idle
    unused = max(job.reserved_units - job.units, Decimal(0))
    return EfficiencyJob(
        job=job,
        idle_core_hours=_hours(seconds),
        idle_cost=money_of(money, Decimal(1)),
        unused_reserved_units=unused,
        unused_reserved_value=money_of(unused, job.allocation.unit_price),
    )


# The work the periodic tasks find.


def clusters_to_poll() -> list[int]:
    """The clusters with jobs queued for them or on them, and those where a team holds a
    tenant account (its jobs may submit jobs of their own at any time)."""
    with_jobs = set(
        Job.objects.filter(state__in=[JobState.QUEUED, *ACTIVE_STATES])
        .order_by()
        .values_list("cluster_id", flat=True)
        .distinct()
    )
    with_leases = set(
        TenantLease.objects.filter(
            status__in=[TenantLease.Status.ACTIVE, TenantLease.Status.ENDING]
        )
        .order_by()
        .values_list("cluster_id", flat=True)
        .distinct()
    )
    return sorted(with_jobs | with_leases | set(clusters_to_sample()))


def clusters_to_reconcile() -> list[int]:
    """The clusters that ran jobs, or lent tenant accounts, in the reconciliation's window."""
    since = timezone.now() - timedelta(days=settings.JOBS_RECONCILE_DAYS + 1)
    with_jobs = set(
        Job.objects.filter(submitted_at__gte=since)
        .order_by()
        .values_list("cluster_id", flat=True)
        .distinct()
    )
    with_leases = set(
        TenantLease.objects.filter(
            Q(status__in=TenantLease.HOLDING_STATES) | Q(ended_at__gte=since)
        )
        .order_by()
        .values_list("cluster_id", flat=True)
        .distinct()
    )
    return sorted(with_jobs | with_leases)


def is_idle_sampling_on() -> bool:
    return float(settings.IDLE_SAMPLE_SECONDS) > 0


def clusters_to_sample(now: datetime | None = None) -> list[int]:
    """Online Slurm clusters whose last idle sample is older than `IDLE_SAMPLE_SECONDS`."""
    if not is_idle_sampling_on():
        return []
    since = (now or timezone.now()) - timedelta(seconds=settings.IDLE_SAMPLE_SECONDS)
    return sorted(
        Cluster.objects.filter(status=Cluster.Status.ONLINE, backend=Cluster.Backend.SLURM)
        .filter(Q(poll__idle_sampled_at__isnull=True) | Q(poll__idle_sampled_at__lt=since))
        .values_list("pk", flat=True)
    )


def tenant_leases_idle(leases: QuerySet[TenantLease]) -> QuerySet[TenantLease]:
    """The active leases of `leases` whose team has neither an open allocation (one whose
    window has not been closed), nor an unfinished job, nor a reserved block being sold to it
    (a `PendingReservation` not yet stale: the reservation names the lease's account) on the
    lease's cluster."""
    open_allocations = Allocation.objects.filter(
        cluster=OuterRef("cluster"),
        organization=OuterRef("organization"),
        closed_at__isnull=True,
    )
    unfinished_jobs = Job.objects.filter(
        lease=OuterRef("pk"), state__in=[JobState.QUEUED, *ACTIVE_STATES]
    )
    blocks_being_sold = PendingReservation.objects.filter(
        cluster=OuterRef("cluster"),
        organization=OuterRef("organization"),
        created_at__gt=timezone.now() - PendingReservation.STALE_AFTER,
    )
    return leases.filter(status=TenantLease.Status.ACTIVE).filter(
        ~Exists(open_allocations), ~Exists(unfinished_jobs), ~Exists(blocks_being_sold)
    )


def tenant_leases_to_end() -> list[int]:
    """Every lease that `tenant_leases_idle` finds, in id order."""
    return list(
        tenant_leases_idle(TenantLease.objects.all()).order_by("pk").values_list("pk", flat=True)
    )


def jobs_results_to_collect() -> list[int]:
    """Ended jobs of the last retention period whose results wait to be collected (the task
    enqueued at their end was lost, or a try failed and its backoff has passed), or whose
    collector vanished."""
    now = timezone.now()
    since = now - timedelta(days=settings.JOB_RESULT_RETENTION_DAYS)
    candidates = Job.objects.filter(
        state__in=ENDED_STATES,
        ended_at__gte=since,
        results_state__in=[Job.ResultsState.WAITING, Job.ResultsState.COLLECTING],
    ).only("pk", "results_state", "results_claimed_at", "results_attempts")
    return [job.pk for job in candidates[:2000] if job.are_results_due(now)][:500]


def sweep_jobs_to_gather() -> list[int]:
    """Ended sweep jobs whose files are final but whose rows still wait: their gathering was
    lost (a worker stopped between the two), or their job never reached the cluster."""
    return list(
        SweepJob.objects.filter(
            sweep__state=Sweep.State.RUNNING,
            job__state__in=ENDED_STATES,
            job__results_state__in=RESULTS_FINAL,
            job__tasks__sweep_rows__result_state=SweepRow.ResultState.PENDING,
        )
        .values_list("job_id", flat=True)
        .distinct()[:500]
    )
