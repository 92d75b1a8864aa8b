"""Slurm's job commands (sbatch, squeue, sacct, scancel): how the bridge builds them and reads
what they print. Pure functions, tested on output recorded from a real cluster.

Every format is explicit and delimited. The job name is the one field a user's text could reach
(the platform's names are "cs-<uuid>", but the parsers do not rely on that): it is always printed
last, so that a `|` inside it cannot shift the other fields."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduler_bridge.backends.arrays import InvalidArray, parse_array
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
    JobSpec,
    QueueEntry,
    RunRecord,
    Stream,
    environment_name_problem,
    output_file_name,
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


# --- Job specs ----------------------------------------------------------------------------------

_JOB_ID = re.compile(r"[0-9]+(_[0-9]+)?")

SCRIPT_FILE = "job.sh"
# The spec's variables as NAME=value records ended by NUL, written over SFTP.
ENVIRONMENT_FILE = "job.environment"
# The job's whole environment as `sbatch --export-file` reads it, built on the login node from
# its PATH, HOME, USER and LOGNAME and ENVIRONMENT_FILE.
EXPORT_FILE = "job.export"


def spec_problem(spec: JobSpec) -> str | None:
    """Why the bridge refuses to submit this spec, or None. The API validates requests before
    they get here; these checks hold the line for whatever reaches the library."""
    if not spec.name or '"' in spec.name or "," in spec.name or not spec.name.isprintable():
        # `squeue --name` and `sacct --name` take a comma list, squeue prints one job a line,
        # and slurmdbd stores a `"` of a name as a backtick: a job with such a name could not
        # be found again by name.
        return (
            f"the job name {spec.name!r} is empty or holds a comma, a double quote or a "
            "control character"
        )
    if directory_problem := job_directory_problem(spec.directory):
        return directory_problem
    if spec.array is not None:
        try:
            parse_array(spec.array)
        except InvalidArray as error:
            return f"the array expression {spec.array!r} is not valid: {error}"
    sizes = (spec.time_limit_minutes, spec.nodes, spec.ntasks, spec.cpus_per_task)
    if min(sizes) < 1 or spec.gpus < 0:
        return "time limit, nodes, tasks and CPUs per task must be positive, GPUs not negative"
    for name, value in spec.environment.items():
        if problem := environment_name_problem(name):
            return problem
        if "\x00" in value:
            return f"the value of the environment variable {name!r} holds a NUL character"
    return None


def job_directory_problem(directory: str) -> str | None:
    """Why `directory` cannot be a job directory (relative to the home, without `.`, `..` or
    characters sbatch would read in output paths), or None."""
    parts = directory.split("/")
    if (
        not directory
        or directory.startswith("/")
        or any(part in ("", ".", "..") for part in parts)
        # sbatch reads `%` in output paths as a pattern and `\` as an escape.
        or any(character in directory for character in "%\\")
        or not directory.isprintable()
    ):
        return f"the job directory {directory!r} is not a plain relative path"
    return None


def environment_file_content(environment: Mapping[str, str]) -> bytes:
    """The spec's variables as `--export-file` reads them: `NAME=value` records, each ended by
    NUL, so that a value may hold any character but NUL (line breaks, quotes, `$(...)`)."""
    return b"".join(f"{name}={value}".encode() + b"\x00" for name, value in environment.items())


def sbatch_arguments(spec: JobSpec, job_directory: str) -> list[str]:
    """The sbatch command line of one spec, `job_directory` being the absolute path of its
    directory. Every resource is an option here, so nothing depends on the script's text.

    The job's environment is not given to sbatch's own process: variables such as LD_PRELOAD or
    PATH would act on sbatch on the login node. The job gets it from the export file
    (`--export-file`), which Slurm uses as the job's whole environment, Slurm's own variables
    aside; the submission script prepends the login node's PATH, HOME, USER and LOGNAME to it."""
    arguments = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.name}",
        f"--partition={spec.partition}",
        f"--time={spec.time_limit_minutes}",
        f"--nodes={spec.nodes}",
        f"--ntasks={spec.ntasks}",
        f"--cpus-per-task={spec.cpus_per_task}",
    ]
    if spec.gpus > 0:
        arguments.append(f"--gpus={spec.gpus}")
    if spec.account:
        arguments.append(f"--account={spec.account}")
    if spec.array is not None:
        arguments.append(f"--array={spec.array}")
    is_array = spec.array is not None
    arguments += [
        f"--chdir={job_directory}",
        f"--output={job_directory}/{_output_pattern('stdout', is_array)}",
        f"--error={job_directory}/{_output_pattern('stderr', is_array)}",
        "--export=ALL",
        f"--export-file={job_directory}/{EXPORT_FILE}",
        f"{job_directory}/{SCRIPT_FILE}",
    ]
    return arguments


def _output_pattern(stream: Stream, is_array: bool) -> str:
    """The output path sbatch fills in: `output_file_name` of the stream, with `%a` (the task
    id) in place of the task for an array."""
    return f"{stream}-%a.txt" if is_array else output_file_name(stream, None)


@dataclass(frozen=True)
class SubmissionOutcome:
    """What one sbatch of a batch printed, and how it exited."""

    exit_status: int
    stdout: str
    stderr: str


def submission_script(submissions: Sequence[tuple[str, list[str]]], token: str) -> str:
    """A /bin/sh script that runs every sbatch of a batch (each given as its job's absolute
    directory and `sbatch_arguments`), one after the other, and prints each one's stdout, stderr
    and exit status between lines carrying `token` (unguessable, so that no output can forge a
    marker). An sbatch that fails does not stop the others."""
    lines = [
        # The export file may hold secrets; the jobs inherit this umask too, so their files are
        # the service user's alone unless a job says otherwise.
        "umask 077",
        "scratch=$(mktemp -d) || exit 70",
        "trap 'rm -rf \"$scratch\"' EXIT",
        # Resolved once under the clean PATH: no job's variables are in sbatch's environment.
        "sbatch=$(command -v sbatch) || { echo 'sbatch is not on the PATH' >&2; exit 71; }",
    ]
    for index, (directory, arguments) in enumerate(submissions):
        spec_environment = shlex.quote(f"{directory}/{ENVIRONMENT_FILE}")
        export_file = shlex.quote(f"{directory}/{EXPORT_FILE}")
        # The job starts from the login node's PATH, HOME, USER and LOGNAME, then the spec's
        # variables (of two definitions of a name in an export file, the last one wins).
        prepare = (
            "{ printf 'PATH=%s\\0HOME=%s\\0USER=%s\\0LOGNAME=%s\\0' "
            '"$PATH" "$HOME" "$USER" "$LOGNAME" && { [ ! -s '
            + spec_environment
            + " ] || cat "
            + spec_environment
            + "; }; }"
        )
        # Each sbatch costs the login node a fork and an exec; everything else here is a shell
        # builtin unless there is something to copy (variables, an error), because a `cat` per
        # job was a third of the batch's time. `$(...)` drops the trailing line breaks of
        # sbatch's output, which the `printf` puts back as one: `--parsable` prints one line.
        lines += [
            f'out=$({{ {prepare} >{export_file} && "$sbatch" {shlex.join(arguments[1:])}; }}'
            ' </dev/null 2>"$scratch/err")',
            "status=$?",
            f"printf '\\n%s\\n' {shlex.quote(f'{token} stdout {index}')}",
            '[ -z "$out" ] || printf \'%s\\n\' "$out"',
            f"printf '\\n%s\\n' {shlex.quote(f'{token} stderr {index}')}",
            '[ ! -s "$scratch/err" ] || cat "$scratch/err"',
            f"printf '\\n%s %s\\n' {shlex.quote(f'{token} exit {index}')} \"$status\"",
        ]
    return "\n".join(lines) + "\n"


def parse_submission_output(text: str, token: str, count: int) -> list[SubmissionOutcome]:
    """The outcome of every sbatch of a submission script's output, in order. Raises
    `UnexpectedOutput` unless every one of the `count` sbatch calls is there whole."""
    outcomes: list[SubmissionOutcome] = []
    section: str | None = None
    captured: dict[str, list[str]] = {"stdout": [], "stderr": []}
    for line in text.split("\n"):
        if not line.startswith(token + " "):
            if section is not None:
                captured[section].append(line)
            continue
        kind, _, rest = line[len(token) + 1 :].partition(" ")
        index_text, _, status_text = rest.partition(" ")
        if not index_text.isdigit() or int(index_text) != len(outcomes):
            raise UnexpectedOutput(f"a submission marker is out of order: {line!r}")
        if kind in ("stdout", "stderr"):
            section = kind
            captured[kind] = []
        elif kind == "exit" and status_text.isdigit():
            outcomes.append(
                SubmissionOutcome(
                    exit_status=int(status_text),
                    stdout=_without_marker_padding(captured["stdout"]),
                    stderr=_without_marker_padding(captured["stderr"]),
                )
            )
            section = None
        else:
            raise UnexpectedOutput(f"unreadable submission marker: {line!r}")
    if len(outcomes) != count:
        raise UnexpectedOutput(f"the submission printed {len(outcomes)} of {count} outcomes")
    return outcomes


def _without_marker_padding(lines: list[str]) -> str:
    """A captured stream from its lines. The script prints a line break before each marker, so
    that a marker starts a line even after a stream without a final newline: the lines between
    two markers joined by line breaks are the stream exactly."""
    return "\n".join(lines)


# Messages of an sbatch that may pass when tried again: the controller was down, busy or
# unreachable. Anything else (invalid account, partition, time limit...) is Slurm's final word.
_TRANSIENT_MESSAGES = (
    "unable to contact slurm controller",
    "socket timed out",
    "slurm temporarily unable",
    "resource temporarily unavailable",
    "zero bytes were transmitted",
    "connection refused",
    "connection timed out",
    "problem talking to the database",
    "slurmctld is not responding",
    "slurm backup controller in standby mode",
)


def is_transient_message(text: str) -> bool:
    lowered = text.lower()
    return any(message in lowered for message in _TRANSIENT_MESSAGES)


def refusal_reason(outcome: SubmissionOutcome) -> str:
    """The last lines Slurm printed about a refused submission, for the job's error."""
    lines = [line.strip() for line in (outcome.stderr or outcome.stdout).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return f"sbatch exited {outcome.exit_status} without a message"
    return "\n".join(lines[-2:])


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


# --- scancel ------------------------------------------------------------------------------------

# What scancel says about ids that have ended or are unknown: cancelling them is already done.
_ALREADY_ENDED = ("invalid job id specified", "already completing or completed")


def valid_job_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids once each, in order; raises `ValueError` for anything but `123` or `123_4`, so
    that no other text reaches a command line as an id."""
    unique = list(dict.fromkeys(job_ids))
    for job_id in unique:
        if not _JOB_ID.fullmatch(job_id):
            raise ValueError(f"not a Slurm job id: {job_id!r}")
    return unique


def scancel_arguments(job_ids: Sequence[str]) -> list[str]:
    return ["scancel", *valid_job_ids(job_ids)]


def only_ended_jobs_refused(stderr: str) -> bool:
    """Whether every error scancel printed is about a job that has ended already."""
    errors = [line for line in stderr.splitlines() if line.strip()]
    return bool(errors) and all(
        any(message in line.lower() for message in _ALREADY_ENDED) for line in errors
    )


def chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
