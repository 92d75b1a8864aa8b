"""The site under load (issues 15 and 33): simulated people browse the offers (pages and
API), bid, buy, and submit and follow tiny jobs on the real Slurm test cluster, against
gunicorn on PostgreSQL and Redis with a Celery worker per queue and beat, all on loopback;
200 of them, and a step-up search for the most at which the aim still holds.

    make loadtest     (or: .venv/bin/python bench/loadtest/run.py [--users 200] [--seconds 60]
                       [--step 50] [--most 400] [--only] [--keep])

It makes its own scratch database (LOADTEST_DATABASE, default BENCH_DATABASE + "_load") and
uses REDIS_URL's Redis database (LOADTEST_REDIS_URL overrides it), makes the market
(scene.py), starts gunicorn as deployed (3 workers x 4 threads, persistent connections, the
caches on), a Celery worker per queue (cluster 2 processes, money 1, io 1: 4 in all, as
one worker of 4 before the queues) and beat, then runs Locust headless once per step of the
search (50, 100, 150, ... people, each step `--seconds` once all are there, against the same
site), on past `--users` until a step does not hold. It prints each step's p95, errors and the
machine's load, and for `--users` the p50/p95/p99 and errors of each kind of request and the
CPU of each kind of process; then the headline (records the figure `loadtest.p95` for
bench/summary.py), stops everything, cancels the run's jobs still on the cluster, removes
their directories and drops the database.

The aim (issue 33): at 200 people p95 < 300 ms and no errors on this 2-core machine, and the
most people at which that still holds, printed."""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
BENCH = REPOSITORY / "bench"
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(REPOSITORY), str(BENCH), str(HERE)]

import bench_support  # noqa: E402

DATABASE = os.environ.get("LOADTEST_DATABASE", f"{bench_support.DATABASE}_load")
REDIS_URL = os.environ.get(
    "LOADTEST_REDIS_URL", os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/12"
)
AIM_P95_MS = 300
CLOCK_TICKS = bench_support.CLOCK_TICKS


# --- CPU of each kind of process ------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _by_name(names: tuple[str, ...]) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip().startswith(names):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@dataclass
class CpuWatch:
    """CPU seconds of each kind of process between `start()` and `stop()`, and the machine's."""

    kinds: dict[str, list[int]] = field(default_factory=dict)
    first: dict[int, float] = field(default_factory=dict)
    latest: dict[int, float] = field(default_factory=dict)
    used: dict[str, float] = field(default_factory=dict)
    machine_before: tuple[float, float] = (0.0, 0.0)
    machine_busy: float = 0.0
    seconds: float = 0.0
    began: float = 0.0
    loads: list[float] = field(default_factory=list)

    @staticmethod
    def _machine() -> tuple[float, float]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        idle = values[3] + values[4]
        return (sum(values) - idle) / CLOCK_TICKS, sum(values) / CLOCK_TICKS

    def _read(self) -> None:
        # The last value seen of each process: one that ends before `stop()` keeps its own.
        for pids in self.kinds.values():
            for pid in pids:
                seconds = bench_support.process_cpu_seconds(pid)
                if seconds:
                    self.latest[pid] = seconds

    def start(self, kinds: dict[str, list[int]]) -> None:
        self.kinds = kinds
        self._read()
        self.first = dict(self.latest)
        self.machine_before = self._machine()
        self.began = time.monotonic()

    def sample(self) -> None:
        self.loads.append(os.getloadavg()[0])
        self._read()

    def stop(self) -> None:
        self._read()
        self.used = {
            kind: sum(self.latest.get(pid, 0.0) - self.first.get(pid, 0.0) for pid in pids)
            for kind, pids in self.kinds.items()
        }
        busy, total = self._machine()
        self.seconds = time.monotonic() - self.began
        self.machine_busy = (busy - self.machine_before[0]) / (total - self.machine_before[1])


def _tree(pid: int) -> list[int]:
    return [pid, *_children(pid)]


# --- The processes --------------------------------------------------------------------------------


def _environment(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "loadtest_settings",
        "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(BENCH), str(HERE)]),
        "DATABASE_URL": database_url,
        "REDIS_URL": REDIS_URL,
        "CELERY_BROKER_URL": REDIS_URL,
    }


def _celery(
    arguments: list[str], environment: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "celery"), "-A", "computeshare", *arguments],
            cwd=REPOSITORY,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
        )


def _wait_for_worker(hostname: str, process: subprocess.Popen[bytes], log: Path) -> None:
    from computeshare.celery import app

    deadline = time.monotonic() + 120
    while not app.control.ping(destination=[hostname], timeout=1):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Celery worker did not start:\n{log.read_text()[-3000:]}")


# --- The table ------------------------------------------------------------------------------------


def _table(prefix: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    with (prefix.parent / f"{prefix.name}_stats.csv").open() as stats:
        rows = list(csv.DictReader(stats))
    total = next(row for row in rows if row["Name"] == "Aggregated")
    return [row for row in rows if row["Name"] != "Aggregated"], total


def _print_table(rows: list[dict[str, str]], total: dict[str, str]) -> None:
    print(
        f"  {'request kind':<34} {'count':>7} {'errors':>6} {'req/s':>6} {'p50 ms':>7} "
        f"{'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"
    )
    for row in [*sorted(rows, key=lambda row: row["Name"]), total]:
        name = row["Name"] if row is not total else "all"
        count = int(row["Request Count"])
        print(
            f"  {name[:34]:<34} {count:>7,} {row['Failure Count']:>6} "
            f"{float(row['Requests/s']):>6.1f} {row['50%']:>7} {row['95%']:>7} {row['99%']:>7} "
            f"{float(row['Max Response Time']):>7.0f}"
        )


def _print_failures(prefix: Path) -> None:
    path = prefix.parent / f"{prefix.name}_failures.csv"
    if not path.exists():
        return
    with path.open() as failures:
        for row in list(csv.DictReader(failures))[:10]:
            print(f"    {row['Occurrences']} x {row['Method']} {row['Name']}: {row['Error'][:160]}")


def _print_load(watch: CpuWatch) -> None:
    loads = watch.loads or [os.getloadavg()[0]]
    print(
        f"  Machine: {os.cpu_count()} CPUs, {watch.machine_busy:.0%} busy over the run; load "
        f"average (1 min) mean {sum(loads) / len(loads):.1f}, max {max(loads):.1f}"
    )
    print("  CPU of each kind of process over the run (100% = one CPU):")
    for kind, used in sorted(watch.used.items(), key=lambda item: -item[1]):
        print(f"    {kind:<52} {used / watch.seconds:>6.0%}  ({used:,.1f} s)")


# --- The run --------------------------------------------------------------------------------------


def _jobs_summary() -> dict[str, int]:
    from django.db.models import Count

    from scheduler_bridge.models import Job

    return dict(Job.objects.values_list("state").annotate(n=Count("id")).order_by())


def _clean_cluster(scene: dict[str, object]) -> None:
    """Cancels the run's jobs still on the cluster (by their names: the platform names each job
    after its UUID) and removes their directories, as each tenant."""
    from bench_jobs_cluster import BenchJobs, fixed_tenants, ssh_settings

    from hpc.errors import ClusterUnreachable
    from hpc.ssh import SSHConnection
    from marketplace.models import TenantLease
    from scheduler_bridge.models import Job

    tenants = [tenant for tenant in fixed_tenants() if tenant.user in scene["tenants"]]  # type: ignore[operator]
    connection = SSHConnection(ssh_settings())
    for attempt in range(12):  # another person's `testcluster up` may be restarting its sshd
        try:
            connection.open()
            break
        except ClusterUnreachable:
            if attempt == 11:
                raise
            time.sleep(5)
    try:
        jobs = BenchJobs(connection, f"loadtest-{uuid.uuid4().hex[:8]}", tenants)
        leases = {
            lease.organization_id: lease.account.username
            for lease in TenantLease.objects.select_related("account")
        }
        directories: dict[str, list[str]] = defaultdict(list)
        for job in Job.objects.all():
            jobs.names.add(job.scheduler_name)
            if job.organization_id in leases:
                directories[leases[job.organization_id]].append(job.directory)
        jobs.cancel_everything()
        jobs.remove_files(dict(directories))
    finally:
        connection.close()


@dataclass
class Step:
    """One Locust run at a number of simulated people: its table and whether it held."""

    users: int
    rows: list[dict[str, str]]
    total: dict[str, str]
    prefix: Path
    watch: CpuWatch

    @property
    def p95(self) -> float:
        return float(self.total["95%"])

    @property
    def errors(self) -> int:
        return int(self.total["Failure Count"])

    @property
    def holds(self) -> bool:
        return self.p95 < AIM_P95_MS and self.errors == 0


def _locust_step(
    users: int,
    seconds: int,
    spawn_rate: float,
    base_url: str,
    scratch: Path,
    scene_path: Path,
    kinds: dict[str, list[int]],
) -> Step:
    """Locust headless with `users` people for `seconds` once they are all there (the table
    is of that steady state: --reset-stats once every person has started)."""
    prefix = scratch / f"locust-{users}"
    ramp = users / spawn_rate
    locust = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "locust"),
            "-f",
            str(HERE / "locustfile.py"),
            "--headless",
            f"--users={users}",
            f"--spawn-rate={spawn_rate}",
            f"--run-time={int(seconds + ramp + 1)}s",
            f"--csv={prefix}",
            f"--host={base_url}",
            "--only-summary",
            "--reset-stats",
            "--stop-timeout=10",
            "--loglevel=WARNING",
        ],
        cwd=HERE,
        env={**os.environ, "LOADTEST_SCENE": str(scene_path)},
        stdout=(scratch / f"locust-{users}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        # Measured from when every simulated person is there, as the table (--reset-stats).
        time.sleep(1 + ramp)
        watch = CpuWatch()
        watch.start({**kinds, "Locust (the simulated people)": [locust.pid]})
        while locust.poll() is None:
            watch.sample()
            time.sleep(5)
        watch.stop()
    finally:
        if locust.poll() is None:
            process_stop(locust)
    if locust.returncode not in (0, 1):  # 1: some requests failed, shown in the table
        raise RuntimeError(
            f"locust ended {locust.returncode}:\n"
            f"{(scratch / f'locust-{users}.log').read_text()[-3000:]}"
        )
    rows, total = _table(prefix)
    return Step(users, rows, total, prefix, watch)


def _print_step(step: Step, *, detailed: bool) -> None:
    verdict = "holds" if step.holds else "does NOT hold"
    print(
        f"  {step.users:4d} people: p95 {step.p95:5.0f} ms, p99 {float(step.total['99%']):5.0f} "
        f"ms, {float(step.total['Requests/s']):6.1f} req/s, {step.errors} error(s), machine "
        f"{step.watch.machine_busy:.0%} busy, load average mean "
        f"{sum(step.watch.loads or [0]) / max(1, len(step.watch.loads)):.1f}: {verdict}"
    )
    if detailed:
        print()
        _print_table(step.rows, step.total)
        _print_failures(step.prefix)
        _print_load(step.watch)
        print()


def process_stop(process: subprocess.Popen[bytes]) -> None:
    from tests.workers import process_stop as stop

    stop(process)


def _steps(users: int, step: int, most: int) -> list[int]:
    """The step-up search's numbers of people: `step`, 2 x `step`, ... up to `most`, with
    `users` (the headline) among them."""
    return sorted({*range(step, most + 1, step), users})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=int, default=60, help="how long each step runs once all are there"
    )
    parser.add_argument("--users", type=int, default=200, help="the headline number of people")
    parser.add_argument("--step", type=int, default=50, help="people added at each step")
    parser.add_argument(
        "--most", type=int, default=400, help="the step-up search stops here at the latest"
    )
    parser.add_argument(
        "--only", action="store_true", help="run --users alone, without the step-up search"
    )
    parser.add_argument("--spawn-rate", type=float, default=20, help="new people per second")
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (as deployed)")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument(
        "--concurrency",
        default="cluster=2,money=1,io=1",
        help="processes of each queue's Celery worker (docker-compose.yml runs one pool per queue)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    arguments = parser.parse_args()
    begun = time.perf_counter()
    warnings.filterwarnings("ignore", message="No directory at")

    pools = {
        queue: int(count)
        for queue, _, count in (part.partition("=") for part in arguments.concurrency.split(","))
    }
    steps = (
        [arguments.users]
        if arguments.only
        else _steps(arguments.users, arguments.step, arguments.most)
    )
    # The scene's people for the largest step; Locust's people take them round robin.
    most = max(steps)
    runners = max(2, most // 8)
    traders = (most - runners) * 2 // 5
    browsers = most - runners - traders
    bench_support.prepare_django(DATABASE, redis_url=REDIS_URL)
    from django.core.cache import cache
    from scene import scene_make

    from billing.selectors import ledger_verify
    from computeshare.celery import app
    from tests.workers import GunicornServer

    cache.clear()
    app.control.purge()
    scratch = Path(tempfile.mkdtemp(prefix="loadtest-"))
    scene = scene_make(browsers=browsers, traders=traders, runners=runners).as_json()
    scene_path = scratch / "scene.json"
    scene_path.write_text(json.dumps(scene))
    environment = _environment(bench_support.bench_database_url(DATABASE))
    processes: list[subprocess.Popen[bytes]] = []
    server = None
    try:
        server = GunicornServer(
            environment,
            scratch / "gunicorn.log",
            [
                f"--workers={arguments.workers}",
                f"--threads={arguments.threads}",
                # Longer than a person's pause between requests, as the proxy in front of a
                # deployment keeps its connections: gunicorn's default of 2 s closes idle
                # keep-alive connections just as the next request goes out (connection reset).
                "--keep-alive=75",
                "--log-level=warning",
            ],
        )
        workers: dict[str, tuple[str, subprocess.Popen[bytes]]] = {}
        for queue, concurrency in pools.items():
            hostname = f"loadtest-{queue}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
            workers[queue] = (
                hostname,
                _celery(
                    [
                        "worker",
                        "--loglevel=WARNING",
                        f"--queues={queue}",
                        f"--concurrency={concurrency}",
                        f"--hostname={hostname}",
                        "--without-gossip",
                        "--without-mingle",
                    ],
                    environment,
                    scratch / f"worker-{queue}.log",
                ),
            )
            processes.append(workers[queue][1])
        beat = _celery(
            ["beat", "--loglevel=WARNING", "--schedule", str(scratch / "beat-schedule")],
            environment,
            scratch / "beat.log",
        )
        processes.append(beat)
        server.wait_ready()
        for queue, (hostname, worker) in workers.items():
            _wait_for_worker(hostname, worker, scratch / f"worker-{queue}.log")
        print(
            f"The site under load: simulated people (5 in 9 browsing pages and the API, 3 in 9 "
            f"bidding and buying in 10 teams, 1 in 9 running tiny jobs on the Slurm test "
            f"cluster), {arguments.seconds} s at each step once all are there; "
            f"{len(scene['offers']):,} open offers; gunicorn {arguments.workers} workers x "
            f"{arguments.threads} threads (as deployed), a Celery worker per queue "
            f"({arguments.concurrency} processes) and beat, PostgreSQL and Redis, all on "
            f"127.0.0.1. Aim: at {arguments.users} people, p95 < {AIM_P95_MS} ms and no errors; "
            f"step-up search: {', '.join(map(str, steps))} people, on past {arguments.users} "
            "until a step does not hold"
        )
        kinds = {
            f"gunicorn ({arguments.workers} workers)": _tree(server.process.pid),
            f"Celery workers ({arguments.concurrency})": [
                pid for _, worker in workers.values() for pid in _tree(worker.pid)
            ],
            "Celery beat": [beat.pid],
            "PostgreSQL (every database on it)": _by_name(("postgres",)),
            "Redis": _by_name(("redis-server",)),
            "the test cluster (sshd, Slurm, jobs)": _by_name(("sshd", "slurm", "sbatch")),
        }
        done: list[Step] = []
        for users in steps:
            step = _locust_step(
                users,
                arguments.seconds,
                arguments.spawn_rate,
                server.base_url,
                scratch,
                scene_path,
                kinds,
            )
            done.append(step)
            _print_step(step, detailed=users == arguments.users)
            if users >= arguments.users and not step.holds:
                break
        _report(done, arguments.users)
        print(f"  Jobs by state at the end: {_jobs_summary()}")
        problems = ledger_verify()
        print(f"  Ledger verified: {'it sums to zero' if not problems else problems[:5]}")
    finally:
        for process in reversed(processes):
            process_stop(process)
        if server is not None:
            server.stop()
        try:
            _clean_cluster(scene)
        finally:
            if not arguments.keep:
                bench_support.drop_database(DATABASE)
    print(f"(the whole run took {time.perf_counter() - begun:,.0f} s; logs in {scratch})")


def _report(done: list[Step], users: int) -> None:
    """The headline step against the aim, and the most people at which the aim held: the
    largest step that held with every step below it holding too (a step that held above one
    that did not is luck, not capacity)."""
    headline = next(step for step in done if step.users == users)
    highest = 0
    for step in done:
        if not step.holds:
            break
        highest = step.users
    searched = "" if len(done) > 1 else " (no step-up search in this run)"
    print(
        f"  At {users} people: p95 {headline.p95:.0f} ms (aim < {AIM_P95_MS}: "
        f"{'met' if headline.p95 < AIM_P95_MS else 'NOT met'}), {headline.errors} error(s) (aim "
        f"0: {'met' if headline.errors == 0 else 'NOT met'}); the aim holds up to "
        f"{highest or 'none'} of the steps run{searched}"
    )
    bench_support.record_figure(
        "loadtest.p95",
        f"site under load (make loadtest), {users} people: p95, errors; most people within it",
        f"p95 {headline.p95:.0f} ms, {headline.errors} errors; holds up to {highest} people"
        + searched,
        f"p95 < {AIM_P95_MS} ms and 0 errors at {users} people",
        headline.holds,
    )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    main()
