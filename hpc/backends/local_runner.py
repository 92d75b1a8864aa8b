"""The supervisor of one job of the `local` scheduler backend (the state it writes is described
and kept in `local_state`).

`LocalBackend.submit` records a job and starts `python -m hpc.backends.local_runner
--root ROOT --job ID` in a new session. That process forks: the parent exits as soon as the child
has claimed the job's tasks, so the Celery worker that started it reaps it at once, and the child
belongs to no process that can die under it (a worker killed with SIGKILL or restarted leaves its
jobs running). The child supervises every task of the job until each has ended: it waits for
CPU slots, runs the script with bash in a new session (inside a bubblewrap sandbox when the job
has one: `sandbox`), enforces the time limit, answers cancel requests, measures CPU time and
writes the final record.

One supervisor per job, not per task: an array of 1,000 tasks would otherwise be 1,000 Python
processes (about 10 MiB each) waiting for two CPUs, and the `%N` throttle is a plain counter
inside one process instead of a lock protocol between many.

CPU time is what the kernel reports when the supervisor reaps a process (`wait4` rusage,
user + system). The script's rusage includes every descendant that was reaped by its parent; the
supervisor is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so processes orphaned inside a
task are reparented to it and their time is added when it reaps them. Not counted: a process
that left the task's session (`setsid`) and therefore escapes both the kill and the accounting,
and anything still running when the supervisor itself is killed (such a task ends NODE_FAIL,
which is not charged).

A sandboxed task is three processes deep: the supervisor starts bwrap (the session leader, the
task's `process`), which starts the sandbox's init (bwrap again, pid 1 of the task's PID
namespace, the task's `sandbox`), which starts the script. Orphans inside the sandbox go to its
init, never to the supervisor, and the init reaps them and the script, so their CPU time is in
the init's rusage. The outer bwrap exits with the script's status (128 + the signal's number
for a script killed by one, the same exit code as unsandboxed) as soon as the script has exited,
without reaping the init, which is reparented to the supervisor (the subreaper) and reaped by it
once everything left inside is killed: the supervisor adds its time to the task then (the init
has a session of its own, so it is known by its pid, which bwrap reports). Signals go to the
processes inside the namespace, never to bwrap (`local_state.signal_task_processes`): the init
would lose the CPU time of what it had not reaped yet, and the outer bwrap would take the
sandbox with it, without the SIGTERM's grace. Nothing inside can leave the namespace, so
`setsid` escapes neither the kill nor the accounting there.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import os
import select
import shutil
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import FrameType

from hpc import job_folder
from hpc.backends.local_state import (
    _PR_SET_CHILD_SUBREAPER,
    CANCELLED,
    CLAIM_TIMEOUT_SECONDS,
    COMPLETED,
    FAILED,
    FINISHING_SECONDS,
    NODE_FAIL,
    POLL_SECONDS,
    RUNNING,
    SCRIPT_PATH,
    TIMEOUT,
    JobRecord,
    ProcessIdentity,
    StateDirectory,
    TaskRecord,
    kill_task_processes,
    now_utc,
    read_process_status,
    session_members,
    signal_task_processes,
)
from hpc.backends.sandbox import sandbox_command, sandbox_init_identity
from hpc.slurm.filenames import DEV_NULL, batch_values, name_with
from hpc.types import output_file_name

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
    process: ProcessIdentity | None = None  # the leader of its session: bash, or bwrap
    sandbox: ProcessIdentity | None = None  # the sandbox's init, for a sandboxed task
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
            if self.job.refusal is not None:
                for task in self.tasks:
                    if task.phase != _DONE:
                        self._end(task, FAILED, self.job.refusal, exit_code=None)
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
                kill_task_processes(task.process, task.sandbox)
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
                    and (
                        task.process.pid == pid
                        or (status and status.session == task.process.pid)
                        or (task.sandbox is not None and task.sandbox.pid == pid)
                    )
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
                signal_task_processes(task.process, signal.SIGKILL, task.sandbox)
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
                    signal_task_processes(task.process, signal.SIGKILL, task.sandbox)
                    task.kill_at = None
            elif task.phase == _FINISHING:
                assert task.process is not None
                leftovers = self._leftovers(task)
                if leftovers and now >= task.finishing_until:
                    kill_task_processes(task.process, task.sandbox)
                elif leftovers:
                    # Again: a process forked while the first SIGKILL went round escaped it.
                    signal_task_processes(task.process, signal.SIGKILL, task.sandbox)
                if not leftovers or now >= task.finishing_until:
                    self._finish(task, cancel_requested=task.raw_job_id in cancel_requests)

    @staticmethod
    def _leftovers(task: _Task) -> list[int]:
        """What of a task whose script has exited is still to be reaped: the members of its
        session; and a sandbox's init, which has its own session and stays until everything
        inside has ended (they are all its descendants) and we have reaped it."""
        assert task.process is not None
        leftovers = session_members(task.process.pid, include_zombies=True)
        if task.sandbox is not None:
            status = read_process_status(task.sandbox.pid)
            if status is not None and status.start_ticks == task.sandbox.start_ticks:
                leftovers.append(task.sandbox.pid)
        return leftovers

    def _terminate(self, task: _Task, ending_state: str, now: float) -> None:
        assert task.process is not None
        task.ending_state = ending_state
        signal_task_processes(task.process, signal.SIGTERM, task.sandbox)
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
        the user's variables, and the SLURM_* variables scripts written for Slurm read. HOME is
        the job's directory: the only one a sandboxed job has, and not one shared by teams."""
        environment = {"PATH": SCRIPT_PATH, "HOME": str(directory)}
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

    def _stream_names(self, task: _Task) -> dict[str, str]:
        """The task's stdout, stderr and stdin names in the job's directory, the patterns
        filled as Slurm fills a batch step's (`%x` and `%u` were filled on submission)."""
        values = batch_values(
            job_id=task.raw_job_id,
            array_job_id=self.job.job_id,
            array_task_id=task.array_task_id,
            node=os.uname().nodename.split(".")[0],
        )
        streams = self.job.streams or {
            stream: output_file_name(stream, task.array_task_id) for stream in ("stdout", "stderr")
        }
        return {stream: name_with(pattern, values) for stream, pattern in streams.items()}

    def _stream_files(self, task: _Task) -> tuple[int | None, int | None, int | None]:
        """The task's stdin, stdout and stderr as descriptors (None for /dev/null, and for no
        input), opened in the job's folder without following a link (`hpc.job_folder`):
        another task of the array may have left a link, a FIFO or a hard link under a name,
        and the supervisor writes only into a new file of its own, or appends (`--open-mode`)
        only to a regular file of the folder. stderr shares stdout's file when the script sent
        both there. The caller closes them."""
        names = self._stream_names(task)
        opened: dict[str, int] = {}
        folder = job_folder.open_folder(self.state.root, self.job.directory)
        try:

            def output(name: str) -> int | None:
                if name == DEV_NULL:
                    return None
                if name not in opened:
                    opening = (
                        job_folder.open_for_appending
                        if self.job.open_mode == "append"
                        else job_folder.open_for_writing
                    )
                    opened[name] = opening(folder, name)
                return opened[name]

            stdout, stderr = output(names["stdout"]), output(names["stderr"])
            stdin = None
            if names.get("stdin", DEV_NULL) != DEV_NULL:
                stdin, _ = job_folder.open_for_reading(folder, names["stdin"])
        except BaseException:
            for descriptor in opened.values():
                os.close(descriptor)
            raise
        finally:
            os.close(folder)
        return stdin, stdout, stderr

    def _start(self, task: _Task, slots: list[int]) -> None:
        task.slots = slots
        directory = self.state.root / self.job.directory
        command = [self.bash, "job.sh"]
        info_read = info_write = None
        if self.job.sandbox is not None:
            info_read, info_write = os.pipe()
            command = sandbox_command(
                self.job.sandbox, directory, command, info_descriptor=info_write
            )
        try:
            stdin, stdout, stderr = self._stream_files(task)
            try:
                task.popen = subprocess.Popen(
                    command,
                    cwd=directory,
                    env=self._environment(task, directory),
                    stdin=subprocess.DEVNULL if stdin is None else stdin,
                    stdout=subprocess.DEVNULL if stdout is None else stdout,
                    stderr=subprocess.DEVNULL if stderr is None else stderr,
                    start_new_session=True,  # the task's own session and process group
                    close_fds=True,
                    pass_fds=() if info_write is None else (info_write,),
                )
            finally:
                # The task's process has its own copies now.
                for descriptor in {stdin, stdout, stderr}:
                    if descriptor is not None:
                        os.close(descriptor)
        except (OSError, ValueError) as error:
            if info_read is not None:
                os.close(info_read)
            self._end(task, FAILED, f"the script could not start: {error}", exit_code=None)
            return
        finally:
            if info_write is not None:
                os.close(info_write)
        # Our child cannot be reaped by anyone else, so its /proc entry is there to read.
        task.process = ProcessIdentity.of(task.popen.pid) or ProcessIdentity(task.popen.pid, 0)
        if info_read is not None:
            task.sandbox = sandbox_init_identity(info_read)
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
                sandbox=task.sandbox,
            ),
        )
        if record.is_ended:
            # The backend ended it meanwhile, believing this supervisor dead: honour that.
            kill_task_processes(task.process, task.sandbox)


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
