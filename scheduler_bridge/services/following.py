"""Following jobs on their cluster and settling what they used.

One poll per cluster per cycle: one `squeue` for every job of the cluster's leased tenants,
then `sacct` (in chunks) for the tasks that left the queue. Metering follows the Unix user:
a job of a tenant that the platform did not submit (one of the team's jobs ran `sbatch`) is
recorded as the team's when the poll sees it, in the queue or, once a minute, in accounting.
A task is called ended only once accounting shows its last run ended; each run is charged once,
from the allocation's commitment hold, in the same transaction that records it (key: cluster,
raw job id, submit time).

The poll also holds the allocation's limits at the cluster: a running task that has used what
it reserved (a job that requeued or grew itself, or one the team submitted itself) is
cancelled, and so is every job still running when its allocation's window has closed."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from billing import services as billing
from billing.models import Hold, ReferenceKind, Transaction
from computeshare.states import status_move, status_move_all
from hpc.arrays import InvalidArray, parse_index_ranges
from hpc.batches import batched
from hpc.errors import BridgeError
from hpc.slurm.accounting import run_state
from hpc.types import (
    CANCELLED,
    COMPLETED,
    OWNER_CAUSED_STATES,
    PREEMPTED,
    REQUEUED,
    RESIZED,
    UNDETERMINED,
    Backend,
    QueueEntry,
    RunRecord,
    Tenant,
)
from marketplace import services as market
from marketplace.models import Allocation, Cluster, Resource, TenantLease
from scheduler_bridge import notices, webhook_events
from scheduler_bridge.models import (
    ACTIVE_STATES,
    ENDED_STATES,
    SECONDS_PER_HOUR,
    ClusterPoll,
    Job,
    JobEvent,
    JobRun,
    JobState,
    JobTask,
    metered_units,
    money_of,
)
from scheduler_bridge.services.backends import backend_failed, backend_for, job_tenant
from scheduler_bridge.services.files import job_results_collect_after_commit
from scheduler_bridge.services.idle import (
    cluster_idle_sample,
    cluster_reachability_seen,
    is_unreachable,
)
from scheduler_bridge.services.submission import cluster_jobs_submit, job_state_record
from scheduler_bridge.services.tenant_jobs import (
    LeaseWindow,
    lease_of_run,
    lease_windows,
    tenant_jobs_record,
)

logger = logging.getLogger(__name__)

# A cancellation the cluster has not acted on by then is asked for again by the poll.
CANCEL_REPEAT_AFTER = timedelta(seconds=30)
# How stale `Job.last_seen_at` may be: it only starts the (long) undetermined grace period.
LAST_SEEN_PRECISION = timedelta(seconds=60)
# The tenants' accounting is read again from this long before the last read: slurmdbd may
# record a run a little after it happened.
TENANT_RUNS_OVERLAP = timedelta(minutes=5)
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
    tenant_jobs_found: int = 0
    cancelled: int = 0
    error: str = ""
    backend_calls: list[str] = field(default_factory=list)
    # What the poll noticed without failing: states it does not know, runs of no lease.
    notices: list[str] = field(default_factory=list)


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
        try:
            if cluster_idle_sample(cluster=cluster, now=now) is not None:
                report.backend_calls.append("idle")
        except BridgeError as error:
            if is_unreachable(error):
                raise
            # The jobs were followed; a sinfo refused or misread costs this sample only.
            report.notices.append(f"idle time not sampled: {error}")
        if report.backend_calls or report.submitted:
            cluster_reachability_seen(cluster=cluster, error=None)
        outcome = {
            "last_polled_at": timezone.now(),
            "last_error": "",
            "consecutive_failures": 0,
            "commands_last_poll": len(report.backend_calls),
            "last_notice": "; ".join(report.notices)[:500],
        }
    except BridgeError as error:
        backend_failed(cluster, error)
        cluster_reachability_seen(cluster=cluster, error=error)
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


# A poll reads a cluster's active jobs, and their tasks, this many at a time: a worker following
# thousands of jobs never holds them all as rows at once.
FOLLOW_CHUNK = 1000


@dataclass
class _Followed:
    """What a poll keeps of a cluster's active jobs from one chunk to the next: the few jobs
    that need more than the queue's word (tasks gone from the queue or run again, cancels to
    send), and ids."""

    jobs: dict[int, Job] = field(default_factory=dict)
    gone: list[JobTask] = field(default_factory=list)
    rerun: list[JobTask] = field(default_factory=list)
    seen_jobs: set[int] = field(default_factory=set)
    touched_jobs: set[int] = field(default_factory=set)
    to_cancel: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    repeat: dict[Tenant | None, list[str]] = field(default_factory=lambda: defaultdict(list))


def _active_job_chunks(cluster: Cluster) -> Iterable[list[Job]]:
    """The cluster's active jobs, `FOLLOW_CHUNK` at a time in id order (keyset pages, so that
    each page is one indexed query however many jobs there are), each with its allocation and
    lease set from one read of each (a cluster has few; a join per job row cost more than
    the rest of a steady poll)."""
    allocations: dict[int, Allocation] = {}
    leases: dict[int, TenantLease] = {}
    after = 0
    while True:
        chunk = list(
            Job.objects.filter(cluster=cluster, state__in=ACTIVE_STATES, pk__gt=after)
            .order_by("pk")
            .only(
                "pk",
                "uuid",
                "state",
                "state_reason",
                "scheduler_job_id",
                "array",
                "origin",
                "gpus",
                "ntasks",
                "cpus_per_task",
                "submitted_at",
                "last_seen_at",
                "cancel_requested_at",
                "allocation_id",
                "lease_id",
            )[:FOLLOW_CHUNK]
        )
        if not chunk:
            return
        missing_allocations = {job.allocation_id for job in chunk} - set(allocations)
        allocations.update(
            Allocation.objects.only("pk", "window_end", "resource").in_bulk(missing_allocations)
        )
        missing_leases = {job.lease_id for job in chunk if job.lease_id} - set(leases)
        leases.update(
            TenantLease.objects.select_related("account")
            .only("pk", "account", "account__username", "account__home")
            .in_bulk(missing_leases)
        )
        for job in chunk:
            job.allocation = allocations[job.allocation_id]
            if job.lease_id:
                job.lease = leases[job.lease_id]
        yield chunk
        if len(chunk) < FOLLOW_CHUNK:
            return
        after = chunk[-1].pk


def _follow(cluster: Cluster, report: PollReport) -> None:
    """One poll of the cluster's jobs, in named steps: the queue read once; each chunk of
    active jobs matched with it (`_follow_chunk`); the tasks that left it, or ran again,
    settled from accounting; the jobs whose tasks moved refreshed; then the limits held."""
    now = timezone.now()
    backend, entries = _queue_read(cluster, now, report)
    if backend is None:
        return
    queue = _Queue.of(entries, report)
    followed = _Followed()
    for chunk in _active_job_chunks(cluster):
        report.active_jobs += len(chunk)
        _follow_chunk(chunk, queue, followed, now, report)
    _tasks_settle(backend, followed, now, report)
    _jobs_state_refresh(followed.touched_jobs)
    _cancels_send(backend, followed, now, report)


def _queue_read(
    cluster: Cluster, now: datetime, report: PollReport
) -> tuple[Backend | None, list[QueueEntry]]:
    """The queue's entries for the cluster's tenants (one squeue, which also finds the jobs
    they submitted themselves) and the backend to follow jobs with; no backend when the
    cluster has no active job."""
    windows = lease_windows(cluster)
    users = sorted({window.user for window in windows})
    backend: Backend | None = None
    entries: list[QueueEntry] = []
    if users:
        backend = backend_for(cluster)
        report.backend_calls.append("queue")
        entries = backend.queue(users)
        _tenant_jobs_find(cluster, backend, entries, windows, now, report)
    if not Job.objects.filter(cluster=cluster, state__in=ACTIVE_STATES).exists():
        return None, entries
    if backend is None:
        backend = backend_for(cluster)
        if cluster.backend == Cluster.Backend.LOCAL:
            report.backend_calls.append("queue")
            entries = backend.queue([])
    return backend, entries


@dataclass
class _Queue:
    """The queue's entries by task: the split-out ones by (job id, array index), and the
    pending arrays' ranges of indices not split out yet."""

    exact: dict[tuple[str, int | None], QueueEntry] = field(default_factory=dict)
    pending_ranges: dict[str, list[tuple[set[int], QueueEntry]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    @classmethod
    def of(cls, entries: list[QueueEntry], report: PollReport) -> _Queue:
        queue = cls()
        for line in entries:
            if line.state == UNDETERMINED:
                report.notices.append(
                    f"{line.job_id} is in a state the poll does not know: {line.scheduler_state}"
                )
            if not line.pending_tasks:
                queue.exact[(line.array_job_id, line.array_task_id)] = line
                continue
            try:
                indices = set(parse_index_ranges(line.pending_tasks))
            except InvalidArray:
                continue
            queue.pending_ranges[line.array_job_id].append((indices, line))
        return queue

    def entry_of(self, job: Job, task: JobTask) -> QueueEntry | None:
        """The task's entry, or None when the task has left the queue."""
        entry = self.exact.get((job.scheduler_job_id, task.array_task_id))
        if entry is not None or task.array_task_id is None:
            return entry
        ranges = self.pending_ranges.get(job.scheduler_job_id, [])
        return next((line for indices, line in ranges if task.array_task_id in indices), None)


def _follow_chunk(
    chunk: list[Job], queue: _Queue, followed: _Followed, now: datetime, report: PollReport
) -> None:
    """Matches one chunk of active jobs' tasks with the queue: the tasks whose state changed
    are written grouped by what changed (a first poll of 5,000 pending jobs is a few UPDATEs,
    not 5,000), and what needs accounting or a cancel is kept in `followed`."""
    jobs = {job.pk: job for job in chunk}
    tasks = _tasks_to_follow(jobs)
    # A job with no task left to follow had its last task settled by a worker that died before
    # it refreshed the job: refresh it now, or it would stay active forever.
    followed.touched_jobs |= set(jobs) - {task.job_id for task in tasks}
    seen_jobs: set[int] = set()
    changed: dict[tuple[tuple[str, object], ...], list[int]] = defaultdict(list)
    for task in tasks:
        job = jobs[task.job_id]
        entry = queue.entry_of(job, task)
        if entry is None:
            followed.gone.append(task)
            followed.jobs[job.pk] = job
            continue
        seen_jobs.add(job.pk)
        if changes := _task_match(job, task, entry, followed, now, report):
            changed[tuple(sorted(changes.items()))].append(task.pk)
    for key, task_ids in changed.items():
        _tasks_change(task_ids, dict(key), now, report)
    _jobs_seen(seen_jobs, now)
    followed.seen_jobs |= seen_jobs
    _cancels_due(chunk, followed, now)


def _tasks_to_follow(jobs: dict[int, Job]) -> list[JobTask]:
    """The unsettled tasks of `jobs`, with what the poll compares and writes."""
    return list(
        JobTask.objects.filter(job_id__in=jobs, is_released=False).only(
            "pk",
            "job_id",
            "array_task_id",
            "state",
            "state_reason",
            "started_at",
            "run_started_at",
            "scheduler_job_id",
            "units",
            "reserved_units",
        )
    )


def _task_match(
    job: Job,
    task: JobTask,
    entry: QueueEntry,
    followed: _Followed,
    now: datetime,
    report: PollReport,
) -> dict[str, object]:
    """What the queue's entry changes of a task (state, reason, start times), keeping in
    `followed` what it needs beyond: its earlier runs settled when it runs again, a cancel
    when it went past its allocation's limits."""
    reason = entry.reason if entry.state == JobState.PENDING else ""
    changes: dict[str, object] = {}
    if task.state != entry.state or task.state_reason != reason:
        changes["state_reason"] = reason[:500]
        if task.state != entry.state:
            changes["state"] = entry.state
        if entry.state in (JobState.RUNNING, JobState.COMPLETING) and not task.started_at:
            changes["started_at"] = now
        followed.touched_jobs.add(job.pk)
        report.state_changes += 1
    if _is_new_run(task, entry):
        # Requeued (back to pending after it ran, or running again since): the runs before
        # are settled now, so that what the task has used counts against its reservation.
        followed.rerun.append(task)
        followed.jobs[job.pk] = job
    if entry.start_time is not None and entry.start_time != task.run_started_at:
        changes["run_started_at"] = entry.start_time
    if _over_its_limits(job, task, entry, now) and not job.cancel_requested_at:
        followed.to_cancel[job.pk].append(task.scheduler_job_id or job.scheduler_job_id)
        followed.jobs[job.pk] = job
    return changes


def _tasks_change(
    task_ids: list[int], columns: dict[str, Any], now: datetime, report: PollReport
) -> None:
    """Writes what the queue showed of these tasks, in one UPDATE: a new state through
    `JobTask.TRANSITIONS` (compare-and-set), a reason or a start time alike."""
    tasks = JobTask.objects.filter(pk__in=task_ids)
    if "state" not in columns:
        tasks.update(**columns, updated_at=now)
        return
    state = str(columns.pop("state"))
    moved = status_move_all(tasks, state, field="state", **columns, updated_at=now)
    if moved < len(task_ids):
        # An end the queue showed, then another state: accounting settles the task.
        report.notices.append(f"{len(task_ids) - moved} tasks not moved to {state}")


def _jobs_seen(job_ids: set[int], now: datetime) -> None:
    """Records that the queue shows these jobs. Only a grace period measured in minutes reads
    it: a row is rewritten at most once a minute, not every cycle for every job in the queue."""
    if job_ids:
        Job.objects.filter(pk__in=job_ids, last_seen_at__lt=now - LAST_SEEN_PRECISION).update(
            last_seen_at=now
        )


def _cancels_due(chunk: list[Job], followed: _Followed, now: datetime) -> None:
    """The chunk's jobs to cancel because their allocation's window has closed, and those
    whose cancel the cluster has not acted on after CANCEL_REPEAT_AFTER (asked again)."""
    for job in chunk:
        if job.allocation.window_end <= now and not job.cancel_requested_at:
            followed.to_cancel[job.pk].append(job.scheduler_job_id)
            followed.jobs[job.pk] = job
        if job.cancel_requested_at and job.cancel_requested_at < now - CANCEL_REPEAT_AFTER:
            followed.repeat[job_tenant(job)].append(job.scheduler_job_id)


def _tasks_settle(backend: Backend, followed: _Followed, now: datetime, report: PollReport) -> None:
    """Settles from accounting (one sacct, in chunks) the tasks that left the queue (their
    last run, once ended, ends them) and those that ran again (their runs before are
    charged). A job that left the queue and that accounting does not know either is marked
    undetermined after a grace period."""
    tasks = [*followed.gone, *followed.rerun]
    if not tasks:
        return
    jobs = followed.jobs
    gone = {task.pk for task in followed.gone}
    report.backend_calls.append("runs")
    runs_by_task = _runs_by_task(
        backend, sorted({jobs[task.job_id].scheduler_job_id for task in tasks}), report
    )
    found_jobs: set[int] = set()
    for task in tasks:
        job = jobs[task.job_id]
        runs = runs_by_task.get((job.scheduler_job_id, task.array_task_id))
        if not runs:
            continue
        found_jobs.add(job.pk)
        final = _final_run(runs[-1], now) if task.pk in gone else None
        if _task_settle_counted(job, task, runs, final, report):
            followed.touched_jobs.add(job.pk)
    if found_jobs:
        Job.objects.filter(pk__in=found_jobs).update(last_seen_at=now)
    missing = {task.job_id for task in followed.gone} - found_jobs - followed.seen_jobs
    _undetermined_mark([jobs[pk] for pk in missing], now)


def _runs_by_task(
    backend: Backend, job_ids: list[str], report: PollReport
) -> dict[tuple[str, int | None], list[RunRecord]]:
    """Accounting's runs of the jobs, by (job id, array index), oldest first."""
    runs_by_task: dict[tuple[str, int | None], list[RunRecord]] = defaultdict(list)
    for run in backend.runs(job_ids):
        runs_by_task[(run.array_job_id, run.array_task_id)].append(run)
        if run.state == UNDETERMINED and run.scheduler_state and not run.is_ended:
            report.notices.append(f"run {run.job_id}: {run.scheduler_state}")
    for runs in runs_by_task.values():
        runs.sort(key=lambda run: run.submit_time)
    return runs_by_task


def _task_settle_counted(
    job: Job, task: JobTask, runs: list[RunRecord], final: RunRecord | None, report: PollReport
) -> bool:
    """`job_task_settle`, counted in the report; False when it failed. One task that cannot
    be settled (a bug, a refused charge) must not stop the cluster's other jobs from being
    followed: it is tried again next cycle."""
    try:
        settled = job_task_settle(task_id=task.pk, runs=runs, final=final)
    except Exception:
        logger.exception("settling task %s of job %s failed", task.pk, job.uuid)
        report.error = f"settling task {task.pk} failed"
        return False
    report.runs_settled += settled.runs_charged
    report.tasks_ended += int(settled.ended)
    return True


def _cancels_send(backend: Backend, followed: _Followed, now: datetime, report: PollReport) -> None:
    """Cancels what went past its allocation's limits, and asks again for the cancels the
    cluster has not acted on."""
    if followed.to_cancel:
        jobs = {pk: followed.jobs[pk] for pk in followed.to_cancel}
        _limits_enforce(backend, jobs, followed.to_cancel, now, report)
    for tenant, job_ids in followed.repeat.items():
        report.backend_calls.append("cancel")
        backend.cancel(tenant, job_ids)


def _jobs_state_refresh(job_ids: set[int]) -> None:
    """`job_state_refresh` for every job whose tasks moved, with the common case in bulk: a
    job of one task that waits in the queue (a first poll sees thousands go from submitted to
    pending) takes its task's state and reason in one UPDATE per reason, its history in one
    INSERT. Every other job (running, ended, arrays) goes through `job_state_refresh`."""
    rest: list[int] = []
    for batch in batched(sorted(job_ids), FOLLOW_CHUNK):
        rest += _jobs_pending_record(batch)
    for job_id in rest:
        job_state_refresh(job_id=job_id)


@transaction.atomic
def _jobs_pending_record(job_ids: list[int]) -> list[int]:
    """Records as pending, in bulk, the jobs of `job_ids` that have one task and whose task
    pends; returns the others."""
    jobs = list(
        Job.objects.select_for_update()
        .filter(pk__in=job_ids, task_count=1)
        .exclude(state__in=ENDED_STATES)
        .order_by("pk")
        .only("pk", "state", "state_reason", "started_at")
    )
    pending = {
        job_id: reason
        for job_id, reason in JobTask.objects.filter(
            job_id__in=[job.pk for job in jobs], state=JobState.PENDING, started_at__isnull=True
        ).values_list("job_id", "state_reason")
    }
    now = timezone.now()
    moving: dict[str, list[int]] = defaultdict(list)
    reason_only: dict[str, list[int]] = defaultdict(list)
    events: list[JobEvent] = []
    bulk: set[int] = set()
    for job in jobs:
        if job.pk not in pending or job.started_at is not None:
            continue
        if job.state != JobState.PENDING and JobState.PENDING not in Job.TRANSITIONS[job.state]:
            continue
        bulk.add(job.pk)
        reason = pending[job.pk][:500]
        if job.state == JobState.PENDING and job.state_reason == reason:
            continue
        if job.state == JobState.PENDING:
            reason_only[reason].append(job.pk)
        else:
            moving[reason].append(job.pk)
            events.append(JobEvent(job_id=job.pk, state=JobState.PENDING, reason=reason, at=now))
    for reason, pks in moving.items():
        status_move_all(
            Job.objects.filter(pk__in=pks),
            JobState.PENDING,
            field="state",
            state_reason=reason,
            updated_at=now,
        )
    for reason, pks in reason_only.items():
        Job.objects.filter(pk__in=pks).update(state_reason=reason, updated_at=now)
    JobEvent.objects.bulk_create(events)
    return [job_id for job_id in job_ids if job_id not in bulk]


def _final_run(last: RunRecord, now: datetime) -> RunRecord | None:
    """The run that ends a task gone from the queue: its last run, once that has ended as a
    job ends. A last run the job requeued or resized is normally followed by another, which
    accounting shows a moment later; when none has come within the grace (a helper
    allocation whose resources went to the job it expanded: `RESIZING`, then nothing), the
    task has ended there, `completed` after a resize and `cancelled` after a requeue."""
    if last.state in ENDED_STATES:
        return last
    grace = timedelta(seconds=settings.JOBS_RUN_RECORD_GRACE_SECONDS)
    if last.state in (REQUEUED, RESIZED) and last.end_time and now - last.end_time > grace:
        return replace(last, state=COMPLETED if last.state == RESIZED else CANCELLED)
    # An allocation that gave its resources to the job it expanded gets one more record, in
    # an end state with nothing allocated, whose end Slurm never writes (its elapsed time
    # keeps growing): it held nothing, so it ends there, having used nothing.
    ended_as = run_state(last.scheduler_state)
    if (
        last.state == UNDETERMINED
        and ended_as in ENDED_STATES
        and last.end_time is None
        and last.allocated_cpus == last.allocated_gpus == 0
        and last.start_time is not None
        and now - last.start_time > grace
    ):
        return replace(last, state=ended_as, end_time=last.start_time, elapsed_seconds=0)
    return None


def _is_new_run(task: JobTask, entry: QueueEntry) -> bool:
    """Whether the queue shows a run of the task after the one the poll saw running."""
    if entry.state == JobState.PENDING and task.state in (JobState.RUNNING, JobState.COMPLETING):
        return True
    return (
        entry.start_time is not None
        and task.run_started_at is not None
        and entry.start_time > task.run_started_at
    )


def _over_its_limits(job: Job, task: JobTask, entry: QueueEntry, now: datetime) -> bool:
    """Whether a task in the queue must be cancelled to hold its allocation's limits: it has
    nothing reserved (a job the team submitted itself when the allocation had nothing left),
    or, running, it has used more than it reserved (its earlier runs, settled, and its current
    one at its CPUs, or GPUs, so far). A platform job within its time limit never is: Slurm's
    limit keeps one run within the reservation."""
    if task.reserved_units <= 0:
        return True
    if entry.state != JobState.RUNNING or entry.start_time is None:
        return False
    if (
        job.origin == Job.Origin.PLATFORM
        and task.units == 0
        and entry.cpus <= job.ntasks * job.cpus_per_task
    ):
        # Its first run at the size it asked for: Slurm ends it at its time limit, the
        # bound its reservation was made from (and names the end `timeout`).
        return False
    rate = job.gpus if job.allocation.resource == Resource.GPU else max(entry.cpus, 1)
    seconds = max((now - entry.start_time).total_seconds(), 0.0)
    used: Decimal = task.units + Decimal(rate) * Decimal(seconds) / SECONDS_PER_HOUR
    return bool(used > task.reserved_units)


def _limits_enforce(
    backend: Backend,
    jobs: dict[int, Job],
    ids: dict[int, list[str]],
    now: datetime,
    report: PollReport,
) -> None:
    """Cancels, as their tenants, the jobs (or array tasks) that went past their allocation's
    limits, and records why on each job."""
    by_tenant: dict[Tenant | None, list[str]] = defaultdict(list)
    for pk, job_ids in ids.items():
        job = jobs[pk]
        by_tenant[job_tenant(job)].extend(job_ids)
        reason = (
            "Cancelled: the allocation's window has closed."
            if job.allocation.window_end <= now
            else "Cancelled: it used up what it reserved of the allocation."
        )
        Job.objects.filter(pk=pk, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now, cancel_reason=reason, state_reason=reason, updated_at=now
        )
    for tenant, job_ids in by_tenant.items():
        report.backend_calls.append("cancel")
        backend.cancel(tenant, sorted(set(job_ids)))
        report.cancelled += len(set(job_ids))


def _tenant_jobs_find(
    cluster: Cluster,
    backend: Backend,
    entries: list[QueueEntry],
    windows: list[LeaseWindow],
    now: datetime,
    report: PollReport,
) -> None:
    """Records the tenants' jobs the platform did not submit: those in the queue now, and, once
    per `JOBS_TENANT_RUNS_READ_SECONDS`, every run in the tenants' accounting since the last
    read (a job can start and end between two polls)."""
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
        report.backend_calls.append("runs")
        records += backend.runs(sorted(unknown))
    poll = ClusterPoll.objects.get(cluster=cluster)
    read_until = poll.tenant_runs_read_until
    period = timedelta(seconds=settings.JOBS_TENANT_RUNS_READ_SECONDS)
    if read_until is None or now - read_until >= period:
        since = min(window.started_at for window in windows)
        if read_until is not None:
            since = max(since, read_until - TENANT_RUNS_OVERLAP)
        report.backend_calls.append("runs_of_users")
        records += backend.runs_of_users([window.user for window in windows], since, now)
        ClusterPoll.objects.filter(pk=poll.pk).update(tenant_runs_read_until=now)
    if not records:
        return
    found = tenant_jobs_record(cluster=cluster, records=records, windows=windows, now=now)
    report.tenant_jobs_found += len(found)


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
    max_rss_bytes: int | None = None

    def add(self, other: _Usage) -> None:
        self.units += other.units
        self.cost += other.cost
        self.elapsed_seconds += other.elapsed_seconds
        self.cpu_seconds += other.cpu_seconds
        self.core_seconds += other.core_seconds
        self.max_rss_bytes = _larger(self.max_rss_bytes, other.max_rss_bytes)

    def add_to(self, task: JobTask) -> None:
        task.units += self.units
        task.cost += self.cost
        task.elapsed_seconds += self.elapsed_seconds
        task.cpu_seconds += self.cpu_seconds
        task.allocated_core_seconds += self.core_seconds
        task.max_rss_bytes = _larger(task.max_rss_bytes, self.max_rss_bytes)


def _larger(first: int | None, second: int | None) -> int | None:
    """The larger of two memory sizes, either of which may be unknown."""
    known = [size for size in (first, second) if size is not None]
    return max(known) if known else None


@dataclass(frozen=True)
class Settlement:
    runs_charged: int
    ended: bool


def _metered_units(resource: str, run: RunRecord) -> Decimal:
    count = run.allocated_gpus if resource == Resource.GPU else run.allocated_cpus
    return metered_units(count, run.elapsed_seconds)


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
    """`job_task_settle`'s steps, under the allocation's and the task's locks: the runs
    charged, the task ended at its final run, then what they used and released added to the
    allocation and the job."""
    job = Job.objects.select_related("cluster__organization").get(tasks__pk=task_id)
    allocation = Allocation.objects.select_for_update().get(pk=job.allocation_id)
    task = JobTask.objects.select_for_update().get(pk=task_id)
    charged, totals = _runs_charge(job, allocation, task, runs, source)
    release = _task_end(task, final)
    if charged or release is not None:
        task.save()
        _usage_add(job, allocation, totals, release or Decimal(0))
    return Settlement(runs_charged=charged, ended=release is not None)


def _runs_charge(
    job: Job, allocation: Allocation, task: JobTask, runs: Sequence[RunRecord], source: str
) -> tuple[int, _Usage]:
    """Charges each ended run of `runs` that no one charged before (by cluster, raw job id
    and submit time), adding its use to the task; returns how many and their total use."""
    done = set(
        JobRun.objects.filter(
            cluster=job.cluster, raw_job_id__in={run.raw_job_id for run in runs}
        ).values_list("raw_job_id", "submit_time")
    )
    charged = 0
    totals = _Usage()
    for run in runs:
        if not run.is_ended or (run.raw_job_id, run.submit_time) in done:
            continue
        usage = _run_charge(job, allocation, task, run, source)
        done.add((run.raw_job_id, run.submit_time))
        charged += 1
        usage.add_to(task)
        totals.add(usage)
    return charged, totals


def _run_charge(
    job: Job, allocation: Allocation, task: JobTask, run: RunRecord, source: str
) -> _Usage:
    """Records one ended run and charges it from the allocation's hold: cores (or GPUs) x
    elapsed, capped at what the task has left of its reservation and at the hold; nothing
    for a run the owner's side ended (recorded for the owner's track record)."""
    cluster = job.cluster
    metered = _metered_units(allocation.resource, run)
    is_owner_caused = run.state in OWNER_CAUSED_STATES
    units = Decimal(0) if is_owner_caused else min(metered, task.reserved_units - task.units)
    cost, charge = _run_capture(job, allocation, run, units)
    if is_owner_caused:
        market.owner_side_run_end_record(
            cluster=cluster,
            raw_job_id=run.raw_job_id,
            submit_time=run.submit_time,
            scheduler_state=run.scheduler_state,
            ended_at=run.end_time or timezone.now(),
        )
    if run.state == PREEMPTED:
        webhook_events.job_preempted(job, run)
        notices.job_preempted(job, run, cluster.preemption_grace_seconds)
    cpu_seconds = Decimal(str(round(run.cpu_seconds, 3)))
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
        cpu_seconds=cpu_seconds,
        max_rss_bytes=run.max_rss_bytes,
        metered_units=metered,
        units=units,
        cost=cost,
        is_owner_caused=is_owner_caused,
        charge=charge,
        source=source,
    )
    cores = run.allocated_gpus if allocation.resource == Resource.GPU else run.allocated_cpus
    return _Usage(
        units=units,
        cost=cost,
        elapsed_seconds=run.elapsed_seconds,
        cpu_seconds=cpu_seconds,
        core_seconds=cores * run.counted_seconds,
        max_rss_bytes=run.max_rss_bytes,
    )


def _run_capture(
    job: Job, allocation: Allocation, run: RunRecord, units: Decimal
) -> tuple[Decimal, Transaction | None]:
    """What `units` of the run cost, at most what the allocation's hold has left, captured
    from the hold for the cluster's owner (once per run: its reference is the run's key)."""
    cluster = job.cluster
    hold = Hold.objects.get(pk=allocation.hold_id)
    cost = min(money_of(units, allocation.unit_price), hold.amount)
    if cost <= 0:
        return cost, None
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
    return cost, charge


def _task_end(task: JobTask, final: RunRecord | None) -> Decimal | None:
    """Ends the task (in memory) at its final run, once ended and not before: what of its
    reservation goes back to the allocation, or None when it did not end now."""
    if final is None or final.state not in ENDED_STATES or task.is_released:
        return None
    task.is_released = True
    status_move(task, final.state, field="state")
    task.state_reason = final.reason[:500] if final.state != JobState.COMPLETED else ""
    task.exit_code = final.exit_code
    # A task of less than a second ran, though accounting counts no whole second of it: its
    # start is accounting's (`has_run`). One cancelled while pending never ran, and has none.
    if final.has_run:
        task.started_at = final.start_time
    task.ended_at = final.end_time or timezone.now()
    release: Decimal = task.reserved_units - task.units
    return release


def _usage_add(job: Job, allocation: Allocation, totals: _Usage, release: Decimal) -> None:
    """Adds what runs used to the allocation (used, and no longer reserved, with what the
    ended task gives back) and to the job's sums."""
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
    job.max_rss_bytes = _larger(job.max_rss_bytes, totals.max_rss_bytes)
    job.save(
        update_fields=[
            "units",
            "cost",
            "elapsed_seconds",
            "cpu_seconds",
            "allocated_core_seconds",
            "max_rss_bytes",
            "updated_at",
        ]
    )


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
    if state == JobState.CANCELLED and job.cancel_reason:
        reasons = [job.cancel_reason]
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
    if state in ENDED_STATES:
        # The files it wrote in its folder are fetched once its end is committed.
        job_results_collect_after_commit(job)
    return job


def cluster_reconcile(*, cluster_id: int, days: int | None = None) -> int:
    """Compares the cluster's accounting for the last days with what was charged, and charges
    (as new ledger entries, never edits) every ended run that no poll settled: every run of the
    tenants leased in that time, whoever submitted it (a job the poll never saw is recorded
    first). Returns how many runs it charged."""
    cluster = Cluster.objects.get(pk=cluster_id)
    now = timezone.now()
    since = now - timedelta(days=days or settings.JOBS_RECONCILE_DAYS)
    backend = backend_for(cluster)
    if cluster.backend == Cluster.Backend.LOCAL:
        windows: list[LeaseWindow] = []
        records = backend.runs_of_users([], since, now)
    else:
        windows = lease_windows(cluster, since=since)
        if not windows:
            return 0
        records = backend.runs_of_users(sorted({window.user for window in windows}), since, now)
        records = [record for record in records if lease_of_run(windows, record)]
        tenant_jobs_record(cluster=cluster, records=records, windows=windows, now=now)
    ended = [record for record in records if record.is_ended]
    if not ended:
        return 0
    settled = {
        (raw, submit)
        for raw, submit in JobRun.objects.filter(
            cluster=cluster, raw_job_id__in={record.raw_job_id for record in ended}
        ).values_list("raw_job_id", "submit_time")
    }
    tasks = {
        (task.job.scheduler_job_id, task.array_task_id): task
        for task in JobTask.objects.filter(
            job__cluster=cluster,
            job__scheduler_job_id__in={record.array_job_id for record in ended},
        ).select_related("job")
    }
    posted = 0
    for record in ended:
        task = tasks.get((record.array_job_id, record.array_task_id))
        if task is None or (record.raw_job_id, record.submit_time) in settled:
            continue
        result = job_task_settle(
            task_id=task.pk, runs=[record], final=None, source=JobRun.Source.RECONCILIATION
        )
        posted += result.runs_charged
    if posted:
        logger.warning("reconciliation of cluster %s charged %s missed runs", cluster_id, posted)
    return posted
