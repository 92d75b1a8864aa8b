"""Real `celery worker` and gunicorn processes on a given database and Redis, for the tests (the
session's worker, the fault tests' workers that get killed, the live servers) and for the
benches."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent

# No proxy, whatever the environment says: every server here is on loopback.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def process_stop(process: subprocess.Popen[bytes], stop_signal: int = signal.SIGTERM) -> None:
    """Sends `stop_signal` to the process, if it still runs, and SIGKILL if it has not ended
    20 s later."""
    if process.poll() is None:
        process.send_signal(stop_signal)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def database_url(settings_dict: dict[str, Any]) -> str:
    """A `DATABASE_URL` for Django's connection settings (PostgreSQL with trust auth)."""
    return (
        f"postgres://{settings_dict['USER']}@{settings_dict['HOST']}:{settings_dict['PORT']}"
        f"/{settings_dict['NAME']}"
    )


def worker_environment(*, database: str, redis: str, **changes: str) -> dict[str, str]:
    """This process's environment, pointed at `database` and `redis` (also the broker).

    The test settings have already chosen this test process's Redis database and job files; the
    child is given them as they are, without the process's name from which it would choose
    again (one Redis database further down)."""
    from django.conf import settings

    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "computeshare.settings.test",
        "DATABASE_URL": database,
        "REDIS_URL": redis,
        "CELERY_BROKER_URL": redis,
        "JOB_FILES_ROOT": str(settings.JOB_FILES_ROOT),
        **changes,
    }
    environment.pop("COMPUTESHARE_TEST_PROCESS", None)
    return environment


@contextmanager
def tasks_routed_to(queue: str) -> Iterator[str]:
    """Every task this process sends while the block runs goes to `queue`, whatever its route in
    CELERY_TASK_ROUTES says; the routes are put back and what is left in `queue` is purged
    after it. For a test whose tasks only its own workers (or none) may take: a session worker
    started without -Q consumes the default queue and the three routed ones.

    Changing `task_default_queue` is not enough since tasks have routes (the routes win).
    `conf.update(task_routes=...)`, not an assignment: Celery keeps the router it built from the
    routes, and rebuilds it only when an update names `task_routes`
    (celery/app/amqp.py, `AMQP._handle_conf_update`)."""
    from computeshare.celery import app

    previous = app.conf.task_routes

    def to_queue(*arguments: object, **options: object) -> dict[str, str]:
        return {"queue": queue}

    app.conf.update(task_routes=(to_queue,))
    try:
        yield queue
    finally:
        app.conf.update(task_routes=previous)
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(queue)


@dataclass
class WorkerProcess:
    """A `celery worker --pool=solo` process: tasks run in the process itself, so its memory is
    the memory of the work, and a SIGKILL stops the task it was running."""

    process: subprocess.Popen[bytes]
    hostname: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no task is finished, acknowledged or rolled back by the worker itself."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        process_stop(self.process)

    def memory_kib(self) -> dict[str, int]:
        """VmRSS (now) and VmHWM (the peak so far) of the worker, in KiB."""
        values = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(value.split()[0])
        return values

    def results(self, task_name: str) -> list[str]:
        """What each finished run of `task_name` returned, as the worker logged it (results
        are not stored: CELERY_TASK_IGNORE_RESULT)."""
        marker = f"Task {task_name}["
        return [
            line.rsplit(": ", 1)[1].strip()
            for line in self.log().splitlines()
            if marker in line and " succeeded in " in line
        ]


def worker_start(
    *,
    name: str,
    log_path: Path,
    environment: dict[str, str],
    queue: str | None = None,
    loglevel: str = "INFO",
    timeout: float = 60,
) -> WorkerProcess:
    """Starts a worker (on `queue` only, when given) and returns once it answers a ping."""
    from computeshare.celery import app

    celery = shutil.which("celery", path=str(Path(sys.executable).parent)) or "celery"
    hostname = f"{name}@{socket.gethostname()}"
    arguments = [
        celery,
        "-A",
        "computeshare",
        "worker",
        "--pool=solo",
        f"--loglevel={loglevel}",
        f"--hostname={hostname}",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
    ]
    if queue:
        arguments.append(f"--queues={queue}")
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            arguments, cwd=REPOSITORY, env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    worker = WorkerProcess(process, hostname, log_path)
    deadline = time.monotonic() + timeout
    while not app.control.ping(destination=[hostname], timeout=0.5):
        if process.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            raise RuntimeError(f"the Celery worker {name} did not start:\n{worker.log()[-4000:]}")
    return worker


class GunicornServer:
    """`gunicorn computeshare.wsgi` with `options` and the environment given, on a free loopback
    port, its output in `log_path`; it answers once `wait_ready()` returns. `stop()` sends
    `stop_signal`: SIGTERM lets requests under way finish, SIGINT is gunicorn's quick shutdown."""

    def __init__(
        self,
        environment: dict[str, str],
        log_path: Path,
        options: Sequence[str] = (),
        *,
        stop_signal: int = signal.SIGTERM,
        preexec_fn: Callable[[], object] | None = None,
    ) -> None:
        self.port = free_loopback_port()
        self.log_path = log_path
        self.stop_signal = stop_signal
        with log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "gunicorn"),
                    "computeshare.wsgi:application",
                    f"--bind=127.0.0.1:{self.port}",
                    *options,
                ],
                cwd=REPOSITORY,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec_fn,
            )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120) -> None:
        """Returns once `/healthz` answers (200, or 503 for a service down): the master listens
        before its workers have loaded Django. Else stops the server and raises with its log.
        Slow on a busy 2-CPU machine: importing Django and Celery alone can take 15 s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.request("GET", "/healthz")[0] in (200, 503):
                    return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"gunicorn did not answer within {timeout:g} s (exit status "
                    f"{self.process.returncode}):\n{self.log()[-4000:]}"
                )
            time.sleep(0.1)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(  # noqa: S310 (http on loopback only)
            self.base_url + path, data=body, method=method, headers=headers or {}
        )
        try:
            with _opener.open(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        process_stop(self.process, self.stop_signal)
