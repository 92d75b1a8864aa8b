"""The `local` scheduler: jobs run as process groups on this machine, with the interface and the
states of the Slurm backend, a hard time limit and CPU time measured by the kernel. It serves the
embedded demo and development; it is not offered to owners.

`LocalBackend` writes each job's records under `root/.local-scheduler` and starts one detached
supervisor per job (`local_runner`), which runs the tasks and writes their records; the backend
reads those records to answer `queue`, `runs` and `find` (`local_accounting`). Nothing is held in
memory between calls, so any number of backends in any number of processes can share one root.

A supervisor that died (kill -9, a reboot) would leave its tasks "running" forever; every read
ends the tasks of a dead one as NODE_FAIL (`local_supervision`, which also starts the
supervisors and signals them on cancel).

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
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

from hpc import job_folder
from hpc.arrays import parse_array
from hpc.backends import local_accounting, local_supervision
from hpc.backends.local_accounting import PARTITION
from hpc.backends.local_reservations import LocalReservations
from hpc.backends.local_state import (
    PENDING,
    STATE_DIRECTORY_NAME,
    JobRecord,
    StateDirectory,
    TaskRecord,
    now_utc,
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
                launches.append(
                    (next_id, local_supervision.launch_supervisor(self.python, self.root, next_id))
                )
                results.append(SubmitResult(spec.name, str(next_id)))
                next_id += len(plan.indices)
        except OSError as error:
            raise LocalSchedulerError(
                f"the local scheduler could not record a job: {error}"
            ) from error
        for job_id, launcher in launches:
            local_supervision.await_launch(self.state, job_id, launcher)
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

    # Reading -------------------------------------------------------------------------------------

    def find(self, names: Sequence[str], users: Sequence[str]) -> dict[str, str]:
        """Every local job is the platform's: `users` is ignored."""
        return local_accounting.find(self.state, names)

    def queue(self, users: Sequence[str]) -> list[QueueEntry]:
        """Every unended local task, whatever `users` says: there are no tenants here."""
        return local_accounting.queue(self.state)

    def runs(self, job_ids: Sequence[str]) -> list[RunRecord]:
        return local_accounting.runs(self.state, job_ids)

    def runs_of_users(
        self, users: Sequence[str], start: datetime, end: datetime
    ) -> list[RunRecord]:
        """Every run recorded here that was in the system (submitted, and not yet ended) at
        some time between `start` and `end`, whatever `users` says. The local backend has no
        tenants: every job on it runs as the platform's own user, so there is no Unix user to
        tell one team's runs from another's, and every local job is returned; the platform knows
        its jobs by their ids. (A sandboxed job cannot submit one of its own: the scheduler's
        state is not visible inside.)"""
        return local_accounting.runs_between(self.state, start, end)

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
            records = local_accounting.tasks_of(self.state, job_id)
            if records is None:
                raise BridgeError(f"invalid job id {job_id!r}")
            unended += [record for record in records if not record.is_ended]
        local_supervision.cancel_tasks(self.state, unended)

    def close(self) -> None:
        """Nothing to release: every call opens and closes what it uses."""


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
