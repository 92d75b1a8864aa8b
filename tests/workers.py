"""Real `celery worker` processes on a given database and Redis, for the tests (the session's
worker, and the fault tests' workers that get killed) and for the benches."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPOSITORY = Path(__file__).resolve().parent.parent


def database_url(settings_dict: dict[str, Any]) -> str:
    """A `DATABASE_URL` for Django's connection settings (PostgreSQL with trust auth)."""
    return (
        f"postgres://{settings_dict['USER']}@{settings_dict['HOST']}:{settings_dict['PORT']}"
        f"/{settings_dict['NAME']}"
    )


def worker_environment(*, database: str, redis: str, **changes: str) -> dict[str, str]:
    """This process's environment, pointed at `database` and `redis` (also the broker)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "computeshare.settings.test",
        "DATABASE_URL": database,
        "REDIS_URL": redis,
        "CELERY_BROKER_URL": redis,
        **changes,
    }


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
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

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
