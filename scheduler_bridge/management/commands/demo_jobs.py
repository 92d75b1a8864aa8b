"""Seeds the demo's job history: a few jobs of Nimbus Research that really ran on the demo's
`local` cluster, so that a newcomer finds finished jobs with output, usage, cost and efficiency
next to the one they submit themselves (idempotent).

The jobs go through the same services as a job submitted on the site (`job_submit`, then
`cluster_poll` until they end), so they are real runs of this machine, metered by the kernel and
charged through the ledger. The command polls itself instead of waiting for the Celery worker:
`scripts/demo` runs it before the worker starts, and the demo opens with the jobs finished.

Before them, the teams' past weeks: a job each working day of the last three weeks on the
allocation Nimbus Research won three weeks ago, submitted and settled as accounting reported
it, on Django's clock set back to each day (as `demo_seed` replays the market), so that the
dashboards' spending and earnings per day have a history on the first visit. Their runs are
recorded as accounting would have them, not run on this machine: they have no output."""

import datetime
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from computeshare.figures import amount_text
from hpc.types import RunRecord
from marketplace.management.commands.demo_seed import clock
from marketplace.models import Allocation, Cluster
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.models import ENDED_STATES, Job

ORGANIZATION = "Nimbus Research"
CLUSTER = "aurora-local"
# Enough for a few seconds of work each on a slow laptop; a job that has not ended by then is
# left to the demo's periodic poll, which finishes it once the worker runs.
WAIT_SECONDS = 90.0
POLL_EVERY_SECONDS = 1.0

# Scripts short enough to read whole on the job's page. `SECONDS` counts whole seconds: each
# loop keeps a core busy for about a second, so that the CPU time (and the efficiency) is real.
SWEEP_SCRIPT = """#!/bin/bash
# One task per learning rate.
rates=(0.001 0.003 0.01 0.03)
rate=${rates[$SLURM_ARRAY_TASK_ID]}
echo "task $SLURM_ARRAY_TASK_ID: rate $rate"
for epoch in 1 2 3; do
  end=$((SECONDS + 1))
  while [ "$SECONDS" -lt "$end" ]; do :; done
  echo "epoch $epoch: loss 0.$((90 / epoch))"
done
"""

SINGLE_SCRIPT = """#!/bin/bash
echo "mesh convergence check on $(hostname)"
for cells in 1000 8000 64000; do
  end=$((SECONDS + 1))
  while [ "$SECONDS" -lt "$end" ]; do :; done
  echo "cells=$cells residual=$((64000 / cells))e-4"
done
echo "converged"
"""


@dataclass(frozen=True)
class DemoJob:
    name: str
    username: str
    request: services.JobRequest


DEMO_JOBS = [
    DemoJob(
        name="lr-sweep",
        username="tom",
        request=services.JobRequest(
            name="lr-sweep", script=SWEEP_SCRIPT, time_limit_minutes=5, array="0-3"
        ),
    ),
    DemoJob(
        name="mesh-convergence",
        username="mia",
        request=services.JobRequest(
            name="mesh-convergence", script=SINGLE_SCRIPT, time_limit_minutes=5
        ),
    ),
]


# The past jobs: one each working day of the last `PAST_DAYS` days, at `PAST_HOUR` UTC, by tom
# and mia in turn, on one CPU for a few tens of minutes.
PAST_DAYS = 20
PAST_HOUR = 9
PAST_SCRIPT = """#!/bin/bash
# Nightly calibration of the detector model.
python3 calibrate.py --runs 200
"""


@dataclass(frozen=True)
class PastJob:
    name: str
    username: str
    submitted_at: datetime.datetime
    minutes: int


def past_jobs(now: datetime.datetime) -> list[PastJob]:
    """The past weeks' jobs, oldest first: working days only, none today."""
    jobs: list[PastJob] = []
    for days_ago in range(PAST_DAYS, 0, -1):
        day = (now - timedelta(days=days_ago)).replace(
            hour=PAST_HOUR, minute=0, second=0, microsecond=0
        )
        if day.weekday() >= 5:
            continue
        jobs.append(
            PastJob(
                name=f"calibration-{day:%m-%d}",
                username=("tom", "mia")[len(jobs) % 2],
                submitted_at=day,
                minutes=20 + (days_ago * 17) % 60,
            )
        )
    return jobs


class Command(BaseCommand):
    help = "Runs a few demo jobs of Nimbus Research on the demo's local cluster, once."

    def handle(self, *args: Any, **options: Any) -> None:
        self._past()
        allocation = self._allocation()
        if allocation is None:
            self.stdout.write("No active allocation of Nimbus Research on aurora-local: no jobs.")
            return
        existing = set(
            Job.objects.filter(
                organization_id=allocation.organization_id,
                name__in=[demo_job.name for demo_job in DEMO_JOBS],
            ).values_list("name", flat=True)
        )
        jobs = [
            services.job_submit(
                actor=self._membership(allocation, demo_job.username),
                allocation=allocation,
                request=demo_job.request,
            )
            for demo_job in DEMO_JOBS
            if demo_job.name not in existing
        ]
        if not jobs:
            return
        self.stdout.write(f"Running {len(jobs)} demo jobs on {CLUSTER}...")
        self._follow(allocation.cluster_id, [job.pk for job in jobs])

    def _allocation(self) -> Allocation | None:
        """Nimbus Research's allocation on the demo cluster whose window is open now, the one
        `demo_seed` made from the last auction."""
        now = timezone.now()
        return (
            Allocation.objects.select_related("cluster")
            .filter(
                organization__name=ORGANIZATION,
                cluster__name=CLUSTER,
                cluster__backend=Cluster.Backend.LOCAL,
                closed_at__isnull=True,
                window_start__lte=now,
                window_end__gt=now,
            )
            .order_by("-window_end")
            .first()
        )

    def _past(self) -> None:
        """The past weeks' jobs, each submitted on its day and settled when it ended."""
        now = timezone.now()
        allocation = (
            Allocation.objects.select_related("cluster")
            .filter(
                organization__name=ORGANIZATION,
                cluster__name=CLUSTER,
                cluster__backend=Cluster.Backend.LOCAL,
                closed_at__isnull=True,
                window_start__lte=now - timedelta(days=PAST_DAYS),
                window_end__gt=now,
            )
            .order_by("window_start")
            .first()
        )
        if allocation is None:
            return
        existing = set(
            Job.objects.filter(organization_id=allocation.organization_id).values_list(
                "name", flat=True
            )
        )
        for number, past in enumerate(past_jobs(now)):
            if past.name not in existing:
                self._past_job(allocation, past, scheduler_job_id=str(7001 + number))

    def _past_job(self, allocation: Allocation, past: PastJob, *, scheduler_job_id: str) -> None:
        # Submitted and on the cluster in one commit: the submission the commit enqueues finds
        # the job already there and leaves it alone.
        with clock(past.submitted_at), transaction.atomic():
            job = services.job_submit(
                actor=self._membership(allocation, past.username),
                allocation=allocation,
                request=services.JobRequest(
                    name=past.name, script=PAST_SCRIPT, time_limit_minutes=120
                ),
            )
            services.job_mark_submitted(job_id=job.pk, scheduler_job_id=scheduler_job_id)
        started = past.submitted_at + timedelta(seconds=20)
        ended = started + timedelta(minutes=past.minutes)
        with clock(ended + timedelta(seconds=30)):
            for task in job.tasks.all():
                run = RunRecord(
                    job_id=scheduler_job_id,
                    raw_job_id=scheduler_job_id,
                    array_job_id=scheduler_job_id,
                    array_task_id=None,
                    name=f"cs-{job.uuid}",
                    state="completed",
                    scheduler_state="COMPLETED",
                    exit_code=0,
                    submit_time=past.submitted_at,
                    start_time=started,
                    end_time=ended,
                    elapsed_seconds=past.minutes * 60,
                    allocated_cpus=job.cpus_per_task * job.ntasks,
                    allocated_gpus=0,
                    # Most of the core busy, as a numerical job keeps it.
                    cpu_seconds=past.minutes * 60 * 0.85,
                    time_limit_minutes=job.time_limit_minutes,
                )
                services.job_task_settle(task_id=task.pk, runs=[run], final=run)
            services.job_state_refresh(job_id=job.pk)

    def _membership(self, allocation: Allocation, username: str) -> Membership:
        membership = Membership.objects.filter(
            organization_id=allocation.organization_id, user__username=username
        ).first()
        if membership is None:
            raise CommandError(f"{username} is not a member of {ORGANIZATION}: run demo_seed.")
        return membership

    def _follow(self, cluster_id: int, job_ids: list[int]) -> None:
        """Polls the cluster as the periodic task would, until the jobs have ended and been
        charged."""
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            services.cluster_poll(cluster_id=cluster_id)
            unended = Job.objects.filter(pk__in=job_ids).exclude(state__in=ENDED_STATES)
            if not unended.exists():
                for job in Job.objects.filter(pk__in=job_ids).order_by("pk"):
                    state = job.get_state_display().lower()
                    cost = amount_text(job.cost, settings.PLATFORM_CURRENCY)
                    self.stdout.write(f"  {job.name}: {state}, cost {cost}")
                return
            time.sleep(POLL_EVERY_SECONDS)
        self.stdout.write(
            self.style.WARNING("Demo jobs still running: the worker's poll will finish them.")
        )
