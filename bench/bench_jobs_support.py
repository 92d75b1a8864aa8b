"""What bench/jobs.py's parts share: its own scratch database and Redis database (other people
run tests and benches on this machine at the same time), and a real Celery worker on them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import bench_support
from bench_support import bench_database_url, bench_settings_environment, load_average

from tests.workers import WorkerProcess, worker_environment
from tests.workers import worker_start as start

__all__ = [
    "AS_DEPLOYED",
    "WorkerProcess",
    "drop_database",
    "load_average",
    "prepare_django",
    "worker_start",
]

# Its own scratch database beside the other benches' (BENCH_DATABASE names theirs), so that two
# people's runs on this machine never share one.
DATABASE = f"{bench_support.DATABASE}_jobs"
# A Redis database of its own (the tests default to 15): the worker's queue is the bench's only.
REDIS_URL = os.environ.get("BENCH_JOBS_REDIS_URL", "redis://127.0.0.1:6379/11")
# The server's and the worker's settings as a deployment has them: persistent database
# connections and the token cache. The test settings' connection per request or task cost
# PostgreSQL more CPU than the requests' own queries.
AS_DEPLOYED = bench_settings_environment(conn_max_age=60)


def prepare_django() -> None:
    """The bench's database and Redis database, migrated and empty."""
    bench_support.prepare_django(DATABASE, redis_url=REDIS_URL)


def drop_database() -> None:
    bench_support.drop_database(DATABASE)


def worker_start() -> WorkerProcess:
    """Starts a worker of the `cluster` queue on the bench's database and Redis, after emptying
    the queues (the jobs queued earlier in the run have enqueued submission tasks that nobody
    needs now). Only that queue: what this bench measures (submission, the poll and the
    settlement it does, the poll's memory) is cluster work, and a deployment's cluster pool
    takes nothing else (docker-compose.yml); the io tasks the jobs' ends send wait unread and
    are purged with the rest."""
    from computeshare.celery import app

    app.control.purge()
    return start(
        name="bench-jobs",
        log_path=Path(tempfile.mkdtemp(prefix="bench-jobs-")) / "worker.log",
        environment=worker_environment(
            database=bench_database_url(DATABASE),
            redis=REDIS_URL,
            JOBS_SUBMIT_LEASE_SECONDS="20",
            JOBS_POLL_LEASE_SECONDS="20",
            JOBS_COMMAND_TIMEOUT_SECONDS="30",
            **AS_DEPLOYED,
        ),
        loglevel="WARNING",
        queue="cluster",
    )
