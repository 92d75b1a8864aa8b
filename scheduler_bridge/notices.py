"""The notification of jobs (`job_ended`, with the state and the cost) to the user who
submitted the job, recorded in the transaction that ends it."""

from django.urls import reverse

from hpc.types import RunRecord
from notifications.services import NotificationEvent, money_text, notifications_record
from scheduler_bridge.models import Job


def job_ended(job: Job) -> None:
    if job.submitted_by_id is None:
        return  # a job of the team's own, seen on its tenant account: nobody here submitted it
    # Slurm's reason in words ("NonZeroExitCode" is "exited with code 3"), once: a reason that
    # is the exit code itself takes the exit code's place.
    reason = job.state_reason_text
    if reason and job.state_reason.startswith("NonZeroExitCode"):
        ending, reason = f": {reason[0].lower()}{reason[1:]}", ""
    else:
        ending = "" if job.exit_code is None else f", exit code {job.exit_code}"
    state = job.get_state_display().lower()
    notifications_record(
        [
            NotificationEvent(
                kind="job_ended",
                key=f"job_ended:job:{job.uuid}",
                title=f"Job {job.name} {state}",
                body=f"State {state}{ending}; cost so far {money_text(job.cost)} "
                "(runs still being accounted add to it)." + (f"\n{reason}" if reason else ""),
                link=reverse("job-detail", args=[job.uuid]),
                organization_id=job.organization_id,
                user_ids=[job.submitted_by_id],
            )
        ]
    )


def job_preempted(job: Job, run: RunRecord, grace_seconds: int | None) -> None:
    """The submitter learns, once per run, that the owner's own jobs took the cores back: the
    run is not charged and Slurm queues the job again."""
    if job.submitted_by_id is None:
        return
    task = "" if run.array_task_id is None else f" (task {run.array_task_id})"
    when = f" at {run.end_time:%Y-%m-%d %H:%M} UTC" if run.end_time else ""
    grace = (
        f" It had {grace_seconds} s between SIGTERM and its stop to save its work."
        if grace_seconds
        else ""
    )
    notifications_record(
        [
            NotificationEvent(
                kind="job_preempted",
                key=f"job_preempted:job:{job.uuid}:run:{run.raw_job_id}:{run.submit_time:%s}",
                title=f"Job {job.name} was preempted{task}",
                body=f"The cluster's owner needed the cores{when}. That run is not charged; "
                f"Slurm has queued the job again and the next run is charged as usual.{grace}",
                link=reverse("job-detail", args=[job.uuid]),
                organization_id=job.organization_id,
                user_ids=[job.submitted_by_id],
            )
        ]
    )
