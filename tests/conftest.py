"""Fixtures shared by the whole suite. The suite runs against the real parts: PostgreSQL,
Redis, a Celery worker and the Slurm test cluster over SSH. A part that does not answer fails
the tests that need it; nothing is skipped."""

import fcntl
import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from rest_framework.test import APIClient

from computeshare.models import User
from organizations.models import Membership
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory, token_for
from tests.testcluster import CONNECTION_FILE, TestCluster, testcluster_read
from tests.workers import WorkerProcess, database_url, worker_environment, worker_start

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


@pytest.fixture(autouse=True)
def _no_failed_log_ins_counted() -> None:
    """Every test starts with no failed log-in counted: the log-in throttling counts in Redis,
    which outlives a test, and every test client logs in from 127.0.0.1."""
    from computeshare.login_throttling import failures_forget_all

    failures_forget_all()


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
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


def _flush_retrying_deadlocks() -> None:
    """A transactional test ends by emptying every table (TRUNCATE); the session's Celery
    worker may still be running a task the test's commits enqueued (a webhook delivery, a
    settlement) on the same tables, and PostgreSQL can then end the TRUNCATE as one side of a
    deadlock. The worker's task finishes in a moment: the flush is tried again, up to 5 times."""
    from django.db import OperationalError
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self: DatabaseOperations, sql_list: list[str]) -> None:
        for attempt in range(5):
            try:
                flush(self, sql_list)
                return
            except OperationalError as error:
                if "deadlock detected" not in str(error) or attempt == 4:
                    raise
                time.sleep(0.5)

    DatabaseOperations.execute_sql_flush = execute_sql_flush  # type: ignore[method-assign]


_flush_retrying_deadlocks()


# `make test` runs the suite as four pytest processes side by side (scripts/pytest-processes):
# the tests that reach a Slurm test cluster in two, one per cluster (the machine runs two,
# `scripts/testcluster` and its TESTCLUSTER_INSTANCE=b), each one test after the other (they
# cancel every tenant's jobs and move tenants between accounts as they end); everything else in
# the other two. Each process has its own test database, Redis database and job files
# (computeshare/settings/test.py), Celery worker and local Stripe server. The cluster's tests
# are those that ask for it, the owner setup script's (real users and sudoers rules on this
# machine) and the fault tests (they stop and start the machine's services).
CLUSTER_FIXTURES = {"testcluster", "on_testcluster"}
CLUSTER_FOLDERS = ("tests/faults/", "tests/scripts/")
# The cluster tests that run on the second cluster, about half of the time. Each reads its
# cluster, pools and tenants from the connection file and changes nothing the two clusters
# share (the QOS, the Slurm users' AdminLevel, the machine's users and sudoers rules). The
# others stay on the first cluster: they name its tenants or its service user, change what is
# shared, or stop the machine's services.
SECOND_CLUSTER_FILES = frozenset(
    {
        "tests/hpc/test_inventory_integration.py",
        "tests/hpc/test_job_folder_links_slurm.py",
        "tests/hpc/test_pool.py",
        "tests/hpc/test_slurm_backend_integration.py",
        "tests/scheduler_bridge/test_capacity_journeys.py",
        "tests/scheduler_bridge/test_directives_integration.py",
        "tests/scheduler_bridge/test_directives_sbatch.py",
        "tests/scheduler_bridge/test_idle_integration.py",
        "tests/scheduler_bridge/test_job_files_integration.py",
        "tests/scheduler_bridge/test_job_secrets.py",
        "tests/scheduler_bridge/test_jobs_faults.py",
        "tests/scheduler_bridge/test_jobs_integration.py",
        "tests/scheduler_bridge/test_sizing_integration.py",
        "tests/scheduler_bridge/test_tenants_metering.py",
        "tests/web/test_browser_market.py",
        "tests/web/test_browser_sweeps.py",
        "tests/webhooks/test_events.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by it
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent.parent
    for item in items:
        where = item.path.relative_to(root).as_posix()
        if CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ())) or where.startswith(
            CLUSTER_FOLDERS
        ):
            item.add_marker(pytest.mark.on_test_cluster)
            if where in SECOND_CLUSTER_FILES:
                item.add_marker(pytest.mark.second_test_cluster)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The CPU the run took, its own and its finished children's (servers, workers, CLIs):
    on a 2-core machine the processes of `make test` share, this is what a test costs the
    others, where the durations above count its waits too."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    terminalreporter.write_line(
        f"CPU: {own.ru_utime + own.ru_stime:.0f} s in pytest, "
        f"{children.ru_utime + children.ru_stime:.0f} s in its children "
        f"({os.environ.get('COMPUTESHARE_TEST_PROCESS') or 'alone'})"
    )


@pytest.fixture(autouse=True)
def _the_test_cluster_to_itself(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test on the Slurm test cluster holds a lock beside its connection file for as long as
    it runs, so that other pytest runs on this machine (a colleague's checkout, a bench) wait
    instead of having their jobs cancelled by this test's teardown."""
    if request.node.get_closest_marker("on_test_cluster") is None:
        yield
        return
    CONNECTION_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(CONNECTION_FILE.parent / "in-use.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def testcluster() -> TestCluster:
    try:
        cluster = testcluster_read()
    except FileNotFoundError:
        pytest.fail(
            f"The Slurm test cluster is not set up ({CONNECTION_FILE} is missing): "
            "run `scripts/testcluster up` (make test does)."
        )
    _require_slurm_answers(cluster)
    return cluster


def _require_slurm_answers(cluster: TestCluster) -> None:
    """Fails (never skips) every test that needs the cluster when sshd or slurmctld is down."""
    from hpc.errors import BridgeError
    from hpc.ssh import SSHConnection

    try:
        with SSHConnection(cluster.ssh_settings()) as connection:
            answer = connection.run(["scontrol", "ping"], timeout=15, check=False)
    except BridgeError as error:
        pytest.fail(f"The Slurm test cluster does not answer over SSH: {error}")
    if answer.exit_status != 0 or "is UP" not in answer.stdout:
        pytest.fail(
            f"slurmctld does not answer on the test cluster: {answer.stdout}{answer.stderr}"
        )


@pytest.fixture
def on_testcluster(testcluster: TestCluster) -> Iterator[Any]:
    """Makes cluster rows for the real test cluster (`on_testcluster(pool="fixed", **fields)`,
    see `tests.factories.cluster_on_testcluster`). Afterwards every job of the pools' tenants is
    cancelled and gone from the queue: the cluster has 2 CPUs, and the next test's teams lease
    the same accounts."""
    from tests.factories import cluster_on_testcluster

    def make(pool: str = "fixed", **fields: Any) -> Any:
        return cluster_on_testcluster(testcluster, pool=pool, **fields)

    yield make
    testcluster_tidy(testcluster)


def testcluster_tidy(testcluster: TestCluster) -> None:
    """Leaves the test cluster as the next test expects it, over one SSH connection, doing only
    what is needed (the suite's cluster tests run one after the other, and most leave nothing):
    every job of the pools' tenants cancelled and gone from the queue, the managed pool's
    tenants out of the teams' Slurm accounts, and no reservation left."""
    from hpc.ssh import SSHConnection

    with SSHConnection(testcluster.ssh_settings()) as connection:
        tenants_jobs_cancel(testcluster, connection=connection)
        tenants_back_in_the_idle_account(testcluster, connection=connection)
        reservations_delete_all(testcluster, connection=connection)


@contextmanager
def _connected(testcluster: TestCluster, connection: Any | None) -> Iterator[Any]:
    """`connection` when given, else a new one for the block."""
    from hpc.ssh import SSHConnection

    if connection is not None:
        yield connection
        return
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


def reservations_delete_all(testcluster: TestCluster, *, connection: Any | None = None) -> None:
    """Deletes every reservation on the test cluster: the blocks of reserved allocations a test
    sold, and those a test made by hand in the owner's name."""
    from hpc.slurm.reservations import parse_reservations

    with _connected(testcluster, connection) as ssh:
        shown = ssh.run(["scontrol", "show", "reservation", "--oneliner"], timeout=30)
        for reservation in parse_reservations(shown.stdout):
            ssh.run(
                ["scontrol", "delete", f"ReservationName={reservation.name}"],
                timeout=30,
                check=False,
            )


def tenants_back_in_the_idle_account(
    testcluster: TestCluster, *, connection: Any | None = None
) -> None:
    """Takes every tenant of the managed pool out of the teams' Slurm accounts it was moved
    into, as a scrub does at the end of a lease (a failed test may not have got that far). One
    `sacctmgr` reads all the tenants; only those found in a team's account are moved."""
    from hpc.slurm import accounts

    pool = testcluster.managed_pool
    assert pool.idle_account is not None
    users = [tenant.user for tenant in pool.tenants]
    with _connected(testcluster, connection) as ssh:
        listed = accounts.slurm_users_get(
            ssh, cluster_name=testcluster.cluster_name, users=users, timeout=30
        )
        for user, found in listed.items():
            for association in found.associations:
                if accounts.is_team_account(association.account):
                    accounts.tenant_leave(
                        ssh,
                        cluster_name=testcluster.cluster_name,
                        user=user,
                        account=association.account,
                        idle_account=pool.idle_account,
                    )


def tenants_jobs_cancel(
    testcluster: TestCluster, *, wait_seconds: int = 60, connection: Any | None = None
) -> None:
    """Cancels, as each tenant of every pool that has any, all of its jobs, and waits until none
    is left (a tenant with no job in the queue costs no `sudo`)."""
    users = [tenant.user for pool in testcluster.tenant_pools.values() for tenant in pool.tenants]
    script = "\n".join(
        [
            f"users={','.join(users)}",
            'for user in $(squeue --noheader --user="$users" --format=%u | sort -u); do',
            '  sudo -n -u "$user" scancel --user="$user"',
            "done",
            f"for i in $(seq {wait_seconds * 5}); do",
            '  [ -z "$(squeue --noheader --user="$users" --format=%i)" ] && exit 0',
            "  sleep 0.2",
            "done",
            "exit 1",
        ]
    )
    with _connected(testcluster, connection) as ssh:
        ssh.run(script, timeout=wait_seconds + 30)


# --- A real Celery worker ---------------------------------------------------------------------


@dataclass
class CeleryWorker:
    worker: WorkerProcess
    mail_directory: Path

    def log(self) -> str:
        return self.worker.log()


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
    environment = worker_environment(
        database=database_url(connection.settings_dict),
        redis=settings.REDIS_URL,
        EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
        EMAIL_FILE_PATH=str(mail_directory),
        # Short leases and deadlines, so that a killed worker's jobs are taken up again within
        # seconds rather than minutes.
        JOBS_SUBMIT_LEASE_SECONDS="20",
        JOBS_POLL_LEASE_SECONDS="20",
        JOBS_COMMAND_TIMEOUT_SECONDS="15",
        # Jobs that the teams' jobs submit themselves, and the records that come after a run
        # (a requeue's, a resize's), are looked for within seconds rather than a minute.
        JOBS_TENANT_RUNS_READ_SECONDS="3",
        JOBS_RUN_RECORD_GRACE_SECONDS="5",
        LOCAL_CLUSTER_ROOT=str(local_cluster_root(tmp_path_factory)),
    )
    app.control.purge()
    # A worker killed in an earlier run leaves the messages it held in the broker's `unacked`
    # hash, which purge() does not empty: they would come back to this run's worker, for rows
    # that no longer exist, and keep the queue from ever looking settled.
    if settings.CELERY_BROKER_URL.startswith("redis://"):
        broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        try:
            broker.delete("unacked", "unacked_index", "unacked_mutex")
        finally:
            broker.close()
    try:
        process = worker_start(
            name="pytest", log_path=workdir / "worker.log", environment=environment
        )
    except RuntimeError as error:
        pytest.fail(str(error))
    worker = CeleryWorker(process, mail_directory)
    yield worker
    process.stop()


@pytest.fixture
def poller(celery_worker: CeleryWorker) -> Iterator[None]:
    """Sends the periodic poll to the Celery worker every second while the test runs, as beat
    would (every few seconds in production)."""
    from scheduler_bridge.tasks import jobs_poll_task

    stop = threading.Event()

    def send() -> None:
        while not stop.wait(1.0):
            jobs_poll_task.delay()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()


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
