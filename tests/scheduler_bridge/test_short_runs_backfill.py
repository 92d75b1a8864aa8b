"""The data migration that gives jobs settled before `RunRecord.has_run` what settlement now
records for runs shorter than accounting's whole second: the task's start, one second of its
cores, and the job's start and efficiency after them."""

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from importlib import import_module

import pytest
from django.apps import apps

from scheduler_bridge import services
from scheduler_bridge.models import Job, JobTask
from tests.scheduler_bridge.test_settlement import run_record, submitted_job

backfill = import_module(
    "scheduler_bridge.migrations.0012_short_runs_keep_their_start"
).short_runs_backfill

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 26, 1, 0, 0, tzinfo=UTC)


def test_tasks_of_short_runs_get_their_start_and_a_second_of_their_cores():
    job = submitted_job(cpus=2, minutes=60, array="0-2")
    quick, slow, never = list(job.tasks.order_by("array_task_id"))
    runs = {
        quick.pk: run_record(task=0, cpus=2, elapsed=0, cpu_seconds=0.5),
        slow.pk: run_record(task=1, cpus=2, elapsed=10, cpu_seconds=5.0),
        never.pk: replace(
            run_record(task=2, cpus=0, elapsed=0, cpu_seconds=0.0, state="cancelled"),
            start_time=None,
        ),
    }
    for task_id, run in runs.items():
        services.job_task_settle(task_id=task_id, runs=[run], final=run)
    services.job_state_refresh(job_id=job.pk)
    # As settlement left them before: a run of 0 s gave no start and no core-seconds.
    JobTask.objects.filter(pk=quick.pk).update(started_at=None, allocated_core_seconds=0)
    Job.objects.filter(pk=job.pk).update(started_at=None, allocated_core_seconds=20)

    backfill(apps, None)

    tasks = {task.pk: task for task in JobTask.objects.filter(job=job)}
    assert (tasks[quick.pk].started_at, tasks[quick.pk].allocated_core_seconds) == (START, 2)
    assert (tasks[slow.pk].started_at, tasks[slow.pk].allocated_core_seconds) == (START, 20)
    assert (tasks[never.pk].started_at, tasks[never.pk].allocated_core_seconds) == (None, 0)
    job.refresh_from_db()
    assert (job.started_at, job.allocated_core_seconds) == (START, 22)
    assert job.efficiency == Decimal("0.2500")  # 5.5 s of CPU over 22 core-seconds
