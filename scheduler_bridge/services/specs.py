"""What reaches the scheduler for a job (docs/design.md: QOS, reservations, requeue): its
sizes and options as sbatch options, the Slurm account and QOS it runs under, its script with
the directive lines made comments, and its file names filled. Shared by the submission and its
quote."""

from __future__ import annotations

import getpass
from dataclasses import replace

from hpc.slurm import directives, filenames
from hpc.types import InputFile, JobOptions, JobSpec, Tenant
from marketplace.models import Allocation, Capacity, Cluster, SlurmAccount
from scheduler_bridge.job_requests import DirectiveReport
from scheduler_bridge.models import Job
from scheduler_bridge.services.backends import job_tenant


def account_for(allocation: Allocation) -> str:
    cluster = allocation.cluster
    if cluster.backend != Cluster.Backend.SLURM:
        return ""
    if cluster.account_mode == Cluster.AccountMode.MANAGED:
        account = SlurmAccount.objects.filter(
            cluster=cluster, organization_id=allocation.organization_id
        ).first()
        return account.name if account else ""
    return cluster.slurm_account


def qos_for(allocation: Allocation) -> str:
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
        **job.size.columns(),
        account=job.account or None,
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
