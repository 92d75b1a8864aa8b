"""Carrying queued jobs to their cluster, once (ADR 0006).

Submitting claims a batch of the cluster's queued jobs under a lease (so that no two workers
submit the same job), looks up by name every job that an earlier attempt may already have
submitted, and submits the rest together: jobs that arrive at the same moment share remote
commands. sbatch's answers mark them submitted, refused, or waiting."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import CharField, F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from computeshare.states import status_move_all
from hpc.errors import BridgeError
from hpc.types import Backend, Tenant
from marketplace.models import Cluster, TenantLease
from marketplace.services import tenant_slurm_join
from scheduler_bridge.models import ENDED_STATES, Job, JobEvent, JobState, JobTask
from scheduler_bridge.services.backends import backend_failed, backend_for, job_tenant
from scheduler_bridge.services.files import (
    job_input_files,
    job_inputs_discard_after_commit,
)
from scheduler_bridge.services.specs import job_spec
from scheduler_bridge.services.submission import job_cancel_unsubmitted, job_fail_unsubmitted

logger = logging.getLogger(__name__)


def _claim(cluster: Cluster, limit: int, now: datetime) -> list[tuple[Job, bool]]:
    """Takes up to `limit` of the cluster's queued jobs for this worker, oldest first, and
    returns each with whether an earlier attempt may have reached the cluster. The jobs and
    their leases are given the `cluster` row the caller read, rather than a copy of it each
    (with its key decrypted again)."""
    lease_until = now + timedelta(seconds=settings.JOBS_SUBMIT_LEASE_SECONDS)
    with transaction.atomic():
        jobs = list(
            Job.objects.select_for_update(skip_locked=True, of=("self",))
            # The spec needs the partition's name and the tenant's name and home.
            .select_related("allocation__partition", "lease__account")
            .filter(cluster_id=cluster.pk, state=JobState.QUEUED)
            .filter(Q(submit_lease_until__isnull=True) | Q(submit_lease_until__lt=now))
            .order_by("created_at", "pk")[:limit]
        )
        if not jobs:
            return []
        Job.objects.filter(pk__in=[job.pk for job in jobs]).update(
            submit_attempts=F("submit_attempts") + 1, submit_lease_until=lease_until
        )
    claimed = []
    for job in jobs:
        job.cluster = cluster
        if job.lease is not None and job.lease.cluster_id == cluster.pk:
            job.lease.cluster = cluster
        claimed.append((job, job.submit_attempts > 0))
        job.submit_attempts += 1
        job.submit_lease_until = lease_until
    return claimed


# What the queued jobs of a cluster that takes no jobs now (`Cluster.UNAVAILABLE_STATUSES`) say.
_WAITING_BECAUSE: dict[str, str] = {
    Cluster.Status.SUSPENDED: "Waiting: the cluster is suspended.",
    Cluster.Status.HOST_KEY_MISMATCH: (
        "Waiting: the cluster's host offered another key than the pinned one; its owners "
        "must check it and verify the cluster again."
    ),
}


def cluster_jobs_submit(*, cluster_id: int, limit: int | None = None) -> int:
    """Submits the cluster's queued jobs, a batch at a time, and returns how many reached the
    cluster. Never submits a job twice: an attempt that ended unclearly (connection lost,
    deadline passed, worker killed) leaves the job claimed until its lease runs out, and the
    next attempt finds it by name first. Transient failures leave jobs queued for the next
    attempt; refusals fail them with the scheduler's reason."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if cluster.status in Cluster.UNAVAILABLE_STATUSES:
        # Nothing goes to a cluster the operators suspended or whose host key changed; the
        # jobs wait (and can be cancelled) until the owners sort it out.
        reason = _WAITING_BECAUSE.get(cluster.status, "Waiting: the cluster takes no jobs now.")
        Job.objects.filter(cluster=cluster, state=JobState.QUEUED).update(state_reason=reason)
        return 0
    limit = limit or settings.JOBS_SUBMIT_BATCH_SIZE
    submitted = 0
    while claimed := _claim(cluster, limit, timezone.now()):
        submitted += _submit_claimed(cluster, claimed)
        if len(claimed) < limit:
            break
    return submitted


def _submit_claimed(cluster: Cluster, claimed: list[tuple[Job, bool]]) -> int:
    """Submits a claimed batch, tenant by tenant: each team's jobs go to the cluster as its own
    tenant, and one tenant's trouble (a Slurm association not ready, an unclear answer) leaves
    only that tenant's jobs waiting."""
    by_lease: dict[int | None, list[tuple[Job, bool]]] = {}
    for job, retried in claimed:
        by_lease.setdefault(job.lease_id, []).append((job, retried))
    submitted = 0
    backend: Backend | None = None
    for lease_id, group in by_lease.items():
        jobs = [job for job, _ in group]
        try:
            backend = backend or backend_for(cluster)
            if lease_id is not None and jobs[0].lease is not None:
                _lease_prepare(jobs[0].lease)
            submitted += _submit_group(backend, job_tenant(jobs[0]), group)
        except BridgeError as error:
            backend_failed(cluster, error)
            _submission_postponed(jobs, error)
            logger.warning("submission to cluster %s failed: %s", cluster.pk, error)
    return submitted


def _lease_prepare(lease: TenantLease) -> None:
    """On a managed cluster, the tenant's Slurm association with the team's account must be in
    place before its first job (jobs it submits itself are charged to its default account)."""
    if lease.prepared_at is None and lease.cluster.account_mode == Cluster.AccountMode.MANAGED:
        tenant_slurm_join(lease_id=lease.pk)


def _submit_group(backend: Backend, tenant: Tenant | None, claimed: list[tuple[Job, bool]]) -> int:
    """One tenant's share of a batch. Raises the bridge's error when its outcome is unclear."""
    jobs = [job for job, _ in claimed]
    users = [tenant.user] if tenant is not None else []
    maybe_submitted = [job.scheduler_name for job, retried in claimed if retried]
    # Looked up among this tenant's jobs only: another team's job may carry any name.
    found = backend.find(maybe_submitted, users) if maybe_submitted else {}
    cancelled_before = set(
        Job.objects.filter(
            pk__in=[job.pk for job in jobs], cancel_requested_at__isnull=False
        ).values_list("pk", flat=True)
    )
    to_submit = [
        job for job in jobs if job.scheduler_name not in found and job.pk not in cancelled_before
    ]
    reached = {job.pk: found[job.scheduler_name] for job in jobs if job.scheduler_name in found}
    for job in jobs:
        if job.pk not in reached and job.pk in cancelled_before:
            job_cancel_unsubmitted(job_id=job.pk)
    submitted = jobs_mark_submitted(scheduler_job_ids=reached)
    # A job whose --dependency names a job of this batch goes in a round after that job's:
    # its sbatch needs the other's Slurm id.
    pending = to_submit
    while pending:
        ready, pending, dependencies = _dependencies_written(pending)
        if not ready:
            break
        submitted += jobs_mark_submitted(
            scheduler_job_ids=_submit_round(backend, ready, dependencies)
        )
    if pending:
        _submission_postponed(
            pending,
            "the jobs its --dependency names have not reached the cluster yet",
            is_clear_refusal=True,
        )
    to_cancel = list(
        Job.objects.filter(
            pk__in=[job.pk for job in jobs],
            cancel_requested_at__isnull=False,
            state__in=[JobState.SUBMITTED],
        ).values_list("scheduler_job_id", flat=True)
    )
    if to_cancel:
        try:
            backend.cancel(tenant, to_cancel)
        except BridgeError as error:  # the poll asks again after CANCEL_REPEAT_AFTER
            logger.warning("cancel as %s failed: %s", tenant, error)
    return submitted


def _submit_round(
    backend: Backend, jobs: list[Job], dependencies: dict[int, str]
) -> dict[int, str]:
    """Submits the jobs; returns the Slurm ids of those that reached the cluster. A refusal
    fails its job with the scheduler's reason; a refusal for now leaves it queued."""
    inputs = job_input_files(job.pk for job in jobs)
    specs = [job_spec(job, inputs.get(job.pk, ()), dependencies.get(job.pk, "")) for job in jobs]
    reached = {}
    for job, result in zip(jobs, backend.submit(specs), strict=True):
        if result.scheduler_job_id is not None:
            reached[job.pk] = result.scheduler_job_id
        elif result.is_transient:
            _submission_postponed(
                [job], result.error or "the scheduler refused for now", is_clear_refusal=True
            )
        else:
            job_fail_unsubmitted(job_id=job.pk, reason=f"Refused by the scheduler: {result.error}")
    return reached


def _dependencies_written(jobs: list[Job]) -> tuple[list[Job], list[Job], dict[int, str]]:
    """The jobs that can be submitted now, those whose dependency names a job not yet on the
    cluster, and each dependency written in Slurm's ids. A job whose dependency names a job
    that ended without reaching the cluster fails: Slurm would never start it."""
    named = {
        reference["job"]
        for job in jobs
        for condition in (job.options or {}).get("dependency", {}).get("conditions", [])
        for reference in condition["jobs"]
    }
    if not named:
        return jobs, [], {}
    others = {
        str(row.uuid): row
        for row in Job.objects.filter(uuid__in=named).only("uuid", "scheduler_job_id", "state")
    }
    ready, waiting, written = [], [], {}
    for job in jobs:
        dependency = (job.options or {}).get("dependency")
        if not dependency:
            ready.append(job)
            continue
        text, missing = _dependency_text(dependency, others)
        if missing is None:
            ready.append(job)
            written[job.pk] = text
        elif missing.state in ENDED_STATES:
            job_fail_unsubmitted(
                job_id=job.pk,
                reason=f"Its --dependency names the job {missing.uuid}, which ended without "
                "reaching the cluster.",
            )
        else:
            waiting.append(job)
    return ready, waiting, written


def _dependency_text(dependency: dict[str, Any], others: dict[str, Job]) -> tuple[str, Job | None]:
    """The dependency in Slurm's ids, or the first job it names that has none yet."""
    parts = []
    for condition in dependency["conditions"]:
        text = condition["kind"]
        for reference in condition["jobs"]:
            other = others[reference["job"]]
            if not other.scheduler_job_id:
                return "", other
            text += f":{other.scheduler_job_id}"
            if reference["task"] is not None:
                text += f"_{reference['task']}"
            if reference["minutes"] is not None:
                text += f"+{reference['minutes']}"
        parts.append(text)
    return ("?" if dependency["any_of"] else ",").join(parts), None


# A job that sbatch clearly refused for now (the controller is down) is tried again after this;
# nothing of it can be on the cluster, so it need not wait out the whole lease.
REFUSED_RETRY_SECONDS = 30.0


def _submission_postponed(
    jobs: list[Job], error: BridgeError | str, *, is_clear_refusal: bool = False
) -> None:
    """Leaves the jobs queued with the reason shown. After an unclear failure their lease is
    kept: it is what makes the next attempt wait out an sbatch that may still be running, and
    look the jobs up first. After a clear refusal they are tried again sooner."""
    now = timezone.now()
    changes: dict[str, object] = {
        "state_reason": f"Waiting to reach the cluster: {error}"[:500],
        "updated_at": now,
    }
    if is_clear_refusal:
        retry = min(REFUSED_RETRY_SECONDS, settings.JOBS_SUBMIT_LEASE_SECONDS)
        changes["submit_lease_until"] = now + timedelta(seconds=retry)
    Job.objects.filter(pk__in=[job.pk for job in jobs], state=JobState.QUEUED).update(**changes)


def job_mark_submitted(*, job_id: int, scheduler_job_id: str) -> bool:
    """Records the scheduler's id of a job that reached the cluster. Idempotent."""
    return jobs_mark_submitted(scheduler_job_ids={job_id: scheduler_job_id}) == 1


@transaction.atomic
def jobs_mark_submitted(*, scheduler_job_ids: dict[int, str]) -> int:
    """Records the scheduler's ids of jobs that reached the cluster (job pk -> id), in one
    transaction for the whole batch: a batch of 200 is a handful of statements, not 1,200.
    What every job of the batch gets alike is one plain UPDATE, and only what differs goes
    row by row (the id, and the secrets' values forgotten where there are some): a
    `bulk_update` of every field built a CASE of 200 branches per field, which took longer
    than the sbatch calls themselves. Jobs no longer queued are left alone; returns how many
    were marked."""
    if not scheduler_job_ids:
        return 0
    jobs = _queued_locked(scheduler_job_ids)
    if not jobs:
        return 0
    now = timezone.now()
    _jobs_moved_to_submitted(jobs, scheduler_job_ids, now)
    pks = [job.pk for job in jobs]
    _tasks_moved_to_submitted(pks, now)
    # Staged with the script: the stored copies of their inputs are not needed any more.
    job_inputs_discard_after_commit(pks)
    return len(jobs)


def _queued_locked(scheduler_job_ids: dict[int, str]) -> list[Job]:
    """The jobs of the batch still queued, locked in the order of their keys."""
    return list(
        Job.objects.select_for_update()
        .filter(pk__in=scheduler_job_ids, state=JobState.QUEUED)
        .order_by("pk")
        .only("pk", "state", "secret_environment")
    )


def _jobs_moved_to_submitted(
    jobs: list[Job], scheduler_job_ids: dict[int, str], now: datetime
) -> None:
    """The jobs `submitted` with their Slurm ids and a `submitted` event each; their secrets'
    values forgotten, since a job on the cluster is never submitted again."""
    with_secrets = []
    for job in jobs:
        job.scheduler_job_id = scheduler_job_ids[job.pk]
        if job.secret_environment:
            job.secret_values_forget()
            with_secrets.append(job)
    status_move_all(
        Job.objects.filter(pk__in=[job.pk for job in jobs]),
        JobState.SUBMITTED,
        field="state",
        from_statuses=[JobState.QUEUED],
        state_reason="",
        submitted_at=now,
        last_seen_at=now,
        submit_lease_until=None,
        updated_at=now,
    )
    Job.objects.bulk_update(jobs, ["scheduler_job_id"])
    if with_secrets:
        Job.objects.bulk_update(with_secrets, ["secret_environment"])
    JobEvent.objects.bulk_create(
        JobEvent(job=job, state=JobState.SUBMITTED, at=now) for job in jobs
    )


def _tasks_moved_to_submitted(job_pks: list[int], now: datetime) -> None:
    """The jobs' tasks `submitted`. A task's id is its job's, and `ID_INDEX` for an array's
    task: read from the rows just written rather than sent back row by row."""
    job_id = Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("scheduler_job_id")[:1])
    tasks = JobTask.objects.filter(job_id__in=job_pks)
    status_move_all(
        tasks.filter(array_task_id__isnull=True),
        JobState.SUBMITTED,
        field="state",
        from_statuses=[JobState.QUEUED],
        scheduler_job_id=job_id,
        updated_at=now,
    )
    status_move_all(
        tasks.filter(array_task_id__isnull=False),
        JobState.SUBMITTED,
        field="state",
        from_statuses=[JobState.QUEUED],
        scheduler_job_id=Concat(job_id, Value("_"), Cast("array_task_id", CharField())),
        updated_at=now,
    )
