"""Clusters reach only addresses the outbound rules allow, and verification is no port scanner.

Registration refuses a host that resolves to a loopback, private, link-local or metadata address
(400 `address_not_allowed`); the connection checks again and goes to the checked address; any
failure to reach a cluster reads the same to its owner, with the real reason in the operators'
log; verification runs in a worker (202), once at a time per cluster, throttled per
organization; the web process answers meanwhile."""

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from computeshare.models import User
from hpc.ssh import SSHConnection
from marketplace import services
from marketplace.models import Cluster, ClusterVerification
from marketplace.services.verification_checks import UNREACHABLE_REASON
from organizations.models import Membership, Organization
from tests.conftest import client_for, wait_for
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    ssh_host_key_line,
    ssh_private_key_text,
)

API = "/api/v1"
WORKER_TIMEOUT = 60
VERIFICATION_LOGGER = "marketplace.services.verification"


@dataclass
class Owner:
    organization: Organization
    admin: User
    membership: Membership


@pytest.fixture
def owner(db: None) -> Owner:
    organization = OrganizationFactory(name="Port Scanners Inc")
    membership = MembershipFactory(organization=organization, role=Membership.Role.ADMIN)
    return Owner(organization, membership.user, membership)


def registration(owner: Owner, **changes: Any) -> dict[str, Any]:
    return {
        "organization": str(owner.organization.uuid),
        "name": "Probe",
        "ssh_host": "127.0.0.1",
        "ssh_port": 22,
        "ssh_user": "computeshare",
        "ssh_private_key": ssh_private_key_text(),
        "ssh_host_key": ssh_host_key_line(),
        "account_mode": "fixed",
        "slurm_account": "computeshare",
        **changes,
    }


def cluster_at(owner: Owner, host: str, port: int, **changes: Any) -> Cluster:
    fields = registration(owner, ssh_host=host, ssh_port=port, **changes)
    del fields["organization"]
    fields.setdefault("name", f"{host}:{port}")
    return services.cluster_create(actor=owner.membership, **fields)


@dataclass
class Listener:
    """A TCP server on loopback that either answers every connection with `greeting` and
    closes it (something other than sshd), or, with no greeting, accepts and never answers."""

    greeting: bytes | None
    server: socket.socket = field(init=False)
    port: int = field(init=False)
    accepted: int = 0
    held: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return  # closed
            self.accepted += 1
            if self.greeting is None:
                self.held.append(connection)
            else:
                connection.sendall(self.greeting)
                connection.close()

    def close(self) -> None:
        # shutdown() wakes the thread blocked in accept(); close() alone leaves it listening.
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        for connection in self.held:
            connection.close()
        self.thread.join(timeout=5)


@pytest.fixture
def not_sshd() -> Iterator[Listener]:
    listener = Listener(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    yield listener
    listener.close()


@pytest.fixture
def silent() -> Iterator[Listener]:
    listener = Listener(None)
    yield listener
    listener.close()


# --- Registration and connection updates -------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("127.0.0.1", 6379),  # the platform's Redis
        ("127.0.0.1", 5432),  # its PostgreSQL
        ("169.254.169.254", 80),  # the cloud's metadata service
        ("[::1]", 22),
        ("::1", 22),
        ("::ffff:127.0.0.1", 22),
        ("10.0.0.1", 22),
        ("192.168.1.1", 22),
        ("fd00:ec2::254", 80),
        ("localhost", 22),
        ("2130706433", 22),  # 127.0.0.1 as one number
    ],
)
def test_registering_a_host_the_rules_deny_is_400_and_registers_nothing(
    owner, settings, host, port
):
    settings.CLUSTER_ALLOWED_NETWORKS = []

    answer = client_for(owner.admin).post(
        f"{API}/clusters/", registration(owner, ssh_host=host, ssh_port=port), format="json"
    )

    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert body["code"] == "address_not_allowed"
    assert list(body["extra"]["fields"]) == ["ssh_host"]
    [message] = body["extra"]["fields"]["ssh_host"]
    assert "an address the platform does not connect to" in message
    assert not Cluster.objects.filter(organization=owner.organization).exists()


def test_a_public_address_and_a_name_that_does_not_resolve_yet_are_registered(owner, settings):
    settings.CLUSTER_ALLOWED_NETWORKS = []
    client = client_for(owner.admin)

    public = client.post(
        f"{API}/clusters/", registration(owner, ssh_host="192.0.32.10", name="A"), format="json"
    )
    unresolved = client.post(
        f"{API}/clusters/",
        registration(owner, ssh_host="login.no-such-cluster.invalid", name="B"),
        format="json",
    )

    assert (public.status_code, unresolved.status_code) == (201, 201)
    assert Cluster.objects.filter(organization=owner.organization).count() == 2


def test_moving_a_cluster_to_a_denied_host_is_400_and_changes_nothing(owner, settings):
    cluster = cluster_at(owner, "192.0.32.10", 22)
    settings.CLUSTER_ALLOWED_NETWORKS = []

    answer = client_for(owner.admin).patch(
        f"{API}/clusters/{cluster.uuid}/",
        {"ssh_host": "169.254.169.254", "ssh_port": 80},
        format="json",
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "address_not_allowed"
    cluster.refresh_from_db()
    assert (cluster.ssh_host, cluster.ssh_port) == ("192.0.32.10", 22)


def test_the_web_form_refuses_a_denied_host_beside_the_field(owner, settings, client):
    settings.CLUSTER_ALLOWED_NETWORKS = []
    client.force_login(owner.admin)
    fields = registration(owner, ssh_host="169.254.169.254", ssh_port=80)
    del fields["organization"]

    page = client.post(f"/organizations/{owner.organization.uuid}/clusters/", fields)

    assert page.status_code == 400
    assert "an address the platform does not connect to" in page.content.decode()
    assert not Cluster.objects.filter(organization=owner.organization).exists()


# --- One reason for every failure to connect -------------------------------------------------


def run_verification(owner: Owner, cluster: Cluster) -> dict[str, Any]:
    """Asks for a verification through the API and runs it here, as the worker would; returns
    what the owner reads: the cluster's GET without the parts that change with time."""
    client = client_for(owner.admin)
    asked = client.post(f"{API}/clusters/{cluster.uuid}/verify/")
    assert asked.status_code == 202, asked.content
    verification = ClusterVerification.objects.get(uuid=asked.json()["verification"]["id"])
    services.cluster_verification_run(verification_id=verification.pk)
    body = client.get(f"{API}/clusters/{cluster.uuid}/").json()
    shown = body["verification"]
    for changing in ("id", "requested_at", "finished_at"):
        del shown[changing]
    return {"cluster_status": body["status"], "status_detail": body["status_detail"], **shown}


def test_a_closed_port_an_open_port_that_is_not_sshd_and_a_denied_address_read_the_same(
    owner, settings, not_sshd, caplog
):
    """The same host and port: first something that is not sshd answers there, then nothing
    listens there, then the operators stop allowing loopback. The owner reads one outcome;
    the operators' log has the three real reasons."""
    cluster = cluster_at(owner, "127.0.0.1", not_sshd.port)
    caplog.set_level("WARNING", logger=VERIFICATION_LOGGER)

    open_but_not_sshd = run_verification(owner, cluster)
    not_sshd.close()
    closed = run_verification(owner, cluster)
    settings.CLUSTER_ALLOWED_NETWORKS = []
    accepted_before = not_sshd.accepted
    denied = run_verification(owner, cluster)

    assert open_but_not_sshd == closed == denied
    assert denied == {
        "cluster_status": "unreachable",
        "status_detail": UNREACHABLE_REASON,
        "status": "failed",
        "code": "cluster_unreachable",
        "detail": f"The cluster could not be verified: {UNREACHABLE_REASON}",
        "step": "Done",
        "steps": [
            {
                "key": "connect",
                "title": f"Connect to 127.0.0.1:{not_sshd.port} as computeshare with the "
                "pinned key",
                "status": "failed",
                "detail": UNREACHABLE_REASON,
            }
        ],
        "failed_step": "connect",
    }
    assert not_sshd.accepted == accepted_before == 1  # the denied try never connected
    logged = [
        record.getMessage() for record in caplog.records if record.name == VERIFICATION_LOGGER
    ]
    assert len(logged) == 3
    assert all(str(cluster.uuid) in message for message in logged)
    assert "Error reading SSH protocol banner" in logged[0]
    assert "connection refused" in logged[1]
    assert "127.0.0.1 resolves to 127.0.0.1, where the platform does not connect" in logged[2]


# --- The connection goes to the checked address ----------------------------------------------


@pytest.mark.slurm
def test_a_connection_resolves_the_host_once_and_goes_to_the_checked_address(
    owner, testcluster, monkeypatch
):
    """The test cluster registered by name (`localhost`): the name is looked up once per
    connection, the socket is connected to the address that was checked, and the pinned host
    key is still the one of `[localhost]:port`."""
    cluster = cluster_at(
        owner,
        "localhost",
        testcluster.port,
        ssh_user=testcluster.user,
        ssh_private_key=testcluster.private_key,
        ssh_host_key=testcluster.host_key,
        tenant_group=testcluster.fixed_pool.group,
    )
    looked_up: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def spy(host: Any, *arguments: Any, **options: Any) -> Any:
        looked_up.append(host)
        return real_getaddrinfo(host, *arguments, **options)

    monkeypatch.setattr(socket, "getaddrinfo", spy)

    with SSHConnection(services.ssh_settings_for(cluster)) as connection:
        peer = connection.transport.sock.getpeername()
        hostname = connection.run(["hostname"], timeout=30)

    assert looked_up == ["localhost"]
    assert (peer[0], peer[1]) == ("127.0.0.1", testcluster.port)
    assert hostname.exit_status == 0


@pytest.mark.slurm
def test_a_name_that_resolves_to_a_denied_address_is_never_connected_to(
    owner, testcluster, settings
):
    cluster = cluster_at(
        owner,
        "localhost",
        testcluster.port,
        ssh_user=testcluster.user,
        ssh_private_key=testcluster.private_key,
        ssh_host_key=testcluster.host_key,
    )
    settings.CLUSTER_ALLOWED_NETWORKS = []  # the operators stop allowing loopback

    with pytest.raises(Exception) as refused:
        SSHConnection(services.ssh_settings_for(cluster)).open()

    assert type(refused.value).__name__ == "ClusterUnreachable"
    assert str(refused.value) == (
        f"cannot connect to localhost:{testcluster.port}: localhost resolves to 127.0.0.1, "
        "where the platform does not connect"
    )


# --- Verification in a worker, once at a time, throttled --------------------------------------


def test_verify_answers_202_with_the_running_verification_and_does_not_queue_it_twice(owner):
    cluster = cluster_at(owner, "192.0.32.10", 22)
    client = client_for(owner.admin)

    first = client.post(f"{API}/clusters/{cluster.uuid}/verify/")
    again = client.post(f"{API}/clusters/{cluster.uuid}/verify/")
    shown = client.get(f"{API}/clusters/{cluster.uuid}/")

    assert (first.status_code, again.status_code) == (202, 202)
    assert first["Location"] == f"{API}/clusters/{cluster.uuid}/"
    [queued] = ClusterVerification.objects.filter(cluster=cluster)
    verification = first.json()["verification"]
    assert verification.pop("requested_at")
    assert verification == {
        "id": str(queued.uuid),
        "status": "running",
        "step": "Waiting for a worker",
        "steps": [],
        "code": "",
        "detail": "",
        "failed_step": None,
        "finished_at": None,
    }
    assert (
        again.json()["verification"]["id"] == shown.json()["verification"]["id"] == str(queued.uuid)
    )
    assert first.json()["status"] == "unverified"  # the cluster itself is as it was


def test_only_the_owners_see_the_verification(owner):
    cluster = cluster_at(owner, "192.0.32.10", 22)
    client_for(owner.admin).post(f"{API}/clusters/{cluster.uuid}/verify/")
    stranger = MembershipFactory(role=Membership.Role.ADMIN).user

    shown = client_for(stranger).get(f"{API}/clusters/{cluster.uuid}/")

    assert shown.status_code == 200
    assert "verification" not in shown.json()
    assert "status_detail" not in shown.json()


def test_verifications_past_the_organizations_rate_are_429_with_retry_after(owner, settings):
    settings.CLUSTER_VERIFY_RATE = "2/day"
    clusters = [cluster_at(owner, "192.0.32.10", 22, name=f"c{number}") for number in range(3)]
    client = client_for(owner.admin)
    other = Owner(*_other_owner())
    elsewhere = cluster_at(other, "192.0.32.10", 22)

    first = client.post(f"{API}/clusters/{clusters[0].uuid}/verify/")
    repeated = client.post(f"{API}/clusters/{clusters[0].uuid}/verify/")  # the running one
    second = client.post(f"{API}/clusters/{clusters[1].uuid}/verify/")
    third = client.post(f"{API}/clusters/{clusters[2].uuid}/verify/")
    other_organization = client_for(other.admin).post(f"{API}/clusters/{elsewhere.uuid}/verify/")

    assert [first.status_code, repeated.status_code, second.status_code] == [202, 202, 202]
    assert third.status_code == 429
    body = third.json()
    assert body["code"] == "throttled"
    wait = int(third["Retry-After"])
    assert 1 <= wait <= 86400
    assert body["extra"] == {"retry_after_seconds": wait}
    assert not ClusterVerification.objects.filter(cluster=clusters[2]).exists()
    assert ClusterVerification.objects.filter(cluster__organization=owner.organization).count() == 2
    assert other_organization.status_code == 202


def _other_owner() -> tuple[Organization, User, Membership]:
    membership = MembershipFactory(role=Membership.Role.ADMIN)
    return membership.organization, membership.user, membership


def test_the_web_pages_verify_button_says_when_the_organization_is_throttled(
    owner, settings, client
):
    settings.CLUSTER_VERIFY_RATE = "0/day"
    cluster = cluster_at(owner, "192.0.32.10", 22)
    client.force_login(owner.admin)

    card = client.post(f"/clusters/{cluster.uuid}/verify/", HTTP_HX_REQUEST="true")

    assert card.status_code == 200
    assert 'data-field="verify-notice"' in card.content.decode()
    assert "cluster verifications" in card.content.decode()
    assert not ClusterVerification.objects.filter(cluster=cluster).exists()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_eight_verifications_of_a_silent_host_answer_at_once_and_the_web_keeps_answering(
    celery_worker, owner, silent
):
    """A socket that accepts and never answers held every web process that verified against it
    for the connect timeout. Now the web answers 202 at once, the worker does the waiting,
    and /healthz answers meanwhile."""
    clusters = [cluster_at(owner, "127.0.0.1", silent.port, name=f"s{n}") for n in range(8)]
    client = client_for(owner.admin)

    started = time.monotonic()
    answers = [client.post(f"{API}/clusters/{cluster.uuid}/verify/") for cluster in clusters]
    asked_in = time.monotonic() - started

    assert [answer.status_code for answer in answers] == [202] * 8
    assert asked_in < 3.0
    wait_for(lambda: silent.accepted >= 1, timeout=WORKER_TIMEOUT)  # the worker connects
    started = time.monotonic()
    health = client.get("/healthz")
    assert (health.status_code, time.monotonic() - started < 1.0) == (200, True)
    running = client.get(f"{API}/clusters/{clusters[0].uuid}/").json()["verification"]
    assert running["status"] == "running"

    silent.close()  # the held connection ends; the rest find the port closed

    def all_ended() -> list[ClusterVerification] | None:
        verifications = list(ClusterVerification.objects.filter(cluster__in=clusters))
        ended = all(each.status != ClusterVerification.Status.RUNNING for each in verifications)
        return verifications if ended else None

    ended = wait_for(all_ended, timeout=WORKER_TIMEOUT)
    assert {(each.status, each.error_code, each.detail) for each in ended} == {
        (
            "failed",
            "cluster_unreachable",
            f"The cluster could not be verified: {UNREACHABLE_REASON}",
        )
    }
    assert len(ended) == 8


@pytest.mark.slurm
@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_the_test_cluster_verified_through_the_api_comes_online_in_the_worker(
    celery_worker, owner, testcluster
):
    client = client_for(owner.admin)
    created = client.post(
        f"{API}/clusters/",
        registration(
            owner,
            ssh_host=testcluster.host,
            ssh_port=testcluster.port,
            ssh_user=testcluster.user,
            ssh_private_key=testcluster.private_key,
            ssh_host_key=testcluster.host_key,
            slurm_account=testcluster.fixed_pool.account,
            tenant_group=testcluster.fixed_pool.group,
            sftp_server=testcluster.sftp_server,
        ),
        format="json",
    )
    assert created.status_code == 201, created.content
    path = f"{API}/clusters/{created.json()['id']}/"

    asked = client.post(f"{path}verify/")

    assert asked.status_code == 202
    assert asked.json()["verification"]["status"] == "running"

    def ended() -> dict[str, Any] | None:
        body = client.get(path).json()
        return body if body["verification"]["status"] != "running" else None

    body = wait_for(ended, timeout=WORKER_TIMEOUT)
    assert (body["verification"]["status"], body["verification"]["code"]) == ("succeeded", "")
    assert body["status"] == "online"
    assert [partition["name"] for partition in body["partitions"]] == [testcluster.partition]
    assert body["verification"]["steps"][0]["key"] == "connect"
    assert {step["status"] for step in body["verification"]["steps"]} <= {"passed", "warning"}
