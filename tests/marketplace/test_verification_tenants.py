"""Verification checks every capability the bridge uses, on the real test cluster, step by step.

A cluster set up by scripts/cluster-setup passes (fixed and managed pools). Then the test breaks
the cluster the way an owner's setup can be broken, one way at a time, and verifies again: no
SFTP server program (the package is missing), no sudoers rule for the pool, a service user's
home the tenants can read (a group that does not exist is in test_market_api.py). Each is
refused with the failing step named and its reason, the steps before it passed, and nothing of
the cluster's inventory or pool written. What was broken is put back at once (scripts/testcluster
up would too)."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from marketplace import errors, services
from marketplace.models import Cluster, TenantAccount
from organizations.models import Membership
from tests.factories import MembershipFactory

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]

SUDOERS = Path("/etc/sudoers.d")


@contextmanager
def moved_aside(path: Path) -> Iterator[None]:
    """`path` is gone while the block runs, and back afterwards whatever happened."""
    aside = path.with_name(path.name + ".computeshare-test-aside")
    path.rename(aside)
    try:
        yield
    finally:
        aside.rename(path)


@contextmanager
def mode(path: Path, temporary: int) -> Iterator[None]:
    original = stat.S_IMODE(path.stat().st_mode)
    os.chmod(path, temporary)
    try:
        yield
    finally:
        os.chmod(path, original)


def owner_of(cluster: Cluster) -> Membership:
    return MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)


def unverified(on_testcluster, pool: str, **fields) -> Cluster:
    """A cluster row as registered (nothing of its pool recorded yet)."""
    cluster = on_testcluster(pool=pool, status=Cluster.Status.UNVERIFIED, tenants=[], **fields)
    cluster.partitions.all().delete()
    return cluster


def refused(cluster: Cluster) -> errors.ClusterMisconfigured:
    with pytest.raises(errors.ClusterMisconfigured) as failure:
        services.cluster_verify(actor=owner_of(cluster), cluster=cluster)
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.MISCONFIGURED
    assert not cluster.partitions.exists()
    assert not TenantAccount.objects.filter(cluster=cluster).exists()
    return failure.value


def statuses(steps: list[dict[str, str]]) -> dict[str, str]:
    return {step["key"]: step["status"] for step in steps}


@pytest.mark.parametrize("pool", ["fixed", "managed"])
def test_a_cluster_set_up_by_the_script_passes_every_step(testcluster, on_testcluster, pool):
    cluster = unverified(on_testcluster, pool)

    cluster, steps = services.cluster_verify(actor=owner_of(cluster), cluster=cluster)

    expected = {
        "connect": "passed",
        "partitions": "passed",
        "queries": "passed",
        "visibility": "passed",
        "pool": "passed",
        "sudo": "passed",
        "homes": "passed",
        "sftp": "passed",
        "sbatch": "passed",
        "gpus": "passed",
        # The test cluster tracks processes with linuxproc: a double fork escapes a job there.
        "proctrack": "warning",
        # One job on the one node (also the login node), as the first tenant.
        "nodes": "passed",
        # Set up with `--preemption normal --reservations` and the lines that prints.
        "preemption": "passed",
        "reservations": "passed",
    }
    if pool == "managed":
        expected |= {"operator": "passed", "limits": "passed", "idle": "passed"}
    assert statuses(steps) == expected
    assert cluster.status == Cluster.Status.ONLINE
    tenants = testcluster.tenant_pool(pool).tenants
    assert set(cluster.tenant_accounts.values_list("username", "home", "status")) == {
        (tenant.user, tenant.home, "available") for tenant in tenants
    }
    if pool == "managed":
        assert cluster.tenant_idle_account == testcluster.managed_pool.idle_account
        # The nodes step ran its job in the idle account, which runs nothing again after it.
        idle = f"account={cluster.tenant_idle_account}"
        limits = subprocess.run(
            ["sacctmgr", "-n", "-P", "show", "association", idle, "format=MaxJobs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert set(limits) == {"0"}, limits


def test_a_cluster_without_an_sftp_server_fails_at_sftp(testcluster, on_testcluster):
    cluster = unverified(on_testcluster, "fixed")

    with moved_aside(Path(testcluster.sftp_server)):
        failure = refused(cluster)

    assert failure.extra["failed_step"] == "sftp"
    steps = statuses(failure.extra["steps"])
    assert steps["sudo"] == steps["homes"] == "passed" and steps["sftp"] == "failed"
    [sftp] = [step for step in failure.extra["steps"] if step["key"] == "sftp"]
    assert testcluster.sftp_server in sftp["detail"]
    assert "No such file" in sftp["detail"] or "not found" in sftp["detail"]


def test_a_cluster_without_the_sudoers_rule_fails_at_sudo(testcluster, on_testcluster):
    cluster = unverified(on_testcluster, "fixed")
    rule = SUDOERS / f"computeshare-{testcluster.fixed_pool.group}"

    with moved_aside(rule):
        failure = refused(cluster)

    assert failure.extra["failed_step"] == "sudo"
    [sudo] = [step for step in failure.extra["steps"] if step["key"] == "sudo"]
    users = [tenant.user for tenant in testcluster.fixed_pool.tenants]
    assert all(user in sudo["detail"] for user in users)
    assert "password is required" in sudo["detail"]
    assert "run scripts/cluster-setup" in sudo["detail"]


def test_tenants_that_can_read_the_service_users_home_fail_at_homes(testcluster, on_testcluster):
    cluster = unverified(on_testcluster, "fixed")

    with mode(Path(f"/home/{testcluster.user}"), 0o755):
        failure = refused(cluster)

    assert failure.extra["failed_step"] == "homes"
    [homes] = [step for step in failure.extra["steps"] if step["key"] == "homes"]
    assert "can read the service user's home" in homes["detail"]
    assert "the service user's home is mode 755" in homes["detail"]
