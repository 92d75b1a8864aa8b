"""Jobs that a team's own jobs submitted on the cluster (`sbatch` from inside a job).

Metering follows the Unix user, not a job name: every Slurm run of a leased tenant during its
lease is the team's. The poll finds the tenant's jobs that the platform did not submit (in the
queue, and in accounting once a minute for those too short to be seen queued) and records each
as a job of the team (`origin` tenant), on the team's allocation of that cluster. Such a job
reserves what it can use when it is found, as any job does at submission: its CPUs (or GPUs)
times its time limit, or until the allocation's window ends when it has none, as far as the
allocation has units left; the poll cancels it when it has used that up. It is then settled and
charged like any other job, and listed with its Slurm id as a job the platform did not submit."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from computeshare.numbers import MICRO_UNIT
from hpc.slurm.nodes import SCRUB_JOB_NAME
from hpc.types import Backend, QueueEntry, RunRecord, platform_job_name, platform_job_uuid
from marketplace.models import Allocation, Cluster, Resource, TenantLease
from scheduler_bridge.models import (
    ClusterPoll,
    Job,
    JobEvent,
    JobState,
    JobTask,
)

logger = logging.getLogger(__name__)

MINUTES_PER_HOUR = Decimal(60)

# The tenants' accounting is read again from this long before the last read: slurmdbd may
# record a run a little after it happened.
TENANT_RUNS_OVERLAP = timedelta(minutes=5)


@dataclass(frozen=True)
class LeaseWindow:
    """Which team a tenant's run belongs to: the lease of that user whose time covers it."""

    lease_id: int
    organization_id: int
    user: str
    started_at: datetime
    ended_at: datetime | None
    # When the lease began to end: the scrub's jobs on the nodes come after.
    ending_at: datetime | None = None

    def is_scrub_of(self, record: RunRecord) -> bool:
        """Whether the run is the platform's scrub of the lease's nodes (docs/adr/0023), not the
        team's: named so, and submitted once the lease was ending, when nothing of the team's
        runs any more (a team's job of that name during the lease is the team's)."""
        return (
            record.name == SCRUB_JOB_NAME
            and self.ending_at is not None
            and record.submit_time >= self.ending_at.replace(microsecond=0)
        )


def lease_windows(cluster: Cluster, since: datetime | None = None) -> list[LeaseWindow]:
    """The cluster's leases that hold an account now, and, with `since`, those that ended after
    it: whose runs the poll and the reconciliation attribute."""
    leases = TenantLease.objects.filter(cluster=cluster).select_related("account")
    condition = Q(status__in=TenantLease.HOLDING_STATES)
    if since is not None:
        condition |= Q(ended_at__gte=since)
    return [
        LeaseWindow(
            lease_id=lease.pk,
            organization_id=lease.organization_id,
            user=lease.account.username,
            started_at=lease.created_at,
            ended_at=lease.ended_at,
            ending_at=lease.ending_at,
        )
        for lease in leases.filter(condition).order_by("created_at")
    ]


def lease_of_run(windows: Iterable[LeaseWindow], record: RunRecord) -> LeaseWindow | None:
    """The lease a run belongs to: of its user, begun by its submit time and not ended then.
    Slurm's times are whole seconds, so a lease counts from the start of the second it began
    in (a job its team's first job submits at once is submitted in that second); of two leases
    that could hold a run, the later one does, since an account is leased again only after the
    scrub has emptied its queue."""
    for window in sorted(windows, key=lambda window: window.started_at, reverse=True):
        if window.user != record.user:
            continue
        if record.submit_time < window.started_at.replace(microsecond=0):
            continue
        if window.ended_at is None or record.submit_time <= window.ended_at:
            return window
    return None


def tenant_jobs_record(
    *, cluster: Cluster, records: Sequence[RunRecord], windows: Sequence[LeaseWindow], now: datetime
) -> list[int]:
    """Records the jobs of `records` that the platform does not know yet (grouped by the id
    the job is cancelled by: its array's, or a heterogeneous job's leader's), each on its
    team's allocation, and adds array tasks seen for the first time to jobs recorded before.
    Returns the ids of the jobs that have tasks to follow. Runs of no lease are left out (and
    logged): they are nobody's on this platform."""
    by_job: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        # Recorded once accounting has the job's own record (its name, its time limit): the
        # next poll finds it again.
        if record.has_own_record:
            by_job[record.array_job_id].append(record)
    if not by_job:
        return []
    known = {
        job.scheduler_job_id: job
        for job in Job.objects.filter(cluster=cluster, scheduler_job_id__in=list(by_job))
    }
    platform_names = _platform_jobs_named(cluster, records)
    recorded: list[int] = []
    for scheduler_job_id, job_records in by_job.items():
        first = job_records[0]
        job = known.get(scheduler_job_id)
        if job is not None:
            if job.is_from_tenant and _tasks_add(job, job_records, now):
                recorded.append(job.pk)
            continue
        window = lease_of_run(windows, first)
        if window is None:
            logger.warning(
                "cluster %s: job %s of %s belongs to no lease", cluster.pk, first.job_id, first.user
            )
            continue
        if window.is_scrub_of(first):
            continue
        platform_user = platform_names.get(first.name)
        if platform_user == first.user:
            # The platform's own job, submitted a moment ago by another worker that has not
            # recorded its id yet: it is followed as soon as it has.
            continue
        job_id = _job_create(cluster, window, scheduler_job_id, job_records, now)
        if job_id is not None:
            recorded.append(job_id)
    return recorded


def _platform_jobs_named(cluster: Cluster, records: Iterable[RunRecord]) -> dict[str, str]:
    """Name -> tenant user of the platform's jobs on this cluster that are being submitted
    now (still `queued`: sbatch may have answered, the id is not recorded yet) and whose names
    appear in `records`. A team's job may take any name, even one of its own team's jobs', so a
    name counts as the platform's only together with the user that job runs as, and only while
    that job is in flight: a job named after one that is on the cluster is another job."""
    uuids = {
        job_uuid: record.name
        for record in records
        if (job_uuid := platform_job_uuid(record.name)) is not None
    }
    if not uuids:
        return {}
    return {
        platform_job_name(job_uuid): user
        for job_uuid, user in Job.objects.filter(
            cluster=cluster,
            uuid__in=list(uuids),
            origin=Job.Origin.PLATFORM,
            state=JobState.QUEUED,
        ).values_list("uuid", "lease__account__username")
        if user
    }


def _job_create(
    cluster: Cluster,
    window: LeaseWindow,
    scheduler_job_id: str,
    records: list[RunRecord],
    now: datetime,
) -> int | None:
    first = min(records, key=lambda record: record.submit_time)
    try:
        with transaction.atomic():
            allocation = _allocation_for(cluster, window.organization_id, first, now)
            if allocation is None:
                logger.warning(
                    "cluster %s: job %s of %s has no allocation of its team to draw on",
                    cluster.pk,
                    scheduler_job_id,
                    first.user,
                )
                return None
            is_array = any(record.array_task_id is not None for record in records)
            minutes = _time_limit_minutes(first, allocation, now)
            job = Job.objects.create(
                allocation=allocation,
                organization_id=window.organization_id,
                cluster=cluster,
                lease_id=window.lease_id,
                origin=Job.Origin.TENANT,
                name=(first.name or f"Slurm job {scheduler_job_id}")[:200],
                script="",
                time_limit_minutes=minutes,
                cpus_per_task=max(first.requested_cpus, first.allocated_cpus, 1),
                gpus=max(first.requested_gpus, first.allocated_gpus),
                array="array" if is_array else "",
                task_count=1,  # counted again as its tasks are added, just below
                partition_name=first.partition[:64],
                reserved_units=Decimal(0),
                state=JobState.SUBMITTED,
                state_reason="",
                scheduler_job_id=scheduler_job_id,
                submitted_at=first.submit_time,
                last_seen_at=now,
            )
            JobEvent.objects.create(
                job=job,
                state=JobState.SUBMITTED,
                reason=f"Submitted on the cluster by one of the team's jobs (Slurm job "
                f"{scheduler_job_id}, as {first.user}).",
                at=first.submit_time,
            )
            _tasks_add(job, records, now, allocation=allocation)
            return job.pk
    except IntegrityError:
        # Recorded a moment ago by another worker: one job is recorded once per cluster.
        if Job.objects.filter(cluster=cluster, scheduler_job_id=scheduler_job_id).exists():
            return None
        raise


def _allocation_for(
    cluster: Cluster, organization_id: int, record: RunRecord, now: datetime
) -> Allocation | None:
    """The team's allocation a job it submitted itself draws on: an active one on the job's
    partition, else any active one on the cluster, else its latest one (closed or not yet
    open: the job then reserves nothing and is cancelled), locked."""
    allocations = list(
        Allocation.objects.select_for_update(of=("self",))
        .select_related("partition")
        .filter(cluster=cluster, organization_id=organization_id)
        .order_by("-window_end", "-pk")
    )
    active = [
        allocation
        for allocation in allocations
        if allocation.status_at(now) == Allocation.Status.ACTIVE
    ]
    for allocation in active:
        if allocation.partition.name == record.partition:
            return allocation
    if active:
        return max(active, key=lambda allocation: allocation.remaining)
    return allocations[0] if allocations else None


def _time_limit_minutes(record: RunRecord, allocation: Allocation, now: datetime) -> int:
    """The job's time limit, or, without one, the minutes left in the allocation's window."""
    if record.time_limit_minutes:
        return record.time_limit_minutes
    left = int((allocation.window_end - now).total_seconds() // 60)
    return max(left, 1)


def _tasks_add(
    job: Job, records: Iterable[RunRecord], now: datetime, *, allocation: Allocation | None = None
) -> bool:
    """Adds the tasks of `records` that the job does not have yet, each reserving what it can
    use as far as the allocation has units left; a task that gets nothing is to be cancelled.
    Returns whether any was added."""
    existing = set(job.tasks.values_list("array_task_id", flat=True))
    new = sorted(
        {record.array_task_id for record in records} - existing,
        key=lambda index: -1 if index is None else index,
    )
    if not new:
        return False
    with transaction.atomic():
        if allocation is None:
            allocation = Allocation.objects.select_for_update().get(pk=job.allocation_id)
        job = Job.objects.select_for_update().get(pk=job.pk)
        per_task = _units_per_task(job, allocation)
        tasks = []
        reserved = Decimal(0)
        starved = False
        for index in new:
            units = min(per_task, allocation.remaining - reserved)
            units = max(units, Decimal(0)) if allocation.closed_at is None else Decimal(0)
            starved |= units < per_task
            reserved += units
            tasks.append(
                JobTask(
                    job=job,
                    array_task_id=index,
                    reserved_units=units,
                    state=JobState.SUBMITTED,
                    scheduler_job_id=(
                        job.scheduler_job_id if index is None else f"{job.scheduler_job_id}_{index}"
                    ),
                )
            )
        JobTask.objects.bulk_create(tasks)
        allocation.reserved += reserved
        allocation.save(update_fields=["reserved", "updated_at"])
        job.reserved_units += reserved
        job.task_count = len(existing) + len(tasks)
        fields = ["reserved_units", "task_count", "updated_at"]
        if starved and job.cancel_requested_at is None:
            # Nothing (or not enough) left to run on: the poll cancels what has no reservation
            # and what uses its reservation up.
            job.state_reason = "The allocation had too few units left for this job."
            fields.append("state_reason")
        job.save(update_fields=fields)
    return True


def _units_per_task(job: Job, allocation: Allocation) -> Decimal:
    rate = job.gpus if allocation.resource == Resource.GPU else job.cpus_per_task
    return (Decimal(rate * job.time_limit_minutes) / MINUTES_PER_HOUR).quantize(
        MICRO_UNIT, rounding=ROUND_CEILING
    )


def tenant_jobs_find(
    cluster: Cluster,
    backend: Backend,
    entries: list[QueueEntry],
    windows: list[LeaseWindow],
    now: datetime,
    calls: list[str],
) -> int:
    """Records the tenants' jobs the platform did not submit: those in the queue now, and, once
    per `JOBS_TENANT_RUNS_READ_SECONDS`, every run in the tenants' accounting since the last
    read (a job can start and end between two polls). Returns how many it recorded; each call
    to the cluster is named in `calls`."""
    in_queue = {entry.array_job_id for entry in entries}
    known = dict(
        Job.objects.filter(cluster=cluster, scheduler_job_id__in=list(in_queue)).values_list(
            "scheduler_job_id", "origin"
        )
    )
    known_tasks = set(
        JobTask.objects.filter(
            job__cluster=cluster,
            job__origin=Job.Origin.TENANT,
            job__scheduler_job_id__in=list(in_queue),
        ).values_list("job__scheduler_job_id", "array_task_id")
    )
    unknown = {job_id for job_id in in_queue if job_id not in known}
    # A task of an array the team submitted itself is split out of its pending range when it
    # starts: it is recorded (with its reservation) then.
    unknown |= {
        entry.array_job_id
        for entry in entries
        if known.get(entry.array_job_id) == Job.Origin.TENANT
        and entry.pending_tasks is None
        and (entry.array_job_id, entry.array_task_id) not in known_tasks
    }
    records: list[RunRecord] = []
    if unknown:
        calls.append("runs")
        records += backend.runs(sorted(unknown))
    poll = ClusterPoll.objects.get(cluster=cluster)
    read_until = poll.tenant_runs_read_until
    period = timedelta(seconds=settings.JOBS_TENANT_RUNS_READ_SECONDS)
    if read_until is None or now - read_until >= period:
        since = min(window.started_at for window in windows)
        if read_until is not None:
            since = max(since, read_until - TENANT_RUNS_OVERLAP)
        calls.append("runs_of_users")
        records += backend.runs_of_users([window.user for window in windows], since, now)
        ClusterPoll.objects.filter(pk=poll.pk).update(tenant_runs_read_until=now)
    if not records:
        return 0
    return len(tenant_jobs_record(cluster=cluster, records=records, windows=windows, now=now))
