"""Accepting a job, and ending or cancelling it.

A job is saved as `queued` with its units reserved on the allocation, in one transaction; the
submission task is enqueued after the commit (`dispatch` carries it to the cluster). A job that
never reached the cluster ends here and gives its whole reservation back; one on the cluster is
cancelled there after the commit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, QuerySet
from django.utils import timezone

from computeshare.errors import ValidationFailed
from computeshare.prepared import PreparedRead
from computeshare.queue import enqueue_after_commit, enqueue_once_after_commit
from computeshare.states import status_move, status_move_all
from marketplace.models import Allocation, Cluster
from marketplace.selectors import tenant_lease_active_id
from marketplace.services import tenant_lease_take
from organizations.models import Membership
from scheduler_bridge import errors, notices, webhook_events
from scheduler_bridge.job_files import InputUpload
from scheduler_bridge.job_requests import JobRequest
from scheduler_bridge.models import ENDED_STATES, Job, JobEvent, JobFile, JobState, JobTask
from scheduler_bridge.services.backends import backend_for, job_tenant
from scheduler_bridge.services.files import (
    job_inputs_discard_after_commit,
    job_inputs_store,
)
from scheduler_bridge.services.planning import (
    AS_WRITTEN,
    DirectivesRead,
    SizedJob,
    job_request_sized,
)
from scheduler_bridge.services.specs import account_for, qos_for


def job_state_record(job: Job, state: str, reason: str = "", at: datetime | None = None) -> None:
    """Moves the job to `state` (in memory; the caller saves) through `Job.TRANSITIONS`, with its
    history. Raises `TransitionRefused` for a move the table does not allow."""
    changed = status_move(job, state, field="state")
    job.state_reason = reason[:500]
    if changed:
        JobEvent.objects.create(
            job=job, state=state, reason=job.state_reason, at=at or timezone.now()
        )
    if changed and state in ENDED_STATES:
        webhook_events.job_ended(job, at)
        notices.job_ended(job)


def allocation_check_open(allocation: Allocation) -> None:
    """Refuses jobs on an allocation whose window is not open (409 `allocation_not_active`) or
    whose cluster takes no jobs now (409 `cluster_not_available`). The API asks this before it
    reads the body, so that a state conflict is answered before an input error."""
    if allocation.status_at(timezone.now()) != Allocation.Status.ACTIVE:
        raise errors.AllocationNotActive(
            extra={"window_start": allocation.window_start, "window_end": allocation.window_end}
        )
    if allocation.cluster.status in Cluster.UNAVAILABLE_STATUSES:
        raise errors.ClusterNotAvailable(extra={"cluster_status": allocation.cluster.status})


@dataclass(frozen=True)
class AcceptedJob:
    """A job `job_accept` accepted, with the rows it wrote beside the job's: its tasks (in the
    order of their indices), its first event and its input files. The answer to a submission
    is built from them rather than read back (`selectors.job_detail_of_accepted`)."""

    job: Job
    tasks: list[JobTask]
    events: list[JobEvent]
    input_files: list[JobFile]


def job_submit(
    *,
    actor: Membership,
    allocation: Allocation,
    request: JobRequest,
    input_files: Sequence[InputUpload] = (),
    read: DirectivesRead = AS_WRITTEN,
) -> Job:
    """`job_accept`'s job."""
    return job_accept(
        actor=actor, allocation=allocation, request=request, input_files=input_files, read=read
    ).job


@transaction.atomic
def job_accept(
    *,
    actor: Membership,
    allocation: Allocation,
    request: JobRequest,
    input_files: Sequence[InputUpload] = (),
    read: DirectivesRead = AS_WRITTEN,
) -> AcceptedJob:
    """Accepts a job: reads its script's directives into it, checks it against the allocation,
    reserves its units and saves it as `queued` with its input files in storage (checked by
    the caller, `input_uploads_check`); the submission to the cluster starts after the commit.
    Keeps `used + reserved <= quantity` on the allocation, under its row lock. `read` says
    where its directives are read from when not its own script (a sweep's)."""
    allocation, held_lease_id = _allocation_locked(allocation)
    if allocation.organization_id != actor.organization_id:
        raise ValidationFailed(fields={"allocation": ["No such allocation."]})
    allocation_check_open(allocation)
    sized = job_request_sized(allocation, request, read)
    units = sized.units
    # The team's tenant on the cluster: leased with its first allocation there, and read with
    # the allocation (a lease ends only once the team has no open allocation there), or leased
    # now if that lease has ended meanwhile. 409 when every account is another team's.
    if held_lease_id is None:
        lease = tenant_lease_take(
            cluster=allocation.cluster, organization_id=allocation.organization_id
        )
        held_lease_id = lease.pk if lease is not None else None
    allocation.reserved += units
    allocation.save(update_fields=["reserved", "updated_at"])
    job = _job_insert(actor, allocation, held_lease_id, sized)
    task_units = sized.task_units
    tasks = JobTask.objects.bulk_create(
        JobTask(job=job, array_task_id=index, reserved_units=task_units) for index in sized.indices
    )
    event = JobEvent.objects.create(job=job, state=JobState.QUEUED, at=job.created_at)
    files = job_inputs_store(job, input_files)
    # One message for all the jobs accepted while the last is waiting for a worker: it submits
    # every queued job of the cluster together.
    enqueue_once_after_commit(
        "scheduler_bridge.tasks.cluster_jobs_submit_task",
        allocation.cluster_id,
        recovered_by="the periodic poll submits it",
        pending_seconds=settings.JOBS_SUBMIT_WAKE_SECONDS,
    )
    tasks.sort(key=lambda task: -1 if task.array_task_id is None else task.array_task_id)
    return AcceptedJob(job, tasks, [event], files)


def _job_insert(
    actor: Membership, allocation: Allocation, lease_id: int | None, sized: SizedJob
) -> Job:
    """The job's row, `queued`, as its plan and size say."""
    plan = sized.plan
    return Job.objects.create(
        allocation=allocation,
        # The rows just read, so that the job's detail needs no second read of them.
        organization=allocation.organization,
        cluster=allocation.cluster,
        lease_id=lease_id,
        partition_name=allocation.partition.name,
        submitted_by=actor.user,
        name=plan.name.strip(),
        script=plan.script,
        **plan.size.columns(),
        template=plan.template,
        array=plan.array or "",
        task_count=len(sized.indices),
        environment=plan.environment,
        secret_environment=plan.secret_environment,
        account=account_for(allocation),
        qos=qos_for(allocation),
        reservation=allocation.reservation,
        reserved_units=sized.units,
        directives=plan.report.as_json(),
        options=_options_kept(sized),
    )


# What a job's acceptance reads with its allocation.
_ALLOCATION_RELATED = ("cluster", "partition", "organization")


def _allocation_with_lease(pk: int) -> QuerySet[Allocation]:
    return (
        Allocation.objects.select_for_update(of=("self",))
        .annotate(
            held_lease_id=tenant_lease_active_id(
                OuterRef("cluster_id"), OuterRef("organization_id")
            )
        )
        .filter(pk=pk)
        .order_by()  # one row: not the model's ordering
    )


# Compiled once (computeshare/prepared.py): every accepted job runs it.
_allocation_with_lease_read = PreparedRead(
    _allocation_with_lease, parameters={"pk": Allocation._meta.get_field("id")}
)


def _allocation_locked(allocation: Allocation) -> tuple[Allocation, int | None]:
    """The allocation's row read again under its lock, with the id of its team's active tenant
    lease on the cluster (None without one) in the same query. Its cluster, partition and
    organization are those the caller read (the API reads them with the allocation), or read
    when first used: only the allocation's own row is locked, as it always was, so a
    cluster's status read a moment before the lock is as good as one read under it."""
    (locked,) = _allocation_with_lease_read(pk=allocation.pk)
    for name in _ALLOCATION_RELATED:
        if Allocation._meta.get_field(name).is_cached(allocation):  # type: ignore[union-attr]
            setattr(locked, name, getattr(allocation, name))
    held_lease_id: int | None = getattr(locked, "held_lease_id")  # noqa: B009 (an annotation)
    return locked, held_lease_id


def _options_kept(sized: SizedJob) -> dict[str, Any]:
    """The plan's options as the job keeps them (`Job.options`): those set, its requeue, its
    dependency as the team's jobs it names, and an exclusive job's whole-node figures."""
    plan = sized.plan
    kept: dict[str, Any] = {
        name: value
        for name, value in asdict(plan.options).items()
        if name != "dependency" and value not in ("", None, False)
    }
    if plan.requeue is not None:
        kept["requeue"] = plan.requeue
    if sized.dependency is not None:
        kept["dependency"] = sized.dependency
    if plan.size.exclusive:
        kept["node_cpus"] = plan.size.node_cpus
        kept["node_gpus"] = plan.size.node_gpus
    return kept


def _end_unsubmitted(job_id: int, state: str, reason: str) -> bool:
    """Ends a job that never reached the cluster and gives its whole reservation back."""
    job = Job.objects.get(pk=job_id)
    allocation = Allocation.objects.select_for_update().get(pk=job.allocation_id)
    job = Job.objects.select_for_update().get(pk=job_id)
    if job.state != JobState.QUEUED:
        return False
    now = timezone.now()
    job_state_record(job, state, reason, at=now)
    job.ended_at = now
    job.submit_lease_until = None
    job.secret_values_forget()
    status_move(job, Job.ResultsState.READY, field="results_state")  # it never ran: no files
    job.save()
    status_move_all(
        JobTask.objects.filter(job=job),
        state,
        field="state",
        from_statuses=[JobState.QUEUED],
        state_reason=reason[:500],
        ended_at=now,
        is_released=True,
        updated_at=now,
    )
    allocation.reserved -= job.reserved_units
    allocation.save(update_fields=["reserved", "updated_at"])
    job_inputs_discard_after_commit([job.pk])
    return True


@transaction.atomic
def job_fail_unsubmitted(*, job_id: int, reason: str) -> bool:
    return _end_unsubmitted(job_id, JobState.FAILED, reason)


@transaction.atomic
def job_cancel_unsubmitted(*, job_id: int) -> bool:
    return _end_unsubmitted(job_id, JobState.CANCELLED, "Cancelled before it reached the cluster.")


@transaction.atomic
def job_cancel(*, actor: Membership, job: Job) -> Job:
    """Cancels a job. One that never reached the cluster (and that no worker is submitting)
    ends at once with its reservation released; otherwise the request is recorded and the
    cluster is asked to cancel it after the commit (or by the submitter, when the job is
    being submitted now). The poll then sees it end and settles what it used."""
    # The allocation's row first, then the job's: the one lock order of jobs (settlement and
    # submission take them in this order too).
    Allocation.objects.select_for_update().filter(pk=job.allocation_id).first()
    job = Job.objects.select_for_update().get(pk=job.pk)
    if job.organization_id != actor.organization_id:
        raise ValidationFailed(fields={"job": ["No such job."]})
    if job.state in ENDED_STATES:
        raise errors.JobAlreadyEnded(extra={"state": job.state})
    now = timezone.now()
    job.cancel_requested_at = job.cancel_requested_at or now
    job.save(update_fields=["cancel_requested_at", "updated_at"])
    being_submitted = job.submit_lease_until is not None and job.submit_lease_until > now
    if job.state == JobState.QUEUED and job.submit_attempts == 0 and not being_submitted:
        _end_unsubmitted(job.pk, JobState.CANCELLED, "Cancelled before it reached the cluster.")
    elif job.state != JobState.QUEUED:
        # Unheard (the broker down), the cancel is repeated by the poll after
        # CANCEL_REPEAT_AFTER, as for a cancel that the cluster did not act on.
        enqueue_after_commit(
            "scheduler_bridge.tasks.job_cancel_remote_task",
            job.pk,
            recovered_by="the poll repeats it",
        )
    job.refresh_from_db()
    return job


def job_cancel_remote(*, job_id: int) -> bool:
    """Asks the cluster to cancel a job whose cancellation was requested. Raises the bridge's
    error when the cluster cannot be reached (the task retries)."""
    job = Job.objects.select_related("cluster", "lease__account").get(pk=job_id)
    if job.state in ENDED_STATES or not job.scheduler_job_id or job.cancel_requested_at is None:
        return False
    backend_for(job.cluster).cancel(job_tenant(job), [job.scheduler_job_id])
    return True
