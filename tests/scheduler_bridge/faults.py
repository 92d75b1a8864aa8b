"""Helpers of the fault tests (tests/scheduler_bridge/test_jobs_faults.py): stopping a daemon of
the test cluster for a while, dropping one SSH connection, Celery workers that can be killed,
and a second process that settles a task at the same moment as another.

Run as `python -m tests.scheduler_bridge.faults settle PICKLE` it is that second process: it
sets Django up, says `ready`, waits for `go` on its standard input, settles the tasks listed in
PICKLE and prints how many runs it charged, as JSON."""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tests.testcluster import CONNECTION_FILE, testcluster_read
from tests.workers import REPOSITORY, database_url, worker_environment

if TYPE_CHECKING:
    from hpc.ssh import SSHSettings
    from hpc.types import RunRecord

TESTCLUSTER = REPOSITORY / "scripts" / "testcluster"
# The state of the cluster the tests run on (TESTCLUSTER_INSTANCE, which the script reads too).
STATE_DIRECTORY = CONNECTION_FILE.parent
# The lock `scripts/testcluster` takes for every change to the daemons.
TESTCLUSTER_LOCK = STATE_DIRECTORY / "testcluster.lock"


# --- The test cluster's daemons ---------------------------------------------------------------


def testcluster(*arguments: str, lock_held: bool = False, timeout: float = 120) -> str:
    """Runs `scripts/testcluster` and returns what it logged; fails loudly when it fails."""
    environment = {**os.environ, "TESTCLUSTER_LOCK_HELD": "1" if lock_held else "0"}
    result = subprocess.run(
        [str(TESTCLUSTER), *arguments],
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/testcluster {' '.join(arguments)} exited {result.returncode}:\n"
            f"{result.stdout}{result.stderr}"
        )
    return result.stdout + result.stderr


@contextmanager
def daemon_stopped(name: str) -> Iterator[None]:
    """Stops one daemon of the test cluster for the block and brings the whole cluster up
    again afterwards, whatever happens in the block.

    The script's lock is held for the whole outage: other people's `scripts/testcluster up`
    (`make test` runs it) then waits for the end of the outage instead of restarting the daemon
    in the middle of the test."""
    with TESTCLUSTER_LOCK.open("a") as lock:
        deadline = time.monotonic() + 300
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{TESTCLUSTER_LOCK} stayed locked for 300 s") from None
                time.sleep(0.2)
        try:
            testcluster("stop-daemon", name, lock_held=True)
            yield
        finally:
            testcluster("up", lock_held=True)


@contextmanager
def controller_paused() -> Iterator[None]:
    """The test cluster's slurmctld stopped (SIGSTOP) for the block and resumed after it,
    whatever happens: an sbatch in flight waits for its answer meanwhile (for well under
    slurm.conf's MessageTimeout), so that what a batch of them has done cannot change while
    the block runs."""
    pid_file = next(
        line.split("=", 1)[1].strip()
        for line in Path(testcluster_read().slurm_conf).read_text().splitlines()
        if line.startswith("SlurmctldPidFile=")
    )
    pid = int(Path(pid_file).read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def drop_connection(client_port: int) -> None:
    """Kills the sshd processes serving the client connection that has `client_port` as its
    local port: the connection ends under whatever command it carries; the listener stays."""
    testcluster("drop-connection", str(client_port))


def local_queue(job_ids: Sequence[str]) -> list[str]:
    """The ids of `job_ids` still in the queue, asked of slurmctld on this host rather than over
    SSH (the test cluster is this machine): for the moments when sshd is down."""
    result = subprocess.run(
        ["squeue", "--noheader", f"--jobs={','.join(job_ids)}", "--format=%i"],
        env={**os.environ, "SLURM_CONF": testcluster_read().slurm_conf},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if result.returncode != 0 and "Invalid job id" not in result.stderr:
        raise RuntimeError(f"squeue failed: {result.stderr}")
    return result.stdout.split()


# --- What is on the cluster, seen over a connection of the test's own ------------------------


class ClusterShell:
    """Questions the tests ask the cluster about their own jobs, each over a short connection
    of its own (never the bridge's pooled one, whose failures the tests cause)."""

    def __init__(self, settings: SSHSettings) -> None:
        self.settings = settings

    def run(self, arguments: Sequence[str] | str, timeout: float = 30) -> str:
        from hpc.ssh import SSHConnection

        with SSHConnection(self.settings) as connection:
            return connection.run(arguments, timeout=timeout).stdout

    def job_ids_by_name(self, names: Sequence[str]) -> dict[str, set[str]]:
        """Every job (for an array, the array's id) carrying one of `names`, in the queue or in
        the last hour of accounting: a name submitted twice shows two ids."""
        if not names:
            return {}
        joined = ",".join(names)
        queued = self.run(
            ["squeue", "--noheader", f"--name={joined}", "--format=%j|%F", "--states=all"]
        )
        accounted = self.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                f"--name={joined}",
                "--starttime=now-1hours",
                "--format=JobName,JobID",
            ]
        )
        found: dict[str, set[str]] = defaultdict(set)
        for line in (queued + accounted).splitlines():
            if "|" in line:
                name, job_id = line.split("|", 1)
                found[name].add(job_id.split("_", 1)[0])
        return dict(found)

    def wait_until_queued(self, name: str, timeout: float = 30) -> None:
        """Returns as soon as a job named `name` is in the queue. The loop runs on the login
        node, so the answer comes a few milliseconds after the sbatch that made the job."""
        script = (
            f"end=$(( $(date +%s) + {int(timeout)} )); "
            f"while [ -z \"$(squeue --noheader --name='{name}' --format=%i)\" ]; do "
            '[ "$(date +%s)" -lt "$end" ] || exit 3; done'
        )
        self.run(script, timeout=timeout + 10)

    def runs(self, job_id: str) -> list[RunRecord]:
        """Accounting's runs of a job (every task of an array)."""
        from hpc.backends.slurm import SlurmBackend
        from hpc.ssh import SSHConnection

        with SSHConnection(self.settings) as connection:
            return SlurmBackend(connection, command_timeout=30).runs([job_id])

    def cancel_named(self, names: Sequence[str]) -> None:
        """Cancels the jobs carrying `names` (the test's own), whoever submitted them."""
        ids = sorted({job_id for ids in self.job_ids_by_name(names).values() for job_id in ids})
        if ids:
            from hpc.ssh import SSHConnection

            with SSHConnection(self.settings) as connection:
                connection.run(["scancel", *ids], check=False, timeout=30)


# --- Celery workers that the tests kill ---------------------------------------------------------


def process_environment(**changes: str) -> dict[str, str]:
    """The environment of a worker or helper process: this test run's database and Redis."""
    from django.conf import settings
    from django.db import connection

    return worker_environment(
        database=database_url(connection.settings_dict), redis=settings.REDIS_URL, **changes
    )


# --- A second process settling the same task --------------------------------------------------


@dataclass(frozen=True)
class SettlementOrder:
    """What a poll would settle for one task: its runs as accounting shows them, and the final
    one when the task has ended."""

    task_id: int
    runs: list[RunRecord]
    final: RunRecord | None


class Settler:
    """`python -m tests.scheduler_bridge.faults settle PICKLE` in a process of its own."""

    def __init__(self, orders_path: Path, environment: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.scheduler_bridge.faults", "settle", str(orders_path)],
            cwd=REPOSITORY,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self) -> None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.process.kill()
            raise RuntimeError(f"the settler did not start: {line}{self.process.communicate()}")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def charged(self, timeout: float = 60) -> list[int]:
        """How many runs the process charged for each task, in the order of the orders."""
        stdout, stderr = self.process.communicate(timeout=timeout)
        if self.process.returncode != 0:
            raise RuntimeError(f"the settler failed:\n{stderr}")
        return list(json.loads(stdout.strip().splitlines()[-1]))


def settle_together(
    orders: Sequence[SettlementOrder], directory: Path, copies: int = 2
) -> list[list[int]]:
    """Settles the same `orders` in `copies` processes released at the same moment, as a
    settlement delivered twice would; returns each process's charged counts."""
    orders_path = directory / "settlement-orders.pickle"
    orders_path.write_bytes(pickle.dumps(list(orders)))
    settlers = [Settler(orders_path, process_environment()) for _ in range(copies)]
    for settler in settlers:
        settler.wait_ready()
    for settler in settlers:
        settler.go()
    return [settler.charged() for settler in settlers]


def _settle_main(orders_path: str) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "computeshare.settings.test")
    django.setup()
    from scheduler_bridge import services
    from scheduler_bridge.models import JobTask

    # The file is the test's own, written by `settle_together` a moment ago.
    orders: list[SettlementOrder] = pickle.loads(Path(orders_path).read_bytes())  # noqa: S301
    job_ids = dict(
        JobTask.objects.filter(pk__in=[order.task_id for order in orders]).values_list(
            "pk", "job_id"
        )
    )  # a first query, also: connecting to the database is not part of the race
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")
    charged = []
    # As the poll does: each task settled, then its job brought in line with its tasks.
    for order in orders:
        settled = services.job_task_settle(
            task_id=order.task_id, runs=order.runs, final=order.final
        )
        charged.append(settled.runs_charged)
    for job_id in sorted(set(job_ids.values())):
        services.job_state_refresh(job_id=job_id)
    print(json.dumps(charged), flush=True)


def main(arguments: list[str]) -> None:
    if len(arguments) == 2 and arguments[0] == "settle":
        _settle_main(arguments[1])
        return
    raise SystemExit("usage: python -m tests.scheduler_bridge.faults settle PICKLE")


if __name__ == "__main__":
    main(sys.argv[1:])
