"""Part 1 of bench/jobs.py: submitting the same tiny jobs to the Slurm test cluster in every way
worth comparing, and keeping the shared cluster clean around them.

Every job runs as a tenant (a pool account of the cluster's fixed pool), as the bridge's jobs
do: the service user reaches it through `sudo -n -u TENANT` on its one SSH connection, and
cannot run jobs itself (its only Slurm association is an idle account with MaxJobs=0).

Nothing here needs Django: the ways are the plain library (`SSHConnection`, `SlurmBackend`), an
OpenSSH client process, and sbatch itself on the login node."""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hpc.backends.slurm import SlurmBackend
from hpc.ssh import (
    DEFAULT_COMMAND_TIMEOUT,
    SSHConnection,
    SSHSettings,
    remote_command,
)
from hpc.types import JobSpec, Tenant
from tests.testcluster import testcluster_read

# The bench's files in each tenant's home, one directory per run, removed at the end.
REMOTE_ROOT = "computeshare-bench"
# Where the services put a job's directory in its tenant's home (`Job.directory`).
JOBS_ROOT = "computeshare-jobs"
TINY_SCRIPT = "#!/bin/bash\ntrue\n"
# How long a blocker holds both CPUs at most, should the bench die before cancelling it: the
# cluster is shared, and other people's tests wait behind it.
BLOCKER_MINUTES = 15

TEST_CLUSTER = testcluster_read()


def fixed_tenants() -> list[Tenant]:
    """The fixed pool's tenant accounts (all in the Slurm account `computeshare`)."""
    return [Tenant(user=each.user, home=each.home) for each in TEST_CLUSTER.fixed_pool.tenants]


def ssh_settings() -> SSHSettings:
    """The service user's login, with the cluster's SFTP server program for the tenants."""
    return TEST_CLUSTER.ssh_settings(sftp_server=TEST_CLUSTER.sftp_server)


# --- Counting what goes over SSH ----------------------------------------------------------------


@dataclass
class Counts:
    """What the bench process sent over SSH while counting: remote commands (one exec channel
    each, "sudo ..." when run as a tenant), SFTP uses (a block of file work on a cached session),
    SFTP sessions opened (a tenant's: its SFTP server started under sudo), and new SSH
    connections (key exchange and authentication)."""

    commands: list[str] = field(default_factory=list)
    command_seconds: float = 0.0
    sftp_uses: int = 0
    sftp_opened: int = 0
    sftp_seconds: float = 0.0
    connections: int = 0

    def summary(self) -> str:
        return (
            f"{len(self.commands)} command(s), {self.sftp_uses} SFTP use(s) "
            f"({self.sftp_opened} session(s) opened), {self.connections} new connection(s)"
        )


@contextmanager
def counting() -> Iterator[Counts]:
    """Counts every `SSHConnection.run`, SFTP use, SFTP session opened and connection made in
    this process meanwhile, by wrapping the class's methods (the bench's instrument only: the
    library is unchanged)."""
    counts = Counts()
    original_run = SSHConnection.run
    original_sftp = SSHConnection.sftp
    original_open_sftp = SSHConnection._open_sftp
    original_connect = SSHConnection._connect

    def run(self: SSHConnection, arguments: Sequence[str] | str, **options: Any) -> Any:
        begun = time.perf_counter()
        try:
            return original_run(self, arguments, **options)
        finally:
            counts.command_seconds += time.perf_counter() - begun
            shown = arguments if isinstance(arguments, str) else " ".join(arguments)
            program = shown.split()[0] if shown else ""
            counts.commands.append(f"sudo {program}" if options.get("as_user") else program)

    @contextmanager
    def sftp(
        self: SSHConnection,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        *,
        as_user: str | None = None,
    ) -> Iterator[Any]:
        counts.sftp_uses += 1
        begun = time.perf_counter()
        try:
            with original_sftp(self, timeout, as_user=as_user) as session:
                yield session
        finally:
            counts.sftp_seconds += time.perf_counter() - begun

    def open_sftp(self: SSHConnection, slot: Any, as_user: str | None, timeout: float) -> Any:
        cached = slot.client
        session = original_open_sftp(self, slot, as_user, timeout)
        if session is not cached:
            counts.sftp_opened += 1
        return session

    def connect(self: SSHConnection) -> Any:
        counts.connections += 1
        return original_connect(self)

    SSHConnection.run = run  # type: ignore[method-assign]
    SSHConnection.sftp = sftp  # type: ignore[method-assign]
    SSHConnection._open_sftp = open_sftp  # type: ignore[method-assign]
    SSHConnection._connect = connect  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        SSHConnection.run = original_run  # type: ignore[method-assign]
        SSHConnection.sftp = original_sftp  # type: ignore[method-assign]
        SSHConnection._open_sftp = original_open_sftp  # type: ignore[method-assign]
        SSHConnection._connect = original_connect  # type: ignore[method-assign]


# --- The bench's jobs on the shared cluster ----------------------------------------------------


@dataclass(frozen=True)
class QueueLine:
    name: str
    state: str
    user: str


class BenchJobs:
    """Every job this run put on the cluster, by id with the tenant it runs as, and by name, so
    that it cancels its own jobs and never anybody else's (other people's tests lease the same
    tenant accounts). The connection is the service user's: it reads the whole queue (as a
    Slurm administrator it sees every user's jobs despite `PrivateData=jobs`) and acts as a
    tenant through sudo.

    Jobs are cancelled as their tenants, not by the service user's administrator rights: that
    is how the bridge cancels, and a fixed-mode cluster's service user need not be more than a
    Slurm operator."""

    def __init__(self, connection: SSHConnection, run_name: str, tenants: Sequence[Tenant]) -> None:
        self.connection = connection
        self.run_name = run_name
        self.tenants = {tenant.user: tenant for tenant in tenants}
        self.names: set[str] = set()
        self.owners: dict[str, str] = {}  # job id -> the tenant user it runs as

    def name(self) -> str:
        made = f"cs-bench-{uuid.uuid4()}"
        self.names.add(made)
        return made

    def add(self, ids: Sequence[str | None], tenant: Tenant) -> list[str]:
        known = [job_id for job_id in ids if job_id]
        for job_id in known:
            self.owners[job_id] = tenant.user
        return known

    def queued(self) -> dict[str, QueueLine]:
        """The cluster's whole queue: id -> name, state and user."""
        answer = self.connection.run(["squeue", "--noheader", "--format=%i|%j|%T|%u"])
        queue = {}
        for line in answer.stdout.splitlines():
            job_id, name, state, user = line.split("|", 3)
            queue[job_id] = QueueLine(name, state, user)
        return queue

    def cancel(self, ids: Sequence[str], *, timeout: float = 90.0) -> float:
        """Cancels `ids` (this run's only), as the tenant each runs as, in one scancel per
        tenant and 1,000 ids, and waits until squeue shows none of them, so that the next phase
        finds slurmctld idle. Returns the seconds it took."""
        begun = time.perf_counter()
        strangers = set(ids) - set(self.owners)
        if strangers:
            raise ValueError(f"not this run's jobs, never cancelled: {sorted(strangers)[:5]}")
        by_user: dict[str, list[str]] = defaultdict(list)
        for job_id in ids:
            by_user[self.owners[job_id]].append(job_id)
        for user, user_ids in by_user.items():
            for start in range(0, len(user_ids), 1000):
                self.connection.run(
                    ["scancel", *user_ids[start : start + 1000]], check=False, as_user=user
                )
        wanted = set(ids)
        while wanted & set(self.queued()):
            if time.perf_counter() - begun > timeout:
                raise RuntimeError(f"jobs still queued {timeout:.0f} s after scancel")
            time.sleep(0.5)
        return time.perf_counter() - begun

    def cancel_everything(self) -> None:
        """The last word of the run: cancels whatever of this run is still queued, found by id
        or by one of its names (a job whose submission raised has a name but no id yet), among
        the jobs of the tenants it used."""
        mine = []
        for job_id, line in self.queued().items():
            if line.user not in self.tenants:
                continue
            if job_id.split("_")[0] in self.owners or line.name in self.names:
                self.owners.setdefault(job_id, line.user)
                mine.append(job_id)
        if mine:
            self.cancel(mine)

    def blocker(self, tenant: Tenant, *, wait_seconds: float = 60.0) -> tuple[str, str]:
        """Submits, as `tenant`, a job that holds both CPUs, so that the bench's tiny jobs pend
        behind it instead of running (and loading the 2-core machine that also runs the bench).
        Returns its id and the state it reached: `RUNNING`, or `PENDING` when other people's
        jobs hold the CPUs (then some tiny jobs may be backfilled and run)."""
        answer = self.connection.run(
            [
                "sbatch",
                "--parsable",
                f"--job-name={self.name()}",
                f"--partition={TEST_CLUSTER.partition}",
                f"--account={TEST_CLUSTER.fixed_pool.account}",
                f"--time={BLOCKER_MINUTES}",
                "--nodes=1",
                "--ntasks=1",
                "--cpus-per-task=2",
                "--output=/dev/null",
                "--error=/dev/null",
                f"--wrap=sleep {60 * BLOCKER_MINUTES}",
            ],
            as_user=tenant.user,
        )
        [job_id] = self.add([answer.stdout.strip().split(";")[0]], tenant)
        deadline = time.perf_counter() + wait_seconds
        state = "PENDING"
        while time.perf_counter() < deadline:
            line = self.queued().get(job_id)
            state = line.state if line else "GONE"
            if state != "PENDING":
                break
            time.sleep(0.5)
        return job_id, state

    def remove_files(self, job_directories: dict[str, list[str]] | None = None) -> None:
        """Removes, as each tenant, the run's directory in its home and the given job
        directories (tenant user -> directories relative to its home), then the roots they were
        in when nothing else is left in them (another run of the bench, or a test's job, may
        still be using them)."""
        job_directories = job_directories or {}
        for user, tenant in self.tenants.items():
            directories = job_directories.get(user, [])
            paths = [f"{tenant.home}/{REMOTE_ROOT}/{self.run_name}"]
            paths += [f"{tenant.home}/{directory}" for directory in directories]
            for start in range(0, len(paths), 500):
                self.connection.run(
                    ["rm", "-rf", "--", *paths[start : start + 500]], check=False, as_user=user
                )
            roots = [f"{tenant.home}/{REMOTE_ROOT}"]
            if directories:
                roots.append(f"{tenant.home}/{JOBS_ROOT}")
            self.connection.run(
                ["rmdir", "--ignore-fail-on-non-empty", *roots], check=False, as_user=user
            )


# --- The ways to submit -----------------------------------------------------------------------


@dataclass
class Way:
    label: str
    jobs: int
    seconds: float
    commands: int  # remote commands (exec channels), sudo'd or not
    connections: int  # new SSH connections
    sftp_sessions: int = 0  # SFTP sessions opened (a tenant's: sftp-server under sudo)
    note: str = ""

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def milliseconds_per_job(self) -> float:
        return 1000 * self.seconds / self.jobs


def tiny_specs(jobs: BenchJobs, count: int, tenants: Sequence[Tenant]) -> list[JobSpec]:
    """`count` tiny jobs, dealt to `tenants` in turn."""
    return [
        JobSpec(
            name=(name := jobs.name()),
            script=TINY_SCRIPT,
            directory=f"{REMOTE_ROOT}/{jobs.run_name}/{name}",
            partition=TEST_CLUSTER.partition,
            time_limit_minutes=1,
            account=TEST_CLUSTER.fixed_pool.account,
            tenant=tenants[index % len(tenants)],
        )
        for index in range(count)
    ]


def shared_script(connection: SSHConnection, tenant: Tenant, run_name: str) -> str:
    """One script file in `tenant`'s home for the ways that run sbatch alone: its absolute
    path."""
    directory = f"{tenant.home}/{REMOTE_ROOT}/{run_name}"
    path = f"{directory}/job.sh"
    connection.run(
        f"mkdir -p -m 0700 {shlex.quote(directory)} && printf %s {shlex.quote(TINY_SCRIPT)}"
        f" > {shlex.quote(path)} && chmod 0700 {shlex.quote(path)}",
        as_user=tenant.user,
    )
    return path


def plain_sbatch_arguments(name: str, script_path: str) -> list[str]:
    """sbatch with the resource options the bridge gives (output thrown away): what the login
    node does per job, whoever calls it."""
    return [
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        f"--partition={TEST_CLUSTER.partition}",
        f"--account={TEST_CLUSTER.fixed_pool.account}",
        "--time=1",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--output=/dev/null",
        "--error=/dev/null",
        script_path,
    ]


def _ids_of(output: str) -> list[str]:
    return [line.split(";")[0] for line in output.split() if line.split(";")[0].isdigit()]


def plain_sbatch(
    connection: SSHConnection, jobs: BenchJobs, tenant: Tenant, script_path: str, count: int
) -> tuple[Way, list[str]]:
    """`count` sbatch calls in a shell loop on the login node as `tenant` (the loop started
    under one sudo), timed there with `date`: the physical limit, with neither SSH nor sudo in
    the figure."""
    lines = ["start=$(date +%s.%N)"]
    for _ in range(count):
        lines.append(shlex.join(plain_sbatch_arguments(jobs.name(), script_path)))
    lines += ["end=$(date +%s.%N)", 'echo "elapsed $start $end"']
    answer = connection.run(
        ["/bin/sh", "-s"], stdin="\n".join(lines).encode(), timeout=120, as_user=tenant.user
    )
    ids = jobs.add(_ids_of(answer.stdout), tenant)
    [start, end] = next(
        line.split()[1:] for line in answer.stdout.splitlines() if line.startswith("elapsed ")
    )
    seconds = float(end) - float(start)
    way = Way("plain sbatch on the login node, as a tenant (timed inside)", len(ids), seconds, 1, 0)
    return way, ids


def naive_paramiko(
    settings: SSHSettings, jobs: BenchJobs, tenant: Tenant, count: int
) -> tuple[Way, list[str]]:
    """The naive loop: for every job a new paramiko connection (host key pinned), its files
    written over an SFTP session as the tenant and its sbatch run as the tenant (the library's
    own `submit` of one spec), then closed."""
    ids = []
    with counting() as counts:
        begun = time.perf_counter()
        for spec in tiny_specs(jobs, count, [tenant]):
            with SSHConnection(settings) as connection:
                [result] = SlurmBackend(connection).submit([spec])
            ids += jobs.add([result.scheduler_job_id], tenant)
        seconds = time.perf_counter() - begun
    way = Way(
        "naive: a new paramiko connection per job",
        len(ids), seconds, len(counts.commands), counts.connections, counts.sftp_opened,
    )  # fmt: skip
    return way, ids


def openssh_per_job(
    jobs: BenchJobs, tenant: Tenant, script_path: str, count: int
) -> tuple[Way, list[str]]:
    """One `ssh` client process per sbatch (a shell script's way), the host key pinned by the
    test cluster's known_hosts file; sbatch runs as the tenant through sudo, on the command line
    the bridge would send."""
    cluster = TEST_CLUSTER
    ids = []
    begun = time.perf_counter()
    for _ in range(count):
        command = remote_command(
            plain_sbatch_arguments(jobs.name(), script_path), as_user=tenant.user
        )
        answer = subprocess.run(
            [
                "ssh", "-q", "-i", cluster.private_key_path, "-p", str(cluster.port),
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={cluster.known_hosts_path}",
                "-o", "IdentitiesOnly=yes",
                f"{cluster.user}@{cluster.host}",
                command,
            ],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        ids += jobs.add(_ids_of(answer.stdout), tenant)
    seconds = time.perf_counter() - begun
    return Way("OpenSSH: one `ssh` process per job", len(ids), seconds, count, count), ids


def command_per_job(
    connection: SSHConnection, jobs: BenchJobs, tenant: Tenant, script_path: str, count: int
) -> tuple[Way, list[str]]:
    """One remote command per sbatch (each through sudo) on one kept-open connection: the pool
    without batching."""
    ids = []
    begun = time.perf_counter()
    for _ in range(count):
        answer = connection.run(
            plain_sbatch_arguments(jobs.name(), script_path), as_user=tenant.user
        )
        ids += jobs.add(_ids_of(answer.stdout), tenant)
    seconds = time.perf_counter() - begun
    return Way(
        "one sudo'd command per job on one kept connection", len(ids), seconds, count, 0
    ), ids


def bridge_submit(
    settings: SSHSettings,
    jobs: BenchJobs,
    tenants: Sequence[Tenant],
    count: int,
    batch_size: int,
    lanes: int = 2,
) -> tuple[Way, list[str], Counts]:
    """The bridge library: `SlurmBackend.submit`, the specs arriving together (dealt to
    `tenants` in turn), in batches of `batch_size` as `cluster_jobs_submit` claims them.

    It runs on a connection opened beforehand (outside the figure), as a worker's pooled
    connection: each tenant's share of a batch is one command under sudo, which writes the
    jobs' files and runs their sbatch calls in `lanes` lanes (`JOBS_SUBMIT_LANES`, 2 by
    default)."""
    specs = tiny_specs(jobs, count, tenants)
    ids: list[str] = []
    refused: list[str | None] = []
    with SSHConnection(settings) as connection, counting() as counts:
        begun = time.perf_counter()
        backend = SlurmBackend(connection, submit_lanes=lanes)
        for start in range(0, len(specs), batch_size):
            batch = specs[start : start + batch_size]
            results = backend.submit(batch)
            for spec, result in zip(batch, results, strict=True):
                assert spec.tenant is not None
                ids += jobs.add([result.scheduler_job_id], spec.tenant)
                if result.scheduler_job_id is None:
                    refused.append(result.error)
        seconds = time.perf_counter() - begun
    spread = "one tenant" if len(tenants) == 1 else f"{len(tenants)} tenants"
    way = Way(
        f"bridge: SlurmBackend.submit, {batch_size} specs a batch, {spread}, "
        f"{lanes} lane{'s' if lanes > 1 else ''}",
        len(ids), seconds, len(counts.commands), counts.connections, counts.sftp_opened,
        note=f"{len(refused)} refused: {refused[:1]}" if refused else "",
    )  # fmt: skip
    return way, ids, counts
