"""A team and an owner with a few weeks of history, for the dashboards' tests, browser tests
and README screenshots: allocations bought through the market's services, jobs submitted and
settled through the jobs' services (so the ledger holds real charges, earnings and fees),
some of them on past days.

The past is made by setting Django's clock (`timezone.now`) while those services run, the way
the rows would have been written on those days; nothing is written around the services."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from unittest import mock

from django.utils import timezone

from billing import services as billing
from hpc.types import RunRecord
from marketplace import services as market
from marketplace.models import Allocation, Cluster
from organizations.models import Membership, Organization
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobState, JobTask
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
)

DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)


@dataclass
class DashboardData:
    owners: Organization
    owner_admin: Membership
    owner_member: Membership
    cluster: Cluster
    team: Organization
    team_admin: Membership
    team_member: Membership
    active: Allocation
    upcoming: Allocation
    sweep: Job
    single: Job
    ended_jobs: list[Job]
    now: datetime.datetime


@contextmanager
def clock(moment: datetime.datetime) -> Iterator[None]:
    """Django's clock set to `moment` (every `timezone.now()` and `auto_now_add`)."""
    with mock.patch("django.utils.timezone.now", return_value=moment):
        yield


def run_of(job: Job, task: JobTask, *, ended: datetime.datetime, elapsed: int) -> RunRecord:
    raw = job.scheduler_job_id if task.array_task_id is None else f"{9000 + task.pk}"
    return RunRecord(
        job_id=job.scheduler_job_id
        if task.array_task_id is None
        else f"{job.scheduler_job_id}_{task.array_task_id}",
        raw_job_id=raw,
        array_job_id=job.scheduler_job_id,
        array_task_id=task.array_task_id,
        name=f"cs-{job.uuid}",
        state="completed",
        scheduler_state="COMPLETED",
        exit_code=0,
        submit_time=ended - datetime.timedelta(seconds=elapsed + 60),
        start_time=ended - datetime.timedelta(seconds=elapsed),
        end_time=ended,
        elapsed_seconds=elapsed,
        allocated_cpus=job.cpus_per_task * job.ntasks,
        allocated_gpus=0,
        cpu_seconds=float(elapsed * job.cpus_per_task * job.ntasks) * 0.8,
        time_limit_minutes=job.time_limit_minutes,
    )


def submit(
    member: Membership,
    allocation: Allocation,
    name: str,
    *,
    slurm_id: str,
    cpus: int = 4,
    minutes: int = 120,
    array: str | None = None,
) -> Job:
    job = services.job_submit(
        actor=member,
        allocation=allocation,
        request=services.JobRequest(
            name=name,
            script="#!/bin/bash\nsrun ./simulate\n",
            time_limit_minutes=minutes,
            cpus_per_task=cpus,
            array=array,
        ),
    )
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id=slurm_id)
    return Job.objects.get(pk=job.pk)


def settle(job: Job, tasks: list[JobTask], *, ended: datetime.datetime, elapsed: int) -> None:
    for task in tasks:
        run = run_of(job, task, ended=ended, elapsed=elapsed)
        services.job_task_settle(task_id=task.pk, runs=[run], final=run)
    services.job_state_refresh(job_id=job.pk)


def mark_running(job: Job, started: datetime.datetime) -> None:
    """What the poll writes when squeue shows the job's unfinished tasks running."""
    JobTask.objects.filter(job=job, state=JobState.SUBMITTED).update(
        state=JobState.RUNNING, started_at=started
    )
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, started_at=started)


def dashboard_data(*, history_days: int = 6) -> DashboardData:
    now = timezone.now()
    owners = OrganizationFactory(name="Fjord Compute")
    owner_admin = MembershipFactory(
        organization=owners, role=Membership.Role.ADMIN, user__username="olga"
    )
    owner_member = MembershipFactory(
        organization=owners, role=Membership.Role.MEMBER, user__username="mats"
    )
    cluster = ClusterFactory(organization=owners, name="fjord")
    batch = PartitionFactory(cluster=cluster, name="batch", nodes=4, cpus=256, gpus=0)
    team = OrganizationFactory(name="Tidal Team")
    billing.wallet_open(team)
    billing.wallet_open(owners)
    billing.wallet_adjust(organization=team, amount=Decimal("2500"), memo="Funds", actor=None)
    team_admin = MembershipFactory(
        organization=team, role=Membership.Role.ADMIN, user__username="tara"
    )
    team_member = MembershipFactory(
        organization=team, role=Membership.Role.MEMBER, user__username="tom"
    )
    billing.budget_set(
        organization=team, monthly_limit=Decimal("3000"), alert_thresholds=[50, 80, 100]
    )

    start = now - (history_days + 1) * DAY
    with clock(start):
        offer = OfferFactory(
            partition=batch,
            quantity=2000,
            reserve_price=Decimal("0.40"),
            buy_now_price=Decimal("0.50"),
            window_start=start,
            auction_closes_at=now + HOUR,
            window_end=now + 20 * DAY,
        )
        active = market.offer_buy(actor=team_admin, offer=offer, quantity=1500)
    # Listed and not sold yet: the owner's idle hours.
    OfferFactory(
        partition=batch,
        quantity=960,
        reserve_price=Decimal("0.35"),
        window_start=now - 2 * DAY,
        auction_closes_at=now + 2 * HOUR,
        window_end=now + 8 * DAY,
    )
    later = OfferFactory(
        partition=batch,
        quantity=500,
        reserve_price=Decimal("0.30"),
        buy_now_price=Decimal("0.45"),
        window_start=now + 2 * DAY + 5 * HOUR,
        auction_closes_at=now + 2 * DAY,
        window_end=now + 9 * DAY,
    )
    upcoming = market.offer_buy(actor=team_admin, offer=later, quantity=200)

    ended_jobs = []
    for index in range(history_days):
        # At 08:00 of each past day, so that a job of up to 3 hours ends on the day it began
        # whatever the time the test runs at (from 2 hours after `now`'s time it spilled past
        # midnight after about 19:00 UTC).
        day = (now - (history_days - index) * DAY).replace(
            hour=8, minute=0, second=0, microsecond=0
        )
        with clock(day):
            job = submit(
                team_member,
                active,
                f"calibration-{index + 1}",
                slurm_id=str(700 + index),
                cpus=8,
                minutes=240,
            )
        ended = day + (1 + index % 3) * HOUR
        with clock(ended + 5 * datetime.timedelta(minutes=1)):
            settle(job, list(job.tasks.all()), ended=ended, elapsed=3600 * (1 + index % 3))
        ended_jobs.append(job)

    sweep = submit(team_member, active, "parameter-sweep", slurm_id="812", cpus=2, array="0-9")
    tasks = list(sweep.tasks.order_by("array_task_id"))
    # Ended today (UTC), the day the charts count them in, even in a run just after midnight.
    midnight = now.astimezone(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    sweep_ended = max(now - 10 * datetime.timedelta(minutes=1), midnight)
    settle(sweep, tasks[:6], ended=sweep_ended, elapsed=1200)
    mark_running(sweep, now - 30 * datetime.timedelta(minutes=1))
    single = submit(team_member, active, "train-model", slurm_id="813", cpus=16, minutes=180)
    mark_running(single, now - 45 * datetime.timedelta(minutes=1))
    return DashboardData(
        owners=owners,
        owner_admin=owner_admin,
        owner_member=owner_member,
        cluster=cluster,
        team=team,
        team_admin=team_admin,
        team_member=team_member,
        active=Allocation.objects.get(pk=active.pk),
        upcoming=upcoming,
        sweep=Job.objects.get(pk=sweep.pk),
        single=Job.objects.get(pk=single.pk),
        ended_jobs=ended_jobs,
        now=now,
    )
