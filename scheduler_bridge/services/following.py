"""Following jobs on their cluster and settling what they used.

One poll per cluster per cycle: one `squeue` for every job of the cluster, then `sacct` (in
chunks) for the tasks that left the queue. A task is called ended only once accounting shows
its last run ended; each run is charged once, from the allocation's commitment hold, in the
same transaction that records it (key: cluster, raw job id, submit time)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from billing import services as billing
from billing.models import Hold, ReferenceKind
from marketplace.models import Allocation, Cluster, Resource
from scheduler_bridge.backends.arrays import InvalidArray, parse_index_ranges
from scheduler_bridge.backends.types import OWNER_CAUSED_STATES, QueueEntry, RunRecord
from scheduler_bridge.models import (
    ACTIVE_STATES,
    ENDED_STATES,
    ClusterPoll,
    Job,
    JobRun,
    JobState,
    JobTask,
    money_of,
)
from scheduler_bridge.services.backends import backend_failed, backend_for
from scheduler_bridge.services.submission import cluster_jobs_submit, job_state_record
from scheduler_bridge.slurm.errors import BridgeError

logger = logging.getLogger(__name__)

UNITS = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)
# A cancellation the cluster has not acted on by then is asked for again by the poll.
CANCEL_REPEAT_AFTER = timedelta(seconds=30)
# How stale `Job.last_seen_at` may be: it only starts the (long) undetermined grace period.
LAST_SEEN_PRECISION = timedelta(seconds=60)
# For an array, the job's state is that of its most advanced task; once all have ended, the
# worst end wins (one failed task makes the sweep failed).
_ARRAY_ACTIVE_ORDER = [
    JobState.RUNNING,
    JobState.COMPLETING,
    JobState.PENDING,
    JobState.SUBMITTED,
    JobState.UNDETERMINED,
]
_ARRAY_END_ORDER = [
    JobState.FAILED,
    JobState.OUT_OF_MEMORY,
    JobState.TIMEOUT,
    JobState.NODE_FAIL,
    JobState.PREEMPTED,
    JobState.CANCELLED,
    JobState.COMPLETED,
]


@dataclass
class PollReport:
    cluster_id: int
    active_jobs: int = 0
    submitted: int = 0
    state_changes: int = 0
    runs_settled: int = 0
    tasks_ended: int = 0
    error: str = ""
    backend_calls: list[str] = field(default_factory=list)


def clusters_to_poll() -> list[int]:
    """The clusters with jobs queued for them or on them."""
    return list(
        Job.objects.filter(state__in=[JobState.QUEUED, *ACTIVE_STATES])
        .order_by()
        .values_list("cluster_id", flat=True)
        .distinct()
    )


def clusters_to_reconcile() -> list[int]:
    """The clusters that ran jobs in the reconciliation's window."""
    since = timezone.now() - timedelta(days=settings.JOBS_RECONCILE_DAYS + 1)
    return list(
        Job.objects.filter(submitted_at__gte=since)
        .order_by()
        .values_list("cluster_id", flat=True)
        .distinct()
    )


def _lease_take(cluster_id: int, now: datetime) -> bool:
    ClusterPoll.objects.get_or_create(cluster_id=cluster_id)
    taken = (
        ClusterPoll.objects.filter(cluster_id=cluster_id)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(lease_until=now + timedelta(seconds=settings.JOBS_POLL_LEASE_SECONDS))
    )
    return bool(taken)


def cluster_poll(*, cluster_id: int) -> PollReport | None:
    """One cycle for one cluster: submits what is queued, reads the queue once, settles the
    tasks that left it. None when another worker is polling the cluster right now."""
    now = timezone.now()
    if not _lease_take(cluster_id, now):
        return None
    cluster = Cluster.objects.select_related("organization").get(pk=cluster_id)
    report = PollReport(cluster_id=cluster_id)
    outcome: dict[str, object] = {}
    try:
        report.submitted = cluster_jobs_submit(cluster_id=cluster_id)
        _follow(cluster, report)
        outcome = {
            "last_polled_at": timezone.now(),
            "last_error": "",
            "consecutive_failures": 0,
            "commands_last_poll": len(report.backend_calls),
        }
    except BridgeError as error:
        backend_failed(cluster, error)
        report.error = str(error)[:500]
        logger.warning("poll of cluster %s failed: %s", cluster_id, error)
        outcome = {
            "last_error": report.error,
            "consecutive_failures": F("consecutive_failures") + 1,
        }
    finally:
        # Given back whatever happened, so that the next cycle need not wait out the lease.
        ClusterPoll.objects.filter(cluster_id=cluster_id).update(lease_until=None, **outcome)
    return report


def _follow(cluster: Cluster, report: PollReport) -> None:
    now = timezone.now()
    jobs = {
        job.pk: job
        for job in Job.objects.filter(cluster=cluster, state__in=ACTIVE_STATES).only(
            "pk",
            "uuid",
            "state",
            "state_reason",
            "scheduler_job_id",
            "array",
            "submitted_at",
            "last_seen_at",
            "cancel_requested_at",
        )
    }
    report.active_jobs = len(jobs)
    if not jobs:
        return
    backend = backend_for(cluster)
    report.backend_calls.append("queue")
    entries = backend.queue()
    exact: dict[tuple[str, int | None], QueueEntry] = {}
    pending_ranges: dict[str, list[tuple[set[int], QueueEntry]]] = defaultdict(list)
    for line in entries:
        if line.pending_tasks:
            try:
                indices = set(parse_index_ranges(line.pending_tasks))
            except InvalidArray:
                continue
            pending_ranges[line.array_job_id].append((indices, line))
        else:
            exact[(line.array_job_id, line.array_task_id)] = line

    tasks = list(
        JobTask.objects.filter(job_id__in=jobs, is_released=False).only(
            "pk", "job_id", "array_task_id", "state", "state_reason", "started_at"
        )
    )
    seen_jobs: set[int] = set()
    gone: list[JobTask] = []
    # A job with no task left to follow had its last task settled by a worker that died before
    # it refreshed the job: refresh it now, or it would stay active forever.
    touched_jobs: set[int] = set(jobs) - {task.job_id for task in tasks}
    for task in tasks:
        job = jobs[task.job_id]
        entry: QueueEntry | None = exact.get((job.scheduler_job_id, task.array_task_id))
        if entry is None and task.array_task_id is not None:
            entry = next(
                (
                    candidate
                    for indices, candidate in pending_ranges.get(job.scheduler_job_id, [])
                    if task.array_task_id in indices
                ),
                None,
            )
        if entry is None:
            gone.append(task)
            continue
        seen_jobs.add(job.pk)
        reason = entry.reason if entry.state == JobState.PENDING else ""
        if task.state != entry.state or task.state_reason != reason:
            changes: dict[str, object] = {"state": entry.state, "state_reason": reason[:500]}
            if entry.state in (JobState.RUNNING, JobState.COMPLETING) and not task.started_at:
                changes["started_at"] = now
            JobTask.objects.filter(pk=task.pk).update(**changes, updated_at=now)
            touched_jobs.add(job.pk)
            report.state_changes += 1
    if seen_jobs:
        # Only a grace period measured in minutes reads it: a row is rewritten at most once a
        # minute, not every cycle for every job in the queue.
        Job.objects.filter(pk__in=seen_jobs, last_seen_at__lt=now - LAST_SEEN_PRECISION).update(
            last_seen_at=now
        )

    if gone:
        job_ids = sorted({jobs[task.job_id].scheduler_job_id for task in gone})
        report.backend_calls.append("runs")
        runs_by_task: dict[tuple[str, int | None], list[RunRecord]] = defaultdict(list)
        for run in backend.runs(job_ids):
            runs_by_task[(run.array_job_id, run.array_task_id)].append(run)
        found_jobs: set[int] = set()
        for task in gone:
            job = jobs[task.job_id]
            runs = sorted(
                runs_by_task.get((job.scheduler_job_id, task.array_task_id), []),
                key=lambda run: run.submit_time,
            )
            if not runs:
                continue
            found_jobs.add(job.pk)
            final = runs[-1] if runs[-1].is_ended else None
            try:
                settled = job_task_settle(task_id=task.pk, runs=runs, final=final)
            except Exception:
                # One task that cannot be settled (a bug, a refused charge) must not stop the
                # cluster's other jobs from being followed; it is tried again next cycle.
                logger.exception("settling task %s of job %s failed", task.pk, job.uuid)
                report.error = f"settling task {task.pk} failed"
                continue
            report.runs_settled += settled.runs_charged
            report.tasks_ended += int(settled.ended)
            touched_jobs.add(job.pk)
        if found_jobs:
            Job.objects.filter(pk__in=found_jobs).update(last_seen_at=now)
        _undetermined_mark(
            [jobs[pk] for pk in {task.job_id for task in gone} - found_jobs - seen_jobs], now
        )

    for job_id in touched_jobs:
        job_state_refresh(job_id=job_id)

    repeat = [
        job.scheduler_job_id
        for job in jobs.values()
        if job.cancel_requested_at and job.cancel_requested_at < now - CANCEL_REPEAT_AFTER
    ]
    if repeat:
        report.backend_calls.append("cancel")
        backend.cancel(repeat)


def _undetermined_mark(jobs: Iterable[Job], now: datetime) -> None:
    """A job that left the queue and that accounting does not know: after a grace period (the
    accounting daemon may be behind) it is `undetermined`, never `completed`; the poll keeps
    looking for it."""
    grace = timedelta(seconds=settings.JOBS_MISSING_GRACE_SECONDS)
    for job in jobs:
        last_seen = job.last_seen_at or job.submitted_at or now
        if job.state == JobState.UNDETERMINED or now - last_seen < grace:
            continue
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(pk=job.pk)
            if locked.state in ENDED_STATES:
                continue
            job_state_record(
                locked,
                JobState.UNDETERMINED,
                "Not in the queue, and the cluster's accounting has no record of it yet.",
                at=now,
            )
            locked.save(update_fields=["state", "state_reason", "updated_at"])


@dataclass
class _Usage:
    """What runs used and cost, added up for a task and for its job."""

    units: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    elapsed_seconds: int = 0
    cpu_seconds: Decimal = Decimal(0)
    core_seconds: int = 0

    def add(self, other: _Usage) -> None:
        self.units += other.units
        self.cost += other.cost
        self.elapsed_seconds += other.elapsed_seconds
        self.cpu_seconds += other.cpu_seconds
        self.core_seconds += other.core_seconds

    def add_to(self, task: JobTask) -> None:
        task.units += self.units
        task.cost += self.cost
        task.elapsed_seconds += self.elapsed_seconds
        task.cpu_seconds += self.cpu_seconds
        task.allocated_core_seconds += self.core_seconds


@dataclass(frozen=True)
class Settlement:
    runs_charged: int
    ended: bool


def _metered_units(resource: str, run: RunRecord) -> Decimal:
    count = run.allocated_gpus if resource == Resource.GPU else run.allocated_cpus
    return (Decimal(count) * Decimal(run.elapsed_seconds) / SECONDS_PER_HOUR).quantize(
        UNITS, rounding=ROUND_HALF_UP
    )


def _run_charge_reference(cluster: Cluster, run: RunRecord) -> str:
    return f"job-run:{cluster.uuid}:{run.raw_job_id}:{run.submit_time.isoformat()}"


def job_task_settle(
    *,
    task_id: int,
    runs: Sequence[RunRecord],
    final: RunRecord | None,
    source: str = JobRun.Source.POLL,
) -> Settlement:
    """Charges every ended run of the task that has not been charged, and, given the task's
    final run, ends the task and gives back the part of its reservation it did not use.

    Keeps, in one transaction under the allocation's lock: each run charged exactly once;
    a run's units = allocated cores (or GPUs) x elapsed, capped so that a task never pays
    more than it reserved; owner-caused ends charged nothing; `used + reserved <= quantity`."""
    with transaction.atomic():
        return _settle(task_id, runs, final, source)


def _settle(
    task_id: int, runs: Sequence[RunRecord], final: RunRecord | None, source: str
) -> Settlement:
    job = Job.objects.select_related("cluster__organization").get(tasks__pk=task_id)
    allocation = Allocation.objects.select_for_update().get(pk=job.allocation_id)
    task = JobTask.objects.select_for_update().get(pk=task_id)
    cluster = job.cluster
    done = set(
        JobRun.objects.filter(
            cluster=cluster, raw_job_id__in={run.raw_job_id for run in runs}
        ).values_list("raw_job_id", "submit_time")
    )
    charged = 0
    totals = _Usage()
    for run in runs:
        if not run.is_ended or (run.raw_job_id, run.submit_time) in done:
            continue
        metered = _metered_units(allocation.resource, run)
        is_owner_caused = run.state in OWNER_CAUSED_STATES
        units = Decimal(0) if is_owner_caused else min(metered, task.reserved_units - task.units)
        hold = Hold.objects.get(pk=allocation.hold_id)
        cost = min(money_of(units, allocation.unit_price), hold.amount)
        charge = None
        if cost > 0:
            charge = billing.hold_capture(
                hold=hold,
                amount=cost,
                payee=cluster.organization,
                idempotency_reference=_run_charge_reference(cluster, run),
                reference_kind=ReferenceKind.JOB,
                reference=job.uuid,
                memo=f"Job {job.name} ({run.job_id} on {cluster.name})",
                source=cluster.uuid,
                source_name=cluster.name,
            )
        cores = run.allocated_gpus if allocation.resource == Resource.GPU else run.allocated_cpus
        JobRun.objects.create(
            task=task,
            cluster=cluster,
            raw_job_id=run.raw_job_id,
            submit_time=run.submit_time,
            state=run.state,
            scheduler_state=run.scheduler_state[:64],
            exit_code=run.exit_code,
            started_at=run.start_time,
            ended_at=run.end_time,
            elapsed_seconds=run.elapsed_seconds,
            allocated_cpus=run.allocated_cpus,
            allocated_gpus=run.allocated_gpus,
            cpu_seconds=Decimal(str(round(run.cpu_seconds, 3))),
            metered_units=metered,
            units=units,
            cost=cost,
            is_owner_caused=is_owner_caused,
            charge=charge,
            source=source,
        )
        done.add((run.raw_job_id, run.submit_time))
        charged += 1
        usage = _Usage(
            units=units,
            cost=cost,
            elapsed_seconds=run.elapsed_seconds,
            cpu_seconds=Decimal(str(round(run.cpu_seconds, 3))),
            core_seconds=cores * run.elapsed_seconds,
        )
        usage.add_to(task)
        totals.add(usage)
    release = Decimal(0)
    ended = False
    if final is not None and not task.is_released:
        release = task.reserved_units - task.units
        task.is_released = True
        task.state = final.state
        task.state_reason = final.reason[:500] if final.state != JobState.COMPLETED else ""
        task.exit_code = final.exit_code
        # A job cancelled while pending has Slurm's start time equal to its end, and never ran.
        if final.elapsed_seconds > 0 and final.start_time is not None:
            task.started_at = final.start_time
        task.ended_at = final.end_time or timezone.now()
        ended = True
    if charged or ended:
        task.save()
        # Decimal arithmetic on the locked row rather than F(): SQLite (the demo) keeps decimals
        # as floats, where a reservation released to zero came out as -2.8e-17 and failed the
        # allocation's check constraint.
        allocation.used += totals.units
        allocation.reserved -= totals.units + release
        allocation.save(update_fields=["used", "reserved", "updated_at"])
        # The job's row after the allocation's and the task's: the one lock order of jobs.
        job = Job.objects.select_for_update().get(pk=job.pk)
        job.units += totals.units
        job.cost += totals.cost
        job.elapsed_seconds += totals.elapsed_seconds
        job.cpu_seconds += totals.cpu_seconds
        job.allocated_core_seconds += totals.core_seconds
        job.save(
            update_fields=[
                "units",
                "cost",
                "elapsed_seconds",
                "cpu_seconds",
                "allocated_core_seconds",
                "updated_at",
            ]
        )
    return Settlement(runs_charged=charged, ended=ended)


def job_state_from_tasks(states: Sequence[str]) -> str:
    """The job's state from its tasks' states."""
    if len(states) == 1:
        return states[0]
    if all(state in ENDED_STATES for state in states):
        return next(state for state in _ARRAY_END_ORDER if state in states)
    return next((state for state in _ARRAY_ACTIVE_ORDER if state in states), JobState.UNDETERMINED)


@transaction.atomic
def job_state_refresh(*, job_id: int) -> Job:
    """Brings the job's state, times and exit code in line with its tasks'."""
    job = Job.objects.select_for_update().get(pk=job_id)
    if job.state in ENDED_STATES:
        return job
    tasks = list(job.tasks.all())
    state = job_state_from_tasks([task.state for task in tasks])
    if state == JobState.QUEUED:
        return job
    reasons = [task.state_reason for task in tasks if task.state == state and task.state_reason]
    started = [task.started_at for task in tasks if task.started_at]
    job.started_at = min(started) if started else None
    if state in ENDED_STATES:
        ended = [task.ended_at for task in tasks if task.ended_at]
        job.ended_at = max(ended) if ended else timezone.now()
        exit_codes = [task.exit_code for task in tasks if task.exit_code is not None]
        job.exit_code = max(exit_codes, key=abs) if exit_codes else None
    # The history shows when things happened on the cluster where the cluster says so (start
    # and end times from accounting), not when the poll noticed.
    at = job.ended_at if state in ENDED_STATES else None
    if state in (JobState.RUNNING, JobState.COMPLETING) and job.started_at:
        at = job.started_at
    job_state_record(job, state, reasons[0] if reasons else "", at=at)
    job.save(
        update_fields=["state", "state_reason", "started_at", "ended_at", "exit_code", "updated_at"]
    )
    return job


def cluster_reconcile(*, cluster_id: int, days: int | None = None) -> int:
    """Compares the cluster's accounting for the last days with what was charged, and charges
    (as new ledger entries, never edits) every ended run that no poll settled. Returns how
    many runs it charged."""
    cluster = Cluster.objects.get(pk=cluster_id)
    now = timezone.now()
    records = backend_for(cluster).runs_between(
        now - timedelta(days=days or settings.JOBS_RECONCILE_DAYS), now
    )
    by_uuid: dict[str, list[RunRecord]] = defaultdict(list)
    for record in records:
        if record.is_ended and record.name.startswith("cs-"):
            by_uuid[record.name.removeprefix("cs-")].append(record)
    if not by_uuid:
        return 0
    settled = {
        (raw, submit.isoformat())
        for raw, submit in JobRun.objects.filter(
            cluster=cluster, raw_job_id__in={r.raw_job_id for rs in by_uuid.values() for r in rs}
        ).values_list("raw_job_id", "submit_time")
    }
    tasks = {
        (str(task.job.uuid), task.array_task_id): task
        for task in JobTask.objects.filter(
            job__cluster=cluster, job__uuid__in=list(by_uuid)
        ).select_related("job")
    }
    posted = 0
    for job_uuid, job_records in by_uuid.items():
        for record in job_records:
            task = tasks.get((job_uuid, record.array_task_id))
            if task is None or (record.raw_job_id, record.submit_time.isoformat()) in settled:
                continue
            result = job_task_settle(
                task_id=task.pk, runs=[record], final=None, source=JobRun.Source.RECONCILIATION
            )
            posted += result.runs_charged
    if posted:
        logger.warning("reconciliation of cluster %s charged %s missed runs", cluster_id, posted)
    return posted
