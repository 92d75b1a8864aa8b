"""Accepting a job, carrying it to the cluster, and cancelling it.

A job is saved as `queued` with its units reserved on the allocation, in one transaction; the
submission task is enqueued after the commit. Submitting claims a batch of the cluster's queued
jobs under a lease (so that no two workers submit the same job), looks up by name every job
that an earlier attempt may already have submitted, and submits the rest together: jobs that
arrive at the same moment share remote commands."""

from __future__ import annotations

import getpass
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import CharField, F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from computeshare.errors import ValidationFailed
from computeshare.queue import enqueue_after_commit, enqueue_once_after_commit
from computeshare.states import status_move, status_move_all
from hpc.errors import BridgeError
from hpc.slurm import directives, filenames
from hpc.types import Backend, InputFile, JobOptions, JobSpec, Tenant
from marketplace.models import Allocation, Capacity, Cluster, SlurmAccount, TenantLease
from marketplace.selectors import tenant_lease_active_id
from marketplace.services import tenant_lease_take, tenant_slurm_join
from organizations.models import Membership
from scheduler_bridge import errors, notices, webhook_events
from scheduler_bridge.job_files import InputUpload
from scheduler_bridge.job_requests import DirectiveReport, JobRequest
from scheduler_bridge.models import ENDED_STATES, Job, JobEvent, JobFile, JobState, JobTask
from scheduler_bridge.services.backends import backend_failed, backend_for, job_tenant
from scheduler_bridge.services.files import (
    job_input_files,
    job_inputs_discard_after_commit,
    job_inputs_store,
)
from scheduler_bridge.services.planning import (
    AS_WRITTEN,
    DirectivesRead,
    SizedJob,
    job_request_sized,
)

logger = logging.getLogger(__name__)


def _account_for(allocation: Allocation) -> str:
    cluster = allocation.cluster
    if cluster.backend != Cluster.Backend.SLURM:
        return ""
    if cluster.account_mode == Cluster.AccountMode.MANAGED:
        account = SlurmAccount.objects.filter(
            cluster=cluster, organization_id=allocation.organization_id
        ).first()
        return account.name if account else ""
    return cluster.slurm_account


def _qos_for(allocation: Allocation) -> str:
    """The QOS a job on the allocation runs under: on preemptible capacity of a fixed-mode
    cluster, the market's, which the owner's own QOS preempts; elsewhere the association's
    default (in managed mode the team's own QOS, itself preemptable by the owner's; on a
    reserved block the tenant's default, since only the team can run on those cores)."""
    cluster = allocation.cluster
    if (
        allocation.capacity != Capacity.PREEMPTIBLE
        or cluster.backend != Cluster.Backend.SLURM
        or cluster.account_mode == Cluster.AccountMode.MANAGED
    ):
        return ""
    return cluster.market_qos


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
        time_limit_minutes=plan.size.time_limit_minutes,
        nodes=plan.size.nodes,
        ntasks=plan.size.ntasks,
        cpus_per_task=plan.size.cpus_per_task,
        gpus=plan.size.gpus,
        mem_per_cpu=plan.mem_per_cpu,
        template=plan.template,
        array=plan.array or "",
        task_count=len(sized.indices),
        environment=plan.environment,
        secret_environment=plan.secret_environment,
        account=_account_for(allocation),
        qos=_qos_for(allocation),
        reservation=allocation.reservation,
        reserved_units=sized.units,
        directives=plan.report.as_json(),
        options=_options_kept(sized),
    )


# What a job's acceptance reads with its allocation.
_ALLOCATION_RELATED = ("cluster", "partition", "organization")


def _allocation_locked(allocation: Allocation) -> tuple[Allocation, int | None]:
    """The allocation's row read again under its lock, with its cluster, partition and
    organization, and the id of its team's active tenant lease on the cluster (None without
    one) in the same query. The related rows the caller has read already (the API reads them
    with the allocation) are taken as they are, the others are read with it. Only the
    allocation's own row is locked, as it always was, so a cluster's status read a moment
    before the lock is as good as one read under it."""
    known = {
        name: getattr(allocation, name)
        for name in _ALLOCATION_RELATED
        if Allocation._meta.get_field(name).is_cached(allocation)  # type: ignore[union-attr]
    }
    unknown = [name for name in _ALLOCATION_RELATED if name not in known]
    rows = Allocation.objects.select_for_update(of=("self",)).annotate(
        held_lease_id=tenant_lease_active_id(OuterRef("cluster_id"), OuterRef("organization_id"))
    )
    if unknown:  # select_related() without names would follow every foreign key
        rows = rows.select_related(*unknown)
    locked = rows.get(pk=allocation.pk)
    for name, row in known.items():
        setattr(locked, name, row)
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


def job_spec(job: Job, input_files: tuple[InputFile, ...] = (), dependency: str = "") -> JobSpec:
    """What reaches the scheduler for `job`: its sizes and options as sbatch options, its
    script with the directive lines made comments that say what became of them."""
    tenant = job_tenant(job)
    notes = DirectiveReport.from_json(job.directives).line_notes()
    return JobSpec(
        name=job.scheduler_name,
        script=directives.neutralised(job.script, notes),
        directory=job.directory,
        partition=job.allocation.partition.name,
        time_limit_minutes=job.time_limit_minutes,
        account=job.account or None,
        nodes=job.nodes,
        ntasks=job.ntasks,
        cpus_per_task=job.cpus_per_task,
        gpus=job.gpus,
        mem_per_cpu=job.mem_per_cpu,
        array=job.array or None,
        # The secret variables reach the job exactly as the others do (the cluster's copy is
        # readable by the tenant alone, and removed once sbatch has read it).
        environment={**job.environment, **job.secret_environment},
        tenant=tenant,
        input_files=input_files,
        qos=job.qos or None,
        reservation=job.reservation or None,
        # A preempted run goes back to the queue rather than ending the job; elsewhere the
        # script's --requeue or --no-requeue, else the cluster's default.
        requeue=(
            True
            if job.allocation.capacity == Capacity.PREEMPTIBLE
            else (job.options or {}).get("requeue")
        ),
        options=_preemption_signalled(
            job,
            replace(stream_names_filled(job.job_options, job.name, tenant), dependency=dependency),
        ),
    )


def _preemption_signalled(job: Job, options: JobOptions) -> JobOptions:
    """On preemptible capacity of a Slurm cluster, a job that asked for no signal of its own
    gets SIGTERM, batch script included, when its grace begins: with `--signal=B:TERM@0` and
    the cluster's `preempt_send_user_signal`, Slurm sends it at preemption (ADR 0022); without
    one the batch script hears nothing until it is killed. `@0`: no warning before the time
    limit, which ends the job as it always did (`timeout`). A script's own `--signal` is what
    it gets at preemption instead."""
    cluster = job.cluster
    if (
        options.signal
        or not cluster.preemption_grace_seconds
        or job.allocation.capacity != Capacity.PREEMPTIBLE
        or cluster.backend != Cluster.Backend.SLURM
    ):
        return options
    return replace(options, signal="B:TERM@0")


def stream_names_filled(options: JobOptions, name: str, tenant: Tenant | None) -> JobOptions:
    """The options with `%x` and `%u` of their file names filled: the Slurm job's name is the
    platform's (`cs-<uuid>`), so `%x` is the job's own name here; `%u` the account it runs as
    (the platform's own on the local backend)."""
    values = {
        "x": filenames.safe_name_part(name),
        "u": tenant.user if tenant else getpass.getuser(),
    }

    def filled(pattern: str) -> str:
        return filenames.name_with(pattern, values) if pattern else ""

    return replace(
        options,
        output=filled(options.output),
        error=filled(options.error),
        input=filled(options.input),
    )


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
    now = timezone.now()
    jobs = list(
        Job.objects.select_for_update()
        .filter(pk__in=scheduler_job_ids, state=JobState.QUEUED)
        .order_by("pk")
        .only("pk", "state", "secret_environment")
    )
    if not jobs:
        return 0
    pks = [job.pk for job in jobs]
    with_secrets = []
    for job in jobs:
        job.scheduler_job_id = scheduler_job_ids[job.pk]
        if job.secret_environment:
            # The job is on the cluster, and is never submitted again: its secret values go.
            job.secret_values_forget()
            with_secrets.append(job)
    status_move_all(
        Job.objects.filter(pk__in=pks),
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
    # A task's id is its job's, and `ID_INDEX` for an array's task: read from the rows just
    # written rather than sent back row by row.
    job_id = Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("scheduler_job_id")[:1])
    tasks = JobTask.objects.filter(job_id__in=pks)
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
    # Staged with the script: the stored copies of their inputs are not needed any more.
    job_inputs_discard_after_commit(pks)
    return len(jobs)


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
