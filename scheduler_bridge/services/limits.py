"""An allocation's limits, held at the cluster by the poll: a task that has used what it
reserved (a job that requeued or grew itself, or one the team submitted itself) is cancelled,
and so is every job still running when its allocation's window has closed."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from hpc.types import Backend, QueueEntry, Tenant
from marketplace.models import Resource
from scheduler_bridge.models import SECONDS_PER_HOUR, Job, JobState, JobTask
from scheduler_bridge.services.backends import job_tenant


def task_over_its_limits(job: Job, task: JobTask, entry: QueueEntry, now: datetime) -> bool:
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


def limits_enforce(
    backend: Backend,
    jobs: dict[int, Job],
    ids: dict[int, list[str]],
    now: datetime,
    calls: list[str],
) -> int:
    """Cancels, as their tenants, the jobs (or array tasks) that went past their allocation's
    limits, and records why on each job. Returns how many were cancelled; each call to the
    cluster is named in `calls`."""
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
    cancelled = 0
    for tenant, job_ids in by_tenant.items():
        calls.append("cancel")
        backend.cancel(tenant, sorted(set(job_ids)))
        cancelled += len(set(job_ids))
    return cancelled
