"""Reads of jobs, always scoped to who is asking: members see their organizations' jobs and
nobody else's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Prefetch, Q, QuerySet

from computeshare.errors import NotFound
from computeshare.models import User
from marketplace.models import Membership, Organization
from scheduler_bridge.models import (
    Job,
    JobEvent,
    JobFile,
    JobRun,
    JobState,
    JobTask,
    Sweep,
    SweepJob,
    SweepRow,
)


def job_list_for_user(user: User) -> QuerySet[Job]:
    return (
        Job.objects.filter(
            organization__in=Membership.objects.filter(user=user).values("organization")
        )
        .select_related("allocation__partition", "cluster", "organization")
        .defer("script", "environment", "secret_environment")
        .order_by("-created_at", "-id")
    )


def job_list_filtered(
    user: User,
    *,
    states: list[str] | None = None,
    allocation: Any = None,
    organization: Any = None,
) -> QuerySet[Job]:
    jobs = job_list_for_user(user)
    if states:
        jobs = jobs.filter(state__in=states)
    if allocation is not None:
        jobs = jobs.filter(allocation__uuid=allocation)
    if organization is not None:
        jobs = jobs.filter(organization__uuid=organization)
    return jobs


def job_get_for_user(user: User, job_uuid: Any) -> Job:
    """One job with its tasks and history; `NotFound` for anyone outside its organization."""
    try:
        return (
            Job.objects.filter(
                organization__in=Membership.objects.filter(user=user).values("organization")
            )
            .select_related("allocation__partition", "cluster", "organization", "submitted_by")
            .prefetch_related(
                Prefetch("tasks", queryset=JobTask.objects.order_by("array_task_id")),
                Prefetch("events", queryset=JobEvent.objects.order_by("at", "id")),
            )
            .get(uuid=job_uuid)
        )
    except (Job.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such job.") from error


def job_run_list(job: Job) -> QuerySet[JobRun]:
    """The job's runs as accounting recorded them and as they were charged, task by task: more
    than one per task when the job requeued or resized itself (every run is charged). The job
    was fetched through `job_get_for_user`: the caller may see it."""
    return (
        JobRun.objects.filter(task__job=job)
        .select_related("task")
        .order_by("task__array_task_id", "submit_time", "id")
    )


def job_usage_list(
    organization: Organization, *, since: datetime | None = None, until: datetime | None = None
) -> QuerySet[Job]:
    """The organization's jobs that ran, for its usage report: ended in the range (or still
    running), oldest first; those the team's own jobs submitted on the cluster among them, with
    their `origin` and Slurm id."""
    jobs = (
        Job.objects.filter(organization=organization)
        .exclude(state__in=[JobState.QUEUED])
        .exclude(started_at__isnull=True, units=0)
        .select_related("cluster", "allocation__partition")
        .only(
            "uuid",
            "name",
            "state",
            "units",
            "cost",
            "started_at",
            "ended_at",
            "created_at",
            "origin",
            "scheduler_job_id",
            "partition_name",
            "cluster__name",
            "allocation__partition__name",
        )
        .order_by("created_at", "id")
    )
    if since is not None:
        jobs = jobs.filter(Q(ended_at__gte=since) | Q(ended_at__isnull=True))
    if until is not None:
        jobs = jobs.filter(
            Q(started_at__lt=until) | Q(started_at__isnull=True, created_at__lt=until)
        )
    return jobs


def job_result_files(job: Job) -> QuerySet[JobFile]:
    """The result files of a job kept in storage, by name."""
    return (
        JobFile.objects.filter(job=job, kind=JobFile.Kind.RESULT)
        .exclude(stored="")
        .order_by("name")
    )


def job_result_file(job: Job, name: str) -> JobFile:
    """One result file of the job by its path in the job's folder; `NotFound` otherwise (a
    name that escapes the folder is simply not among them, nor one with a NUL, which no stored
    name has and PostgreSQL would refuse to compare)."""
    if "\x00" in name:
        raise NotFound("The job has no such result file.")
    row = job_result_files(job).filter(name=name).first()
    if row is None:
        raise NotFound("The job has no such result file.")
    return row


# --- Sweeps ----------------------------------------------------------------------------------


def sweep_list_for_user(user: User) -> QuerySet[Sweep]:
    """The sweeps of the caller's organizations, newest first."""
    return (
        Sweep.objects.filter(
            organization__in=Membership.objects.filter(user=user).values("organization")
        )
        .select_related("allocation", "organization")
        .defer("script")
        .order_by("-created_at", "-id")
    )


def sweep_get_for_user(user: User, sweep_uuid: Any) -> Sweep:
    """One sweep with its jobs; `NotFound` for anyone outside its organization."""
    try:
        return (
            Sweep.objects.filter(
                organization__in=Membership.objects.filter(user=user).values("organization")
            )
            .select_related("allocation__cluster", "organization", "submitted_by")
            .prefetch_related(
                Prefetch(
                    "sweep_jobs",
                    queryset=SweepJob.objects.select_related("job").order_by("attempt"),
                )
            )
            .get(uuid=sweep_uuid)
        )
    except (Sweep.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such sweep.") from error


def sweep_rows(sweep: Sweep) -> QuerySet[SweepRow]:
    """The sweep's rows in table order, each with the task that ran it last and its job (the
    sweep was fetched through `sweep_get_for_user`: the caller may see it)."""
    return (
        SweepRow.objects.filter(sweep=sweep)
        .select_related("task__job")
        .only(
            "index",
            "values",
            "attempts",
            "result_state",
            "result",
            "result_detail",
            "task__array_task_id",
            "task__state",
            "task__exit_code",
            "task__cost",
            "task__elapsed_seconds",
            "task__job__uuid",
        )
        .order_by("index")
    )
