"""Verification's two steps of the kinds of capacity, `preemption` and `reservations`, on the real
test cluster, and what the cluster row records of them.

The test cluster is set up with `cluster-setup --preemption normal --reservations` and the
slurm.conf lines that prints, so both pass there. Then each way preemption can be broken that
a test can undo at once (the market QOS missing, stopping its jobs by CANCEL, preempted by
nobody; a fixed tenant not allowed it) fails the `preemption` step alone: the cluster stays
online and sells reserved capacity only. Without operator rights Slurm refuses the service user
its reservation; both kinds refused fail the verification at the first of the two. What was
changed is put back in a `finally`, whatever happens."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pytest

from hpc.errors import ReservationRefused
from hpc.slurm.inventory import config_read
from hpc.slurm.reservations import PROBE_PREFIX, reservation_probe, reservations_list
from hpc.ssh import SSHConnection
from marketplace import services
from marketplace.models import Cluster
from marketplace.services import verification, verification_checks, verification_steps
from marketplace.services.clusters import ssh_settings_for
from organizations.models import Membership
from tests.factories import MembershipFactory, OrganizationFactory

pytestmark = pytest.mark.django_db


def capacity_of(cluster: Cluster) -> dict[str, Any]:
    cluster.refresh_from_db()
    return {name: getattr(cluster, name) for name in verification.CAPACITY_FIELDS}


def owner_of(cluster: Cluster) -> Membership:
    return MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)


def unverified(on_testcluster: Any, pool: str, **fields: Any) -> Cluster:
    """A cluster row as registered: nothing of its pool or capacity recorded yet."""
    cluster = on_testcluster(
        pool=pool,
        status=Cluster.Status.UNVERIFIED,
        tenants=[],
        sells_preemptible=False,
        sells_reserved=False,
        market_qos=fields.pop("market_qos", ""),
        owner_qos=[],
        preemption_grace_seconds=None,
        **fields,
    )
    cluster.partitions.all().delete()
    return cluster


def verified(cluster: Cluster) -> dict[str, dict[str, str]]:
    """Verifies the cluster, which must come out online; its steps by key."""
    cluster, steps = services.cluster_verify(actor=owner_of(cluster), cluster=cluster)
    assert cluster.status == Cluster.Status.ONLINE
    return {step["key"]: step for step in steps}


def sacctmgr(testcluster: Any, *arguments: str) -> None:
    """As the service user, a Slurm administrator on the test cluster."""
    with SSHConnection(testcluster.ssh_settings()) as connection:
        connection.run(["sacctmgr", "-i", *arguments], timeout=30)


@contextmanager
def changed_in_slurm(testcluster: Any, change: list[str], undo: list[str]) -> Iterator[None]:
    sacctmgr(testcluster, *change)
    try:
        yield
    finally:
        sacctmgr(testcluster, *undo)


def market_only(testcluster: Any) -> dict[str, Any]:
    """What a cluster that sells reserved capacity only records."""
    return {
        "sells_preemptible": False,
        "market_qos": testcluster.market_qos,
        "owner_qos": [],
        "preemption_grace_seconds": None,
        "sells_reserved": True,
        "reserved_refusal": "",
    }


# --- Both kinds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["fixed", "managed"])
def test_a_cluster_set_up_by_the_script_sells_both_kinds(testcluster, on_testcluster, pool):
    cluster = unverified(on_testcluster, pool)

    steps = verified(cluster)

    grace = testcluster.preemption_grace_seconds
    assert steps["preemption"] == {
        "key": "preemption",
        "title": (
            f"Preemptible capacity: your QOS preempt {testcluster.market_qos}, whose jobs are "
            "requeued"
        ),
        "status": "passed",
        "detail": (
            f"{testcluster.owner.qos} preempts {testcluster.market_qos}; a preempted job gets "
            f"SIGTERM {grace} s before it is requeued."
        ),
    }
    tenant = testcluster.tenant_pool(pool).tenants[0].user
    assert steps["reservations"] == {
        "key": "reservations",
        "title": "Reserved capacity: the service user may make Slurm reservations",
        "status": "passed",
        "detail": (
            f"Made and removed a one-minute reservation of 1 core on {testcluster.partition} for "
            f"{tenant}."
        ),
    }
    assert capacity_of(cluster) == {
        "sells_preemptible": True,
        "preemptible_refusal": "",
        "market_qos": testcluster.market_qos,
        "owner_qos": [testcluster.owner.qos],
        "preemption_grace_seconds": grace,
        "sells_reserved": True,
        "reserved_refusal": "",
    }
    # The test reservation is gone.
    with SSHConnection(testcluster.ssh_settings()) as connection:
        assert not [
            reservation
            for reservation in reservations_list(connection, timeout=30)
            if reservation.name.startswith(PROBE_PREFIX)
        ]


def test_a_local_cluster_sells_both_kinds():
    cluster = services.cluster_create_local(organization=OrganizationFactory(), name="Laptop")

    cluster, steps = services.cluster_verify(actor=None, cluster=cluster)

    assert [step["key"] for step in steps] == ["partitions"]
    assert cluster.status == Cluster.Status.ONLINE
    assert capacity_of(cluster) == {
        "sells_preemptible": True,
        "preemptible_refusal": "",
        "market_qos": "",
        "owner_qos": [],
        "preemption_grace_seconds": None,
        "sells_reserved": True,
        "reserved_refusal": "",
    }


# --- Preemption broken, reservations fine: online, reserved capacity only --------------------


def test_a_market_qos_that_does_not_exist_is_refused_and_reserved_capacity_still_sold(
    testcluster, on_testcluster
):
    cluster = unverified(on_testcluster, "fixed", market_qos="cs-no-such-market")

    steps = verified(cluster)

    reason = (
        "there is no QOS cs-no-such-market: run scripts/cluster-setup --preemption with the QOS "
        "your own users' jobs run under (most often normal)."
    )
    assert (steps["preemption"]["status"], steps["preemption"]["detail"]) == ("failed", reason)
    assert steps["reservations"]["status"] == "passed"
    assert capacity_of(cluster) == {
        **market_only(testcluster),
        "market_qos": "cs-no-such-market",
        "preemptible_refusal": reason,
    }


def test_a_market_qos_that_would_cancel_its_jobs_is_refused(testcluster, on_testcluster):
    market = testcluster.market_qos
    cluster = unverified(on_testcluster, "managed")

    with changed_in_slurm(
        testcluster,
        ["modify", "qos", "where", f"name={market}", "set", "preemptmode=cancel"],
        ["modify", "qos", "where", f"name={market}", "set", "preemptmode=requeue"],
    ):
        steps = verified(cluster)

    reason = (
        f"jobs of {market} would be stopped by CANCEL, not requeued: run `sacctmgr modify qos "
        f"{market} set preemptmode=requeue` (scripts/cluster-setup --preemption does)."
    )
    assert (steps["preemption"]["status"], steps["preemption"]["detail"]) == ("failed", reason)
    assert capacity_of(cluster) == {**market_only(testcluster), "preemptible_refusal": reason}


def test_a_market_qos_that_no_qos_preempts_is_refused(testcluster, on_testcluster):
    market, owner = testcluster.market_qos, testcluster.owner.qos
    cluster = unverified(on_testcluster, "fixed")

    with changed_in_slurm(
        testcluster,
        ["modify", "qos", "where", f"name={owner}", "set", f"preempt-={market}"],
        ["modify", "qos", "where", f"name={owner}", "set", f"preempt+={market}"],
    ):
        steps = verified(cluster)

    reason = (
        f"no QOS preempts {market}, so the teams' jobs would keep cores your users need: run "
        "scripts/cluster-setup --preemption with the QOS your own users' jobs run under (most "
        "often normal)."
    )
    assert (steps["preemption"]["status"], steps["preemption"]["detail"]) == ("failed", reason)
    assert capacity_of(cluster) == {**market_only(testcluster), "preemptible_refusal": reason}


def test_a_fixed_tenant_not_allowed_the_market_qos_is_named(testcluster, on_testcluster):
    market = testcluster.market_qos
    pool = testcluster.fixed_pool
    tenant = pool.tenants[-1].user
    cluster = unverified(on_testcluster, "fixed")
    where = ["where", f"name={tenant}", f"account={pool.account}"]

    with changed_in_slurm(
        testcluster,
        ["modify", "user", *where, "set", "qos=normal", "defaultqos=normal"],
        ["modify", "user", *where, "set", f"qos={market}", f"defaultqos={market}"],
    ):
        steps = verified(cluster)

    reason = (
        f"the tenants {tenant} may not run jobs under {market} in the Slurm account "
        f"{pool.account}, so Slurm would refuse the teams' jobs: run scripts/cluster-setup "
        "--preemption for this pool."
    )
    assert (steps["preemption"]["status"], steps["preemption"]["detail"]) == ("failed", reason)
    assert capacity_of(cluster) == {**market_only(testcluster), "preemptible_refusal": reason}


# --- Reservations without operator rights ---------------------------------------------------------


def as_root(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=60)


@contextmanager
def service_user_without_rights(testcluster: Any) -> Iterator[None]:
    """The service user at AdminLevel None for the block, an administrator again afterwards
    (as root on this machine: it may no longer change itself). The test cluster's PrivateData
    makes verification's `visibility` step fail without operator rights, before the steps of
    the kinds, so the tests below run those two steps alone."""
    where = ["sacctmgr", "-i", "modify", "user", "where", f"name={testcluster.user}", "set"]
    as_root(*where, "adminlevel=none")
    try:
        yield
    finally:
        as_root(*where, "adminlevel=administrator")


def test_without_operator_rights_slurm_refuses_the_test_reservation(testcluster):
    tenant = testcluster.fixed_pool.tenants[0].user

    with (
        service_user_without_rights(testcluster),
        SSHConnection(testcluster.ssh_settings()) as connection,
        pytest.raises(ReservationRefused) as refused,
    ):
        reservation_probe(connection, partition=testcluster.partition, user=tenant, timeout=30)

    assert str(refused.value) == "Error creating the reservation: Invalid user id"


def kinds_verified(
    cluster: Cluster, testcluster: Any
) -> tuple[verification_steps.Steps, verification_checks.Findings, BaseException | None]:
    """The two steps of the kinds alone, run on the cluster as verification runs them."""
    steps, findings = verification_steps.Steps(), verification_checks.Findings()
    pool = testcluster.tenant_pool("fixed")
    findings.pool = tuple(verification_checks.PoolAccount(t.user, t.home) for t in pool.tenants)
    failure = None
    with closing(SSHConnection(ssh_settings_for(cluster))) as connection:
        config = config_read(connection, timeout=30)
        try:
            verification_checks.kinds_check(
                connection,
                cluster,
                steps,
                findings,
                config,
                testcluster.partition,
                pool.tenants[0].user,
            )
        except verification_steps.CheckFailed as error:
            failure = error
    return steps, findings, failure


def test_without_operator_rights_the_reservations_step_says_what_to_run(
    testcluster, on_testcluster
):
    cluster = on_testcluster(pool="fixed")

    with service_user_without_rights(testcluster):
        steps, findings, failure = kinds_verified(cluster, testcluster)

    reason = (
        f"Slurm refused {testcluster.user} a reservation (Error creating the reservation: "
        f"Invalid user id): making and removing reservations takes operator rights. Run "
        f"`sacctmgr modify user {testcluster.user} set adminlevel=operator` "
        "(scripts/cluster-setup --reservations does)."
    )
    assert failure is None
    assert [(step.key, step.status) for step in steps.steps] == [
        ("preemption", "passed"),
        ("reservations", "failed"),
    ]
    assert steps.steps[1].detail == reason
    assert steps.failed is None  # preemptible capacity can still be sold
    assert (findings.preemption is not None, findings.reserved_refusal) == (True, reason)


def test_when_neither_kind_can_be_sold_the_verification_fails_at_the_first(
    testcluster, on_testcluster
):
    cluster = on_testcluster(pool="fixed", market_qos="cs-no-such-market")

    with service_user_without_rights(testcluster):
        steps, findings, failure = kinds_verified(cluster, testcluster)

    assert failure is not None
    assert str(failure) == (
        f"{findings.preemptible_refusal} Reserved capacity cannot be sold either: "
        f"{findings.reserved_refusal}"
    )
    assert findings.preemptible_refusal.startswith("there is no QOS cs-no-such-market")
    assert findings.reserved_refusal.startswith(f"Slurm refused {testcluster.user}")
    assert steps.failed is not None and steps.failed.key == "preemption"
