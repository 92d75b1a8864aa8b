"""Private PostgreSQL and Redis instances, a gunicorn server and a `celery beat`, started by the
fault tests themselves: the faults (a stopped Redis, a restarted PostgreSQL) are injected into
these, never into the shared services that the rest of the suite and other people use."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg2
import redis

from tests.workers import (
    REPOSITORY,
    GunicornServer,
    WorkerProcess,
    free_loopback_port,
    process_stop,
)


def _wait(condition: object, what: str, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} within {timeout:g} s\n{tail}")
        time.sleep(0.1)


# --- Redis --------------------------------------------------------------------------------------


class PrivateRedis:
    """A `redis-server` on a free loopback port, without persistence: stopping it loses every
    message and every cached value in it, the worst a Redis restart can do."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_loopback_port()
        self.log_path = directory / f"redis-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def answers(self) -> bool:
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    "redis-server",
                    "--port", str(self.port),
                    "--bind", "127.0.0.1",
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", str(self.directory),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        _wait(self.answers, "the private Redis did not answer", 10, self.log_path)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


# --- PostgreSQL ---------------------------------------------------------------------------------


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1]).parent


class PrivatePostgres:
    """A PostgreSQL cluster of its own in a temporary folder, on a free loopback port. initdb
    refuses to run as root, so as root every server command runs as the `postgres` user."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.directory = Path(tempfile.mkdtemp(prefix="cs-faults-pg-"))
        self.data = self.directory / "data"
        self.log_path = self.directory / "server.log"
        self.port = free_loopback_port()
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")

    def _run(self, *arguments: str, timeout: float = 120) -> str:
        command = [str(self.bin / arguments[0]), *arguments[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        return result.stdout

    def url(self, database: str = "computeshare") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "computeshare") -> psycopg2.extensions.connection:
        return psycopg2.connect(
            host="127.0.0.1", port=self.port, user="postgres", dbname=database, connect_timeout=5
        )

    def initdb(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        self._pg_ctl("start")

    def restart(self, mode: str = "immediate") -> None:
        """`immediate` is a crash as far as the server is concerned: no checkpoint, every open
        transaction lost, recovery from the WAL at the next start."""
        self._pg_ctl("restart", "-m", mode)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop", "-m", "immediate")

    def _pg_ctl(self, action: str, *options: str) -> None:
        server_options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c max_connections=50 -c track_activity_query_size=16384"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "-t", "60",
            "-o", server_options, action, *options,
        )  # fmt: skip

    def create_database(self, name: str = "computeshare") -> None:
        connection = self.connect("postgres")
        connection.autocommit = True
        try:
            with connection.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            connection.close()

    def copy_from(self, settings_dict: dict[str, Any]) -> None:
        """Copies another server's database (Django's connection settings of it) into ours:
        `pg_dump | psql`, as the current user (both servers trust loopback)."""
        dump = subprocess.Popen(
            [
                str(self.bin / "pg_dump"), "--no-owner", "--no-privileges",
                "-h", str(settings_dict["HOST"]), "-p", str(settings_dict["PORT"]),
                "-U", str(settings_dict["USER"]), "-d", str(settings_dict["NAME"]),
            ],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        restored = subprocess.run(
            [
                str(self.bin / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                "-p", str(self.port), "-U", "postgres", "-d", "computeshare",
            ],
            stdin=dump.stdout,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )  # fmt: skip
        assert dump.stdout is not None
        dump.stdout.close()
        if dump.wait(timeout=60) != 0 or restored.returncode != 0:
            raise RuntimeError(f"copying the database failed:\n{restored.stderr[-3000:]}")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# --- gunicorn and celery beat -------------------------------------------------------------------


class Gunicorn(GunicornServer):
    """`gunicorn computeshare.wsgi` with the environment given, on a free loopback port, gthread
    workers of four threads each; it answers once `wait_ready()` returns."""

    def __init__(self, environment: dict[str, str], log_path: Path, workers: int = 1) -> None:
        options = [
            f"--workers={workers}",
            "--worker-class=gthread",
            "--threads=4",
            "--timeout=60",
            "--log-level=warning",
        ]
        super().__init__(environment, log_path, options)


class Beat:
    """`celery beat` with the schedule of the settings, its state file in `directory`."""

    def __init__(self, environment: dict[str, str], directory: Path) -> None:
        self.log_path = directory / "beat.log"
        celery = shutil.which("celery", path=str(Path(sys.executable).parent)) or "celery"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    celery, "-A", "computeshare", "beat", "--loglevel=INFO",
                    f"--schedule={directory / 'beat-schedule'}",
                    f"--pidfile={directory / 'beat.pid'}",
                ],
                cwd=REPOSITORY,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        process_stop(self.process)


def worker_start_on(
    broker_url: str, *, name: str, log_path: Path, environment: dict[str, str]
) -> WorkerProcess:
    """A `celery worker --pool=solo` on a private broker; returns once it says it is ready
    (`tests.workers.worker_start` pings through the session's broker, which it does not use)."""
    celery = shutil.which("celery", path=str(Path(sys.executable).parent)) or "celery"
    hostname = f"{name}@{socket.gethostname()}"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [
                celery, "-A", "computeshare", "worker", "--pool=solo", "--loglevel=INFO",
                f"--hostname={hostname}", "--without-heartbeat", "--without-gossip",
                "--without-mingle",
            ],
            cwd=REPOSITORY,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    worker = WorkerProcess(process, hostname, log_path)
    try:
        _wait(
            lambda: process.poll() is not None or f"{hostname} ready." in worker.log(),
            "the Celery worker did not start",
            120,
            log_path,
        )
    except BaseException:
        worker.stop()
        raise
    if process.poll() is not None:
        raise RuntimeError(f"the Celery worker {name} exited:\n{worker.log()[-4000:]}")
    return worker


def task_send(broker_url: str, name: str, *arguments: object) -> None:
    """Sends task `name` through the private broker, as beat or a web process would."""
    from kombu import Connection

    from computeshare.celery import app

    with Connection(broker_url) as connection:
        app.send_task(name, args=list(arguments), connection=connection)
