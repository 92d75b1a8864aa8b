"""Part 1 of bench/jobs.py: submitting the same tiny jobs to the Slurm test cluster in every way
worth comparing, and keeping the shared cluster clean around them.

Nothing here needs Django: the ways are the plain library (`SSHConnection`, `SlurmBackend`), an
OpenSSH client process, and sbatch itself on the login node."""

from __future__ import annotations

import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from scheduler_bridge.backends.slurm import SlurmBackend
from scheduler_bridge.backends.types import JobSpec
from scheduler_bridge.slurm.ssh import DEFAULT_COMMAND_TIMEOUT, SSHConnection, SSHSettings
from tests.testcluster import testcluster_read

# The bench's files on the login node, one directory per run, removed at the end.
REMOTE_ROOT = "computeshare-bench"
TINY_SCRIPT = "#!/bin/bash\ntrue\n"
# How long a blocker holds both CPUs at most, should the bench die before cancelling it: the
# cluster is shared, and other people's tests wait behind it.
BLOCKER_MINUTES = 6


# --- Counting what goes over SSH ----------------------------------------------------------------


@dataclass
class Counts:
    """What the bench process sent over SSH while counting: remote commands (one exec channel
    each), SFTP sessions used (a block of file work on the connection's one SFTP channel), and
    new SSH connections (key exchange and authentication)."""

    commands: list[str] = field(default_factory=list)
    command_seconds: float = 0.0
    sftp_uses: int = 0
    sftp_seconds: float = 0.0
    connections: int = 0

    def summary(self) -> str:
        return (
            f"{len(self.commands)} command(s), {self.sftp_uses} SFTP use(s), "
            f"{self.connections} new connection(s)"
        )


@contextmanager
def counting() -> Iterator[Counts]:
    """Counts every `SSHConnection.run`, SFTP use and connection made in this process meanwhile,
    by wrapping the class's methods (the bench's instrument only: the library is unchanged)."""
    counts = Counts()
    original_run = SSHConnection.run
    original_sftp = SSHConnection.sftp
    original_connect = SSHConnection._connect

    def run(self: SSHConnection, arguments: Sequence[str] | str, **options: Any) -> Any:
        begun = time.perf_counter()
        try:
            return original_run(self, arguments, **options)
        finally:
            counts.command_seconds += time.perf_counter() - begun
            shown = arguments if isinstance(arguments, str) else " ".join(arguments)
            counts.commands.append(shown.split()[0] if shown else "")

    @contextmanager
    def sftp(self: SSHConnection, timeout: float = DEFAULT_COMMAND_TIMEOUT) -> Iterator[Any]:
        counts.sftp_uses += 1
        begun = time.perf_counter()
        try:
            with original_sftp(self, timeout) as session:
                yield session
        finally:
            counts.sftp_seconds += time.perf_counter() - begun

    def connect(self: SSHConnection) -> Any:
        counts.connections += 1
        return original_connect(self)

    SSHConnection.run = run  # type: ignore[method-assign]
    SSHConnection.sftp = sftp  # type: ignore[method-assign]
    SSHConnection._connect = connect  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        SSHConnection.run = original_run  # type: ignore[method-assign]
        SSHConnection.sftp = original_sftp  # type: ignore[method-assign]
        SSHConnection._connect = original_connect  # type: ignore[method-assign]


# --- The bench's jobs on the shared cluster ----------------------------------------------------


class BenchJobs:
    """Every job this run put on the cluster, by name and id, so that it cancels its own jobs
    and never anybody else's (the cluster's one Unix user is shared by everyone's tests)."""

    def __init__(self, connection: SSHConnection, run_name: str) -> None:
        self.connection = connection
        self.run_name = run_name
        self.names: set[str] = set()
        self.ids: set[str] = set()

    def name(self) -> str:
        made = f"cs-bench-{uuid.uuid4()}"
        self.names.add(made)
        return made

    def add(self, ids: Sequence[str | None]) -> list[str]:
        known = [job_id for job_id in ids if job_id]
        self.ids.update(known)
        return known

    def queued(self) -> dict[str, tuple[str, str]]:
        """The user's queue: id -> (name, state)."""
        answer = self.connection.run(
            ["squeue", "--noheader", f"--user={self.connection.settings.user}", "--format=%i|%j|%T"]
        )
        queue = {}
        for line in answer.stdout.splitlines():
            job_id, name, state = line.split("|", 2)
            queue[job_id] = (name, state)
        return queue

    def cancel(self, ids: Sequence[str], *, timeout: float = 90.0) -> float:
        """Cancels `ids` (this run's only) in one scancel per 1,000 and waits until squeue shows
        none of them, so that the next phase finds slurmctld idle. Returns the seconds it took."""
        begun = time.perf_counter()
        strangers = set(ids) - self.ids
        if strangers:
            raise ValueError(f"not this run's jobs, never cancelled: {sorted(strangers)[:5]}")
        for start in range(0, len(ids), 1000):
            self.connection.run(["scancel", *ids[start : start + 1000]], check=False)
        wanted = set(ids)
        while wanted & set(self.queued()):
            if time.perf_counter() - begun > timeout:
                raise RuntimeError(f"jobs still queued {timeout:.0f} s after scancel")
            time.sleep(0.5)
        return time.perf_counter() - begun

    def cancel_everything(self) -> None:
        """The last word of the run: cancels whatever of this run is still queued, found by id
        or by one of its names (a job whose submission raised has a name but no id yet)."""
        queue = self.queued()
        mine = [
            job_id
            for job_id, (name, _) in queue.items()
            if job_id.split("_")[0] in self.ids or name in self.names
        ]
        if mine:
            self.ids.update(mine)
            self.cancel(mine)

    def blocker(self, *, wait_seconds: float = 60.0) -> tuple[str, str]:
        """Submits a job that holds both CPUs, so that the bench's tiny jobs pend behind it
        instead of running (and loading the 2-core machine that also runs the bench). Returns
        its id and the state it reached: `RUNNING`, or `PENDING` when other people's jobs hold
        the CPUs (then some tiny jobs may be backfilled and run)."""
        answer = self.connection.run(
            [
                "sbatch",
                "--parsable",
                f"--job-name={self.name()}",
                f"--partition={TEST_CLUSTER.partition}",
                f"--account={TEST_CLUSTER.account}",
                f"--time={BLOCKER_MINUTES}",
                "--nodes=1",
                "--ntasks=1",
                "--cpus-per-task=2",
                "--output=/dev/null",
                "--error=/dev/null",
                "--wrap=sleep 600",
            ]
        )
        [job_id] = self.add([answer.stdout.strip().split(";")[0]])
        deadline = time.perf_counter() + wait_seconds
        state = "PENDING"
        while time.perf_counter() < deadline:
            state = self.queued().get(job_id, ("", "GONE"))[1]
            if state != "PENDING":
                break
            time.sleep(0.5)
        return job_id, state

    def remove_files(self, directories: Sequence[str] = ()) -> None:
        """Removes the run's directory on the login node and the given job directories."""
        home = self.connection.home
        paths = [f"{home}/{REMOTE_ROOT}/{self.run_name}", *(f"{home}/{d}" for d in directories)]
        for start in range(0, len(paths), 500):
            self.connection.run(["rm", "-rf", "--", *paths[start : start + 500]], check=False)
        # The root stays while another run of the bench is using it.
        self.connection.run(
            ["rmdir", "--ignore-fail-on-non-empty", f"{home}/{REMOTE_ROOT}"], check=False
        )


TEST_CLUSTER = testcluster_read()


# --- The ways to submit -----------------------------------------------------------------------


@dataclass
class Way:
    label: str
    jobs: int
    seconds: float
    commands: int  # remote commands (exec channels)
    connections: int  # new SSH connections
    note: str = ""

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def milliseconds_per_job(self) -> float:
        return 1000 * self.seconds / self.jobs


def tiny_specs(jobs: BenchJobs, count: int) -> list[JobSpec]:
    return [
        JobSpec(
            name=(name := jobs.name()),
            script=TINY_SCRIPT,
            directory=f"{REMOTE_ROOT}/{jobs.run_name}/{name}",
            partition=TEST_CLUSTER.partition,
            time_limit_minutes=1,
            account=TEST_CLUSTER.account,
        )
        for _ in range(count)
    ]


def shared_script(connection: SSHConnection, run_name: str) -> str:
    """One script file for the ways that run sbatch alone: its absolute path."""
    directory = f"{connection.home}/{REMOTE_ROOT}/{run_name}"
    path = f"{directory}/job.sh"
    connection.run(
        f"mkdir -p -m 0700 {shlex.quote(directory)} && printf %s {shlex.quote(TINY_SCRIPT)}"
        f" > {shlex.quote(path)} && chmod 0700 {shlex.quote(path)}"
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
        f"--account={TEST_CLUSTER.account}",
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
    connection: SSHConnection, jobs: BenchJobs, script_path: str, count: int
) -> tuple[Way, list[str]]:
    """`count` sbatch calls in a shell loop on the login node, timed there with `date`: the
    physical limit, with no SSH in the figure."""
    lines = ["start=$(date +%s.%N)"]
    for _ in range(count):
        lines.append(shlex.join(plain_sbatch_arguments(jobs.name(), script_path)))
    lines += ["end=$(date +%s.%N)", 'echo "elapsed $start $end"']
    answer = connection.run(["/bin/sh", "-s"], stdin="\n".join(lines).encode(), timeout=120)
    ids = jobs.add(_ids_of(answer.stdout))
    [start, end] = next(
        line.split()[1:] for line in answer.stdout.splitlines() if line.startswith("elapsed ")
    )
    seconds = float(end) - float(start)
    way = Way("plain sbatch on the login node (no SSH)", len(ids), seconds, 1, 0)
    return way, ids


def naive_paramiko(settings: SSHSettings, jobs: BenchJobs, count: int) -> tuple[Way, list[str]]:
    """The naive loop: for every job a new paramiko connection (host key pinned), its files
    written over SFTP and its sbatch run (the library's own `submit` of one spec), then closed."""
    ids = []
    with counting() as counts:
        begun = time.perf_counter()
        for spec in tiny_specs(jobs, count):
            with SSHConnection(settings) as connection:
                [result] = SlurmBackend(connection).submit([spec])
            ids += jobs.add([result.scheduler_job_id])
        seconds = time.perf_counter() - begun
    way = Way(
        "naive: a new paramiko connection per job",
        len(ids),
        seconds,
        len(counts.commands),
        counts.connections,
    )
    return way, ids


def openssh_per_job(jobs: BenchJobs, script_path: str, count: int) -> tuple[Way, list[str]]:
    """One `ssh` client process per sbatch (a shell script's way), the host key pinned by the
    test cluster's known_hosts file."""
    cluster = TEST_CLUSTER
    ids = []
    begun = time.perf_counter()
    for _ in range(count):
        answer = subprocess.run(
            [
                "ssh", "-q", "-i", cluster.private_key_path, "-p", str(cluster.port),
                "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={cluster.known_hosts_path}",
                "-o", "IdentitiesOnly=yes",
                f"{cluster.user}@{cluster.host}",
                shlex.join(plain_sbatch_arguments(jobs.name(), script_path)),
            ],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        ids += jobs.add(_ids_of(answer.stdout))
    seconds = time.perf_counter() - begun
    return Way("OpenSSH: one `ssh` process per job", len(ids), seconds, count, count), ids


def command_per_job(
    connection: SSHConnection, jobs: BenchJobs, script_path: str, count: int
) -> tuple[Way, list[str]]:
    """One remote command per sbatch on one kept-open connection: the pool without batching."""
    ids = []
    begun = time.perf_counter()
    for _ in range(count):
        answer = connection.run(plain_sbatch_arguments(jobs.name(), script_path))
        ids += jobs.add(_ids_of(answer.stdout))
    seconds = time.perf_counter() - begun
    return Way("one command per job on one kept connection", len(ids), seconds, count, 0), ids


def bridge_submit(
    connection: SSHConnection, jobs: BenchJobs, count: int, batch_size: int
) -> tuple[Way, list[str], Counts]:
    """The bridge library: `SlurmBackend.submit` on the pooled connection, the specs arriving
    together, in batches of `batch_size` as `cluster_jobs_submit` claims them."""
    specs = tiny_specs(jobs, count)
    ids: list[str] = []
    with counting() as counts:
        begun = time.perf_counter()
        backend = SlurmBackend(connection)
        for start in range(0, len(specs), batch_size):
            results = backend.submit(specs[start : start + batch_size])
            ids += jobs.add([result.scheduler_job_id for result in results])
        seconds = time.perf_counter() - begun
    refused = [result.error for result in results if result.scheduler_job_id is None]
    way = Way(
        f"bridge: SlurmBackend.submit, {batch_size} specs a batch",
        len(ids), seconds, len(counts.commands), counts.connections,
        note=f"{len(refused)} refused: {refused[:1]}" if refused else "",
    )  # fmt: skip
    return way, ids, counts
