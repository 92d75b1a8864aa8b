"""Following jobs on their cluster.

One poll per cluster per cycle: one `squeue` for every job of the cluster's leased tenants,
then `sacct` (in chunks) for the tasks that left the queue. Metering follows the Unix user:
a job of a tenant that the platform did not submit (one of the team's jobs ran `sbatch`) is
recorded as the team's when the poll sees it, in the queue or, once a minute, in accounting.
A task is called ended only once accounting shows its last run ended; what its runs used is
settled by `settlement`. The poll also holds the allocations' limits at the cluster (`limits`)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from computeshare.states import status_move_all
from hpc.arrays import InvalidArray, parse_index_ranges
from hpc.batches import batched
from hpc.errors import BridgeError
from hpc.types import (
    UNDETERMINED,
    Backend,
    QueueEntry,
    RunRecord,
    Tenant,
)
from marketplace.models import Allocation, Cluster, TenantLease
from scheduler_bridge.models import (
    ACTIVE_STATES,
    ENDED_STATES,
    ClusterPoll,
    Job,
    JobEvent,
    JobState,
    JobTask,
)
from scheduler_bridge.services.backends import backend_failed, backend_for, job_tenant
from scheduler_bridge.services.dispatch import cluster_jobs_submit
from scheduler_bridge.services.idle import (
    cluster_idle_sample,
    cluster_reachability_seen,
    is_unreachable,
)
from scheduler_bridge.services.limits import limits_enforce, task_over_its_limits
from scheduler_bridge.services.settlement import (
    final_run,
    job_state_refresh,
    job_task_settle,
)
from scheduler_bridge.services.submission import job_state_record
from scheduler_bridge.services.tenant_jobs import lease_windows, tenant_jobs_find

logger = logging.getLogger(__name__)

# A cancellation the cluster has not acted on by then is asked for again by the poll.
CANCEL_REPEAT_AFTER = timedelta(seconds=30)
# How stale `Job.last_seen_at` may be: it only starts the (long) undetermined grace period.
LAST_SEEN_PRECISION = timedelta(seconds=60)


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
        report.tenant_jobs_found += tenant_jobs_find(
            cluster, backend, entries, windows, now, report.backend_calls
        )
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
    if task_over_its_limits(job, task, entry, now) and not job.cancel_requested_at:
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
        final = final_run(runs[-1], now) if task.pk in gone else None
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
        report.cancelled += limits_enforce(
            backend, jobs, followed.to_cancel, now, report.backend_calls
        )
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


def _is_new_run(task: JobTask, entry: QueueEntry) -> bool:
    """Whether the queue shows a run of the task after the one the poll saw running."""
    if entry.state == JobState.PENDING and task.state in (JobState.RUNNING, JobState.COMPLETING):
        return True
    return (
        entry.start_time is not None
        and task.run_started_at is not None
        and entry.start_time > task.run_started_at
    )


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
