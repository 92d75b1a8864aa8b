"""What Slurm says about jobs: the queue (`squeue`) and accounting (`sacct`), read into typed
records. Every format is explicit and delimited; the parsers are pure functions from text to
records, tested on output recorded from real clusters.

The job name is the one field a user's text could reach, so it is always printed last: a `|`
inside it cannot shift the other fields."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler_bridge.backends.types import (
    CANCELLED,
    COMPLETED,
    COMPLETING,
    ENDED_STATES,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    PREEMPTED,
    RUNNING,
    TIMEOUT,
    UNDETERMINED,
    QueueEntry,
    RunRecord,
)
from scheduler_bridge.slurm.errors import UnexpectedOutput
from scheduler_bridge.slurm.parsers import parse_parsable2

# --- States -------------------------------------------------------------------------------------

_STATES = {
    **dict.fromkeys(
        (
            "PENDING",
            "CONFIGURING",
            "REQUEUED",
            "REQUEUE_HOLD",
            "REQUEUE_FED",
            "RESV_DEL_HOLD",
            "SUSPENDED",
            "STOPPED",
        ),
        PENDING,
    ),
    **dict.fromkeys(("RUNNING", "RESIZING"), RUNNING),
    **dict.fromkeys(("COMPLETING", "SIGNALING", "STAGE_OUT"), COMPLETING),
    "COMPLETED": COMPLETED,
    **dict.fromkeys(("FAILED", "SPECIAL_EXIT"), FAILED),
    **dict.fromkeys(("CANCELLED", "REVOKED"), CANCELLED),
    **dict.fromkeys(("TIMEOUT", "DEADLINE"), TIMEOUT),
    "OUT_OF_MEMORY": OUT_OF_MEMORY,
    **dict.fromkeys(("NODE_FAIL", "BOOT_FAIL"), NODE_FAIL),
    "PREEMPTED": PREEMPTED,
}


def api_state(slurm_state: str) -> str:
    """The API state of a Slurm state as squeue or sacct prints it ("RUNNING", "CANCELLED by
    1000", "PENDING+"...). A state this table does not know is `undetermined`, never an end: a
    job is not settled on a guess."""
    # sacct adds " by <uid>" to CANCELLED, and some versions flag states with a trailing "+".
    word = slurm_state.strip().split(" ", 1)[0].rstrip("+")
    return _STATES.get(word, UNDETERMINED)


def run_state(slurm_state: str) -> str:
    """The API state of one run in `sacct -D` output. A run that Slurm requeued (node failure,
    preemption, an administrator's requeue) shows `REQUEUED` once its next run exists: that run
    ended through no fault of the job's owner, so it is `preempted`, an owner-caused end that is
    recorded and never charged, and not `pending` as the same word means in squeue."""
    if slurm_state.strip().split(" ", 1)[0] == "REQUEUED":
        return PREEMPTED
    return api_state(slurm_state)


# --- Job ids ------------------------------------------------------------------------------------

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")


def valid_job_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids once each, in order; raises `ValueError` for anything but `123` or `123_4`, so
    that no other text reaches a command line as an id."""
    unique = list(dict.fromkeys(job_ids))
    for job_id in unique:
        if not _JOB_ID.fullmatch(job_id):
            raise ValueError(f"not a Slurm job id: {job_id!r}")
    return unique


def chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- squeue -------------------------------------------------------------------------------------

SQUEUE_FIELDS = ["job_id", "array_job_id", "array_task_id", "state", "reason", "name"]
# %i the job id ("123", "123_4", or "123_[5-19]" for tasks not split out yet), %F the array's id
# (the job's own when not an array), %K the task id or range ("N/A" outside arrays), %T the
# state, %r the reason, %j the name (last: free text).
SQUEUE_FORMAT = "%i|%F|%K|%T|%r|%j"


def squeue_arguments(user: str) -> list[str]:
    """Every job of `user` that the controller holds, one line per array task. Never
    `--jobs=<ids>`: squeue exits 1 for ids that have left the queue."""
    return ["squeue", "--noheader", "--array", f"--user={user}", f"--format={SQUEUE_FORMAT}"]


def squeue_by_name_arguments(user: str, names: Sequence[str]) -> list[str]:
    return [
        "squeue",
        "--noheader",
        f"--user={user}",
        f"--name={','.join(names)}",
        "--format=%F|%j",
    ]


_PENDING_RANGE = re.compile(r"(?P<array>[0-9]+)_\[(?P<tasks>[^\]]+)\]")
_NO_VALUE = ("", "N/A", "(null)")


def parse_squeue(text: str) -> list[QueueEntry]:
    """Entries of `squeue_arguments` output. A pending array whose tasks are still one record
    (`123_[5-19]`, also printed with `--array`) is one entry with `pending_tasks` "5-19"; an array
    throttle (`%4`) is left out of that expression, since it limits how many run, not which."""
    entries = []
    for row in parse_parsable2(text, SQUEUE_FIELDS, last_field_is_free_text=True):
        job_id = row["job_id"]
        array_job_id = row["array_job_id"]
        task_text = row["array_task_id"]
        pending_range = _PENDING_RANGE.fullmatch(job_id)
        pending_tasks = None
        task_id = None
        if pending_range:
            pending_tasks = pending_range["tasks"].split("%", 1)[0]
        elif task_text not in _NO_VALUE:
            task_id = _integer(task_text, "array task id")
        if not _JOB_ID.fullmatch(job_id) and not pending_range:
            raise UnexpectedOutput(f"squeue printed job id {job_id!r}")
        if not array_job_id.isdigit():
            raise UnexpectedOutput(f"squeue printed array job id {array_job_id!r}")
        reason = row["reason"]
        entries.append(
            QueueEntry(
                job_id=job_id,
                array_job_id=array_job_id,
                array_task_id=task_id,
                name=row["name"],
                state=api_state(row["state"]),
                scheduler_state=row["state"],
                reason="" if reason in ("None", *_NO_VALUE) else reason,
                pending_tasks=pending_tasks,
            )
        )
    return entries


def parse_squeue_by_name(text: str) -> dict[str, str]:
    """Name -> array (or job) id of `squeue_by_name_arguments` output."""
    found: dict[str, str] = {}
    for row in parse_parsable2(text, ["array_job_id", "name"], last_field_is_free_text=True):
        _remember_newest(found, row["name"], row["array_job_id"])
    return found


# --- sacct --------------------------------------------------------------------------------------

SACCT_RUN_FIELDS = [
    "JobID",
    "JobIDRaw",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "AllocTRES",
    "TotalCPU",
    "TimelimitRaw",
    "Reason",
    "JobName",
]
SACCT_NAME_FIELDS = ["JobID", "JobName"]
SACCT_CHUNK = 100
NAME_CHUNK = 200


def sacct_runs_arguments(job_ids: Sequence[str]) -> list[str]:
    """Every run (`-D`: requeued runs too) of the given jobs, with their steps (read with
    `parse_sacct_runs(..., with_steps=True)`). With `--jobs`, sacct looks back to the epoch."""
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "-D",
        f"--jobs={','.join(job_ids)}",
        f"--format={','.join(SACCT_RUN_FIELDS)}",
    ]


def sacct_window_arguments(user: str, start: datetime, end: datetime) -> list[str]:
    """Every run of `user` that was in the system at some time between `start` and `end`
    (without `--state`, sacct selects by that overlap). Times go as UTC, the commands' TZ."""
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        "-D",
        f"--user={user}",
        f"--starttime={slurm_time(start)}",
        f"--endtime={slurm_time(end)}",
        f"--format={','.join(SACCT_RUN_FIELDS)}",
    ]


def sacct_by_name_arguments(user: str, names: Sequence[str]) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        f"--user={user}",
        f"--name={','.join(names)}",
        "--starttime=now-7days",
        f"--format={','.join(SACCT_NAME_FIELDS)}",
    ]


def parse_sacct_by_name(text: str) -> dict[str, str]:
    """Name -> array (or job) id of `sacct_by_name_arguments` output."""
    found: dict[str, str] = {}
    for row in parse_parsable2(text, SACCT_NAME_FIELDS, last_field_is_free_text=True):
        _remember_newest(found, row["JobName"], row["JobID"].split("_", 1)[0])
    return found


def _remember_newest(found: dict[str, str], name: str, job_id: str) -> None:
    """Keeps the newest id of a name: a name is submitted once, but if it ever was twice the
    newest job is the one still relevant."""
    if not job_id.isdigit():
        raise UnexpectedOutput(f"not a job id: {job_id!r}")
    if name not in found or int(job_id) > int(found[name]):
        found[name] = job_id


def parse_sacct_runs(text: str, *, with_steps: bool = False) -> list[RunRecord]:
    """Runs of `sacct_runs_arguments` or `sacct_window_arguments` output. A pending array's
    placeholder line (`123_[5-19]`) is not a run and is left out; its tasks appear once they
    start. A run whose accounting record is still incomplete is `undetermined`.

    `with_steps`: the output has the step lines too (no `-X`). slurmdbd can record a job's end
    before its batch step's, whose usage is the CPU time: a run that ran is whole only once
    its batch step has ended, and its CPU time is the sum of its steps'."""
    rows = parse_parsable2(text, SACCT_RUN_FIELDS, last_field_is_free_text=True)
    steps: dict[str, list[dict[str, str]]] = {}
    if with_steps:
        for row in rows:
            if "." in row["JobID"]:
                steps.setdefault(row["JobIDRaw"].split(".", 1)[0], []).append(row)
    records = []
    for row in rows:
        job_id = row["JobID"]
        if "." in job_id and with_steps:
            continue
        if _PENDING_RANGE.fullmatch(job_id):
            continue
        if not _JOB_ID.fullmatch(job_id) or not row["JobIDRaw"].isdigit():
            raise UnexpectedOutput(f"sacct printed job id {job_id!r} ({row['JobIDRaw']!r})")
        array_job_id, _, task_text = job_id.partition("_")
        # Until slurmdbd has the job's own record (it can trail the start and end records by a
        # second), sacct prints the job named "allocation" with an empty time limit, while a
        # complete record always has one ("UNLIMITED" at least). Such a run may already read
        # COMPLETED: it is undetermined until its record is whole, never settled on a guess.
        is_incomplete = row["TimelimitRaw"] == ""
        cpu_seconds = parse_cpu_time(row["TotalCPU"])
        if with_steps:
            job_steps = steps.get(row["JobIDRaw"], [])
            batch_ended = any(
                step["JobID"].endswith(".batch") and run_state(step["State"]) in ENDED_STATES
                for step in job_steps
            )
            ran = _integer(row["ElapsedRaw"], "ElapsedRaw") > 0
            is_incomplete = is_incomplete or (
                ran and run_state(row["State"]) in ENDED_STATES and not batch_ended
            )
            if job_steps:
                cpu_seconds = sum(parse_cpu_time(step["TotalCPU"]) for step in job_steps)
        state = UNDETERMINED if is_incomplete else run_state(row["State"])
        submit_time = parse_slurm_time(row["Submit"])
        if submit_time is None:
            raise UnexpectedOutput(f"sacct printed no submit time for {job_id}")
        allocated = parse_alloc_tres(row["AllocTRES"])
        reason = row["Reason"]
        records.append(
            RunRecord(
                job_id=job_id,
                raw_job_id=row["JobIDRaw"],
                array_job_id=array_job_id,
                array_task_id=int(task_text) if task_text else None,
                name=row["JobName"],
                state=state,
                scheduler_state=row["State"],
                exit_code=parse_exit_code(row["ExitCode"]) if state in ENDED_STATES else None,
                submit_time=submit_time,
                start_time=parse_slurm_time(row["Start"]),
                end_time=parse_slurm_time(row["End"]),
                elapsed_seconds=_integer(row["ElapsedRaw"], "ElapsedRaw"),
                allocated_cpus=allocated.cpus,
                allocated_gpus=allocated.gpus,
                cpu_seconds=cpu_seconds,
                time_limit_minutes=parse_time_limit_raw(row["TimelimitRaw"]),
                reason="" if reason in ("None", *_NO_VALUE) else reason,
            )
        )
    return records


_UNKNOWN_TIMES = ("", "Unknown", "None", "N/A")


def parse_slurm_time(text: str) -> datetime | None:
    """A time sacct printed (`2026-11-26T01:00:05`, in UTC since the commands run with TZ=UTC);
    None for a time that has not come (`Unknown`, `None`)."""
    if text in _UNKNOWN_TIMES:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError as error:
        raise UnexpectedOutput(f"not a Slurm time: {text!r}") from error


def slurm_time(moment: datetime) -> str:
    """A time as sacct reads it, in UTC (a naive time is taken as UTC already)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


_CPU_TIME = re.compile(
    r"(?:(?P<days>[0-9]+)-)?(?:(?P<hours>[0-9]+):)?(?P<minutes>[0-9]+):(?P<seconds>[0-9]+(?:\.[0-9]+)?)"
)


def parse_cpu_time(text: str) -> float:
    """Seconds of sacct's TotalCPU: `[DD-[HH:]]MM:SS[.mmm]` (`01:02.345`, `1-02:03:04`)."""
    if text in _NO_VALUE:
        return 0.0
    match = _CPU_TIME.fullmatch(text)
    if not match:
        raise UnexpectedOutput(f"not a CPU time: {text!r}")
    days = int(match["days"] or 0)
    hours = int(match["hours"] or 0)
    return ((days * 24 + hours) * 60 + int(match["minutes"])) * 60 + float(match["seconds"])


def parse_exit_code(text: str) -> int:
    """sacct's `status:signal`. A job killed by a signal gets 128 + the signal, as a shell
    reports it (`0:9` -> 137), so that a signalled end never reads as success."""
    status_text, _, signal_text = text.partition(":")
    status = _integer(status_text, "exit code")
    signal = _integer(signal_text, "exit signal") if signal_text else 0
    return 128 + signal if signal else status


def parse_time_limit_raw(text: str) -> int | None:
    """Minutes of TimelimitRaw; None when the job has no limit of its own."""
    if text.isdigit():
        return int(text)
    if text in ("UNLIMITED", "Partition_Limit", "INVALID", *_NO_VALUE):
        return None
    raise UnexpectedOutput(f"not a time limit: {text!r}")


@dataclass(frozen=True)
class AllocatedResources:
    cpus: int
    gpus: int


def parse_alloc_tres(text: str) -> AllocatedResources:
    """CPUs and GPUs of AllocTRES (`billing=2,cpu=2,gres/gpu=1,mem=4G,node=1`); nothing before
    the job has an allocation. GPUs are the untyped `gres/gpu` count, which Slurm gives next to
    the typed ones (`gres/gpu:a100=1`); the typed ones are summed only when it is missing."""
    cpus = 0
    untyped_gpus: int | None = None
    typed_gpus = 0
    for item in text.split(","):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals:
            raise UnexpectedOutput(f"unreadable AllocTRES item {item!r} in {text!r}")
        if key == "cpu":
            cpus = _integer(value, "allocated CPUs")
        elif key == "gres/gpu":
            untyped_gpus = _integer(value, "allocated GPUs")
        elif key.startswith("gres/gpu:"):
            typed_gpus += _integer(value, "allocated GPUs")
    return AllocatedResources(cpus, typed_gpus if untyped_gpus is None else untyped_gpus)


def _integer(text: str, what: str) -> int:
    if not text.isdigit():
        raise UnexpectedOutput(f"not a number of {what}: {text!r}")
    return int(text)
