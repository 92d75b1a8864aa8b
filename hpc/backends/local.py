"""The `local` scheduler: jobs run as process groups on this machine, with the interface and the
states of the Slurm backend, a hard time limit and CPU time measured by the kernel. It serves the
embedded demo and development; it is not offered to owners.

`LocalBackend` writes each job's records under `root/.local-scheduler` and starts one detached
supervisor per job (`local_runner`), which runs the tasks and writes their records; the backend
reads those records to answer `queue`, `runs` and `find`. Nothing is held in memory between
calls, so any number of backends in any number of processes can share one root.

A supervisor that died (kill -9, a reboot) would leave its tasks "running" forever; every read
checks that the supervisor of each unended task is still the same live process, and ends the
tasks of a dead one as NODE_FAIL (the machine failed, not the job: not charged), killing what it
had left running.

There are no tenants here: every local job runs as the platform's own Unix user, and the
`users` and `tenant` arguments of the protocol are ignored. Teams are kept apart by their job
directories and by the sandbox each task runs in (`sandbox`, with bubblewrap), which shows a
task its own directory and nothing else of theirs. `LOCAL_BACKEND_SANDBOX` says whether it must
(`required`: a job that cannot be sandboxed fails), may (`auto`: sandboxed when bubblewrap works
on this machine, otherwise not, and the job pages say so) or must not (`off`) be used.
Production refuses the backend altogether (`LOCAL_BACKEND_ALLOWED`).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

from hpc import job_folder
from hpc.arrays import parse_array
from hpc.backends import local_state
from hpc.backends.local_reservations import LocalReservations
from hpc.backends.local_state import (
    CANCELLED,
    NODE_FAIL,
    PENDING,
    STATE_DIRECTORY_NAME,
    SUPERVISOR_STARTUP_SECONDS,
    JobRecord,
    StateDirectory,
    TaskRecord,
    kill_task_processes,
    now_utc,
    signal_task_processes,
)
from hpc.backends.sandbox import (
    AUTO,
    OFF,
    REQUIRED,
    SANDBOX_MODES,
    SandboxCheck,
    sandbox_check,
)
from hpc.errors import BridgeError, JobFileUnsafe

# The local backend spells its states as Slurm does, and reads them with Slurm's one table.
from hpc.slurm.accounting import api_state
from hpc.slurm.jobs import SCRIPT_FILE, result_listing, stream_folders, stream_names
from hpc.types import (
    InputFile,
    JobSpec,
    QueueEntry,
    Reservation,
    ReservationSpec,
    ResultFile,
    RunRecord,
    Stream,
    SubmitResult,
    Tenant,
    environment_name_problem,
    output_file_name,
)

PARTITION = "local"
# `find` answers for jobs submitted this recently, as `sacct` does for "the last days".
FIND_WINDOW = timedelta(days=7)
LAUNCH_TIMEOUT_SECONDS = 30.0
_REPOSITORY = Path(__file__).resolve().parents[2]
_JOB_ID = re.compile(r"([0-9]+)(?:_([0-9]+))?")
# As on Slurm: at most this many result files are listed, this many folders deep.
MAX_RESULT_FILES = 10001
MAX_RESULT_DEPTH = 16


logger = logging.getLogger(__name__)


class LocalSchedulerError(BridgeError):
    """The local machine could not record or start a job (disk full, no process left): it may
    pass on retry."""

    is_transient = True


class LocalBackendRefused(BridgeError):
    """This deployment does not run local jobs (`LOCAL_BACKEND_ALLOWED` is false, as in
    production): permanent."""


def _sandbox_mode(mode: str) -> str:
    if mode not in SANDBOX_MODES:
        raise ValueError(
            f"LOCAL_BACKEND_SANDBOX is {mode!r}: it must be one of {', '.join(SANDBOX_MODES)}"
        )
    return mode


SandboxState = Literal["sandboxed", "unsandboxed", "off", "refused"]


@dataclass(frozen=True)
class SandboxStatus:
    """How this machine runs local jobs, for the job pages: `sandboxed`; `unsandboxed` (auto
    mode, without a working bubblewrap); `off` (the sandbox is turned off); `refused` (local
    jobs cannot run: a sandbox is required and there is none, or the backend is not allowed)."""

    state: SandboxState
    problem: str = ""


def local_sandbox_status(*, allowed: bool, mode: str, bwrap: str) -> SandboxStatus:
    """How local jobs run under these settings (`LOCAL_BACKEND_ALLOWED`, `_SANDBOX`, `_BWRAP`);
    bubblewrap's trial run is made once per process."""
    if not allowed:
        return SandboxStatus("refused", "local jobs are not allowed on this deployment")
    mode = _sandbox_mode(mode)
    if mode == OFF:
        return SandboxStatus("off")
    check = sandbox_check(bwrap)
    if check.is_available:
        return SandboxStatus("sandboxed")
    if mode == AUTO:
        return SandboxStatus("unsandboxed", check.problem)
    return SandboxStatus(
        "refused",
        f"jobs must be sandboxed here (LOCAL_BACKEND_SANDBOX=required) and {check.problem}",
    )


@functools.cache
def _warn_unsandboxed(problem: str) -> None:
    """Once per process and reason."""
    logger.warning(
        "Local jobs run WITHOUT a sandbox (LOCAL_BACKEND_SANDBOX=auto): %s. A job can read "
        "every other job's files and the platform's; install bubblewrap to sandbox them.",
        problem,
    )


class _Refused(Exception):
    """A spec the local machine cannot honour; its message is the SubmitResult's error."""


@dataclass(frozen=True)
class _Plan:
    indices: tuple[int | None, ...]  # (None,) for a job that is not an array
    throttle: int | None


class LocalBackend:
    """The `Backend` protocol on this machine. `root` holds everything: the job directories
    (`JobSpec.directory` is relative to it) and the scheduler's state.

    `seconds_per_minute` scales time limits, for tests only (2.0 makes a 1-minute limit last 2
    seconds); `kill_grace_seconds` is the time between the SIGTERM and the SIGKILL that end a
    task at its time limit or on cancel, as Slurm's KillWait. `sandbox` (`auto`, `required`,
    `off`) and `bwrap` (the program) are the settings `LOCAL_BACKEND_SANDBOX` and
    `LOCAL_BACKEND_BWRAP`, `allowed` is `LOCAL_BACKEND_ALLOWED`: the services pass them.

    Raises `LocalBackendRefused` where the deployment does not allow local jobs, so that no path
    runs one in production."""

    def __init__(
        self,
        root: str | Path,
        *,
        cpus: int | None = None,
        python: str = sys.executable,
        seconds_per_minute: float = 60.0,
        kill_grace_seconds: float = 5.0,
        sandbox: str = AUTO,
        bwrap: str = "bwrap",
        allowed: bool = True,
    ) -> None:
        if not allowed:
            raise LocalBackendRefused(
                "this deployment does not run jobs on the local backend (LOCAL_BACKEND_ALLOWED "
                "is false): its jobs would run as the platform's own processes"
            )
        self.sandbox_mode = _sandbox_mode(sandbox)
        self.bwrap = bwrap
        self.root = Path(root).resolve()
        self.cpus = cpus if cpus is not None else (os.cpu_count() or 1)
        self.python = python
        self.seconds_per_minute = seconds_per_minute
        self.kill_grace_seconds = kill_grace_seconds
        self.state = StateDirectory(self.root)
        self.state.create()
        self._reservations = LocalReservations(self.state, self.cpus)

    # Submission ----------------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> list[SubmitResult]:
        plans: list[_Plan | str] = []
        for spec in specs:
            try:
                plans.append(self._plan(spec))
            except _Refused as refusal:
                plans.append(str(refusal))
        task_count = sum(len(plan.indices) for plan in plans if isinstance(plan, _Plan))
        sandbox = self.sandbox() if task_count else SandboxCheck(None)
        try:
            next_id = self.state.allocate_ids(task_count) if task_count else 0
            results: list[SubmitResult] = []
            launches: list[tuple[int, subprocess.Popen[bytes] | None]] = []
            for spec, plan in zip(specs, plans, strict=True):
                if isinstance(plan, str):
                    results.append(SubmitResult(spec.name, None, error=plan))
                    continue
                self._record(spec, plan, next_id, sandbox)
                launches.append((next_id, self._launch(next_id)))
                results.append(SubmitResult(spec.name, str(next_id)))
                next_id += len(plan.indices)
        except OSError as error:
            raise LocalSchedulerError(
                f"the local scheduler could not record a job: {error}"
            ) from error
        for job_id, launcher in launches:
            self._await_launch(job_id, launcher)
        return results

    def sandbox(self) -> SandboxCheck:
        """The bwrap this backend's jobs run under; without one, why (`problem`). In `auto`
        mode a job then runs unsandboxed, and the logs say so; in `required` mode it fails."""
        if self.sandbox_mode == OFF:
            return SandboxCheck(None, "the sandbox is turned off (LOCAL_BACKEND_SANDBOX=off)")
        check = sandbox_check(self.bwrap)
        if not check.is_available and self.sandbox_mode == AUTO:
            _warn_unsandboxed(check.problem)
        return check

    def _plan(self, spec: JobSpec) -> _Plan:
        """Checks what this machine can honour; raises `_Refused` with the reason."""
        if spec.partition != PARTITION:
            raise _Refused(f"invalid partition {spec.partition!r}: the local cluster has 'local'")
        if spec.nodes != 1:
            raise _Refused(f"{spec.nodes} nodes requested: the local cluster has one")
        if spec.gpus != 0:
            raise _Refused(f"{spec.gpus} GPUs requested: the local cluster has none")
        if problem := _options_refused(spec):
            raise _Refused(problem)
        if size_problem := spec.size.problem():
            raise _Refused(size_problem)
        requested = spec.ntasks * spec.cpus_per_task
        if requested > self.cpus:
            raise _Refused(f"{requested} CPUs requested: the local machine has {self.cpus}")
        if not spec.script.startswith("#!"):
            raise _Refused("the script must start with #!")
        if spec.reservation is not None and not self._reservations.exists(spec.reservation):
            raise _Refused(f"Requested reservation {spec.reservation!r} is invalid")
        if "\0" in spec.name:
            raise _Refused("the job name contains a NUL character")
        for name, value in spec.environment.items():
            if problem := environment_name_problem(name):
                raise _Refused(problem)
            if "\0" in value:
                raise _Refused(f"the value of {name} contains a NUL character")
        self._job_directory(spec.directory, refuse=_Refused)
        if spec.array is None:
            return _Plan(indices=(None,), throttle=None)
        try:
            array = parse_array(spec.array)
        except ValueError as error:
            raise _Refused(str(error)) from None
        return _Plan(indices=array.indices, throttle=array.throttle)

    def _job_directory(self, directory: str, *, refuse: type[Exception] = BridgeError) -> Path:
        """The absolute job directory; a path that leaves the root or reaches into the
        scheduler's state is refused."""
        relative = PurePosixPath(directory)
        if (
            relative.is_absolute()
            or not relative.parts
            or ".." in relative.parts
            or relative.parts[0] == STATE_DIRECTORY_NAME
        ):
            raise refuse(f"invalid job directory {directory!r}")
        return self.root / relative

    def _record(self, spec: JobSpec, plan: _Plan, first_id: int, sandbox: SandboxCheck) -> None:
        """Writes the script and the job's records; the name goes last, so that a job `find`
        can see is a job that exists. A job that must be sandboxed and cannot be is recorded
        all the same, with the refusal its supervisor fails every task with."""
        self._job_directory(spec.directory)
        folder = job_folder.open_folder(self.root, spec.directory, create=True)
        try:
            for name in stream_folders(spec):
                # The folders the job's output goes in, which the supervisor does not make.
                os.close(job_folder.open_folder(self.root, f"{spec.directory}/{name}", create=True))
            for input_file in spec.input_files:
                _stage_input(folder, input_file)
            script = job_folder.open_for_writing(folder, SCRIPT_FILE, mode=0o700)
            with os.fdopen(script, "wb") as file:
                file.write(spec.script.encode())
        finally:
            os.close(folder)
        submit_time = now_utc()
        tasks = tuple((first_id + offset, index) for offset, index in enumerate(plan.indices))
        job = JobRecord(
            job_id=first_id,
            name=spec.name,
            directory=spec.directory,
            time_limit_minutes=spec.time_limit_minutes,
            ntasks=spec.ntasks,
            cpus_per_task=spec.cpus_per_task,
            machine_cpus=self.cpus,
            tasks=tasks,
            throttle=plan.throttle,
            environment=dict(spec.environment),
            submit_time=submit_time,
            seconds_per_minute=self.seconds_per_minute,
            kill_grace_seconds=self.kill_grace_seconds,
            sandbox=sandbox.program,
            streams=stream_names(spec),
            open_mode=spec.options.open_mode,
            refusal=(
                f"not run: jobs here must be sandboxed (LOCAL_BACKEND_SANDBOX=required) and "
                f"cannot be: {sandbox.problem}"
                if self.sandbox_mode == REQUIRED and not sandbox.is_available
                else None
            ),
        )
        records = [
            TaskRecord(
                job_id=first_id,
                raw_job_id=raw_job_id,
                array_task_id=index,
                name=spec.name,
                scheduler_state=PENDING,
                submit_time=submit_time,
                time_limit_minutes=spec.time_limit_minutes,
                requested_cpus=job.requested_cpus,
            )
            for raw_job_id, index in tasks
        ]
        self.state.register_job(job, records)
        self.state.register_name(spec.name, first_id, submit_time)

    def _launch(self, job_id: int) -> subprocess.Popen[bytes] | None:
        """Starts the job's supervisor in a session of its own, with an environment that holds
        nothing of this process's (the worker's secrets stay here)."""
        try:
            return subprocess.Popen(
                [
                    self.python,
                    *("-m", "hpc.backends.local_runner"),
                    *("--root", str(self.root), "--job", str(job_id)),
                ],
                cwd=self.root,
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

    def _await_launch(self, job_id: int, launcher: subprocess.Popen[bytes] | None) -> None:
        """Waits for the launcher, which exits once its child has claimed the job's tasks. When
        that failed, the tasks no supervisor claimed end as NODE_FAIL at once."""
        if launcher is not None:
            try:
                if launcher.wait(timeout=LAUNCH_TIMEOUT_SECONDS) == 0:
                    return
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
        for record in self.state.read_tasks(job_id):
            if record.supervisor is None:
                self._end_abandoned(record, NODE_FAIL, "the local supervisor did not start")

    # Reading -------------------------------------------------------------------------------------

    def find(self, names: Sequence[str], users: Sequence[str]) -> dict[str, str]:
        """Every local job is the platform's: `users` is ignored."""
        since = now_utc() - FIND_WINDOW
        found = {}
        for name in names:
            entry = self.state.read_name(name)
            if entry is not None and entry[1] >= since:
                found[name] = str(entry[0])
        return found

    def queue(self, users: Sequence[str]) -> list[QueueEntry]:
        """Every unended local task, whatever `users` says: there are no tenants here."""
        entries = []
        liveness: dict[int, bool] = {}
        for job_id in self.state.active_job_ids():
            for record in self._settled(self.state.read_tasks(job_id), liveness):
                if not record.is_ended:
                    entries.append(
                        QueueEntry(
                            job_id=_display_id(record),
                            array_job_id=str(record.job_id),
                            array_task_id=record.array_task_id,
                            name=record.name,
                            state=api_state(record.scheduler_state),
                            scheduler_state=record.scheduler_state,
                            reason=record.reason,
                            partition=PARTITION,
                            cpus=record.requested_cpus,
                            start_time=record.start_time,
                        )
                    )
        return entries

    def runs(self, job_ids: Sequence[str]) -> list[RunRecord]:
        seen: set[int] = set()
        runs = []
        liveness: dict[int, bool] = {}
        for job_id in job_ids:
            match = _JOB_ID.fullmatch(job_id)
            if match is None:
                continue
            records = self.state.read_tasks(int(match[1]))
            if match[2] is not None:
                records = [r for r in records if r.array_task_id == int(match[2])]
            for record in self._settled(records, liveness):
                if record.raw_job_id not in seen:
                    seen.add(record.raw_job_id)
                    runs.append(_run_record(record))
        return runs

    def runs_of_users(
        self, users: Sequence[str], start: datetime, end: datetime
    ) -> list[RunRecord]:
        """Every run recorded here that was in the system (submitted, and not yet ended) at
        some time between `start` and `end`, whatever `users` says. The local backend has no
        tenants: every job on it runs as the platform's own user, so there is no Unix user to
        tell one team's runs from another's, and every local job is returned; the platform knows
        its jobs by their ids. (A sandboxed job cannot submit one of its own: the scheduler's
        state is not visible inside.)

        Reads every job the root has held that may overlap the window. A job directory last
        changed before `start` whose job is not active ended before the window, unread."""
        active = set(self.state.active_job_ids())
        runs = []
        liveness: dict[int, bool] = {}
        for entry in os.scandir(self.state.jobs):
            if not entry.name.isdigit():
                continue
            job_id = int(entry.name)
            if job_id not in active and entry.stat().st_mtime < start.timestamp():
                continue
            for record in self._settled(self.state.read_tasks(job_id), liveness):
                if record.submit_time <= end and (
                    record.end_time is None or record.end_time >= start
                ):
                    runs.append(_run_record(record))
        return sorted(runs, key=lambda run: int(run.raw_job_id))

    def output_tail(
        self,
        tenant: Tenant | None,
        directory: str,
        stream: Stream,
        array_task_id: int | None,
        tail_bytes: int,
        name: str | None = None,
    ) -> bytes:
        """Read as the platform's user (`tenant` is ignored, None here), without following a
        link (`hpc.job_folder`): raises `JobFileUnsafe` when the job replaced the file by one,
        or by anything but a regular file."""
        self._job_directory(directory)
        try:
            return job_folder.read_tail(
                self.root,
                directory,
                name or output_file_name(stream, array_task_id),
                max(0, tail_bytes),
            )
        except job_folder.JobFileRefused as error:
            raise JobFileUnsafe(f"{error.filename}: {error.strerror}") from None

    # Files ---------------------------------------------------------------------------------------

    def result_files(self, tenant: Tenant | None, directory: str) -> list[ResultFile]:
        """Every regular file under the job's directory, each subfolder entered from its
        parent's descriptor without following a link; what is there but not read (links,
        FIFOs, files with other hard links) is listed with its `problem`. `tenant` is ignored
        (None here)."""
        self._job_directory(directory)
        try:
            folder = job_folder.open_folder(self.root, directory)
        except FileNotFoundError:
            return []
        except job_folder.JobFileRefused as error:
            raise JobFileUnsafe(f"{error.filename}: {error.strerror}") from None
        try:
            files, skipped = job_folder.list_files(
                folder, max_files=MAX_RESULT_FILES, max_depth=MAX_RESULT_DEPTH
            )
        finally:
            os.close(folder)
        return result_listing(files, skipped)

    def result_fetch(
        self,
        tenant: Tenant | None,
        directory: str,
        names: Sequence[str],
        save: Callable[[str, BinaryIO], None],
    ) -> dict[str, str]:
        """Each file opened from the job folder's descriptor without following a link: a name
        that became a link, or anything but a regular file, since the listing (a folder on its
        way swapped for a link included) is not read and comes back with the reason."""
        self._job_directory(directory)
        refused: dict[str, str] = {}
        try:
            folder = job_folder.open_folder(self.root, directory)
        except (FileNotFoundError, job_folder.JobFileRefused) as error:
            return dict.fromkeys(names, job_folder.refusal_reason(error))
        try:
            for name in names:
                try:
                    descriptor, _ = job_folder.open_for_reading(folder, name)
                except OSError as error:
                    refused[name] = job_folder.refusal_reason(error)
                    continue
                with os.fdopen(descriptor, "rb") as handle:
                    save(name, handle)
        finally:
            os.close(folder)
        return refused

    def expected_start(self, spec: JobSpec) -> datetime | None:
        """The local scheduler gives no estimate."""
        return None

    # Reservations --------------------------------------------------------------------------------

    def reservation_create(self, spec: ReservationSpec) -> Reservation:
        return self._reservations.create(spec)

    def reservation_update(self, spec: ReservationSpec) -> Reservation:
        return self._reservations.update(spec)

    def reservation_delete(self, name: str) -> None:
        self._reservations.delete(name)

    def reservations(self) -> list[Reservation]:
        return self._reservations.list()

    # Cancel --------------------------------------------------------------------------------------

    def cancel(self, tenant: Tenant | None, job_ids: Sequence[str]) -> None:
        """A pending task ends without starting; a running one gets SIGTERM (its supervisor
        follows with SIGKILL after the grace). Tasks whose supervisor is gone are killed and
        ended here. `tenant` is ignored (None here)."""
        unended: list[TaskRecord] = []
        for job_id in job_ids:
            match = _JOB_ID.fullmatch(job_id)
            if match is None:
                raise BridgeError(f"invalid job id {job_id!r}")
            records = self.state.read_tasks(int(match[1]))
            if match[2] is not None:
                records = [r for r in records if r.array_task_id == int(match[2])]
            unended += [record for record in records if not record.is_ended]
        # Every request before any signal: a supervisor that sees a task die reads them, to tell
        # a cancel from a failure and not to start the next task of an array in its place.
        for record in unended:
            self.state.request_cancel(record.job_id, record.raw_job_id)
        for record in unended:
            if record.supervisor is not None and record.supervisor.is_alive():
                if record.process is not None:
                    signal_task_processes(record.process, signal.SIGTERM, record.sandbox)
            else:
                self._end_abandoned(record, CANCELLED, "")

    # Supervisors that are gone -------------------------------------------------------------------

    def _settled(self, records: list[TaskRecord], liveness: dict[int, bool]) -> list[TaskRecord]:
        """The records, with the unended tasks of dead supervisors ended as NODE_FAIL.
        `liveness` caches each supervisor's answer for the length of one call."""
        settled = []
        for record in records:
            if not record.is_ended and not self._is_supervised(record, liveness):
                record = self._end_abandoned(
                    record, NODE_FAIL, "the local supervisor of this task is gone"
                )
            settled.append(record)
        return settled

    @staticmethod
    def _is_supervised(record: TaskRecord, liveness: dict[int, bool]) -> bool:
        if record.supervisor is None:
            # Its supervisor may be starting; it never will after this long.
            age = (now_utc() - record.submit_time).total_seconds()
            return age < SUPERVISOR_STARTUP_SECONDS
        if record.supervisor.pid not in liveness:
            liveness[record.supervisor.pid] = record.supervisor.is_alive()
        return liveness[record.supervisor.pid]

    def _end_abandoned(self, record: TaskRecord, state: str, reason: str) -> TaskRecord:
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
                scheduler_state=state,
                reason=reason,
                end_time=end_time,
                elapsed_seconds=max(0, elapsed),
            )

        ended = self.state.update_task(record.job_id, record.raw_job_id, end)
        if ended.is_ended:
            self.state.release_if_ended(record.job_id)
        return ended

    def close(self) -> None:
        """Nothing to release: every call opens and closes what it uses."""


def _display_id(record: TaskRecord) -> str:
    if record.array_task_id is None:
        return str(record.job_id)
    return f"{record.job_id}_{record.array_task_id}"


def _run_record(record: TaskRecord) -> RunRecord:
    elapsed = record.elapsed_seconds
    if not record.is_ended and record.start_time is not None:
        elapsed = max(0, int((now_utc() - record.start_time).total_seconds()))
    return RunRecord(
        job_id=_display_id(record),
        raw_job_id=str(record.raw_job_id),
        array_job_id=str(record.job_id),
        array_task_id=record.array_task_id,
        name=record.name,
        state=api_state(record.scheduler_state),
        scheduler_state=record.scheduler_state,
        exit_code=record.exit_code,
        submit_time=record.submit_time,
        start_time=record.start_time,
        end_time=record.end_time,
        elapsed_seconds=elapsed,
        allocated_cpus=record.allocated_cpus,
        allocated_gpus=0,
        cpu_seconds=record.cpu_seconds,
        time_limit_minutes=record.time_limit_minutes,
        reason=record.reason,
        partition=PARTITION,
        requested_cpus=record.requested_cpus,
    )


def _options_refused(spec: JobSpec) -> str | None:
    """What of the spec's options one machine without a scheduler cannot honour."""
    options = spec.options
    unsupported = (
        ("a dependency on other jobs", options.dependency),
        ("node features (--constraint)", options.constraint),
        ("a signal before the time limit (--signal)", options.signal),
    )
    for what, value in unsupported:
        if value:
            return f"the local cluster does not take {what}"
    return None


def _stage_input(folder: int, input_file: InputFile) -> None:
    """Copies one input file into the job's folder (the API checked its name), in chunks, as a
    new file made without following a link (`hpc.job_folder`)."""
    descriptor = job_folder.open_for_writing(folder, input_file.name, create_folders=True)
    with input_file.open() as source, os.fdopen(descriptor, "wb") as target:
        shutil.copyfileobj(source, target, 1024 * 1024)
