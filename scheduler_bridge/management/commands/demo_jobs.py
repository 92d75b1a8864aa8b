"""Seeds the demo's job history: a few jobs of Nimbus Research that really ran on the demo's
`local` cluster, so that a newcomer finds finished jobs with output, usage, cost and efficiency
next to the one they submit themselves (idempotent).

The jobs go through the same services as a job submitted on the site (`job_submit`, then
`cluster_poll` until they end), so they are real runs of this machine, metered by the kernel and
charged through the ledger. The command polls itself instead of waiting for the Celery worker:
`scripts/demo` runs it before the worker starts, and the demo opens with the jobs finished."""

import time
from dataclasses import dataclass
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

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


class Command(BaseCommand):
    help = "Runs a few demo jobs of Nimbus Research on the demo's local cluster, once."

    def handle(self, *args: Any, **options: Any) -> None:
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
                    self.stdout.write(f"  {job.name}: {job.state}, cost {job.cost}")
                return
            time.sleep(POLL_EVERY_SECONDS)
        self.stdout.write(
            self.style.WARNING("Demo jobs still running: the worker's poll will finish them.")
        )
