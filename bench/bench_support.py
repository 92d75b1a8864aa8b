"""What the benches share: a scratch database of their own (created, migrated and emptied;
dropped at the end) on the test settings, the machine's load, and the figures of the issue's
table, which every bench records (`record_figure`) and `bench/summary.py` prints at the end of
`make bench`."""

import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# BENCH_DATABASE names another scratch database, so that two people's runs do not share one.
DATABASE = os.environ.get("BENCH_DATABASE", "computeshare_bench")
FIGURES = Path(
    os.environ.get(
        "BENCH_FIGURES", Path(__file__).resolve().parent.parent / "var" / "bench" / "figures.jsonl"
    )
)


@dataclass(frozen=True)
class Figure:
    """One row of the table: `key` is stable (it orders the summary and names what is missing),
    `value` and `aim` are as printed ("0.83 of sbatch", ">= 0.8"), `met` says whether the value
    reaches the aim."""

    key: str
    label: str
    value: str
    aim: str
    met: bool


def record_figure(key: str, label: str, value: str, aim: str, met: bool) -> None:
    """Appends one figure to the run's file and prints it where it was measured."""
    figure = Figure(key, label, value, aim, met)
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as figures:
        figures.write(json.dumps(asdict(figure)) + "\n")
    print(f"  -> {label}: {value} (aim {aim}): {'met' if met else 'NOT met'}")


def bench_database_url(database: str = DATABASE) -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/computeshare")
    return urlunsplit(urlsplit(base)._replace(path=f"/{database}"))


def _admin_connection() -> Any:
    import psycopg2

    parts = urlsplit(bench_database_url())
    admin = psycopg2.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username,
        password=parts.password,
        dbname="postgres",
    )
    admin.autocommit = True
    return admin


def prepare_django(database: str = DATABASE, *, redis_url: str | None = None) -> None:
    """Creates (when missing), migrates and empties `database`, on the test settings pointed at
    it (and at `redis_url` for the cache and the broker, when given)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "computeshare.settings.test"
    os.environ["DATABASE_URL"] = bench_database_url(database)
    if redis_url:
        os.environ["REDIS_URL"] = os.environ["CELERY_BROKER_URL"] = redis_url
    admin = _admin_connection()
    with admin.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
        if cursor.fetchone() is None:
            cursor.execute(f"CREATE DATABASE {database}")
    admin.close()

    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the in-process test client counts the API's queries
    call_command("migrate", verbosity=0)
    # TRUNCATE, which the entries' append-only trigger allows.
    call_command("flush", interactive=False, verbosity=0)


def drop_database(database: str = DATABASE) -> None:
    from django.db import connections

    connections.close_all()
    admin = _admin_connection()
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {database}")
    admin.close()


def analyze(*tables: str) -> None:
    """Table statistics as autovacuum would have them after a day of trading, so that the
    planner does not plan a 100,000-row table as an empty one."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute("ANALYZE " + connection.ops.quote_name(table))


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def _connect(database: str = DATABASE) -> Any:
    import psycopg2

    parts = urlsplit(bench_database_url(database))
    return psycopg2.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username,
        password=parts.password,
        dbname=database,
    )


def _ceiling_worker(barrier: Any, table: str, commits: int) -> None:
    """One process of the trivially parallel workload: INSERT + COMMIT into its own table."""
    connection = _connect()
    try:
        with connection.cursor() as cursor:
            barrier.wait()
            for index in range(commits):
                cursor.execute(f"INSERT INTO {table} (value) VALUES (%s)", [index])  # noqa: S608
                connection.commit()
    finally:
        connection.close()


def _ceiling_run(processes: int, commits: int) -> float:
    import multiprocessing

    tables = [f"bench_ceiling_{index}" for index in range(processes)]
    admin = _connect()
    admin.autocommit = True
    with admin.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
            cursor.execute(
                f"CREATE TABLE {table} (id bigserial PRIMARY KEY, value integer NOT NULL, "
                "at timestamptz NOT NULL DEFAULT now())"
            )
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes + 1)
    workers = [
        context.Process(target=_ceiling_worker, args=(barrier, table, commits)) for table in tables
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    with admin.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DROP TABLE IF EXISTS {table}")
    admin.close()
    if any(worker.exitcode for worker in workers):
        raise RuntimeError("a ceiling process failed")
    return elapsed


def parallel_ceiling(processes: int, commits: int = 600) -> float:
    """What `processes` processes can do over one on this machine now, for a workload with
    nothing shared: each INSERTs and COMMITs in a loop into a table of its own (the same
    commits in all, split evenly). On 2 CPUs a figure of N processes / 1 is read against
    this: it is the most the machine gives (CPUs, WAL flushes), whatever the code does."""
    from django.db import connections

    connections.close_all()  # forked children must not share the parent's connection
    one = _ceiling_run(1, commits)
    many = _ceiling_run(processes, commits // processes)
    return one / many * (commits // processes * processes) / commits


def _spin(barrier: Any, rounds: int) -> None:
    barrier.wait()
    total = 0
    for index in range(rounds):
        total += index * index % 7


def _spin_run(processes: int, rounds: int) -> float:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes + 1)
    workers = [context.Process(target=_spin, args=(barrier, rounds)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    barrier.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return time.perf_counter() - started


def cpu_ceiling(processes: int, rounds: int = 8_000_000) -> float:
    """What `processes` processes can do over one on this machine now for work that is only
    Python's CPU (the same loop split evenly): about the CPUs free, whatever the code does."""
    one = _spin_run(1, rounds)
    many = _spin_run(processes, rounds // processes)
    return one / many


# The share of the CPU ceiling a figure of N processes / 1 must reach (issue 33).
CEILING_AIM = 0.9

# A unit of work in a bench process: does a few operations, answers how many.
Step = Callable[[], int]


def _rate_worker(
    prepare: Callable[[int], Step], index: int, barrier: Any, seconds: float, results: Any
) -> None:
    from django.db import connection

    # A session of its own: with the kernel's autogroup (sched_autogroup_enabled, on here) the
    # scheduler shares the CPUs between sessions first, so N processes of one session get no
    # more CPU than 1 does when other sessions keep the CPUs busy, while their database
    # backends (the server's session) do. Each process its own session, as each of the
    # loop's: both sides of the figure compete as separate programs.
    os.setsid()
    try:
        step = prepare(index)
        barrier.wait()
        started = time.perf_counter()
        done = 0
        while (elapsed := time.perf_counter() - started) < seconds:
            done += step()
        results.put((index, done, elapsed))
    except BaseException as error:  # reported by the parent: the bench must not hide it
        results.put((index, -1, repr(error)))
        raise
    finally:
        connection.close()


def processes_rate(processes: int, seconds: float, prepare: Callable[[int], Step]) -> float:
    """Operations a second of `processes` forked processes together. Each calls
    `prepare(index)` before the common start line (its own database connection, its rows, a
    warm-up: a new backend's first statements load its catalog caches, which a server process
    has long done, and 8 short-lived processes would pay it 8 times against the 1's once),
    then calls the step it got until `seconds` have passed; the figure is the sum of each
    process's operations over its own time. A fixed time, not a fixed count of operations:
    with a count, the last process to finish sets the time, and on a loaded machine that tail
    is whichever process the scheduler left behind."""
    import multiprocessing

    from django.db import connections

    connections.close_all()  # a forked child must open its own connection, never share ours
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes + 1)
    results = context.Queue()
    workers = [
        context.Process(target=_rate_worker, args=(prepare, index, barrier, seconds, results))
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    answers = [results.get(timeout=seconds + 600) for _ in workers]
    for worker in workers:
        worker.join()
    if failed := [answer for answer in answers if answer[1] < 0]:
        raise RuntimeError(f"a bench process failed: {failed[0][2]}")
    return sum(done / elapsed for _, done, elapsed in answers)


def _loop_prepare(index: int) -> Step:
    def step() -> int:
        total = 0
        for value in range(20_000):
            total += value * value % 7
        return 20_000

    return step


@dataclass(frozen=True)
class Scaling:
    """N processes / 1, measured in rounds with the CPU ceiling right beside each trial: the
    one process's trial, then a Python loop in one process for as long; the N processes'
    trial, then the same loop in N processes. On a shared machine the CPU free changes from
    one second to the next, so a ceiling measured a minute away from the trials it is read
    against says little about them (0.70 of the ceiling in a loaded run, 0.96 on a quiet one,
    for the same code, when the ceiling was measured once after the trials).

    `rounds` holds each round's (ratio, ceiling); the figures are medians over the rounds, and
    `share`, what the figure is judged by, is the median of each round's ratio over its own
    ceiling."""

    processes: int
    rounds: tuple[tuple[float, float], ...]
    one_rate: float  # the one process's operations a second, median

    @property
    def ratio(self) -> float:
        return statistics.median(ratio for ratio, _ in self.rounds)

    @property
    def ceiling(self) -> float:
        return statistics.median(ceiling for _, ceiling in self.rounds)

    @property
    def share(self) -> float:
        return statistics.median(ratio / ceiling for ratio, ceiling in self.rounds)

    @property
    def is_met(self) -> bool:
        return self.share >= CEILING_AIM

    def value(self) -> str:
        """As the table prints it: "1.75 of a CPU ceiling of 1.90 = 0.92"."""
        return f"{self.ratio:.2f} of a CPU ceiling of {self.ceiling:.2f} = {self.share:.2f}"

    def spread(self) -> str:
        shares = sorted(ratio / ceiling for ratio, ceiling in self.rounds)
        return f"{len(self.rounds)} rounds, each ratio / its own ceiling: " + ", ".join(
            f"{share:.2f}" for share in shares
        )


def scaling_measure(
    prepare: Callable[[int, int], Step], processes: int, rounds: int, seconds: float
) -> Scaling:
    """`rounds` rounds of the work in 1 process and in `processes` (`prepare(count, index)`
    gives process `index` of `count` its step, see `processes_rate`), each trial `seconds`
    long and followed at once by the CPU ceiling's matching half (the Python loop in as many
    processes, as long). Odd rounds run the N processes first, so that a load that rises or
    falls through a round favours neither side."""
    measured = []
    one_rates = []
    for index in range(rounds):
        rates: dict[int, tuple[float, float]] = {}
        for count in (1, processes)[:: 1 if index % 2 == 0 else -1]:
            work = processes_rate(count, seconds, lambda i, count=count: prepare(count, i))
            rates[count] = (work, processes_rate(count, seconds, _loop_prepare))
        one_rates.append(rates[1][0])
        measured.append((rates[processes][0] / rates[1][0], rates[processes][1] / rates[1][1]))
    return Scaling(processes, tuple(measured), statistics.median(one_rates))


class WaitEvents:
    """Samples what the bench database's active backends wait on (pg_stat_activity), every
    `interval` seconds from a thread, while the `with` block runs: `top()` then names the
    most frequent (`CPU` when a backend waits on nothing, `Client/ClientRead` when it waits
    for its process's next statement: the time is in Python)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.samples: dict[str, int] = {}
        self.total = 0

    def __enter__(self) -> "WaitEvents":
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        connection = _connect()
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                while not self._stop.is_set():
                    cursor.execute(
                        "SELECT wait_event_type, wait_event, state FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND backend_type = 'client backend' "
                        "AND state IN ('active', 'idle in transaction')"
                    )
                    for kind, event, state in cursor.fetchall():
                        if state == "idle in transaction":
                            name = "idle in transaction (Python)"
                        else:
                            name = f"{kind}/{event}" if kind else "CPU (running)"
                        self.samples[name] = self.samples.get(name, 0) + 1
                        self.total += 1
                    time.sleep(self.interval)
        finally:
            connection.close()

    def top(self, count: int = 5) -> str:
        ranked = sorted(self.samples.items(), key=lambda item: -item[1])[:count]
        return ", ".join(f"{name} {seen / max(1, self.total):.0%}" for name, seen in ranked)


# --- Servers and workers the benches start ------------------------------------------------------


def bench_settings_environment(conn_max_age: int) -> dict[str, str]:
    """What a bench's gunicorn or Celery worker runs with: bench/bench_settings.py (the test
    settings with the caches between requests as deployed) and CONN_MAX_AGE, 0 for a database
    connection per request or task as the test settings have it, 60 as production has it."""
    bench = Path(__file__).resolve().parent
    return {
        "DJANGO_SETTINGS_MODULE": "bench_settings",
        "BENCH_CONN_MAX_AGE": str(conn_max_age),
        "PYTHONPATH": os.pathsep.join([str(bench.parent), str(bench)]),
    }


# --- Where the machine's CPU went ---------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _process_stat(pid: int | str) -> tuple[str, float] | None:
    """A process's program name and its CPU seconds so far, user and system, with those of its
    children that have ended (proc(5): utime, stime, cutime, cstime); None once it is gone."""
    try:
        text = Path("/proc", str(pid), "stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    return name, sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def process_cpu_seconds(pid: int) -> float:
    """`_process_stat`'s CPU seconds of one process; 0 once it is gone."""
    stat = _process_stat(pid)
    return 0.0 if stat is None else stat[1]


def cpu_by_program() -> dict[str, float]:
    """CPU seconds so far of every process on the machine, summed by program name, each with its
    reaped children's (so a login node's sudo, shell and sbatch processes count under the sshd
    session that started them, and a Celery pool's forks under celery)."""
    totals: dict[str, float] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (stat := _process_stat(entry.name)) is not None:
            # Kernel threads by kind ("kworker/u8:1-events" is a kworker).
            name = stat[0].split("/")[0]
            totals[name] = totals.get(name, 0.0) + stat[1]
    return totals


def cpu_spent(before: dict[str, float], after: dict[str, float], *, top: int = 7) -> str:
    """The programs that used the most CPU between two `cpu_by_program` readings, as text
    ("gunicorn 2.1 s, postgres 1.4 s, ..."), and the sum of all of them."""
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    busiest = sorted(
        ((seconds, name) for name, seconds in spent.items() if seconds > 0.005), reverse=True
    )
    total = sum(seconds for seconds, _ in busiest)
    shown = ", ".join(f"{name} {seconds:.2f} s" for seconds, name in busiest[:top])
    return f"{total:.2f} CPU-seconds in all: {shown}"
