"""The `local` backend's side of its supervisors (`local_runner`): starting one per job, waiting
until it has claimed the job's tasks, and telling when one is gone.

A supervisor that died (kill -9, a reboot) would leave its tasks "running" forever: every read
checks that the supervisor of each unended task is still the same live process, and ends the
tasks of a dead one as NODE_FAIL (the machine failed, not the job: not charged), killing what it
had left running. A cancel asks the supervisor to end a task, or ends it here when there is
none."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from hpc.backends import local_state
from hpc.backends.local_state import (
    CANCELLED,
    NODE_FAIL,
    SUPERVISOR_STARTUP_SECONDS,
    StateDirectory,
    TaskRecord,
    kill_task_processes,
    now_utc,
    signal_task_processes,
)

LAUNCH_TIMEOUT_SECONDS = 30.0
_REPOSITORY = Path(__file__).resolve().parents[2]


def launch_supervisor(python: str, root: Path, job_id: int) -> subprocess.Popen[bytes] | None:
    """Starts the job's supervisor in a session of its own, with an environment that holds
    nothing of this process's (the worker's secrets stay here)."""
    try:
        return subprocess.Popen(
            [
                python,
                *("-m", "hpc.backends.local_runner"),
                *("--root", str(root), "--job", str(job_id)),
            ],
            cwd=root,
            env={
                "PATH": local_state.SCRIPT_PATH,
                "PYTHONPATH": str(_REPOSITORY),
                "LANG": "C.UTF-8",
                "TZ": "UTC",
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return None


def await_launch(
    state: StateDirectory, job_id: int, launcher: subprocess.Popen[bytes] | None
) -> None:
    """Waits for the launcher, which exits once its child has claimed the job's tasks. When
    that failed, the tasks no supervisor claimed end as NODE_FAIL at once."""
    if launcher is not None:
        try:
            if launcher.wait(timeout=LAUNCH_TIMEOUT_SECONDS) == 0:
                return
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
    for record in state.read_tasks(job_id):
        if record.supervisor is None:
            end_abandoned(state, record, NODE_FAIL, "the local supervisor did not start")


def cancel_tasks(state: StateDirectory, unended: Sequence[TaskRecord]) -> None:
    """A pending task ends without starting; a running one gets SIGTERM (its supervisor
    follows with SIGKILL after the grace). Tasks whose supervisor is gone are killed and
    ended here."""
    # Every request before any signal: a supervisor that sees a task die reads them, to tell
    # a cancel from a failure and not to start the next task of an array in its place.
    for record in unended:
        state.request_cancel(record.job_id, record.raw_job_id)
    for record in unended:
        if record.supervisor is not None and record.supervisor.is_alive():
            if record.process is not None:
                signal_task_processes(record.process, signal.SIGTERM, record.sandbox)
        else:
            end_abandoned(state, record, CANCELLED, "")


def settled(
    state: StateDirectory, records: list[TaskRecord], liveness: dict[int, bool]
) -> list[TaskRecord]:
    """The records, with the unended tasks of dead supervisors ended as NODE_FAIL.
    `liveness` caches each supervisor's answer for the length of one call."""
    result = []
    for record in records:
        if not record.is_ended and not _is_supervised(record, liveness):
            record = end_abandoned(
                state, record, NODE_FAIL, "the local supervisor of this task is gone"
            )
        result.append(record)
    return result


def _is_supervised(record: TaskRecord, liveness: dict[int, bool]) -> bool:
    if record.supervisor is None:
        # Its supervisor may be starting; it never will after this long.
        age = (now_utc() - record.submit_time).total_seconds()
        return age < SUPERVISOR_STARTUP_SECONDS
    if record.supervisor.pid not in liveness:
        liveness[record.supervisor.pid] = record.supervisor.is_alive()
    return liveness[record.supervisor.pid]


def end_abandoned(
    state: StateDirectory, record: TaskRecord, scheduler_state: str, reason: str
) -> TaskRecord:
    """Ends a task no live supervisor follows, killing whatever it left running. Checked
    again under the job's lock: a supervisor may have claimed or ended it meanwhile."""

    def end(current: TaskRecord) -> TaskRecord:
        if current.supervisor is not None and current.supervisor.is_alive():
            return current
        if current.process is not None:
            kill_task_processes(current.process, current.sandbox)
        end_time = now_utc()
        elapsed = (
            0
            if current.start_time is None
            else int((end_time - current.start_time).total_seconds())
        )
        return replace(
            current,
            scheduler_state=scheduler_state,
            reason=reason,
            end_time=end_time,
            elapsed_seconds=max(0, elapsed),
        )

    ended = state.update_task(record.job_id, record.raw_job_id, end)
    if ended.is_ended:
        state.release_if_ended(record.job_id)
    return ended
