"""Settling what a job's runs used: each ended run charged once from its allocation's commitment
hold (key: cluster, raw job id, submit time), a task ended at its final run with the rest of
its reservation given back, and the job's state, times and exit code brought in line with its
tasks'. The poll (`following`) and the reconciliation (`reconciliation`) both settle through
`job_task_settle`, in one transaction under the allocation's lock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing import services as billing
from billing.models import Hold, ReferenceKind, Transaction
from computeshare.states import status_move
from hpc.slurm.accounting import run_state
from hpc.types import (
    CANCELLED,
    COMPLETED,
    OWNER_CAUSED_STATES,
    PREEMPTED,
    REQUEUED,
    RESIZED,
    UNDETERMINED,
    RunRecord,
)
from marketplace import services as market
from marketplace.models import Allocation, Cluster, Resource
from scheduler_bridge import notices, webhook_events
from scheduler_bridge.models import (
    ENDED_STATES,
    Job,
    JobRun,
    JobState,
    JobTask,
    metered_units,
    money_of,
)
from scheduler_bridge.services.files import job_results_collect_after_commit
from scheduler_bridge.services.submission import job_state_record

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


def final_run(last: RunRecord, now: datetime) -> RunRecord | None:
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
