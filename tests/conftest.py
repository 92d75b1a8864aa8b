"""Fixtures shared by the whole suite. The suite runs against the real parts: PostgreSQL,
Redis, a Celery worker and the Slurm test cluster over SSH. A part that does not answer fails
the tests that need it; nothing is skipped."""

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from computeshare.models import User
from marketplace.models import Membership
from scheduler_bridge.slurm.ssh import SSHSettings
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

REPOSITORY = Path(__file__).resolve().parent.parent
TESTCLUSTER_CONFIG = Path(
    os.environ.get(
        "COMPUTESHARE_TESTCLUSTER_CONFIG", "/var/lib/computeshare-testcluster/connection.json"
    )
)

if TYPE_CHECKING:
    from tests.localstripe import LocalStripe

pytest_plugins = ["tests.localstripe"]

# Playwright's sync API runs an event loop in the test's thread; the ORM calls the tests make
# around it are ordinary blocking calls.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(autouse=True)
def _stripe_is_local(localstripe: "LocalStripe", settings: Any) -> None:
    """Every test talks to the local Stripe server, never to Stripe."""
    settings.STRIPE_API_BASE = localstripe.api_base
    settings.STRIPE_SECRET_KEY = localstripe.secret_key
    settings.STRIPE_PUBLISHABLE_KEY = localstripe.publishable_key
    settings.STRIPE_JS_URL = localstripe.js_url


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


def client_for(user: User) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@dataclass
class OrganizationWithPeople:
    organization: object
    admin: User
    member: User
    outsider: User


@pytest.fixture
def team(db: None) -> OrganizationWithPeople:
    organization = OrganizationFactory(name="Quantum Lab")
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    member = MembershipFactory(organization=organization, role=Membership.Role.MEMBER).user
    outsider = MembershipFactory(role=Membership.Role.ADMIN).user
    return OrganizationWithPeople(organization, admin, member, outsider)


@pytest.fixture
def user(db: None) -> User:
    return UserFactory()


# --- The Slurm test cluster ---------------------------------------------------------------------


@dataclass(frozen=True)
class TestCluster:
    host: str
    port: int
    user: str
    private_key_path: str
    host_key: str
    cluster_name: str
    partition: str
    account: str

    @property
    def private_key(self) -> str:
        return Path(self.private_key_path).read_text()

    def ssh_settings(self, **changes: Any) -> SSHSettings:
        """How to reach the cluster's login node (5 s to connect), with `changes` applied."""
        values: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "private_key": self.private_key,
            "host_key": self.host_key,
            "connect_timeout": 5.0,
        }
        return SSHSettings(**{**values, **changes})


@pytest.fixture(scope="session")
def testcluster() -> TestCluster:
    if not TESTCLUSTER_CONFIG.exists():
        pytest.fail(
            f"The Slurm test cluster is not set up ({TESTCLUSTER_CONFIG} is missing): "
            "run `scripts/testcluster up` (make test does)."
        )
    config = json.loads(TESTCLUSTER_CONFIG.read_text())
    fields = TestCluster.__dataclass_fields__
    cluster = TestCluster(**{name: config[name] for name in fields})
    _require_slurm_answers(cluster)
    return cluster


def _require_slurm_answers(cluster: TestCluster) -> None:
    """Fails (never skips) every test that needs the cluster when sshd or slurmctld is down."""
    from scheduler_bridge.slurm.errors import BridgeError
    from scheduler_bridge.slurm.ssh import SSHConnection

    try:
        with SSHConnection(cluster.ssh_settings()) as connection:
            answer = connection.run(["scontrol", "ping"], timeout=15, check=False)
    except BridgeError as error:
        pytest.fail(f"The Slurm test cluster does not answer over SSH: {error}")
    if answer.exit_status != 0 or "is UP" not in answer.stdout:
        pytest.fail(
            f"slurmctld does not answer on the test cluster: {answer.stdout}{answer.stderr}"
        )


# --- A real Celery worker ---------------------------------------------------------------------


@dataclass
class CeleryWorker:
    process: subprocess.Popen[bytes]
    mail_directory: Path
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def local_cluster_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the `local` backend keeps its jobs in this test run: the same for the tests and
    for the Celery worker, which may submit a test's local jobs itself."""
    return tmp_path_factory.getbasetemp() / "local-cluster"


@pytest.fixture(scope="session")
def celery_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    """A `celery worker` process on the test Redis and the test database (its writes are seen
    by tests that use `transactional_db`). Mail goes to files in `mail_directory`."""
    from django.conf import settings
    from django.db import connection

    from computeshare.celery import app

    workdir = tmp_path_factory.mktemp("celery")
    mail_directory = workdir / "mail"
    mail_directory.mkdir()
    database = connection.settings_dict
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "computeshare.settings.test",
        "DATABASE_URL": (
            f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
        ),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(mail_directory),
        # Short leases and deadlines, so that the fault tests see a killed worker's jobs taken
        # up again within seconds rather than minutes.
        "JOBS_SUBMIT_LEASE_SECONDS": "20",
        "JOBS_POLL_LEASE_SECONDS": "20",
        "JOBS_COMMAND_TIMEOUT_SECONDS": "15",
        "LOCAL_CLUSTER_ROOT": str(local_cluster_root(tmp_path_factory)),
    }
    app.control.purge()
    log_path = workdir / "worker.log"
    celery = shutil.which("celery", path=str(Path(sys.executable).parent))
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                celery or "celery",
                "-A",
                "computeshare",
                "worker",
                "--pool=solo",
                "--loglevel=INFO",
                "--hostname=pytest@%h",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=REPOSITORY,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    worker = CeleryWorker(process, mail_directory, log_path)
    deadline = time.monotonic() + 60
    while not app.control.ping(timeout=0.5, destination=None):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"The Celery worker did not start:\n{worker.log()[-4000:]}")
    yield worker
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def wait_for(condition: object, timeout: float = 30.0, interval: float = 0.2) -> object:
    """Polls `condition()` until it returns something true; fails the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()  # type: ignore[operator]
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout:g} s")
        time.sleep(interval)
