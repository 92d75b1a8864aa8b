"""A job's output as its tenant reads it on the cluster: the tail of its stdout or stderr, under
the names its script gave them (the patterns Slurm fills) or the platform's own."""

from __future__ import annotations

from computeshare.errors import ValidationFailed
from hpc.errors import BridgeError, JobFileUnsafe
from hpc.slurm import filenames
from hpc.slurm.jobs import streams
from hpc.types import Tenant
from scheduler_bridge import errors
from scheduler_bridge.models import Job, JobState, JobTask
from scheduler_bridge.services.backends import backend_failed, backend_for, job_tenant
from scheduler_bridge.services.specs import stream_names_filled


def job_output_check_kept(job: Job) -> None:
    """Refuses the output of a job the team's own jobs submitted on the cluster (409
    `output_not_kept`): it went where that job sent it. The API asks this before it reads the
    query, so that a state conflict is answered before an input error."""
    if job.is_from_tenant:
        raise errors.OutputNotKept()


def job_output(*, job: Job, stream: str, tail_bytes: int, array_task_id: int | None) -> bytes:
    """The tail of a job's stdout or stderr, read from the cluster as the job's tenant. Empty
    before it runs."""
    job_output_check_kept(job)
    if job.state == JobState.QUEUED or not job.scheduler_job_id:
        return b""
    if job.is_array and array_task_id is None:
        raise ValidationFailed(fields={"task": ["An array job's output is per task: give `task`."]})
    task = None
    if array_task_id is not None:
        task = job.tasks.filter(array_task_id=array_task_id).first()
        if task is None:
            raise ValidationFailed(fields={"task": ["The job has no such task."]})
    tenant = job_tenant(job)
    name = job_output_name(job, stream, task, tenant)
    if name == filenames.DEV_NULL:
        return b""  # the script sent this stream nowhere
    try:
        return backend_for(job.cluster).output_tail(
            tenant,
            job.directory,
            "stderr" if stream == "stderr" else "stdout",
            array_task_id,
            tail_bytes,
            name=name,
        )
    except JobFileUnsafe as error:
        raise errors.OutputNotReadable(extra={"reason": str(error)}) from error
    except BridgeError as error:
        backend_failed(job.cluster, error)
        raise errors.OutputUnavailable(str(error)) from error


def job_stream_files(job: Job) -> dict[str, str]:
    """The names the job's script gave its stdout and stderr in its folder (the patterns
    Slurm fills, `%x` filled with its name), or nothing when the platform named them."""
    options = job.job_options
    if not (options.output or options.error):
        return {}
    names = streams(stream_names_filled(options, job.name, job_tenant(job)), is_array=job.is_array)
    return {stream: names[stream] for stream in ("stdout", "stderr")}


def job_output_name(
    job: Job, stream: str, task: JobTask | None, tenant: Tenant | None
) -> str | None:
    """Where the job's (or the array task's) stdout or stderr is in its folder when its
    script named it: the patterns filled as Slurm filled them, `*` for what is not known here
    (the node's name; an array task's own job id until accounting gave it). None for the
    platform's own names."""
    options = job.job_options
    if not (options.output or options.error):
        return None
    pattern = streams(stream_names_filled(options, job.name, tenant), is_array=job.is_array)[
        "stderr" if stream == "stderr" else "stdout"
    ]
    own: int | str = job.scheduler_job_id
    if task is not None:
        run = task.runs.order_by("-submit_time").first()
        own = run.raw_job_id if run is not None else filenames.WILDCARD
    values = filenames.batch_values(
        job_id=own,
        array_job_id=job.scheduler_job_id,
        array_task_id=task.array_task_id if task is not None else None,
        node=filenames.WILDCARD,
    )
    return filenames.name_with(pattern, values)
