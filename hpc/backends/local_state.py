"""The state on disk that the `local` backend and its supervisors share: job and task records,
the job id counter, CPU slot locks, and what is read from /proc about processes.

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
that found the supervisor dead) is the one whose record stands. Linux only: liveness and process
identity are read from /proc.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


def _pid_namespace(pid: int) -> tuple[int, int] | None:
    """The PID namespace of a process (device and inode of its /proc/<pid>/ns/pid), None when
    it is gone or not ours to inspect."""
    try:
        status = os.stat(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return status.st_dev, status.st_ino


def namespace_members(init: ProcessIdentity) -> list[int]:
    """Every live process of the PID namespace whose init (pid 1 inside) is `init`, the init
    excepted; [] once the init is gone (its namespace went with it) or its pid was reused."""
    status = read_process_status(init.pid)
    if status is None or status.is_zombie or status.start_ticks != init.start_ticks:
        return []
    namespace = _pid_namespace(init.pid)
    if namespace is None:
        return []
    members = []
    for entry in os.scandir("/proc"):
        if (
            entry.name.isdigit()
            and int(entry.name) != init.pid
            and _pid_namespace(int(entry.name)) == namespace
        ):
            member = read_process_status(int(entry.name))
            if member is not None and not member.is_zombie:
                members.append(int(entry.name))
    return members


def _is_reused(process: ProcessIdentity) -> bool:
    status = read_process_status(process.pid)
    return status is not None and status.start_ticks != process.start_ticks


def _signal_group_and_session(leader: ProcessIdentity, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader.pid, signal_number)
    for pid in session_members(leader.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal_number)


def signal_task_processes(
    leader: ProcessIdentity, signal_number: int, sandbox: ProcessIdentity | None = None
) -> None:
    """Sends a signal to every process of a task's script. When another process now holds the
    pid of the leader (sandboxed: of the sandbox's init), the ids have been reused and nothing
    is sent.

    Unsandboxed, `leader` is the script's bash, started as a session leader: the signal goes to
    its process group, and to members of its session that moved to another group.

    Sandboxed, `leader` is the bwrap the supervisor started and `sandbox` the sandbox's init:
    the signal goes to every process inside the sandbox's PID namespace, which none can leave,
    and not to the two bwrap processes. They exit by themselves once the script has (bwrap with
    the script's status): a SIGTERM to the outer bwrap would end the sandbox at once, without
    the grace, and a SIGKILL to its init would lose the CPU time of what it had not reaped yet.
    `kill_task_processes` is for when nothing more is to be measured."""
    if sandbox is None:
        if not _is_reused(leader):
            _signal_group_and_session(leader, signal_number)
        return
    members = namespace_members(sandbox)  # which checks the init is still the same process
    for pid in members:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal_number)
    if not members and signal_number == signal.SIGKILL:
        # Nothing runs inside (bwrap is still setting the sandbox up, or its init is gone):
        # nothing to measure, and nothing else would end bwrap.
        kill_task_processes(leader, sandbox)


def kill_task_processes(leader: ProcessIdentity, sandbox: ProcessIdentity | None = None) -> None:
    """Kills everything of a task at once, bwrap included: a SIGKILL to the sandbox's init ends
    its whole namespace (what it had not reaped is not measured: for tasks whose end is not
    charged, or that would not end otherwise)."""
    if sandbox is not None and not _is_reused(sandbox):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(sandbox.pid, signal.SIGKILL)
    if not _is_reused(leader):
        _signal_group_and_session(leader, signal.SIGKILL)


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
    # The bwrap that runs each task in a sandbox (absolute path), None to run it as it is.
    sandbox: str | None = None
    # Why no task of the job may run (a sandbox was required and there is none): every task
    # fails with it, unstarted.
    refusal: str | None = None
    # Where each task's stdout, stderr and stdin go in the job's directory, with sbatch's
    # patterns (`hpc.slurm.jobs.stream_names`), and whether output is appended to.
    streams: Mapping[str, str] = field(default_factory=dict)
    open_mode: str = ""

    @property
    def requested_cpus(self) -> int:
        return self.ntasks * self.cpus_per_task

    def to_json(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in self.__dataclass_fields__},
            "tasks": [list(task) for task in self.tasks],
            "environment": dict(self.environment),
            "streams": dict(self.streams),
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
    # The leader of the task's session: the script's bash, or the bwrap that runs it sandboxed.
    process: ProcessIdentity | None = None
    sandbox: ProcessIdentity | None = None  # a sandboxed task's init (pid 1 of its namespace)

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
        for name in ("supervisor", "process", "sandbox"):
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
                # Absent from the records of tasks that ran before sandboxes.
                "sandbox": _identity_or_none(data.get("sandbox")),
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
