"""What bench/jobs.py's parts share: its own scratch database and Redis database (other people
run tests and benches on this machine at the same time), and a real Celery worker on them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPOSITORY = Path(__file__).resolve().parent.parent
DATABASE = "computeshare_bench_jobs"
# A Redis database of its own (the tests default to 15): the worker's queue is the bench's only.
REDIS_URL = os.environ.get("BENCH_JOBS_REDIS_URL", "redis://127.0.0.1:6379/11")


def bench_database_url() -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/computeshare")
    return urlunsplit(urlsplit(base)._replace(path=f"/{DATABASE}"))


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


def prepare_django() -> None:
    """Creates (when missing), migrates and empties the bench's database, on the test settings
    pointed at it and at the bench's Redis database."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "computeshare.settings.test"
    os.environ["DATABASE_URL"] = bench_database_url()
    os.environ["REDIS_URL"] = REDIS_URL
    os.environ["CELERY_BROKER_URL"] = REDIS_URL
    admin = _admin_connection()
    with admin.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
        if cursor.fetchone() is None:
            cursor.execute(f"CREATE DATABASE {DATABASE}")
    admin.close()

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    # TRUNCATE, which the entries' append-only trigger allows.
    call_command("flush", interactive=False, verbosity=0)


def drop_database() -> None:
    from django.db import connections

    connections.close_all()
    admin = _admin_connection()
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    admin.close()


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


@dataclass
class Worker:
    """A `celery worker --pool=solo` process: the tasks run in the process itself, so its memory
    is the memory of following the jobs."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def memory_kib(self) -> dict[str, int]:
        """VmRSS (now) and VmHWM (the peak so far) of the worker, in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        values = {}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(value.split()[0])
        return values

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def worker_start() -> Worker:
    """Starts a worker on the bench's database and Redis, after emptying the queue (the jobs
    queued earlier in the run have enqueued submission tasks that nobody needs now)."""
    from computeshare.celery import app

    app.control.purge()
    log_path = Path(tempfile.mkdtemp(prefix="bench-jobs-")) / "worker.log"
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "computeshare.settings.test",
        "DATABASE_URL": bench_database_url(),
        "REDIS_URL": REDIS_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "JOBS_SUBMIT_LEASE_SECONDS": "20",
        "JOBS_POLL_LEASE_SECONDS": "20",
        "JOBS_COMMAND_TIMEOUT_SECONDS": "30",
    }
    celery = shutil.which("celery", path=str(Path(sys.executable).parent)) or "celery"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                celery,
                "-A",
                "computeshare",
                "worker",
                "--pool=solo",
                "--loglevel=WARNING",
                "--hostname=bench-jobs@%h",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=REPOSITORY,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    worker = Worker(process, log_path)
    deadline = time.monotonic() + 60
    while not app.control.ping(timeout=0.5, destination=["bench-jobs@" + os.uname().nodename]):
        if process.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            raise RuntimeError(f"the Celery worker did not start:\n{worker.log_tail()}")
    return worker
