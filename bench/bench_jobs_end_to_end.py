"""Part of bench/jobs.py: jobs submitted end to end, as a team's client does, through the real
processes: `POST /api/v1/jobs/` to gunicorn (the API key of a member of the team), the Celery
worker that the accepted jobs' tasks reach through Redis, sbatch on the test cluster as the
team's tenant, until `squeue` shows every one of them.

The clock starts when the first request is sent and stops when squeue, read by the bench's own
connection every 0.2 s, lists the last of the jobs: what a user waits for, not what the server
measures of itself."""

from __future__ import annotations

import http.client
import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench_jobs_cluster import TINY_SCRIPT, BenchJobs, Way
from bench_jobs_following import Scene
from bench_jobs_support import AS_DEPLOYED, DATABASE, REDIS_URL
from bench_support import bench_database_url, cpu_by_program, cpu_spent, process_cpu_seconds

# gunicorn as deployed (docker/ runs gthread workers), sized for this 2-core machine.
GUNICORN_OPTIONS = [
    "--workers=2",
    "--worker-class=gthread",
    "--threads=4",
    "--keep-alive=10",
    "--log-level=warning",
]
# Client threads sending the requests, each on a kept-alive connection: a team's scripts or
# the cli submitting a sweep.
CLIENTS = 4


@dataclass
class PlatformCpu:
    """CPU seconds of the platform's own processes over the run: the server's, PostgreSQL's
    backends on the bench's database, and the worker's."""

    gunicorn: float
    postgres: float
    worker: float

    @property
    def total(self) -> float:
        return self.gunicorn + self.postgres + self.worker


@dataclass
class EndToEnd:
    way: Way
    ids: list[str]
    accepted_seconds: float  # when the last POST had its 201
    refused: list[str]
    cpu: str  # where the machine's CPU went meanwhile (`cpu_spent`)
    platform: PlatformCpu


def _process_tree(root: int) -> list[int]:
    """`root` and every process below it (a gunicorn master's workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def _database_backends() -> list[int]:
    """The PostgreSQL backends on the bench's database but the bench's own connection."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in cursor.fetchall()]


def _cpu_of(pids: list[int]) -> dict[int, float]:
    return {pid: process_cpu_seconds(pid) for pid in pids}


class PlatformCpuReading:
    """Reads the platform's processes' CPU at the start and the end of the run. A backend that
    appears meanwhile counts from zero; one that ends meanwhile is lost (the persistent
    connections of the server and the worker outlive the run)."""

    def __init__(self, server_pid: int, worker_pid: int) -> None:
        self.server_pid, self.worker_pid = server_pid, worker_pid
        self.before = self._read()

    def _read(self) -> dict[str, dict[int, float]]:
        return {
            "gunicorn": _cpu_of(_process_tree(self.server_pid)),
            "postgres": _cpu_of(_database_backends()),
            "worker": _cpu_of(_process_tree(self.worker_pid)),
        }

    def spent(self) -> PlatformCpu:
        after = self._read()
        return PlatformCpu(
            **{
                kind: sum(
                    seconds - self.before[kind].get(pid, 0.0)
                    for pid, seconds in after[kind].items()
                )
                for kind in after
            }
        )


def end_to_end(
    place: Scene, jobs: BenchJobs, count: int, worker_pid: int, *, clients: int = CLIENTS
) -> EndToEnd:
    """`count` POSTs of tiny jobs spread over `clients` threads against a fresh gunicorn on the
    bench's database and Redis (the worker, process `worker_pid`, must be running), timed until
    squeue shows them all. The jobs' names are the run's from the moment they are accepted."""
    from tests.factories import token_for
    from tests.workers import GunicornServer, worker_environment

    key = token_for(place.actor.user)
    log_path = Path(tempfile.mkdtemp(prefix="bench-jobs-gunicorn-")) / "gunicorn.log"
    server = GunicornServer(
        worker_environment(database=bench_database_url(DATABASE), redis=REDIS_URL, **AS_DEPLOYED),
        log_path,
        GUNICORN_OPTIONS,
    )
    try:
        server.wait_ready()
        # A few jobs first, outside the figure: each gunicorn worker loads the API lazily.
        _post_jobs(server.port, key, place, 2 * clients, [], [])
        warmed = set(_names(place))
        jobs.names.update(warmed)
        _wait_in_queue(jobs, place, list(warmed), timeout=120)
        jobs.cancel(jobs.add(_ids(place, warmed), place.tenant))

        created: list[str] = []
        refused: list[str] = []
        shares = [count // clients + (index < count % clients) for index in range(clients)]
        platform_reading = PlatformCpuReading(server.process.pid, worker_pid)
        cpu_before = cpu_by_program()
        begun = time.perf_counter()
        threads = [
            threading.Thread(
                target=_post_jobs, args=(server.port, key, place, share, created, refused)
            )
            for share in shares
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        accepted = time.perf_counter() - begun
        names = [name for name in _names(place) if name not in warmed]
        jobs.names.update(names)
        left_before_seen = _wait_in_queue(jobs, place, names, timeout=300)
        seconds = time.perf_counter() - begun
        cpu = cpu_spent(cpu_before, cpu_by_program())
        platform = platform_reading.spent()
    finally:
        server.stop()
    ids = jobs.add(_ids(place, set(names)), place.tenant)
    batches = _batches(place, set(names))
    way = Way(
        f"end to end: POST /jobs/ ({clients} clients) -> gunicorn -> worker -> squeue",
        len(ids), seconds, 0, 0,
        note=f"all accepted (201) after {accepted:.2f} s"
        + (f"; {left_before_seen} ended before squeue was read" if left_before_seen else "")
        + (f"; {len(refused)} refused: {refused[:1]}" if refused else "")
        + f"; the worker submitted them in {batches} batch(es)",
    )  # fmt: skip
    return EndToEnd(way, ids, accepted, refused, cpu, platform)


def _post_jobs(
    port: int, key: str, place: Scene, count: int, created: list[str], refused: list[str]
) -> None:
    body = json.dumps(
        {
            "allocation": str(place.allocation.uuid),
            "name": "bench",
            "script": TINY_SCRIPT,
            "time_limit_minutes": 1,
        }
    ).encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for _ in range(count):
            connection.request(
                "POST",
                "/api/v1/jobs/",
                body,
                {"Authorization": f"Token {key}", "Content-Type": "application/json"},
            )
            response = connection.getresponse()
            answer = response.read()
            if response.status == 201:
                created.append(json.loads(answer)["id"])
            else:
                refused.append(f"{response.status} {answer[:200]!r}")
    finally:
        connection.close()


def _names(place: Scene) -> list[str]:
    from scheduler_bridge.models import Job

    return [job.scheduler_name for job in Job.objects.filter(cluster=place.cluster).only("uuid")]


def _ids(place: Scene, names: set[str]) -> list[str]:
    from scheduler_bridge.models import Job

    return [
        job.scheduler_job_id
        for job in Job.objects.filter(cluster=place.cluster).only("uuid", "scheduler_job_id")
        if job.scheduler_name in names and job.scheduler_job_id
    ]


def _batches(place: Scene, names: set[str]) -> int:
    """How many submission batches took the jobs: each batch marks its jobs submitted at one
    moment (`jobs_mark_submitted`)."""
    from scheduler_bridge.models import Job

    return len(
        {
            job.submitted_at
            for job in Job.objects.filter(cluster=place.cluster).only("uuid", "submitted_at")
            if job.scheduler_name in names
        }
    )


def _wait_in_queue(jobs: BenchJobs, place: Scene, names: list[str], *, timeout: float) -> int:
    """Until every job has reached the queue: squeue (read every 0.2 s) listed it as the team's
    tenant's, or, for one that has left it already (a job that ran and ended between two reads,
    should the blocker be gone), the worker has recorded the id sbatch gave it. Returns how
    many were seen only so."""
    from scheduler_bridge.models import Job

    wanted = set(names)
    seen: set[str] = set()
    deadline = time.perf_counter() + timeout
    while True:
        answer = jobs.connection.run(
            ["squeue", "--noheader", "--format=%j", f"--user={place.tenant.user}"]
        )
        seen |= wanted & set(answer.stdout.split())
        if seen == wanted:
            return 0
        submitted = {
            job.scheduler_name
            for job in Job.objects.filter(cluster=place.cluster)
            .exclude(scheduler_job_id="")
            .only("uuid")
        }
        if wanted <= seen | submitted:
            return len(wanted - seen)
        if time.perf_counter() > deadline:
            states = sorted(
                set(Job.objects.filter(cluster=place.cluster).values_list("state", "state_reason"))
            )
            raise RuntimeError(
                f"{len(wanted - seen - submitted)} of {len(wanted)} jobs not in squeue after "
                f"{timeout} s; their rows' states: {states[:3]}"
            )
        time.sleep(0.2)
