"""A lease ends, its account is scrubbed, and the next team finds nothing of the last one: on the
real test cluster (the managed pool, so that the tenant also moves into and out of the team's
Slurm account), with the jobs submitted and followed by the services in this process.

Team A's job leaves what a job can leave: files in its home (in a folder it made read-only),
files in /tmp, /var/tmp and /dev/shm, a process that double-forked out of the job, and a job it
submitted for later.
Its allocation's window closes: the poll cancels the job A's job submitted, the allocation
closes, the lease ends and the scrub removes the rest. Team B then gets the same account and
finds it empty. Then something a tenant cannot remove is planted in the home (by root, as a
stand-in for whatever a scrub cannot undo): the scrub fails, the account is quarantined and
out of the pool until its owners have it scrubbed again.

The scrub also reaches every compute node the lease's jobs ran on, by a job as the tenant there
(docs/adr/0023). Here the one node, `vm`, is the login node itself: it is scrubbed once, by the
login node's scrub, and the lease's detail says so; the node's own scrub is run on it directly
in the last test."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from hpc.pool import default_pool
from hpc.slurm import accounts as slurm_accounts
from hpc.slurm.node_checks import NodeScrub, NodesScrub, nodes_scrub
from hpc.slurm.nodes import LeaseNodes, NodeTarget, idle_jobs_allowed
from hpc.ssh import SSHConnection
from marketplace import errors, services
from marketplace.models import Allocation, TenantAccount, TenantLease
from organizations.models import Membership
from scheduler_bridge import services as job_services
from scheduler_bridge.models import ENDED_STATES, Job
from scheduler_bridge.selectors import jobs as job_selectors
from tests.factories import MembershipFactory, OfferFactory, allocation_bought, funded_organization

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

LEAVES_EVERYTHING = """#!/bin/bash
mkdir -p ~/leftover/deep && echo kept > ~/leftover/deep/file && chmod 500 ~/leftover/deep ~/leftover
for folder in /tmp /var/tmp /dev/shm; do
  echo secret > "$folder/leftover-$USER" && chmod 600 "$folder/leftover-$USER"
done
setsid sh -c 'sleep 600 &' </dev/null >/dev/null 2>&1
sbatch --parsable --begin=now+1hour --job-name=left-for-later --output=/dev/null --wrap=true
"""

LOOKS_AROUND = """#!/bin/bash
echo "home $(ls -A ~ | grep -v -x -e computeshare-jobs | wc -l)"
echo "jobs-home $(ls ~/computeshare-jobs | wc -l)"
echo "sleepers $(ps -u "$USER" -o comm= | grep -c -x sleep)"
echo "queued $(squeue --noheader --user="$USER" --format=%i | grep -v -x "$SLURM_JOB_ID" | wc -l)"
echo "tmp $(find /tmp /var/tmp /dev/shm -xdev -user "$USER" 2>/dev/null | wc -l)"
"""


def as_root(*arguments: str) -> str:
    """The cluster is this machine: what is on its login node, seen by root."""
    return subprocess.run(arguments, capture_output=True, text=True, check=False).stdout


def living_processes(user: str) -> list[str]:
    """The user's processes but zombies: this machine's PID 1 does not reap orphans, so a
    killed process of the tenant may stay listed, dead, for ever."""
    lines = as_root("ps", "-u", user, "-o", "stat=,pid=,comm=").splitlines()
    return [line for line in lines if not line.strip().startswith("Z")]


def run_job(allocation: Allocation, member: Membership, script: str, timeout: float = 120) -> Job:
    job = job_services.job_submit(
        actor=member,
        allocation=allocation,
        request=job_services.JobRequest(name="scrub test", script=script, time_limit_minutes=2),
    )
    # Submitted here, or by a Celery worker of the session that took the task the commit sent.
    job_services.cluster_jobs_submit(cluster_id=allocation.cluster_id)
    return poll_until(allocation.cluster_id, job, timeout)


def poll_until(cluster_id: int, job: Job, timeout: float = 120) -> Job:
    deadline = time.monotonic() + timeout
    while True:
        job_services.cluster_poll(cluster_id=cluster_id)
        job.refresh_from_db()
        if job.state in ENDED_STATES:
            return job
        assert time.monotonic() < deadline, f"{job} did not end: {job.state} {job.state_reason}"
        time.sleep(1)


def poll_for_tenant_job(cluster_id: int, timeout: float = 30) -> Job:
    deadline = time.monotonic() + timeout
    while not (
        found := Job.objects.filter(cluster_id=cluster_id, origin=Job.Origin.TENANT).first()
    ):
        assert time.monotonic() < deadline, "the job the team's job submitted was never found"
        job_services.cluster_poll(cluster_id=cluster_id)
        time.sleep(1)
    return found


def window_closes(allocation: Allocation) -> None:
    """Time passes: the window is over; the poll cancels what still runs on it, then it closes."""
    Allocation.objects.filter(pk=allocation.pk).update(
        window_end=timezone.now() - timedelta(seconds=1)
    )
    deadline = time.monotonic() + 90
    while not services.allocation_close(allocation_id=allocation.pk):
        assert time.monotonic() < deadline, "the allocation never closed"
        job_services.cluster_poll(cluster_id=allocation.cluster_id)
        time.sleep(1)


def lease_ends(lease: TenantLease) -> TenantLease:
    assert job_selectors.tenant_leases_to_end() == [lease.pk]
    assert job_services.tenant_lease_end_if_idle(lease_id=lease.pk)
    return scrubbed(lease)


def scrubbed(lease: TenantLease, timeout: float = 180) -> TenantLease:
    """The lease once scrubbed: here, or by a Celery worker of the session that took the task
    the commit sent (one scrub at a time: the second returns at once)."""
    services.tenant_lease_scrub(lease_id=lease.pk)
    deadline = time.monotonic() + timeout
    while (lease := TenantLease.objects.get(pk=lease.pk)).scrubbing_until is not None or (
        lease.status == TenantLease.Status.ENDING
    ):
        assert time.monotonic() < deadline, "the scrub never ended"
        time.sleep(0.5)
    return lease


@pytest.fixture
def single_account_cluster(testcluster, on_testcluster):
    tenant = testcluster.managed_pool.tenants[1]
    cluster = on_testcluster(pool="managed", tenants=[(tenant.user, tenant.home)])
    yield cluster, tenant
    default_pool.close_all()
    shutil.rmtree(Path(tenant.home) / "root-owned", ignore_errors=True)


def test_a_scrubbed_account_keeps_nothing_of_its_last_team(testcluster, single_account_cluster):
    cluster, tenant = single_account_cluster
    partition = cluster.partitions.get()
    first = allocation_bought(
        funded_organization("100", name="First Team"), partition=partition, quantity=5
    )
    first_member = MembershipFactory(organization=first.organization)
    lease = TenantLease.objects.get(cluster=cluster, organization=first.organization)

    job = run_job(first, first_member, LEAVES_EVERYTHING)

    assert job.state == "completed"
    lease.refresh_from_db()
    assert lease.prepared_at is not None  # the tenant was moved into the team's Slurm account
    assert any(line.endswith(" sleep") for line in living_processes(tenant.user))
    # The job it left for later is found among the tenant's jobs by the next polls.
    later = poll_for_tenant_job(cluster.pk)
    assert (later.name, later.lease_id) == ("left-for-later", lease.pk)

    window_closes(first)
    later.refresh_from_db()
    assert later.state == "cancelled"
    assert later.state_reason == "Cancelled: the allocation's window has closed."
    lease = lease_ends(lease)

    assert lease.status == TenantLease.Status.ENDED, lease.scrub_detail
    # The sleep, and a file in each of /tmp, /var/tmp and /dev/shm; no node beyond the login node.
    assert lease.scrub_detail == (
        "Scrubbed the login node (Slurm's vm): 1 processes and 3 temporary files removed."
    )
    account = TenantAccount.objects.get(cluster=cluster)
    assert (account.status, account.last_scrubbed_at is not None) == ("available", True)
    assert living_processes(tenant.user) == []
    assert as_root("find", tenant.home, "-mindepth", "1") == ""
    for folder in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not Path(f"{folder}/leftover-{tenant.user}").exists()
    with SSHConnection(testcluster.ssh_settings()) as connection:
        slurm_user = slurm_accounts.slurm_user_get(
            connection, cluster_name=testcluster.cluster_name, user=tenant.user
        )
    assert slurm_user.default_account == testcluster.managed_pool.idle_account
    assert {association.account for association in slurm_user.associations} == {
        testcluster.managed_pool.idle_account
    }

    # The next team gets the same account, and finds nothing of the first.
    second = allocation_bought(
        funded_organization("100", name="Second Team"), partition=partition, quantity=5
    )
    second_member = MembershipFactory(organization=second.organization)
    second_lease = TenantLease.objects.get(cluster=cluster, organization=second.organization)
    assert second_lease.account == account

    job = run_job(second, second_member, LOOKS_AROUND)

    output = job_services.job_output(job=job, stream="stdout", tail_bytes=4096, array_task_id=None)
    assert output.decode().split("\n") == [
        "home 0",
        "jobs-home 1",  # its own job's folder
        "sleepers 0",
        "queued 0",
        "tmp 0",
        "",
    ]

    # Something the tenant cannot remove: the scrub fails and the account is quarantined.
    planted = Path(tenant.home) / "root-owned"
    planted.mkdir()
    (planted / "file").write_text("root's")
    window_closes(second)
    second_lease = lease_ends(second_lease)

    account.refresh_from_db()
    assert second_lease.status == TenantLease.Status.FAILED
    assert account.status == TenantAccount.Status.QUARANTINED
    assert "files left in the home" in account.status_detail
    owner = MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)
    buyer = MembershipFactory(
        organization=funded_organization("100", name="Third Team"), role=Membership.Role.ADMIN
    )
    offer = OfferFactory(partition=partition, buy_now_price="1.00")
    with pytest.raises(errors.TenantAccountsExhausted):
        services.offer_buy(actor=buyer, offer=offer, quantity=1)

    # Its owners remove what was planted and have it scrubbed again: back in the pool.
    shutil.rmtree(planted)
    services.tenant_account_rescrub(actor=owner, account=account)
    second_lease = scrubbed(second_lease)

    account.refresh_from_db()
    assert (second_lease.status, account.status) == (TenantLease.Status.ENDED, "available")
    services.offer_buy(actor=buyer, offer=offer, quantity=1)
    assert TenantLease.objects.get(organization=buyer.organization).account == account


def test_the_scrub_of_a_node_ends_what_a_job_left_there(testcluster):
    """The scrub of one compute node, run on the test cluster's one node although it is also the
    login node (a lease's scrub leaves it to the login node's): a job as the tenant in the idle
    account, allowed a job for the moment, ends the double-forked process and removes the
    files, and spares the login side that started it."""
    tenant = testcluster.managed_pool.tenants[2]
    idle = testcluster.managed_pool.idle_account
    as_root(
        "runuser", "-u", tenant.user, "--", "sh", "-c",
        'for folder in /tmp /var/tmp /dev/shm; do echo left > "$folder/node-leftover-$USER"; '
        "done; setsid sh -c 'sleep 600 &' </dev/null >/dev/null 2>&1",
    )  # fmt: skip
    assert any(line.endswith(" sleep") for line in living_processes(tenant.user))

    with (
        SSHConnection(testcluster.ssh_settings()) as connection,
        idle_jobs_allowed(
            connection,
            cluster_name=testcluster.cluster_name,
            user=tenant.user,
            account=idle,
            jobs=1,
        ),
    ):
        scrub = nodes_scrub(connection, tenant.user, [NodeTarget("vm", "debug")], account=idle)

    assert scrub == NodesScrub(
        nodes=(
            NodeScrub(
                node="vm",
                reached=True,
                processes_found=1,
                temporary_files_found=3,
                processes_left=0,
                temporary_files_left=0,
            ),
        ),
        jobs_left=0,
    )
    assert living_processes(tenant.user) == []
    assert as_root("find", "/tmp", "/var/tmp", "/dev/shm", "-user", tenant.user) == ""
    # Its idle association runs nothing again.
    assert as_root(
        "sacctmgr", "--noheader", "--parsable2", "show", "association",
        "where", f"user={tenant.user}", f"account={idle}", "format=MaxJobs",
    ).split() == ["0"]  # fmt: skip


def test_a_leases_scrub_runs_on_each_node_its_jobs_ran_on(testcluster, on_testcluster, monkeypatch):
    """The scrub of a lease's nodes as the lease's scrub runs it on a managed cluster: the
    lease's job ran on `vm`, taken here for a compute node apart from the login node, so that
    after the login node's scrub one job as the tenant runs there, in the idle account allowed
    it for the moment, and the lease's detail counts what each scrub removed."""
    tenant = testcluster.managed_pool.tenants[3]
    idle = testcluster.managed_pool.idle_account
    cluster = on_testcluster(pool="managed", tenants=[(tenant.user, tenant.home)])
    account = TenantAccount.objects.get(cluster=cluster)
    TenantAccount.objects.filter(pk=account.pk).update(status=TenantAccount.Status.LEASED)
    lease = TenantLease.objects.create(
        account=account,
        cluster=cluster,
        organization=funded_organization("10", name="Node Team"),
        status=TenantLease.Status.ENDING,
        ending_at=timezone.now(),
    )
    leaves = (
        'for folder in /tmp /var/tmp /dev/shm; do echo left > "$folder/node-job-$USER"; done; '
        "setsid sh -c 'sleep 600 &' </dev/null >/dev/null 2>&1"
    )
    with (
        SSHConnection(testcluster.ssh_settings()) as connection,
        idle_jobs_allowed(
            connection,
            cluster_name=testcluster.cluster_name,
            user=tenant.user,
            account=idle,
            jobs=1,
        ),
    ):
        as_root(
            "runuser", "-u", tenant.user, "--", "srun", f"--account={idle}", "--nodelist=vm",
            "--time=1", "--chdir=/", "sh", "-c", leaves,
        )  # fmt: skip
    assert any(line.endswith(" sleep") for line in living_processes(tenant.user))
    monkeypatch.setattr(LeaseNodes, "is_login_node", lambda nodes, node: False)

    lease = services.tenant_lease_scrub(lease_id=lease.pk)

    assert lease.status == TenantLease.Status.ENDED, lease.scrub_detail
    assert lease.scrub_detail == (
        "Scrubbed the login node: 1 processes and 3 temporary files removed; node vm: 0 "
        "processes and 0 temporary files removed."
    )
    assert living_processes(tenant.user) == []
    assert as_root("sacctmgr", "-n", "-P", "show", "association", "where", f"user={tenant.user}",
                   f"account={idle}", "format=MaxJobs").split() == ["0"]  # fmt: skip
