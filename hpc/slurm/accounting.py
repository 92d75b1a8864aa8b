"""What Slurm says about jobs: the queue (`squeue`) and accounting (`sacct`), read into typed
records. Every format is explicit and delimited; the parsers are pure functions from text to
records, tested on output recorded from real clusters.

The job name is the one field a user's text could reach, so it is always printed last: a `|`
inside it cannot shift the other fields.

Jobs are looked up by the Unix users they run as (a cluster's leased tenant accounts), not by a
name prefix: a tenant's every job is the team's, including the ones its jobs submit themselves."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hpc.arrays import parse_index_ranges
from hpc.errors import UnexpectedOutput
from hpc.slurm.parsers import parse_parsable2
from hpc.types import (
    CANCELLED,
    COMPLETED,
    COMPLETING,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    PREEMPTED,
    REQUEUED,
    RESIZED,
    RUN_ENDED_STATES,
    RUNNING,
    TIMEOUT,
    UNDETERMINED,
    QueueEntry,
    RunRecord,
)

# --- States -------------------------------------------------------------------------------------

# Every word that squeue's %T and sacct's State print in Slurm 22.05 (`job_state_string`: a
# job's base state, or the first of its flags that it names), with what the word means in the
# queue and what it means for one run in `sacct -D` output. Slurm reuses some words for both:
# in the queue REQUEUED is a job waiting for its next run, in accounting it is the run that
# ended. Flags that only `sacct -v` spells out in its messages (LAUNCH_FAILED, POWER_UP_NODE,
# RECONFIG_FAIL, UPDATE_DB) are never a state these commands print, and are not here.
_STATES: dict[str, tuple[str, str]] = {
    # Not running: waiting for resources or a begin time, held, or stopped by the scheduler.
    "PENDING": (PENDING, PENDING),
    "CONFIGURING": (PENDING, PENDING),  # allocated; its nodes are booting
    "REQUEUE_HOLD": (PENDING, PENDING),
    "REQUEUE_FED": (PENDING, PENDING),
    "RESV_DEL_HOLD": (PENDING, PENDING),
    "SUSPENDED": (PENDING, PENDING),
    "STOPPED": (PENDING, PENDING),
    # A run ended and the job waits for its next one; in accounting, that ended run.
    "REQUEUED": (PENDING, REQUEUED),
    # The job's own exit asked to be requeued and held (`scontrol requeuehold State=SpecialExit`,
    # typically from EpilogSlurmctld on an exit code): it pends, held, and the run failed.
    "SPECIAL_EXIT": (PENDING, FAILED),
    "RUNNING": (RUNNING, RUNNING),
    # The job is changing size and keeps running; in accounting, the run at its old size ended.
    "RESIZING": (RUNNING, RESIZED),
    "COMPLETING": (COMPLETING, COMPLETING),
    "SIGNALING": (COMPLETING, COMPLETING),
    "STAGE_OUT": (COMPLETING, COMPLETING),
    "COMPLETED": (COMPLETED, COMPLETED),
    "FAILED": (FAILED, FAILED),
    "CANCELLED": (CANCELLED, CANCELLED),
    "REVOKED": (CANCELLED, CANCELLED),  # a federation sibling started elsewhere
    "TIMEOUT": (TIMEOUT, TIMEOUT),
    "DEADLINE": (TIMEOUT, TIMEOUT),
    "OUT_OF_MEMORY": (OUT_OF_MEMORY, OUT_OF_MEMORY),
    "NODE_FAIL": (NODE_FAIL, NODE_FAIL),
    "BOOT_FAIL": (NODE_FAIL, NODE_FAIL),
    "PREEMPTED": (PREEMPTED, PREEMPTED),
}


def _state_word(slurm_state: str) -> str:
    # sacct adds " by <uid>" to CANCELLED, and a column too narrow for the word ends in "+".
    return slurm_state.strip().split(" ", 1)[0].rstrip("+")


def api_state(slurm_state: str) -> str:
    """The API state of a job in the queue, from the state squeue prints ("RUNNING",
    "SPECIAL_EXIT"...). A state this table does not know is `undetermined`, never an end: a job
    is not settled on a guess."""
    return _STATES.get(_state_word(slurm_state), (UNDETERMINED, UNDETERMINED))[0]


def run_state(slurm_state: str) -> str:
    """The API state of one run in `sacct -D` output ("COMPLETED", "CANCELLED by 1000",
    "REQUEUED"...), `undetermined` for a state the table does not know.

    A run that ended so that another follows under the same id is `requeued` or `resized`, and
    charged: Slurm records `scontrol requeue` (which the job's own script can call) as REQUEUED
    and a size change as RESIZING, while a preemption's requeue records PREEMPTED and a node
    failure's NODE_FAIL (Slurm's `_job_requeue_op`), the owner's doing, recorded and never
    charged. An administrator's `scontrol requeue` also records REQUEUED: accounting keeps no
    word of who asked. A run that ended in SPECIAL_EXIT failed by the job's own exit code."""
    return _STATES.get(_state_word(slurm_state), (UNDETERMINED, UNDETERMINED))[1]


# --- Job ids and users --------------------------------------------------------------------------

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")
# What squeue's %i and sacct's JobID print for a job: "123", task "123_4" of array 123, a pending
# array's tasks not split out yet "123_[5-19%2]", component "123+1" of heterogeneous job 123.
_PRINTED_JOB_ID = re.compile(
    r"(?P<leader>[0-9]+)(?:_(?P<task>[0-9]+)|_\[(?P<tasks>[^\]]+)\]|\+(?P<offset>[0-9]+))?"
)
_UNIX_USER = re.compile(r"[a-z_][a-z0-9_.-]*")


def valid_job_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids once each, in order; raises `ValueError` for anything but `123` or `123_4`, so
    that no other text reaches a command line as an id. A heterogeneous job is cancelled and
    looked up by its leader's id, never by a component's."""
    unique = list(dict.fromkeys(job_ids))
    for job_id in unique:
        if not _JOB_ID.fullmatch(job_id):
            raise ValueError(f"not a Slurm job id: {job_id!r}")
    return unique


def valid_users(users: Iterable[str]) -> list[str]:
    """The user names once each, in order; raises `ValueError` for anything but a Unix user
    name, and for no name at all: an empty `--user=` must never reach a command that would
    then list every user's jobs."""
    unique = list(dict.fromkeys(users))
    if not unique:
        raise ValueError("no users to ask about")
    for user in unique:
        if not _UNIX_USER.fullmatch(user):
            raise ValueError(f"not a Unix user name: {user!r}")
    return unique


def _leader_id(printed_job_id: str) -> str:
    """The id a job is cancelled and looked up by: an array's or heterogeneous job's own."""
    match = _PRINTED_JOB_ID.fullmatch(printed_job_id)
    if not match:
        raise UnexpectedOutput(f"not a job id: {printed_job_id!r}")
    return match["leader"]


# --- squeue -------------------------------------------------------------------------------------

SQUEUE_FIELDS = [
    "job_id",
    "array_job_id",
    "array_task_id",
    "state",
    "reason",
    "user",
    "partition",
    "cpus",
    "start_time",
    "name",
]
# %i the job id (see `_PRINTED_JOB_ID`), %F the array's id (the job's own when not an array; a
# heterogeneous component's own raw id, not its leader's), %K the task id or range ("N/A"
# outside arrays), %T the state, %r the reason, %u the user, %P the partition, %C the CPUs
# (allocated, or asked for while it pends), %S the start (of the current run while it runs, a
# forecast or N/A while it pends), %j the name (last: free text).
SQUEUE_FORMAT = "%i|%F|%K|%T|%r|%u|%P|%C|%S|%j"


def squeue_arguments(users: Sequence[str]) -> list[str]:
    """Every job of `users` that the controller holds, one line per array task, in one
    command. Never `--jobs=<ids>`: squeue exits 1 for ids that have left the queue."""
    return [
        "squeue",
        "--noheader",
        "--array",
        f"--user={','.join(valid_users(users))}",
        f"--format={SQUEUE_FORMAT}",
    ]


def squeue_by_name_arguments(users: Sequence[str], names: Sequence[str]) -> list[str]:
    """Every state (`--states=all`): a job that ended within MinJobAge is still slurmctld's
    and may not be in slurmdbd yet (it writes behind), so that a job that ran at once is
    found by its name in one or the other, never in neither."""
    return [
        "squeue",
        "--noheader",
        "--states=all",
        f"--user={','.join(valid_users(users))}",
        f"--name={','.join(names)}",
        "--format=%i|%j",
    ]


_PENDING_RANGE = re.compile(r"(?P<array>[0-9]+)_\[(?P<tasks>[^\]]+)\]")
_HET_COMPONENT = re.compile(r"(?P<leader>[0-9]+)\+(?P<offset>[0-9]+)")
_NO_VALUE = ("", "N/A", "(null)")


def parse_squeue(text: str) -> list[QueueEntry]:
    """Entries of `squeue_arguments` output. A pending array whose tasks are still one record
    (`123_[5-19]`) is one entry with `pending_tasks` "5-19"; an array throttle (`%4`) is left
    out of that expression, since it limits how many run, not which. A heterogeneous job is one
    entry per component (`123+1`), under its leader's id, which %i carries and %F does not. The
    start time is only kept for a job that runs: for a pending one squeue prints a forecast."""
    entries = []
    for row in parse_parsable2(text, SQUEUE_FIELDS, last_field_is_free_text=True):
        job_id = row["job_id"]
        if not row["array_job_id"].isdigit():
            raise UnexpectedOutput(f"squeue printed array job id {row['array_job_id']!r}")
        array_job_id = row["array_job_id"]
        task_text = row["array_task_id"]
        pending_tasks = None
        task_id = None
        het_offset = None
        if het := _HET_COMPONENT.fullmatch(job_id):
            array_job_id = het["leader"]
            het_offset = int(het["offset"])
        elif pending_range := _PENDING_RANGE.fullmatch(job_id):
            pending_tasks = pending_range["tasks"].split("%", 1)[0]
        elif _JOB_ID.fullmatch(job_id):
            if task_text not in _NO_VALUE:
                task_id = _integer(task_text, "array task id")
        else:
            raise UnexpectedOutput(f"squeue printed job id {job_id!r}")
        state = api_state(row["state"])
        reason = row["reason"]
        entries.append(
            QueueEntry(
                job_id=job_id,
                array_job_id=array_job_id,
                array_task_id=task_id,
                name=row["name"],
                state=state,
                scheduler_state=row["state"],
                reason="" if reason in ("None", *_NO_VALUE) else reason,
                pending_tasks=pending_tasks,
                user=row["user"],
                partition=row["partition"],
                cpus=_integer(row["cpus"], "CPUs"),
                start_time=(
                    parse_slurm_time(row["start_time"]) if state in (RUNNING, COMPLETING) else None
                ),
                het_offset=het_offset,
            )
        )
    return entries


def parse_squeue_by_name(text: str) -> dict[str, str]:
    """Name -> array, heterogeneous or plain job id of `squeue_by_name_arguments` output."""
    found: dict[str, str] = {}
    for row in parse_parsable2(text, ["job_id", "name"], last_field_is_free_text=True):
        _remember_newest(found, row["name"], _leader_id(row["job_id"]))
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
    "User",
    "Partition",
    "ReqTRES",
    "MaxRSS",
    "JobName",
]
# The fields before MaxRSS was read (output recorded with them still reads).
SACCT_RUN_FIELDS_WITHOUT_MAX_RSS = [name for name in SACCT_RUN_FIELDS if name != "MaxRSS"]
SACCT_NAME_FIELDS = ["JobID", "JobName"]
SACCT_CHUNK = 100
NAME_CHUNK = 200


def sacct_runs_arguments(job_ids: Sequence[str]) -> list[str]:
    """Every run (`-D`: each run of a requeued or resized job as its own record) of the given
    jobs, each record followed by its own steps (read with `parse_sacct_runs(...,
    with_steps=True)`). An array's id gives all its tasks, a heterogeneous leader's id all its
    components. With `--jobs`, sacct looks back to the epoch."""
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "-D",
        f"--jobs={','.join(valid_job_ids(job_ids))}",
        f"--format={','.join(SACCT_RUN_FIELDS)}",
    ]


def sacct_users_arguments(users: Sequence[str], start: datetime, end: datetime) -> list[str]:
    """Every run (allocations only, `-X`; every run, `-D`) of `users` that was in the system at
    some time between `start` and `end` (without `--state`, sacct selects by that overlap),
    whoever submitted it. Times go as UTC, the commands' TZ."""
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        "-D",
        f"--user={','.join(valid_users(users))}",
        f"--starttime={slurm_time(start)}",
        f"--endtime={slurm_time(end)}",
        f"--format={','.join(SACCT_RUN_FIELDS)}",
    ]


def sacct_by_name_arguments(users: Sequence[str], names: Sequence[str]) -> list[str]:
    return [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        f"--user={','.join(valid_users(users))}",
        f"--name={','.join(names)}",
        "--starttime=now-7days",
        f"--format={','.join(SACCT_NAME_FIELDS)}",
    ]


def parse_sacct_by_name(text: str) -> dict[str, str]:
    """Name -> array, heterogeneous or plain job id of `sacct_by_name_arguments` output."""
    found: dict[str, str] = {}
    for row in parse_parsable2(text, SACCT_NAME_FIELDS, last_field_is_free_text=True):
        _remember_newest(found, row["JobName"], _leader_id(row["JobID"]))
    return found


def _remember_newest(found: dict[str, str], name: str, job_id: str) -> None:
    """Keeps the newest id of a name: a name is submitted once, but if it ever was twice the
    newest job is the one still relevant."""
    if name not in found or int(job_id) > int(found[name]):
        found[name] = job_id


def parse_sacct_runs(
    text: str,
    *,
    with_steps: bool = False,
    now: datetime | None = None,
    step_grace: timedelta = timedelta(seconds=60),
    fields: Sequence[str] = tuple(SACCT_RUN_FIELDS),
) -> list[RunRecord]:
    """Runs of `sacct_runs_arguments` or `sacct_users_arguments` output, one per record: each
    run of a requeued or resized job is its own. A pending array's placeholder line
    (`123_[5-19]`) is not a run and is left out; its tasks appear once they start. Once that
    line has ended (the array was cancelled before those tasks ever started), each of its tasks
    is a run of its own that never ran, all under the placeholder's raw id. A
    heterogeneous job's components (`123+1`) are runs of their own, under the leader's id.

    A run whose accounting record is still incomplete is `undetermined`: until slurmdbd has
    the job's own record (it can trail the start and end records by a second), sacct prints the
    job named "allocation" with an empty time limit, while a complete record always has one
    ("UNLIMITED" at least); such a run may already read COMPLETED.

    `with_steps`: the output has the step lines too (no `-X`), each right after the record of
    the run it belongs to, and `now` (aware, the caller's clock) is required. A run's CPU time
    is then the sum of its own steps' (the record's own when it has none). slurmdbd can also
    record a job's end before its batch step's: a run that ended after it ran is whole only
    once its batch step has ended too, or, for a run that never has one (a resized job's later
    record, a heterogeneous job's components after +0, an salloc allocation), once its end is
    `step_grace` old. Without step lines sacct prints a TotalCPU of 0 (seen on 22.05): only
    output with steps tells a run's CPU time, and its memory (the largest MaxRSS of its
    steps; a run's own record has none).

    `fields`: the format the output was printed with (`SACCT_RUN_FIELDS`, or the older one
    without MaxRSS)."""
    if with_steps and (now is None or now.tzinfo is None):
        raise ValueError("reading steps needs the caller's clock as an aware `now`")
    whole_if_ended_by = now - step_grace if with_steps and now is not None else None
    runs: list[tuple[dict[str, str], list[dict[str, str]]]] = []
    for row in parse_parsable2(text, list(fields), last_field_is_free_text=True):
        if "." not in row["JobID"]:
            runs.append((row, []))
            continue
        owner = row["JobIDRaw"].split(".", 1)[0]
        if not with_steps or not runs or runs[-1][0]["JobIDRaw"] != owner:
            raise UnexpectedOutput(
                f"sacct printed step {row['JobID']!r} after no record of its job"
            )
        runs[-1][1].append(row)
    records: list[RunRecord] = []
    for row, steps in runs:
        pending = _PENDING_RANGE.fullmatch(row["JobID"])
        if pending is None:
            records.append(_run_record(row, steps, whole_if_ended_by))
        elif run_state(row["State"]) in RUN_ENDED_STATES:
            records.extend(
                _run_record({**row, "JobID": f"{pending['array']}_{index}"}, [], whole_if_ended_by)
                for index in parse_index_ranges(pending["tasks"])
            )
    return records


def _run_record(
    row: dict[str, str], steps: list[dict[str, str]], whole_if_ended_by: datetime | None
) -> RunRecord:
    """One run from its record and its steps. `whole_if_ended_by` is None for output without
    step lines, where only the record itself can show that it is incomplete."""
    job_id = row["JobID"]
    match = _PRINTED_JOB_ID.fullmatch(job_id)
    if not match or match["tasks"] is not None or not row["JobIDRaw"].isdigit():
        raise UnexpectedOutput(f"sacct printed job id {job_id!r} ({row['JobIDRaw']!r})")
    state = run_state(row["State"])
    elapsed_seconds = _integer(row["ElapsedRaw"], "ElapsedRaw")
    end_time = parse_slurm_time(row["End"])
    has_own_record = row["TimelimitRaw"] != ""
    is_whole = has_own_record
    if is_whole and whole_if_ended_by is not None and state in RUN_ENDED_STATES:
        is_whole = elapsed_seconds == 0 or _steps_are_recorded(steps, end_time, whole_if_ended_by)
    if not is_whole:
        state = UNDETERMINED
    submit_time = parse_slurm_time(row["Submit"])
    if submit_time is None:
        raise UnexpectedOutput(f"sacct printed no submit time for {job_id}")
    if steps:
        cpu_seconds = sum(parse_cpu_time(step["TotalCPU"]) for step in steps)
    else:
        cpu_seconds = parse_cpu_time(row["TotalCPU"])
    allocated = parse_tres(row["AllocTRES"])
    requested = parse_tres(row["ReqTRES"])
    reason = row["Reason"]
    sizes = [parse_memory_size(step.get("MaxRSS", "")) for step in steps]
    known_sizes = [size for size in sizes if size is not None]
    return RunRecord(
        job_id=job_id,
        raw_job_id=row["JobIDRaw"],
        array_job_id=match["leader"],
        array_task_id=int(match["task"]) if match["task"] is not None else None,
        name=row["JobName"],
        state=state,
        scheduler_state=row["State"],
        exit_code=parse_exit_code(row["ExitCode"]) if state in RUN_ENDED_STATES else None,
        submit_time=submit_time,
        start_time=parse_slurm_time(row["Start"]),
        end_time=end_time,
        elapsed_seconds=elapsed_seconds,
        allocated_cpus=allocated.cpus,
        allocated_gpus=allocated.gpus,
        cpu_seconds=cpu_seconds,
        time_limit_minutes=parse_time_limit_raw(row["TimelimitRaw"]),
        reason="" if reason in ("None", *_NO_VALUE) else reason,
        user=row["User"],
        partition=row["Partition"],
        requested_cpus=requested.cpus,
        requested_gpus=requested.gpus,
        het_offset=int(match["offset"]) if match["offset"] is not None else None,
        has_own_record=has_own_record,
        max_rss_bytes=max(known_sizes) if known_sizes else None,
    )


def _steps_are_recorded(
    steps: list[dict[str, str]], end_time: datetime | None, whole_if_ended_by: datetime
) -> bool:
    """Whether the steps of a run that ended after it ran are all in: its batch step has ended
    (a resized job's batch step ends RESIZING with the record it started in), or it has no
    batch step and ended long enough ago for one to have been written."""
    batch_steps = [step for step in steps if step["JobID"].endswith(".batch")]
    if batch_steps:
        return any(run_state(step["State"]) in RUN_ENDED_STATES for step in batch_steps)
    return end_time is not None and end_time <= whole_if_ended_by


_UNKNOWN_TIMES = ("", "Unknown", "None", "N/A")


def parse_slurm_time(text: str) -> datetime | None:
    """A time squeue or sacct printed (`2026-11-26T01:00:05`, in UTC since the commands run
    with TZ=UTC); None for a time that has not come (`Unknown`, `None`, `N/A`)."""
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


_MEMORY_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<unit>[KMGTP]?)")
_MEMORY_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def parse_memory_size(text: str) -> int | None:
    """Bytes of a size as sacct prints MaxRSS (`1234K`, `12.50M`, `0`, a bare number of bytes);
    None when it printed none."""
    if text in _NO_VALUE:
        return None
    match = _MEMORY_SIZE.fullmatch(text)
    if not match:
        raise UnexpectedOutput(f"not a memory size: {text!r}")
    return round(float(match["number"]) * _MEMORY_UNITS[match["unit"]])


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
class ResourceCounts:
    cpus: int
    gpus: int


def parse_tres(text: str) -> ResourceCounts:
    """CPUs and GPUs of a TRES list as AllocTRES and ReqTRES print it
    (`billing=2,cpu=2,gres/gpu=1,mem=4G,node=1`); nothing for an empty list (AllocTRES before
    the job has an allocation). GPUs are the untyped `gres/gpu` count, which Slurm gives next
    to the typed ones (`gres/gpu:a100=1`); the typed ones are summed only when it is missing."""
    cpus = 0
    untyped_gpus: int | None = None
    typed_gpus = 0
    for item in text.split(","):
        if not item:
            continue
        key, equals, value = item.partition("=")
        if not equals:
            raise UnexpectedOutput(f"unreadable TRES item {item!r} in {text!r}")
        if key == "cpu":
            cpus = _integer(value, "CPUs")
        elif key == "gres/gpu":
            untyped_gpus = _integer(value, "GPUs")
        elif key.startswith("gres/gpu:"):
            typed_gpus += _integer(value, "GPUs")
    return ResourceCounts(cpus, typed_gpus if untyped_gpus is None else untyped_gpus)


def _integer(text: str, what: str) -> int:
    if not text.isdigit():
        raise UnexpectedOutput(f"not a number of {what}: {text!r}")
    return int(text)
