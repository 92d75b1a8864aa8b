"""Cluster registration and verification against the real Slurm test cluster over SSH: the API's
verify (queued, then run here as the worker runs it), the web page's verification in a real
Celery worker, and the private key at rest. What a verification must store is read from the
cluster itself with `scontrol`, never copied from what the service found."""

import socket
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection as database
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from computeshare.fields import fernet
from computeshare.models import User
from hpc.ssh import SSHConnection, host_key_from_line
from marketplace import services
from marketplace.models import Cluster, ClusterVerification, Partition
from marketplace.services.verification_checks import UNREACHABLE_REASON
from organizations.models import Membership, Organization
from tests.conftest import client_for, wait_for
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    ssh_host_key_line,
    ssh_private_key_text,
)

pytestmark = pytest.mark.slurm

WORKER_TIMEOUT = 60


@dataclass
class Owner:
    organization: Organization
    admin: User
    membership: Membership


@pytest.fixture
def owner() -> Owner:
    organization = OrganizationFactory(name="Cluster Owners")
    membership = MembershipFactory(organization=organization, role=Membership.Role.ADMIN)
    return Owner(organization, membership.user, membership)


def fingerprint_of(host_key_line: str) -> str:
    return host_key_from_line(host_key_line).fingerprint


def free_loopback_port() -> int:
    """A loopback port where nothing listens (free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def on_cluster(testcluster: Any, arguments: list[str]) -> str:
    with SSHConnection(testcluster.ssh_settings()) as connection:
        return connection.run(arguments, timeout=30).stdout


def partition_as_slurm_describes_it(testcluster: Any) -> dict[str, Any]:
    """The test partition as `scontrol show partition` describes it, in the API's terms."""
    line = on_cluster(
        testcluster, ["scontrol", "--oneliner", "show", "partition", testcluster.partition]
    )
    fields = dict(token.partition("=")[::2] for token in line.split())
    tres = dict(item.partition("=")[::2] for item in fields["TRES"].split(","))
    assert fields["MaxTime"] == "UNLIMITED"
    assert fields["State"] == "UP"
    return {
        "name": fields["PartitionName"],
        "cpus": int(fields["TotalCPUs"]),
        "gpus": int(tres.get("gres/gpu", "0")),
        "nodes": int(fields["TotalNodes"]),
        "max_time_minutes": None,
        "is_up": True,
    }


def slurm_version_of(testcluster: Any) -> str:
    # `scontrol --version` prints `slurm 22.05.8` or, on Debian, `slurm-wlm 22.05.8`.
    return on_cluster(testcluster, ["scontrol", "--version"]).split()[-1]


def registration(owner: Owner, testcluster: Any, **changes: Any) -> dict[str, Any]:
    return {
        "organization": str(owner.organization.uuid),
        "name": "Test cluster",
        "ssh_host": testcluster.host,
        "ssh_port": testcluster.port,
        "ssh_user": testcluster.user,
        "ssh_private_key": testcluster.private_key,
        "ssh_host_key": testcluster.host_key,
        "account_mode": "managed",
        **changes,
    }


def register(owner: Owner, testcluster: Any, **changes: Any) -> str:
    response = client_for(owner.admin).post(
        "/api/v1/clusters/", registration(owner, testcluster, **changes), format="json"
    )
    assert response.status_code == 201, response.json()
    assert (response.json()["status"], response.json()["partitions"]) == ("unverified", [])
    return response.json()["id"]


def verify(owner: Owner, cluster_id: str) -> dict[str, Any]:
    """Asks for a verification through the API (202, queued), runs it in this process as the
    worker would (nothing commits in these tests, so no worker gets it), and returns the
    cluster as its GET shows it then, with the verification's outcome."""
    client = client_for(owner.admin)
    asked = client.post(f"/api/v1/clusters/{cluster_id}/verify/")
    assert asked.status_code == 202, asked.json()
    verification = ClusterVerification.objects.get(uuid=asked.json()["verification"]["id"])
    services.cluster_verification_run(verification_id=verification.pk)
    shown = client.get(f"/api/v1/clusters/{cluster_id}/")
    assert shown.status_code == 200, shown.json()
    return shown.json()


def outcome(body: dict[str, Any]) -> tuple[str, str, str]:
    verification = body["verification"]
    return verification["status"], verification["code"], verification["detail"]


def connect_failed(testcluster: Any, reason: str, port: int) -> dict[str, str]:
    """The one step of a verification that could not connect."""
    return {
        "key": "connect",
        "title": f"Connect to {testcluster.host}:{port} as {testcluster.user} with the pinned key",
        "status": "failed",
        "detail": reason,
    }


def partition_rows(cluster: Cluster) -> list[tuple[Any, ...]]:
    return list(
        Partition.objects.filter(cluster=cluster)
        .order_by("name")
        .values_list("name", "nodes", "cpus", "gpus", "max_time_minutes", "is_up", "updated_at")
    )


def assert_never_verified(cluster: Cluster) -> None:
    assert cluster.verified_at is None
    assert (cluster.slurm_cluster_name, cluster.slurm_version) == ("", "")
    assert not Partition.objects.filter(cluster=cluster).exists()


# --- The API: POST /clusters/{id}/verify/, run as the worker runs it ---------------------------


@pytest.mark.django_db
def test_verifying_with_the_pinned_host_key_stores_the_partitions_slurm_reports(owner, testcluster):
    cluster_id = register(owner, testcluster)
    expected_partition = partition_as_slurm_describes_it(testcluster)
    before = timezone.now()

    body = verify(owner, cluster_id)

    after = timezone.now()
    cluster = Cluster.objects.get(uuid=cluster_id)
    assert parse_datetime(body.pop("verified_at")) == cluster.verified_at
    assert before <= cluster.verified_at <= after
    verification = body.pop("verification")
    pool = testcluster.managed_pool
    assert (verification["status"], verification["code"], verification["failed_step"]) == (
        "succeeded",
        "",
        None,
    )
    assert verification["detail"] == f"Online: 1 partition, {len(pool.tenants)} tenant accounts."
    assert [(step["key"], step["status"]) for step in verification["steps"]] == [
        ("connect", "passed"),
        ("partitions", "passed"),
        ("queries", "passed"),
        ("visibility", "passed"),
        ("operator", "passed"),
        ("limits", "passed"),
        ("pool", "passed"),
        ("sudo", "passed"),
        ("homes", "passed"),
        ("sftp", "passed"),
        ("idle", "passed"),
        ("sbatch", "passed"),
        ("gpus", "passed"),
        ("proctrack", "warning"),
        ("nodes", "passed"),
        ("preemption", "passed"),
        ("reservations", "passed"),
    ]
    assert body == {
        "id": cluster_id,
        "name": "Test cluster",
        "organization": str(owner.organization.uuid),
        "organization_name": "Cluster Owners",
        "status": "online",
        "partitions": [expected_partition],
        "ssh_host": testcluster.host,
        "ssh_port": testcluster.port,
        "ssh_user": testcluster.user,
        "ssh_host_key": testcluster.host_key,
        "host_key_fingerprint": fingerprint_of(testcluster.host_key),
        "account_mode": "managed",
        "slurm_account": "",
        "status_detail": "",
        "tenant_accounts": {"total": len(pool.tenants), "free": len(pool.tenants)},
        "tenant_group": pool.group,
        "sftp_server": testcluster.sftp_server,
        "tenant_idle_account": pool.idle_account,
        "tracks_gpus": False,
        # Set up with `cluster-setup --preemption normal --reservations`.
        "capacity_kinds": ["preemptible", "reserved"],
        "capacity_refusals": {},
        "market_qos": testcluster.market_qos,
        "owner_qos": [testcluster.owner.qos],
        "preemption_grace_seconds": testcluster.preemption_grace_seconds,
    }
    assert expected_partition == {
        "name": "debug",
        "cpus": expected_partition["cpus"],
        "gpus": 0,
        "nodes": expected_partition["nodes"],
        "max_time_minutes": None,
        "is_up": True,
    }
    assert [row[:6] for row in partition_rows(cluster)] == [
        ("debug", expected_partition["nodes"], expected_partition["cpus"], 0, None, True)
    ]
    assert (cluster.status, cluster.status_detail) == (Cluster.Status.ONLINE, "")
    assert cluster.slurm_cluster_name == testcluster.cluster_name == "computeshare-test"
    assert cluster.slurm_version == slurm_version_of(testcluster)


@pytest.mark.django_db
def test_verifying_again_updates_the_same_partition_rows(owner, testcluster):
    cluster_id = register(owner, testcluster)
    assert outcome(verify(owner, cluster_id))[0] == "succeeded"
    cluster = Cluster.objects.get(uuid=cluster_id)
    first_ids = list(Partition.objects.filter(cluster=cluster).values_list("pk", flat=True))
    first_verified_at = cluster.verified_at

    body = verify(owner, cluster_id)

    assert outcome(body)[0] == "succeeded"
    cluster.refresh_from_db()
    assert list(Partition.objects.filter(cluster=cluster).values_list("pk", flat=True)) == (
        first_ids
    )
    assert cluster.verified_at > first_verified_at
    assert body["partitions"] == [partition_as_slurm_describes_it(testcluster)]
    assert ClusterVerification.objects.filter(cluster=cluster).count() == 2


@pytest.mark.django_db
def test_a_wrong_pinned_host_key_is_refused_and_marks_the_cluster(owner, testcluster):
    wrong_key = ssh_host_key_line()
    cluster_id = register(owner, testcluster, ssh_host_key=wrong_key)

    body = verify(owner, cluster_id)

    offered, pinned = fingerprint_of(testcluster.host_key), fingerprint_of(wrong_key)
    detail = f"The host offered a ssh-ed25519 key {offered}; the pinned key is {pinned}."
    assert outcome(body) == ("failed", "host_key_mismatch", detail)
    [step] = body["verification"]["steps"]
    assert (step["key"], step["status"]) == ("connect", "failed")
    assert "which is not the pinned key" in step["detail"]
    assert body["verification"]["failed_step"] == "connect"
    cluster = Cluster.objects.get(uuid=cluster_id)
    assert (cluster.status, cluster.status_detail) == (Cluster.Status.HOST_KEY_MISMATCH, detail)
    assert (body["status"], body["status_detail"]) == ("host_key_mismatch", detail)
    # The pin is never replaced by what the host offered.
    assert (cluster.ssh_host_key, cluster.host_key_fingerprint) == (wrong_key, pinned)
    assert_never_verified(cluster)


@pytest.mark.django_db
def test_an_online_cluster_whose_host_key_changes_is_marked_and_keeps_its_partitions(
    owner, testcluster
):
    cluster_id = register(owner, testcluster)
    assert outcome(verify(owner, cluster_id))[0] == "succeeded"
    cluster = Cluster.objects.get(uuid=cluster_id)
    partitions_before = partition_rows(cluster)
    verified = (cluster.verified_at, cluster.slurm_cluster_name, cluster.slurm_version)
    wrong_key = ssh_host_key_line()
    Cluster.objects.filter(pk=cluster.pk).update(
        ssh_host_key=wrong_key, host_key_fingerprint=fingerprint_of(wrong_key)
    )

    body = verify(owner, cluster_id)

    assert outcome(body)[:2] == ("failed", "host_key_mismatch")
    assert body["verification"]["steps"] == [
        {
            "key": "connect",
            "title": f"Connect to {testcluster.host}:{testcluster.port} as "
            f"{testcluster.user} with the pinned key",
            "status": "failed",
            "detail": f"{testcluster.host}:{testcluster.port} offered a ssh-ed25519 host "
            f"key with fingerprint {fingerprint_of(testcluster.host_key)}, which is not "
            "the pinned key",
        }
    ]
    cluster.refresh_from_db()
    assert cluster.status == Cluster.Status.HOST_KEY_MISMATCH
    assert partition_rows(cluster) == partitions_before
    assert (cluster.verified_at, cluster.slurm_cluster_name, cluster.slurm_version) == verified
    assert (body["status"], body["partitions"]) == (
        "host_key_mismatch",
        [partition_as_slurm_describes_it(testcluster)],
    )


@pytest.mark.django_db
def test_a_port_where_nothing_listens_is_unreachable_with_the_one_generic_reason(
    owner, testcluster
):
    port = free_loopback_port()
    cluster_id = register(owner, testcluster, ssh_port=port)

    body = verify(owner, cluster_id)

    reason = UNREACHABLE_REASON
    assert outcome(body) == (
        "failed",
        "cluster_unreachable",
        f"The cluster could not be verified: {reason}",
    )
    assert body["verification"]["steps"] == [connect_failed(testcluster, reason, port)]
    cluster = Cluster.objects.get(uuid=cluster_id)
    assert (cluster.status, cluster.status_detail) == (Cluster.Status.UNREACHABLE, reason)
    assert_never_verified(cluster)


@pytest.mark.django_db
def test_a_private_key_the_cluster_refuses_is_unreachable_saying_the_key_was_refused(
    owner, testcluster
):
    cluster_id = register(owner, testcluster, ssh_private_key=ssh_private_key_text())
    port = testcluster.port

    body = verify(owner, cluster_id)

    reason = (
        "the service user's key was refused: computeshare@127.0.0.1:2222 refused the key: "
        "Authentication failed."
    )
    assert outcome(body) == (
        "failed",
        "cluster_unreachable",
        f"The cluster could not be verified: {reason}",
    )
    assert body["verification"]["steps"] == [connect_failed(testcluster, reason, port)]
    cluster = Cluster.objects.get(uuid=cluster_id)
    assert (cluster.status, cluster.status_detail) == (Cluster.Status.UNREACHABLE, reason)
    assert_never_verified(cluster)


@pytest.mark.django_db
def test_a_cluster_once_unreachable_comes_online_when_verified_with_the_right_port(
    owner, testcluster
):
    cluster_id = register(owner, testcluster, ssh_port=free_loopback_port())
    assert outcome(verify(owner, cluster_id))[:2] == ("failed", "cluster_unreachable")
    Cluster.objects.filter(uuid=cluster_id).update(ssh_port=testcluster.port)

    body = verify(owner, cluster_id)

    assert outcome(body)[0] == "succeeded"
    cluster = Cluster.objects.get(uuid=cluster_id)
    assert (cluster.status, cluster.status_detail) == (Cluster.Status.ONLINE, "")
    assert body["partitions"] == [partition_as_slurm_describes_it(testcluster)]


# --- The web page's verification, in a real Celery worker -------------------------------------


def registered_cluster(owner: Owner, testcluster: Any, **changes: Any) -> Cluster:
    fields = registration(owner, testcluster, **changes)
    del fields["organization"]
    return services.cluster_create(actor=owner.membership, **fields)


def finished(verification: ClusterVerification) -> ClusterVerification | None:
    verification.refresh_from_db()
    return None if verification.status == ClusterVerification.Status.RUNNING else verification


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_verification_from_the_web_page_runs_in_the_worker_and_succeeds(
    celery_worker, owner, testcluster
):
    cluster = registered_cluster(owner, testcluster)
    expected = partition_as_slurm_describes_it(testcluster)

    verification = services.cluster_verification_start(actor=owner.membership, cluster=cluster)

    assert (verification.status, verification.step) == ("running", "Waiting for a worker")
    assert verification.requested_by == owner.admin
    done = wait_for(lambda: finished(verification), timeout=WORKER_TIMEOUT)
    assert (done.status, done.step, done.error_code) == ("succeeded", "Done", "")
    assert (
        done.detail
        == f"Online: 1 partition, {len(testcluster.managed_pool.tenants)} tenant accounts."
    )
    assert done.finished_at is not None
    cluster.refresh_from_db()
    assert (cluster.status, cluster.slurm_cluster_name) == ("online", testcluster.cluster_name)
    assert [row[:6] for row in partition_rows(cluster)] == [
        (expected["name"], expected["nodes"], expected["cpus"], expected["gpus"], None, True)
    ]
    assert ClusterVerification.objects.filter(cluster=cluster).count() == 1


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_verification_from_the_web_page_against_a_wrong_host_key_fails_in_the_worker(
    celery_worker, owner, testcluster
):
    wrong_key = ssh_host_key_line()
    cluster = registered_cluster(owner, testcluster, ssh_host_key=wrong_key)

    verification = services.cluster_verification_start(actor=owner.membership, cluster=cluster)

    done = wait_for(lambda: finished(verification), timeout=WORKER_TIMEOUT)
    offered, pinned = fingerprint_of(testcluster.host_key), fingerprint_of(wrong_key)
    detail = f"The host offered a ssh-ed25519 key {offered}; the pinned key is {pinned}."
    assert (done.status, done.step, done.error_code) == ("failed", "Done", "host_key_mismatch")
    assert done.detail == detail
    assert done.finished_at is not None
    cluster.refresh_from_db()
    assert (cluster.status, cluster.status_detail) == ("host_key_mismatch", detail)
    assert_never_verified(cluster)


@pytest.mark.django_db
def test_a_second_request_while_a_verification_runs_returns_the_running_one(owner, testcluster):
    # In a rolled-back test nothing commits, so no worker ever picks the first request up.
    cluster = registered_cluster(owner, testcluster)
    first = services.cluster_verification_start(actor=owner.membership, cluster=cluster)

    second = services.cluster_verification_start(actor=owner.membership, cluster=cluster)

    assert second.pk == first.pk
    assert ClusterVerification.objects.filter(cluster=cluster).count() == 1


# --- The private key at rest ---------------------------------------------------------------------


@pytest.mark.django_db
def test_the_private_key_is_stored_encrypted_and_never_returned(owner, testcluster):
    cluster_id = register(owner, testcluster)
    cluster = Cluster.objects.get(uuid=cluster_id)

    with database.cursor() as cursor:
        cursor.execute(
            "SELECT ssh_private_key FROM marketplace_cluster WHERE id = %s", [cluster.pk]
        )
        (stored,) = cursor.fetchone()

    key_text = testcluster.private_key.strip() + "\n"
    assert "PRIVATE KEY" not in stored
    assert not any(line in stored for line in key_text.splitlines() if len(line) > 8)
    assert fernet().decrypt(stored.encode()).decode() == key_text
    assert cluster.ssh_private_key == key_text
    # The decrypted key is the one that works: the cluster verifies with it.
    assert outcome(verify(owner, cluster_id))[0] == "succeeded"
    for path in ("/api/v1/clusters/", f"/api/v1/clusters/{cluster_id}/"):
        assert "PRIVATE KEY" not in client_for(owner.admin).get(path).content.decode()
