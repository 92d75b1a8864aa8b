"""The notification of jobs (`job_ended`, with the state and the cost) to the user who
submitted the job, recorded in the transaction that ends it."""

from django.urls import reverse

from notifications.services import NotificationEvent, money_text, notifications_record
from scheduler_bridge.models import Job


def job_ended(job: Job) -> None:
    if job.submitted_by_id is None:
        return  # a job of the team's own, seen on its tenant account: nobody here submitted it
    exit_code = "" if job.exit_code is None else f", exit code {job.exit_code}"
    notifications_record(
        [
            NotificationEvent(
                kind="job_ended",
                key=f"job_ended:job:{job.uuid}",
                title=f"Job {job.name} {job.state}",
                body=f"State {job.state}{exit_code}; cost so far {money_text(job.cost)} "
                "(runs still being accounted add to it)."
                + (f"\n{job.state_reason}" if job.state_reason else ""),
                link=reverse("job-detail", args=[job.uuid]),
                organization_id=job.organization_id,
                user_ids=[job.submitted_by_id],
            )
        ]
    )
