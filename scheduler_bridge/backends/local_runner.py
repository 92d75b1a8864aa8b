"""The supervisor of one job of the `local` scheduler backend, and the state on disk that it and
`LocalBackend` share (this module writes most of it, so it owns the format).

`LocalBackend.submit` records a job and starts `python -m scheduler_bridge.backends.local_runner
--root ROOT --job ID` in a new session. That process forks: the parent exits as soon as the child
has claimed the job's tasks, so the Celery worker that started it reaps it at once, and the child
belongs to no process that can die under it (a worker killed with SIGKILL or restarted leaves its
jobs running). The child supervises every task of the job until each has ended: it waits for
CPU slots, runs the script with bash in a new session, enforces the time limit, answers cancel
requests, measures CPU time and writes the final record.

One supervisor per job, not per task: an array of 1,000 tasks would otherwise be 1,000 Python
processes (about 10 MiB each) waiting for two CPUs, and the `%N` throttle is a plain counter
inside one process instead of a lock protocol between many.

State under `ROOT/.local-scheduler/`:
    counter                  the last job id given, replaced under `counter.lock` (fcntl.flock)
    slots/slot-<i>           one lock file per CPU; a running task holds a flock on k of them
    active/<job id>          present while the job has a task that has not ended
    names/<sha256 of name>.json   {name, job_id, submit_time}: how `find` looks a name up
    jobs/<job id>/job.json   the job as submitted (written once)
    jobs/<job id>/task-<raw id>.json   one task's record, replaced whole (temp file + rename)
    jobs/<job id>/cancel-<raw id>      a cancel request
    jobs/<job id>/lock       serialises writers of the job's task records

A task record that has ended is never overwritten: `update_task` reads and writes under the job's
lock and leaves ended records alone, so whoever ends a task first (the supervisor, or the backend
that found the supervisor dead) is the one whose record stands.

CPU time is what the kernel reports when the supervisor reaps a process (`wait4` rusage,
user + system). The script's rusage includes every descendant that was reaped by its parent; the
supervisor is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so processes orphaned inside a
task are reparented to it and their time is added when it reaps them. Not counted: a process
that left the task's session (`setsid`) and therefore escapes both the kill and the accounting,
and anything still running when the supervisor itself is killed (such a task ends NODE_FAIL,
which is not charged). Linux only: liveness and process identity are read from /proc.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from scheduler_bridge.backends.types import output_file_name

STATE_DIRECTORY_NAME = ".local-scheduler"

# Scheduler states as the local backend records them, spelled as Slurm spells them.
PENDING = "PENDING"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
TIMEOUT = "TIMEOUT"
CANCELLED = "CANCELLED"
NODE_FAIL = "NODE_FAIL"
ENDED_SCHEDULER_STATES = frozenset({COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL})

# A task whose supervisor has not claimed it within this time never will be.
SUPERVISOR_STARTUP_SECONDS = 60.0
# After a task's script exits, how long its leftover processes may take to die and be reaped.
FINISHING_SECONDS = 5.0
# How often the supervisor looks at cancel requests, the clock and free CPU slots. A child's exit
# wakes it at once (SIGCHLD), whatever this is.
POLL_SECONDS = 0.2
# How long the launching parent waits for its child to claim the job's tasks.
CLAIM_TIMEOUT_SECONDS = 20.0
SCRIPT_PATH = "/usr/local/bin:/usr/bin:/bin"
_PR_SET_CHILD_SUBREAPER = 36


def now_utc() -> datetime:
    return datetime.now(UTC)


# Processes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessStatus:
    state: str  # "R", "S", "Z", ... as /proc/<pid>/stat shows it
    session: int
    start_ticks: int  # start time in clock ticks since boot

    @property
    def is_zombie(self) -> bool:
        return self.state in {"Z", "X"}


def read_process_status(pid: int) -> ProcessStatus | None:
    """The process's /proc/<pid>/stat, None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes().decode("utf-8", "replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and parentheses itself.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcessStatus(state=fields[0], session=int(fields[3]), start_ticks=int(fields[19]))


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as the kernel knows it: a pid and the start time that tells it from a later
    process given the same pid after a reboot or a wrap of the pid counter."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        status = read_process_status(pid)
        return None if status is None else cls(pid, status.start_ticks)

    def is_alive(self) -> bool:
        status = read_process_status(self.pid)
        return (
            status is not None and not status.is_zombie and status.start_ticks == self.start_ticks
        )


def session_members(session: int, *, include_zombies: bool = False) -> list[int]:
    """Every process of a session, found by reading /proc (a task's processes can leave its
    process group, not its session, without `setsid`)."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            status = read_process_status(int(entry.name))
            if status and status.session == session and (include_zombies or not status.is_zombie):
                members.append(int(entry.name))
    return members


def signal_task_processes(leader: ProcessIdentity, signal_number: int) -> None:
    """Sends a signal to every process of a task: its process group, and members of its session
    that moved to another group. The script was started as a session leader, so its pid is the
    id of both. When another process now holds the leader's pid, the ids have been reused and
    nothing is sent."""
    status = read_process_status(leader.pid)
    if status is not None and status.start_ticks != leader.start_ticks:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader.pid, signal_number)
    for pid in session_members(leader.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal_number)


# Records -----------------------------------------------------------------------------------------


def _time_or_none(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _identity_or_none(value: list[int] | None) -> ProcessIdentity | None:
    return None if value is None else ProcessIdentity(value[0], value[1])


@dataclass(frozen=True)
class JobRecord:
    """A job as submitted; written once by `LocalBackend.submit` and read by its supervisor."""

    job_id: int
    name: str
    directory: str  # relative to the root
    time_limit_minutes: int
    ntasks: int
    cpus_per_task: int
    machine_cpus: int  # the slot files there are
    tasks: tuple[tuple[int, int | None], ...]  # (raw id, array index or None), in index order
    throttle: int | None  # at most this many tasks of the array run at once
    environment: Mapping[str, str]
    submit_time: datetime
    seconds_per_minute: float
    kill_grace_seconds: float

    @property
    def requested_cpus(self) -> int:
        return self.ntasks * self.cpus_per_task

    def to_json(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in self.__dataclass_fields__},
            "tasks": [list(task) for task in self.tasks],
            "environment": dict(self.environment),
            "submit_time": self.submit_time.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobRecord:
        return cls(
            **{
                **data,
                "tasks": tuple((raw, index) for raw, index in data["tasks"]),
                "submit_time": datetime.fromisoformat(data["submit_time"]),
            }
        )


@dataclass(frozen=True)
class TaskRecord:
    """One task (a job, or one task of an array) as the scheduler last recorded it."""

    job_id: int
    raw_job_id: int
    array_task_id: int | None
    name: str
    scheduler_state: str
    submit_time: datetime
    time_limit_minutes: int
    requested_cpus: int
    reason: str = ""
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_code: int | None = None
    elapsed_seconds: int = 0
    cpu_seconds: float = 0.0
    supervisor: ProcessIdentity | None = None  # None until a supervisor claimed the task
    process: ProcessIdentity | None = None  # the script's bash, leader of the task's session

    @property
    def is_ended(self) -> bool:
        return self.scheduler_state in ENDED_SCHEDULER_STATES

    @property
    def allocated_cpus(self) -> int:
        """As Slurm's AllocCPUS: nothing is allocated to a task that never started."""
        return 0 if self.start_time is None else self.requested_cpus

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        for name in ("submit_time", "start_time", "end_time"):
            data[name] = None if data[name] is None else data[name].isoformat()
        for name in ("supervisor", "process"):
            data[name] = None if data[name] is None else [data[name].pid, data[name].start_ticks]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        return cls(
            **{
                **data,
                "submit_time": datetime.fromisoformat(data["submit_time"]),
                "start_time": _time_or_none(data["start_time"]),
                "end_time": _time_or_none(data["end_time"]),
                "supervisor": _identity_or_none(data["supervisor"]),
                "process": _identity_or_none(data["process"]),
            }
        )


def write_atomically(
    path: Path, content: bytes, *, mode: int = 0o600, durable: bool = False
) -> None:
    """Replaces `path` whole: readers see the old content or the new, never a part. `durable`
    also survives a power cut (fsync), for what must never be lost: ids and final records."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(content)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _encode(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False).encode()


class StateDirectory:
    """The backend's records under `root/.local-scheduler`; see the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / STATE_DIRECTORY_NAME
        self.jobs = self.path / "jobs"
        self.active = self.path / "active"
        self.names = self.path / "names"
        self.slots = self.path / "slots"

    def create(self) -> None:
        for directory in (self.path, self.jobs, self.active, self.names, self.slots):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def job_path(self, job_id: int) -> Path:
        return self.jobs / str(job_id)

    def task_path(self, job_id: int, raw_job_id: int) -> Path:
        return self.job_path(job_id) / f"task-{raw_job_id}.json"

    def cancel_path(self, job_id: int, raw_job_id: int) -> Path:
        return self.job_path(job_id) / f"cancel-{raw_job_id}"

    def name_path(self, name: str) -> Path:
        return self.names / f"{hashlib.sha256(name.encode()).hexdigest()}.json"

    @contextlib.contextmanager
    def locked(self, path: Path) -> Iterator[None]:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # closing releases the lock

    def allocate_ids(self, count: int) -> int:
        """Reserves `count` consecutive new ids and returns the first. Concurrent callers, in
        any process, never get the same id."""
        counter = self.path / "counter"
        with self.locked(self.path / "counter.lock"):
            try:
                last = int(counter.read_text())
            except FileNotFoundError:
                last = 0
            write_atomically(counter, str(last + count).encode(), durable=True)
        return last + 1

    def register_job(self, job: JobRecord, tasks: Sequence[TaskRecord]) -> None:
        """Records a new job: its description, a record per task and the active marker."""
        self.job_path(job.job_id).mkdir(mode=0o700)
        write_atomically(self.job_path(job.job_id) / "job.json", _encode(job.to_json()))
        for task in tasks:
            self.write_task(task)
        (self.active / str(job.job_id)).touch()

    def register_name(self, name: str, job_id: int, submit_time: datetime) -> None:
        entry = {"name": name, "job_id": job_id, "submit_time": submit_time.isoformat()}
        write_atomically(self.name_path(name), _encode(entry))

    def read_name(self, name: str) -> tuple[int, datetime] | None:
        try:
            entry = json.loads(self.name_path(name).read_bytes())
        except FileNotFoundError:
            return None
        return int(entry["job_id"]), datetime.fromisoformat(entry["submit_time"])

    def read_job(self, job_id: int) -> JobRecord:
        return JobRecord.from_json(json.loads((self.job_path(job_id) / "job.json").read_bytes()))

    def read_tasks(self, job_id: int) -> list[TaskRecord]:
        """The job's task records in raw id order; [] for a job that does not exist."""
        try:
            entries = os.listdir(self.job_path(job_id))
        except FileNotFoundError:
            return []
        names = sorted(
            (entry for entry in entries if entry.startswith("task-") and entry.endswith(".json")),
            key=lambda entry: int(entry[5:-5]),
        )
        directory = self.job_path(job_id)
        return [TaskRecord.from_json(json.loads((directory / name).read_bytes())) for name in names]

    def read_task(self, job_id: int, raw_job_id: int) -> TaskRecord:
        return TaskRecord.from_json(json.loads(self.task_path(job_id, raw_job_id).read_bytes()))

    def write_task(self, task: TaskRecord) -> None:
        write_atomically(
            self.task_path(task.job_id, task.raw_job_id),
            _encode(task.to_json()),
            durable=task.is_ended,
        )

    def update_task(
        self, job_id: int, raw_job_id: int, change: Callable[[TaskRecord], TaskRecord]
    ) -> TaskRecord:
        """Applies `change` to the task's record under the job's lock and returns the record as
        it now stands. An ended record is returned unchanged: the first end written wins."""
        with self.locked(self.job_path(job_id) / "lock"):
            current = self.read_task(job_id, raw_job_id)
            if current.is_ended:
                return current
            changed = change(current)
            if changed != current:
                self.write_task(changed)
            return changed

    def active_job_ids(self) -> list[int]:
        return sorted(int(name) for name in os.listdir(self.active) if name.isdigit())

    def release_if_ended(self, job_id: int) -> None:
        """Drops the job from the active list once every task has ended."""
        if all(task.is_ended for task in self.read_tasks(job_id)):
            (self.active / str(job_id)).unlink(missing_ok=True)

    def cancel_requests(self, job_id: int) -> set[int]:
        return {
            int(name[7:])
            for name in os.listdir(self.job_path(job_id))
            if name.startswith("cancel-") and name[7:].isdigit()
        }

    def request_cancel(self, job_id: int, raw_job_id: int) -> None:
        self.cancel_path(job_id, raw_job_id).touch()


# The supervisor ----------------------------------------------------------------------------------

_WAITING, _RUNNING, _FINISHING, _DONE = "waiting", "running", "finishing", "done"


@dataclass
class _Task:
    """What the supervisor knows of one task while it runs."""

    raw_job_id: int
    array_task_id: int | None
    phase: str = _WAITING
    reason: str = ""  # the pending reason last written
    popen: subprocess.Popen[bytes] | None = None
    process: ProcessIdentity | None = None
    start_time: datetime | None = None
    deadline: float = 0.0  # monotonic time of the time limit
    kill_at: float | None = None  # monotonic time of the SIGKILL that follows a SIGTERM
    finishing_until: float = 0.0
    ending_state: str | None = None  # TIMEOUT or CANCELLED once the supervisor ended it
    wait_status: int | None = None
    cpu_seconds: float = 0.0
    slots: list[int] = field(default_factory=list)  # descriptors holding flocks on CPU slots


def _exit_code(wait_status: int) -> int:
    """The exit status, or 128 + the signal's number for a process killed by one (as a shell
    reports it)."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


class Supervisor:
    def __init__(self, state: StateDirectory, job: JobRecord) -> None:
        identity = ProcessIdentity.of(os.getpid())
        assert identity is not None  # our own /proc entry
        self.identity = identity
        self.state = state
        self.job = job
        self.limit_seconds = job.time_limit_minutes * job.seconds_per_minute
        self.bash = shutil.which("bash", path=SCRIPT_PATH) or "/bin/bash"
        self.tasks = [_Task(raw, index) for raw, index in job.tasks]
        self.stop_signal: int | None = None

    def claim(self) -> None:
        """Writes this process into every task record that has not ended (a task cancelled
        before the supervisor started has)."""
        for task in self.tasks:
            record = self._update(task, lambda current: replace(current, supervisor=self.identity))
            if record.is_ended:
                task.phase = _DONE

    def run(self) -> None:
        # Children are reparented to us when their parent dies, so that we reap them and count
        # their CPU time. Best effort: without it they go to init and are not counted.
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        wakeup_read, wakeup_write = os.pipe()
        os.set_blocking(wakeup_read, False)
        os.set_blocking(wakeup_write, False)
        signal.set_wakeup_fd(wakeup_write)
        signal.signal(signal.SIGCHLD, lambda number, frame: None)
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(number, self._on_stop_signal)
        try:
            while any(task.phase != _DONE for task in self.tasks):
                if self.stop_signal is not None:
                    self.abandon(f"the local supervisor was stopped by signal {self.stop_signal}")
                    break
                self._reap()
                self._follow()
                self._start_waiting_tasks()
                select.select([wakeup_read], [], [], POLL_SECONDS)
                with contextlib.suppress(BlockingIOError):
                    os.read(wakeup_read, 4096)
        finally:
            self.state.release_if_ended(self.job.job_id)

    def abandon(self, reason: str) -> None:
        """Kills every running task and ends every task that has not ended as NODE_FAIL: the
        machine, not the job, failed, so the run is not charged."""
        for task in self.tasks:
            if task.process is not None and task.phase in {_RUNNING, _FINISHING}:
                signal_task_processes(task.process, signal.SIGKILL)
        deadline = time.monotonic() + FINISHING_SECONDS
        while time.monotonic() < deadline and any(t.phase == _RUNNING for t in self.tasks):
            self._reap()
            time.sleep(0.05)
        for task in self.tasks:
            if task.phase != _DONE:
                self._end(task, NODE_FAIL, reason, exit_code=None)

    def _on_stop_signal(self, number: int, frame: FrameType | None) -> None:
        self.stop_signal = number

    def _update(self, task: _Task, change: Callable[[TaskRecord], TaskRecord]) -> TaskRecord:
        return self.state.update_task(self.job.job_id, task.raw_job_id, change)

    def _reap(self) -> None:
        """Reaps every exited child, adding its CPU time to the task whose session it was in.
        `WNOWAIT` first, so the session can still be read from /proc before the reap."""
        while True:
            try:
                waiting = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if waiting is None or waiting.si_pid == 0:
                return
            pid = waiting.si_pid
            status = read_process_status(pid)
            _, wait_status, usage = os.wait4(pid, 0)
            task = next(
                (
                    task
                    for task in self.tasks
                    if task.process is not None
                    and (task.process.pid == pid or (status and status.session == task.process.pid))
                ),
                None,
            )
            if task is None:
                continue
            task.cpu_seconds += usage.ru_utime + usage.ru_stime
            if task.popen is not None and pid == task.popen.pid:
                task.popen.returncode = os.waitstatus_to_exitcode(wait_status)
                task.wait_status = wait_status
                # As Slurm does when a batch script exits: whatever it left behind is killed.
                assert task.process is not None
                signal_task_processes(task.process, signal.SIGKILL)
                task.phase = _FINISHING
                task.kill_at = None
                task.finishing_until = time.monotonic() + FINISHING_SECONDS

    def _follow(self) -> None:
        now = time.monotonic()
        cancel_requests = self.state.cancel_requests(self.job.job_id)
        for task in self.tasks:
            if task.phase == _WAITING and task.raw_job_id in cancel_requests:
                self._end(task, CANCELLED, "", exit_code=None)
            elif task.phase == _RUNNING:
                assert task.process is not None
                if task.ending_state is None and task.raw_job_id in cancel_requests:
                    self._terminate(task, CANCELLED, now)
                elif task.ending_state is None and now >= task.deadline:
                    self._terminate(task, TIMEOUT, now)
                if task.kill_at is not None and now >= task.kill_at:
                    signal_task_processes(task.process, signal.SIGKILL)
                    task.kill_at = None
            elif task.phase == _FINISHING:
                assert task.process is not None
                leftovers = session_members(task.process.pid, include_zombies=True)
                if not leftovers or now >= task.finishing_until:
                    self._finish(task, cancel_requested=task.raw_job_id in cancel_requests)

    def _terminate(self, task: _Task, ending_state: str, now: float) -> None:
        assert task.process is not None
        task.ending_state = ending_state
        signal_task_processes(task.process, signal.SIGTERM)
        task.kill_at = now + self.job.kill_grace_seconds

    def _finish(self, task: _Task, *, cancel_requested: bool) -> None:
        assert task.wait_status is not None
        exit_code = _exit_code(task.wait_status)
        if task.ending_state is not None:
            state = task.ending_state
        elif exit_code == 0:
            state = COMPLETED
        else:
            # A cancel may have been signalled directly by the backend before we saw its file.
            state = CANCELLED if cancel_requested else FAILED
        reason = {TIMEOUT: "TimeLimit", FAILED: "NonZeroExitCode"}.get(state, "")
        self._end(task, state, reason, exit_code=exit_code)

    def _end(self, task: _Task, state: str, reason: str, *, exit_code: int | None) -> None:
        end_time = now_utc()
        start_time = task.start_time
        elapsed = 0 if start_time is None else int((end_time - start_time).total_seconds())
        self._update(
            task,
            lambda current: replace(
                current,
                scheduler_state=state,
                reason=reason,
                end_time=end_time,
                exit_code=exit_code,
                elapsed_seconds=max(0, elapsed),
                cpu_seconds=round(task.cpu_seconds, 3),
            ),
        )
        self._release_slots(task)
        task.phase = _DONE

    def _start_waiting_tasks(self) -> None:
        """Starts waiting tasks in index order while the throttle and the CPU slots allow; the
        rest show why they wait, as Slurm's pending reasons."""
        running = sum(task.phase in {_RUNNING, _FINISHING} for task in self.tasks)
        blocked_reason = None
        for task in self.tasks:
            if task.phase != _WAITING:
                continue
            if blocked_reason is None:
                if self.job.throttle is not None and running >= self.job.throttle:
                    blocked_reason = "JobArrayTaskLimit"
                else:
                    slots = self._acquire_slots(self.job.requested_cpus)
                    if slots is None:
                        blocked_reason = "Resources"
                    else:
                        self._start(task, slots)
                        running += 1
                        continue
            if task.reason != blocked_reason:
                self._write_reason(task, blocked_reason)

    def _write_reason(self, task: _Task, reason: str) -> None:
        task.reason = reason
        self._update(task, lambda current: replace(current, reason=reason))

    def _acquire_slots(self, count: int) -> list[int] | None:
        """Locks `count` free CPU slots at once, or none: a task never holds some slots while it
        waits for others (two tasks could otherwise hold half each, forever)."""
        held: list[int] = []
        for index in range(self.job.machine_cpus):
            descriptor = os.open(self.state.slots / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            held.append(descriptor)
            if len(held) == count:
                return held
        for descriptor in held:
            os.close(descriptor)
        return None

    def _release_slots(self, task: _Task) -> None:
        for descriptor in task.slots:
            os.close(descriptor)
        task.slots = []

    def _environment(self, task: _Task, directory: Path) -> dict[str, str]:
        """A clean environment (nothing of the worker's, which holds the platform's secrets),
        the user's variables, and the SLURM_* variables scripts written for Slurm read."""
        environment = {"PATH": SCRIPT_PATH, "HOME": str(self.state.root)}
        environment |= {"LANG": "C.UTF-8", "TZ": "UTC"}
        environment |= self.job.environment
        environment |= {
            "SLURM_JOB_ID": str(task.raw_job_id),
            "SLURM_JOB_NAME": self.job.name,
            "SLURM_JOB_PARTITION": "local",
            "SLURM_SUBMIT_DIR": str(directory),
            "SLURM_NTASKS": str(self.job.ntasks),
            "SLURM_CPUS_PER_TASK": str(self.job.cpus_per_task),
            "SLURM_CPUS_ON_NODE": str(self.job.requested_cpus),
        }
        if task.array_task_id is not None:
            indices = [index for _, index in self.job.tasks if index is not None]
            environment |= {
                "SLURM_ARRAY_JOB_ID": str(self.job.job_id),
                "SLURM_ARRAY_TASK_ID": str(task.array_task_id),
                "SLURM_ARRAY_TASK_COUNT": str(len(indices)),
                "SLURM_ARRAY_TASK_MIN": str(min(indices)),
                "SLURM_ARRAY_TASK_MAX": str(max(indices)),
            }
        return environment

    def _start(self, task: _Task, slots: list[int]) -> None:
        task.slots = slots
        directory = self.state.root / self.job.directory
        try:
            with (
                open(directory / output_file_name("stdout", task.array_task_id), "wb") as stdout,
                open(directory / output_file_name("stderr", task.array_task_id), "wb") as stderr,
            ):
                task.popen = subprocess.Popen(
                    [self.bash, "job.sh"],
                    cwd=directory,
                    env=self._environment(task, directory),
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    start_new_session=True,  # the task's own session and process group
                    close_fds=True,
                )
        except (OSError, ValueError) as error:
            self._end(task, FAILED, f"the script could not start: {error}", exit_code=None)
            return
        # Our child cannot be reaped by anyone else, so its /proc entry is there to read.
        task.process = ProcessIdentity.of(task.popen.pid) or ProcessIdentity(task.popen.pid, 0)
        task.start_time = now_utc()
        task.deadline = time.monotonic() + self.limit_seconds
        task.phase = _RUNNING
        record = self._update(
            task,
            lambda current: replace(
                current,
                scheduler_state=RUNNING,
                reason="",
                start_time=task.start_time,
                process=task.process,
            ),
        )
        if record.is_ended:
            # The backend ended it meanwhile, believing this supervisor dead: honour that.
            signal_task_processes(task.process, signal.SIGKILL)


def supervise(root: Path, job_id: int, ready_descriptor: int) -> None:
    """Claims the job's tasks, tells the launching parent so, and runs them to their end."""
    state = StateDirectory(root)
    supervisor = Supervisor(state, state.read_job(job_id))
    supervisor.claim()
    os.write(ready_descriptor, b"1")
    os.close(ready_descriptor)
    try:
        supervisor.run()
    except BaseException as error:
        (state.job_path(job_id) / "supervisor.log").write_text(traceback.format_exc())
        supervisor.abandon(f"the local supervisor failed: {type(error).__name__}: {error}")
        raise


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Supervises one job of the local backend.")
    parser.add_argument("--root", required=True, type=Path)
    parser.add_argument("--job", required=True, type=int)
    arguments = parser.parse_args(argv)
    ready_read, ready_write = os.pipe()
    child = os.fork()
    if child:
        os.close(ready_write)
        readable, _, _ = select.select([ready_read], [], [], CLAIM_TIMEOUT_SECONDS)
        return 0 if readable and os.read(ready_read, 1) == b"1" else 1
    os.close(ready_read)
    os.setsid()
    code = 1
    try:
        supervise(arguments.root, arguments.job, ready_write)
        code = 0
    finally:
        os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
