"""Runs shorter than accounting's whole second, settled before `RunRecord.has_run`: their tasks
got no start and their cores x elapsed counted 0, so their jobs showed no start, no efficiency,
and were left out of the usage report. This gives them what settlement now records: the task's
start is its last such run's, each such run counts one second of its cores (or GPUs), and the
job's start and core-seconds follow. Nothing that was charged changes."""

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.db import migrations
from django.db.models import Q


def short_runs_backfill(apps: Any, schema_editor: Any) -> None:
    JobRun = apps.get_model("scheduler_bridge", "JobRun")
    JobTask = apps.get_model("scheduler_bridge", "JobTask")
    Job = apps.get_model("scheduler_bridge", "Job")
    runs = (
        JobRun.objects.filter(elapsed_seconds=0, started_at__isnull=False)
        .filter(Q(allocated_cpus__gt=0) | Q(allocated_gpus__gt=0) | Q(cpu_seconds__gt=0))
        .select_related("task__job__allocation")
        .order_by("task_id", "submit_time")
    )
    core_seconds: dict[int, int] = defaultdict(int)
    last_start: dict[int, datetime] = {}
    job_of: dict[int, int] = {}
    for run in runs.iterator(chunk_size=2000):
        is_gpu = run.task.job.allocation.resource == "gpu"
        core_seconds[run.task_id] += run.allocated_gpus if is_gpu else run.allocated_cpus
        last_start[run.task_id] = run.started_at
        job_of[run.task_id] = run.task.job_id
    added: dict[int, int] = defaultdict(int)
    for task in JobTask.objects.filter(pk__in=list(core_seconds)).iterator(chunk_size=2000):
        task.allocated_core_seconds += core_seconds[task.pk]
        fields = ["allocated_core_seconds"]
        if task.started_at is None and task.is_released:
            task.started_at = last_start[task.pk]
            fields.append("started_at")
        task.save(update_fields=fields)
        added[job_of[task.pk]] += core_seconds[task.pk]
    for job in Job.objects.filter(pk__in=list(added)).iterator(chunk_size=2000):
        job.allocated_core_seconds += added[job.pk]
        starts = [
            start
            for start in JobTask.objects.filter(job_id=job.pk).values_list(
                "started_at", flat=True
            )
            if start is not None
        ]
        if job.started_at is None and starts:
            job.started_at = min(starts)
        job.save(update_fields=["allocated_core_seconds", "started_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler_bridge", "0011_job_directives_and_options"),
    ]

    operations = [
        migrations.RunPython(short_runs_backfill, migrations.RunPython.noop, elidable=True),
    ]
