"""The webhook events of jobs (`job.ended`, and `job.preempted` for each run the owner's own
jobs took back), recorded in the transaction that ends the job or records the run, through the
webhooks app's one entry point."""

from datetime import datetime

from django.conf import settings
from django.utils import timezone

from hpc.types import RunRecord
from scheduler_bridge.models import Job
from webhooks.services import event_record, organizations_listening


def job_ended(job: Job, at: datetime | None) -> None:
    """`job.ended` with the job's end state, exit code and what it cost so far (each run is
    charged as accounting reports it; a run's record that comes after the end adds to the
    job's cost, which the job's API shows)."""
    if not organizations_listening([job.organization_id], "job.ended"):
        return
    event_record(
        organization_id=job.organization_id,
        type="job.ended",
        object_key=f"job:{job.uuid}",
        once=True,
        data={
            "id": str(job.uuid),
            "name": job.name,
            "allocation": str(job.allocation.uuid),
            "state": job.state,
            "state_reason": job.state_reason,
            "exit_code": job.exit_code,
            "scheduler_job_id": job.scheduler_job_id,
            "array": job.array,
            "started_at": job.started_at,
            "ended_at": job.ended_at or at or timezone.now(),
            "units": str(job.units),
            "cost": str(job.cost),
            "currency": settings.PLATFORM_CURRENCY,
        },
    )


def job_preempted(job: Job, run: RunRecord) -> None:
    """`job.preempted`: a run of the job ended because the owner's own jobs took its cores
    back (not charged); Slurm queues the job again. Once per run (its run is recorded once),
    in the order of the job's other events."""
    if not organizations_listening([job.organization_id], "job.preempted"):
        return
    event_record(
        organization_id=job.organization_id,
        type="job.preempted",
        object_key=f"job:{job.uuid}",
        data={
            "id": str(job.uuid),
            "name": job.name,
            "allocation": str(job.allocation.uuid),
            "scheduler_job_id": run.job_id,
            "array_task_id": run.array_task_id,
            "run_started_at": run.start_time,
            "preempted_at": run.end_time,
            "elapsed_seconds": run.elapsed_seconds,
            "grace_seconds": job.cluster.preemption_grace_seconds,
            "charged": False,
        },
    )
