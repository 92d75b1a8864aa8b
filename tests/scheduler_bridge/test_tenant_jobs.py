"""Jobs a team's jobs submitted themselves, as the poll records them from the tenant's runs:
which lease (so which team) a run belongs to, which allocation it draws on, and what it
reserves there. On PostgreSQL, from run records as the accounting parser makes them (the real
cluster's side is in test_tenants_metering.py)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from hpc.types import PENDING, RunRecord
from marketplace.models import Allocation, TenantLease
from scheduler_bridge.models import Job, JobState
from scheduler_bridge.services.tenant_jobs import (
    LeaseWindow,
    lease_of_run,
    lease_windows,
    tenant_jobs_record,
)
from tests.factories import ClusterFactory, PartitionFactory, UserFactory, allocation_bought

NOON = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)


def run(job_id: str = "900", *, user: str = "cs-tenant-01", submitted: datetime = NOON, **fields):
    array_job_id, _, task = job_id.partition("_")
    values = {
        "job_id": job_id,
        "raw_job_id": array_job_id if not task else str(1000 + int(task)),
        "array_job_id": array_job_id,
        "array_task_id": int(task) if task else None,
        "name": "made-by-a-job",
        "state": PENDING,
        "scheduler_state": "PENDING",
        "exit_code": None,
        "submit_time": submitted,
        "start_time": None,
        "end_time": None,
        "elapsed_seconds": 0,
        "allocated_cpus": 0,
        "allocated_gpus": 0,
        "cpu_seconds": 0.0,
        "time_limit_minutes": 30,
        "user": user,
        "partition": "debug",
        "requested_cpus": 2,
        "requested_gpus": 0,
    }
    return RunRecord(**{**values, **fields})


def window(lease_id: int, started: datetime, ended: datetime | None = None, user="cs-tenant-01"):
    return LeaseWindow(
        lease_id=lease_id, organization_id=lease_id, user=user, started_at=started, ended_at=ended
    )


def test_a_run_belongs_to_the_lease_of_its_user_that_covers_its_submit_time():
    earlier = window(1, NOON - timedelta(hours=2), NOON - timedelta(hours=1))
    current = window(2, NOON - timedelta(minutes=30))
    other_user = window(3, NOON - timedelta(hours=3), user="cs-tenant-02")
    windows = [earlier, current, other_user]

    assert lease_of_run(windows, run(submitted=NOON)) == current
    assert lease_of_run(windows, run(submitted=NOON - timedelta(minutes=90))) == earlier
    assert lease_of_run(windows, run(submitted=NOON - timedelta(minutes=45))) is None
    assert lease_of_run(windows, run(user="cs-tenant-03")) is None


def test_a_run_submitted_in_the_second_its_lease_began_is_the_leases():
    """Slurm's times are whole seconds: a job submitted by the team's first job at once reads
    as submitted before the lease's own (finer) start."""
    begun = NOON.replace(microsecond=600_000)

    assert lease_of_run([window(1, begun)], run(submitted=NOON)) == window(1, begun)
    assert lease_of_run([window(1, begun)], run(submitted=NOON - timedelta(seconds=1))) is None


@pytest.mark.django_db
def test_the_scrub_of_an_ending_leases_nodes_is_not_a_job_of_the_team():
    """The scrub runs a job named computeshare-node-scrub as the tenant on each node the lease
    ran on (docs/adr/0023), once the lease is ending: not the team's, nor charged. A job of
    that name the team submitted while its lease was active is the team's."""
    cluster = ClusterFactory(tenants=1)
    partition = PartitionFactory(cluster=cluster, name="debug")
    allocation_bought(partition=partition, quantity=3)
    lease = TenantLease.objects.get(cluster=cluster)
    ending = timezone.now().replace(microsecond=0) + timedelta(minutes=1)
    TenantLease.objects.filter(pk=lease.pk).update(status="ending", ending_at=ending)
    scrub = run("901", name="computeshare-node-scrub", submitted=ending + timedelta(seconds=1))
    teams = run("902", name="computeshare-node-scrub", submitted=ending - timedelta(seconds=5))

    recorded = tenant_jobs_record(
        cluster=cluster, records=[scrub, teams], windows=lease_windows(cluster), now=ending
    )

    assert list(Job.objects.filter(pk__in=recorded).values_list("scheduler_job_id", flat=True)) == [
        "902"
    ]
    assert not Job.objects.filter(scheduler_job_id="901").exists()


@pytest.mark.django_db
def test_a_job_found_among_the_tenants_runs_is_the_teams_and_reserves_what_it_can_use():
    cluster = ClusterFactory(tenants=1)
    partition = PartitionFactory(cluster=cluster, name="debug")
    allocation = allocation_bought(partition=partition, quantity=3)
    lease = TenantLease.objects.get(cluster=cluster)
    now = timezone.now()

    [job_id] = tenant_jobs_record(
        cluster=cluster,
        records=[run(submitted=now.replace(microsecond=0))],
        windows=lease_windows(cluster),
        now=now,
    )

    job = Job.objects.get(pk=job_id)
    assert (job.origin, job.lease, job.allocation, job.organization) == (
        Job.Origin.TENANT,
        lease,
        allocation,
        allocation.organization,
    )
    assert (job.name, job.scheduler_job_id, job.state, job.partition_name) == (
        "made-by-a-job",
        "900",
        JobState.SUBMITTED,
        "debug",
    )
    assert job.submitted_by is None and job.script == ""
    # 2 CPUs x 30 minutes, reserved on the allocation like a job submitted through the API.
    [task] = job.tasks.all()
    assert (task.reserved_units, task.scheduler_job_id) == (Decimal("1.000000"), "900")
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("1.000000")
    assert [event.reason for event in job.events.all()] == [
        "Submitted on the cluster by one of the team's jobs (Slurm job 900, as cs-tenant-01)."
    ]
    # Seen again, it is the same job; its array tasks would be added, nothing else.
    assert (
        tenant_jobs_record(
            cluster=cluster, records=[run(submitted=now)], windows=lease_windows(cluster), now=now
        )
        == []
    )
    assert Job.objects.filter(cluster=cluster, origin=Job.Origin.TENANT).count() == 1


@pytest.mark.django_db
def test_an_array_that_asks_more_than_is_left_reserves_what_is_left_and_the_rest_nothing():
    cluster = ClusterFactory(tenants=1)
    allocation = allocation_bought(partition=PartitionFactory(cluster=cluster), quantity=2)
    now = timezone.now()
    records = [run(f"900_{index}", submitted=now.replace(microsecond=0)) for index in range(3)]

    [job_id] = tenant_jobs_record(
        cluster=cluster, records=records, windows=lease_windows(cluster), now=now
    )

    job = Job.objects.get(pk=job_id)
    # Each task would reserve 1 unit (2 CPUs x 30 minutes); the allocation has 2.
    assert [(task.array_task_id, task.reserved_units) for task in job.tasks.all()] == [
        (0, Decimal("1.000000")),
        (1, Decimal("1.000000")),
        (2, Decimal("0.000000")),
    ]
    assert job.task_count == 3 and job.reserved_units == Decimal("2.000000")
    assert job.state_reason == "The allocation had too few units left for this job."
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("2.000000") and allocation.remaining == 0


@pytest.mark.django_db
def test_a_run_of_no_lease_or_with_no_whole_record_yet_is_not_recorded():
    cluster = ClusterFactory(tenants=1)
    allocation_bought(partition=PartitionFactory(cluster=cluster), quantity=2)
    now = timezone.now()
    records = [
        run("901", submitted=now - timedelta(days=1)),  # before the lease
        run("902", user="cs-tenant-09"),  # an account no team holds
        run("903", submitted=now, has_own_record=False, name="allocation"),  # slurmdbd behind
    ]

    assert (
        tenant_jobs_record(
            cluster=cluster, records=records, windows=lease_windows(cluster), now=now
        )
        == []
    )
    assert not Job.objects.filter(cluster=cluster).exists()
    assert Allocation.objects.get(cluster=cluster).reserved == 0


@pytest.mark.django_db
def test_a_job_named_after_one_of_its_teams_jobs_is_left_out_only_while_that_one_is_submitted():
    """A run named `cs-<uuid>` of the team's own job that is being submitted is that job (its
    id not recorded yet): left to the submission. Named after one already on the cluster, it
    is another job, submitted by a job of the team to look like it, and charged as its own."""
    cluster = ClusterFactory(tenants=1)
    allocation = allocation_bought(partition=PartitionFactory(cluster=cluster), quantity=3)
    lease = TenantLease.objects.get(cluster=cluster)
    now = timezone.now()
    queued, on_cluster = (
        Job.objects.create(
            allocation=allocation,
            organization=allocation.organization,
            cluster=cluster,
            lease=lease,
            submitted_by=UserFactory(),
            name=name,
            script="#!/bin/bash\ntrue\n",
            time_limit_minutes=1,
            reserved_units=Decimal("0.1"),
            state=state,
            scheduler_job_id=scheduler_job_id,
        )
        for name, state, scheduler_job_id in [
            ("queued", JobState.QUEUED, ""),
            ("on the cluster", JobState.RUNNING, "800"),
        ]
    )
    records = [
        run("901", name=queued.scheduler_name, submitted=now.replace(microsecond=0)),
        run("902", name=on_cluster.scheduler_name, submitted=now.replace(microsecond=0)),
    ]

    recorded = tenant_jobs_record(
        cluster=cluster, records=records, windows=lease_windows(cluster), now=now
    )

    [job] = Job.objects.filter(pk__in=recorded)
    assert (job.origin, job.scheduler_job_id, job.name) == (
        Job.Origin.TENANT,
        "902",
        on_cluster.scheduler_name,
    )
    assert not Job.objects.filter(cluster=cluster, scheduler_job_id="901").exists()
