"""Slurm's job commands that act (sbatch, scancel): how the bridge builds them and reads what
they print. Pure functions, tested on output recorded from a real cluster. What Slurm says about
jobs (squeue, sacct) is read in `accounting`."""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from hpc import job_folder
from hpc.arrays import InvalidArray, parse_array
from hpc.batches import batched
from hpc.errors import UnexpectedOutput
from hpc.slurm import directives, filenames
from hpc.slurm.accounting import valid_job_ids
from hpc.types import (
    JobOptions,
    JobSpec,
    ResultFile,
    Stream,
    environment_name_problem,
    output_file_name,
)

# --- Job specs ----------------------------------------------------------------------------------

SCRIPT_FILE = "job.sh"
# Where the spec's variables were written before the submission script wrote the export file
# itself: kept a platform name (no input file may take it) for the folders of those jobs.
ENVIRONMENT_FILE = "job.environment"
# The job's whole environment as `sbatch --export-file` reads it, written on the login node
# from its PATH, HOME, USER and LOGNAME and the spec's variables (`submission_script`).
EXPORT_FILE = "job.export"


# A QOS's or a reservation's name, as the platform gives them.
_SLURM_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


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
    if size_problem := spec.size.problem():
        return size_problem
    for option, value in (("qos", spec.qos), ("reservation", spec.reservation)):
        if value is not None and not _SLURM_NAME.fullmatch(value):
            return f"the {option} {value!r} is not a Slurm name"
    for name, value in spec.environment.items():
        if problem := environment_name_problem(name):
            return problem
        if "\x00" in value:
            return f"the value of the environment variable {name!r} holds a NUL character"
    if directives.directive_lines(spec.script):
        return "the script still carries #SBATCH lines: the platform writes every option"
    return options_problem(spec.options)


# A feature expression (`--constraint`): names, counts and Slurm's operators, nothing a shell
# or sbatch would read otherwise. Dependencies are built by the platform from job ids.
_CONSTRAINT = re.compile(r"[A-Za-z0-9_.:*&|\[\]()-]{1,500}")
_DEPENDENCY = re.compile(
    r"[a-z]+(:[0-9]+(_[0-9]+)?(\+[0-9]+)?)*([,?][a-z]+(:[0-9]+(_[0-9]+)?(\+[0-9]+)?)*)*"
)


def options_problem(options: JobOptions) -> str | None:
    """Why the spec's extra options cannot be written as sbatch options, or None."""
    for option, name in (
        ("output", options.output),
        ("error", options.error),
        ("input", options.input),
    ):
        if name:
            try:
                if filenames.rerooted(name) != name:
                    return f"the {option} file {name!r} is not a name in the job's folder"
            except filenames.NameRefused as error:
                return f"the {option} file: {error}"
    checks = (
        (options.open_mode, lambda value: value in ("append", "truncate")),
        (options.constraint, _CONSTRAINT.fullmatch),
        (options.gpu_type, _SLURM_NAME.fullmatch),
        (options.dependency, _DEPENDENCY.fullmatch),
        (options.comment, lambda value: value.isprintable() and len(value) <= 500),
    )
    for value, is_valid in checks:
        if value and not is_valid(value):
            return f"the option value {value!r} is not one the platform writes"
    try:
        if options.signal:
            directives.signal(options.signal)
        if options.hint:
            directives.hint(options.hint)
    except directives.DirectiveRefused as refusal:
        return refusal.reason
    counts = (
        options.time_min_minutes,
        options.ntasks_per_node,
        options.mem_per_gpu,
        options.gpus_per_node,
        options.gpus_per_task,
        options.cpus_per_gpu,
    )
    if any(count is not None and count < 1 for count in counts):
        return "the options' counts must be positive"
    if (options.mem_per_node is not None and options.mem_per_node < 0) or (
        options.nice is not None and options.nice < 0
    ):
        return "memory per node and nice cannot be negative"
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


def result_file_excluded(name: str) -> bool:
    """Whether a file of a job's folder is the platform's own rather than a result: the script
    and the environment files (stdout and stderr are results)."""
    return name in (SCRIPT_FILE, ENVIRONMENT_FILE, EXPORT_FILE)


def result_listing(
    files: Sequence[tuple[str, int, float]], skipped: Sequence[tuple[str, str]]
) -> list[ResultFile]:
    """`job_folder.list_files`'s answer as the backends give it: the files (the platform's
    own left out) and, with their `problem`, what will not be read, by name."""
    found = [
        ResultFile(name, size, datetime.fromtimestamp(mtime, UTC))
        for name, size, mtime in files
        if not result_file_excluded(name)
    ]
    found += [ResultFile(name, 0, None, problem=reason) for name, reason in skipped]
    return sorted(found, key=lambda result: result.name)


@functools.cache
def reader_source() -> bytes:
    """The job-folder reader's program (`hpc.job_folder`), sent on the reader's stdin."""
    return Path(job_folder.__file__).read_bytes()


def reader_arguments(home: str, directory: str, arguments: Sequence[str]) -> list[str]:
    """The command that runs the job-folder reader on the login node (as the tenant, through
    `remote_command`): `python3` in isolated mode without `site`, so that nothing of the
    tenant's (PYTHONPATH, a `site-packages` of its own, a module in its home) is imported; its
    source comes first on stdin (`reader_source`), the request after it."""
    return [
        "python3",
        *("-I", "-S", "-c", job_folder.BOOTSTRAP, str(len(reader_source()))),
        *(home, directory, *arguments),
    ]


def test_only_arguments(spec: JobSpec) -> list[str]:
    """`sbatch --test-only` with the spec's resources, the script read from stdin: Slurm
    checks the job and says when it would start, and submits nothing. Run in the tenant's home
    (no job folder exists yet), its output nowhere."""
    arguments = sbatch_arguments(spec, "/nonexistent")
    resources = arguments[: arguments.index("--chdir=/nonexistent")]
    return [
        resources[0],
        "--test-only",
        *resources[1:],
        "--output=/dev/null",
        "--error=/dev/null",
    ]


_EXPECTED_START = re.compile(r"to start at ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})")


def parse_test_only(text: str) -> datetime:
    """The start time in what `sbatch --test-only` printed ("sbatch: Job 12 to start at
    2026-11-26T13:00:05 using 1 processors on nodes c1 in partition debug"), read as UTC (the
    bridge runs Slurm's commands with TZ=UTC)."""
    match = _EXPECTED_START.search(text)
    if match is None:
        raise UnexpectedOutput(f"sbatch --test-only printed no start time: {text.strip()!r}")
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=UTC)


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
        # sbatch also reads `#PBS` and `#BSUB` lines as options unless told not to; the API
        # refuses scripts that carry them, and this holds the line for whatever gets here.
        "--ignore-pbs",
        f"--job-name={spec.name}",
        f"--partition={spec.partition}",
        f"--time={spec.time_limit_minutes}",
        f"--nodes={spec.nodes}",
        f"--ntasks={spec.ntasks}",
        f"--cpus-per-task={spec.cpus_per_task}",
    ]
    arguments += _gpu_arguments(spec)
    if spec.mem_per_cpu is not None:
        arguments.append(f"--mem-per-cpu={spec.mem_per_cpu}M")
    if spec.account:
        arguments.append(f"--account={spec.account}")
    if spec.qos:
        arguments.append(f"--qos={spec.qos}")
    if spec.reservation:
        arguments.append(f"--reservation={spec.reservation}")
    if spec.requeue is not None:
        arguments.append("--requeue" if spec.requeue else "--no-requeue")
    if spec.array is not None:
        arguments.append(f"--array={spec.array}")
    arguments += _option_arguments(spec.options)
    arguments += [
        f"--chdir={job_directory}",
        *_stream_arguments(spec, job_directory),
        "--export=ALL",
        f"--export-file={job_directory}/{EXPORT_FILE}",
        f"{job_directory}/{SCRIPT_FILE}",
    ]
    return arguments


def _gpu_arguments(spec: JobSpec) -> list[str]:
    """The job's GPUs as it asked for them: per node, per task, or in all (`--gpus`)."""
    options = spec.options
    kind = f"{options.gpu_type}:" if options.gpu_type else ""
    if options.gpus_per_node:
        return [f"--gpus-per-node={kind}{options.gpus_per_node}"]
    if options.gpus_per_task:
        return [f"--gpus-per-task={kind}{options.gpus_per_task}"]
    if spec.gpus > 0:
        return [f"--gpus={kind}{spec.gpus}"]
    return []


def _option_arguments(options: JobOptions) -> list[str]:
    """The spec's extra options as sbatch options, each from a value `options_problem`
    passed."""
    arguments = []
    numbers = (
        ("--time-min", options.time_min_minutes),
        ("--ntasks-per-node", options.ntasks_per_node),
        ("--cpus-per-gpu", options.cpus_per_gpu),
        ("--nice", options.nice),
    )
    arguments += [f"{option}={value}" for option, value in numbers if value is not None]
    if options.mem_per_node is not None:
        arguments.append(f"--mem={options.mem_per_node}M")
    if options.mem_per_gpu is not None:
        arguments.append(f"--mem-per-gpu={options.mem_per_gpu}M")
    texts = (
        ("--open-mode", options.open_mode),
        ("--signal", options.signal),
        ("--constraint", options.constraint),
        ("--hint", options.hint),
        ("--comment", options.comment),
        ("--dependency", options.dependency),
    )
    arguments += [f"{option}={value}" for option, value in texts if value]
    if options.exclusive:
        arguments.append("--exclusive")
    return arguments


def stream_names(spec: JobSpec) -> dict[str, str]:
    """The spec's stdout, stderr and stdin names in its folder (`streams`)."""
    return streams(spec.options, is_array=spec.array is not None)


def streams(options: JobOptions, *, is_array: bool) -> dict[str, str]:
    """A job's stdout, stderr and stdin names in its folder (or /dev/null), with sbatch's
    patterns for Slurm to fill: the script's own (`JobOptions`), else the platform's
    (`output_file_name`, `%a` in place of an array's task). Without an error file of its own,
    stderr goes where stdout goes when the script named that, as sbatch sends it; stdin is
    absent without an input file."""

    def platform_name(stream: Stream) -> str:
        return f"{stream}-%a.txt" if is_array else output_file_name(stream, None)

    names = {
        "stdout": options.output or platform_name("stdout"),
        "stderr": options.error or options.output or platform_name("stderr"),
    }
    if options.input:
        names["stdin"] = options.input
    return names


def stream_folders(spec: JobSpec) -> list[str]:
    """The folders of the job's folder its stream files go in, which Slurm does not make."""
    folders = {
        name.rpartition("/")[0]
        for name in stream_names(spec).values()
        if name != filenames.DEV_NULL and "/" in name
    }
    return sorted(folders)


def _stream_arguments(spec: JobSpec, job_directory: str) -> list[str]:
    def path(name: str) -> str:
        return name if name == filenames.DEV_NULL else f"{job_directory}/{name}"

    names = stream_names(spec)
    arguments = [f"--output={path(names['stdout'])}"]
    if names["stderr"] != names["stdout"]:
        arguments.append(f"--error={path(names['stderr'])}")
    if "stdin" in names:
        arguments.append(f"--input={path(names['stdin'])}")
    return arguments


@dataclass(frozen=True)
class SubmissionOutcome:
    """What one sbatch of a batch printed, and how it exited."""

    exit_status: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Submission:
    """One job of a batch as the submission script takes it: its absolute directory, its
    `sbatch_arguments`, its script's text and its variables."""

    directory: str
    arguments: list[str]
    script: str
    environment: Mapping[str, str]
    # Folders of the job's directory its output goes in (absolute): made with it.
    folders: tuple[str, ...] = ()


def submission_script(submissions: Sequence[Submission], token: str, *, lanes: int = 1) -> str:
    """A /bin/sh script, run as the tenant, that writes every job's files and runs every sbatch
    of a batch, printing each one's stdout, stderr and exit status between lines carrying
    `token` (unguessable, so that no output can forge a marker). A job whose files cannot be
    written, or whose sbatch fails, does not stop the others.

    The sbatch calls run in `lanes` shell processes at once, job `i` in lane `i % lanes`, so
    that the jobs' ids follow the batch's order closely and Slurm's first-come order barely
    changes. An sbatch spends much of its time waiting for the controller's answer: on the
    test cluster a batch of 200 takes 3.0 ms a job in two lanes, 4.8 in one, and a plain
    sbatch loop 3.6 (`bench/jobs.py`). Each lane writes its outcomes to a file of its own,
    copied out in lane order once every lane is done, so the markers of different jobs never
    interleave.

    The files travel inside the script (its stdin), not over an SFTP session: a session is a
    second process started under sudo, and each file over SFTP was four round trips (open,
    chmod, write, close), which made the files cost more than the sbatch calls. Here a job
    costs the login node one process, its sbatch: the files are written by `printf` (a shell
    builtin, so that a value is never on a command line either), sbatch's answer is read back
    with the `read` builtin, and the directories, modes and removals are one `mkdir`, `chmod`
    and `rm` a batch."""
    lanes = max(1, min(lanes, len(submissions)))
    directories = [submission.directory for submission in submissions]
    folders = directories + [folder for submission in submissions for folder in submission.folders]
    lines = _script_start(token)
    # A directory that cannot be made shows in its own job's outcome (its script cannot be
    # written), so this says nothing itself.
    lines += [
        f"mkdir -p -m 0700 -- {shlex.join(chunk)} 2>/dev/null || :"
        for chunk in batched(folders, _PATHS_PER_COMMAND)
    ]
    lines += _lanes(submissions, lanes)
    lines += _script_end(directories)
    return "\n".join(lines) + "\n"


def _script_start(token: str) -> list[str]:
    """The batch script's settings and its `outcome` function."""
    return [
        # The export file may hold secrets; the jobs inherit this umask too, so their files are
        # the tenant's alone unless a job says otherwise. Directories `mkdir -p` makes on the
        # way are 0700 by it too.
        "umask 077",
        "scratch=$(mktemp -d) || exit 70",
        "trap 'rm -rf \"$scratch\"' EXIT",
        # Resolved once under the clean PATH: no job's variables are in sbatch's environment.
        "sbatch=$(command -v sbatch) || { echo 'sbatch is not on the PATH' >&2; exit 71; }",
        f"token={shlex.quote(token)}",
        # One job's outcome, between its markers: `outcome INDEX STATUS` after its sbatch wrote
        # "$out" and "$err". `read` gives sbatch's one line without a process; a stream without
        # a final line break gets one, as the parser expects.
        "outcome() {",
        '  printf \'\\n%s stdout %s\\n\' "$token" "$1"',
        '  while IFS= read -r line || [ -n "$line" ]; do printf \'%s\\n\' "$line"; done <"$out"',
        '  printf \'\\n%s stderr %s\\n\' "$token" "$1"',
        '  [ ! -s "$err" ] || cat "$err"',
        '  printf \'\\n%s exit %s %s\\n\' "$token" "$1" "$2"',
        "}",
    ]


def _lanes(submissions: Sequence[Submission], lanes: int) -> list[str]:
    """Every job's lines, job `i` in lane `i % lanes`; more than one lane run at once, each
    into its own file, copied out in lane order once all are done."""
    lines: list[str] = []
    for lane in range(lanes):
        jobs = [
            line
            for index in range(lane, len(submissions), lanes)
            for line in _submission_lines(index, submissions[index])
        ]
        names = f'out="$scratch/out{lane}" err="$scratch/err{lane}"'
        if lanes == 1:
            lines += [names, *jobs]
        else:
            lines += ["(", names, *jobs, f') >"$scratch/lane{lane}" &']
    if lanes > 1:
        lines += ["wait", "cat " + " ".join(f'"$scratch/lane{lane}"' for lane in range(lanes))]
    return lines


def _script_end(directories: list[str]) -> list[str]:
    """The scripts made the tenant's alone and executable, as a job's script file is expected
    to be: one `chmod` for the batch, after sbatch has read them (it needs only to read them).
    The jobs' variables, secret ones among them, stay on the cluster only until sbatch has read
    them: Slurm keeps each job's environment itself from then on. One `rm` for the batch; a
    file it leaves (an sbatch that never ran) is written again by the next attempt, and the
    tenant's home is scrubbed when the lease ends."""
    scripts = [f"{directory}/{SCRIPT_FILE}" for directory in directories]
    exports = [f"{directory}/{EXPORT_FILE}" for directory in directories]
    return [
        *(
            f"chmod 0700 -- {shlex.join(chunk)} 2>/dev/null || :"
            for chunk in batched(scripts, _PATHS_PER_COMMAND)
        ),
        *(f"rm -f -- {shlex.join(chunk)} || :" for chunk in batched(exports, _PATHS_PER_COMMAND)),
    ]


def _submission_lines(index: int, submission: Submission) -> list[str]:
    """One job of a lane: its two files written, then its sbatch (status 73 when the files could
    not be written), then its outcome."""
    directory = submission.directory
    script_file = shlex.quote(f"{directory}/{SCRIPT_FILE}")
    export_file = shlex.quote(f"{directory}/{EXPORT_FILE}")
    variables = [f"{name}={value}" for name, value in submission.environment.items()]
    # The job starts from the login node's PATH, HOME, USER and LOGNAME, then the spec's
    # variables (of two definitions of a name in an export file, the last one wins), each
    # record ended by NUL so that a value may hold any character but NUL.
    export = (
        'printf \'PATH=%s\\0HOME=%s\\0USER=%s\\0LOGNAME=%s\\0\' "$PATH" "$HOME" "$USER" "$LOGNAME"'
    )
    if variables:
        export = f"{{ {export} && printf '%s\\0' {shlex.join(variables)}; }}"
    write = (
        f"printf '%s' {shlex.quote(submission.script)} >{script_file} && {export} >{export_file}"
    )
    return [
        f'if {{ {write}; }} 2>"$err"; then',
        f'  "$sbatch" {shlex.join(submission.arguments[1:])} </dev/null >"$out" 2>"$err"',
        "  status=$?",
        "else",
        '  status=73; : >"$out"',
        f"  printf 'cannot write the job files in %s\\n' {shlex.quote(directory)} >>\"$err\"",
        "fi",
        f'outcome {index} "$status"',
    ]


# Paths per mkdir, chmod or rm of a batch: well under any system's limit of a command line.
_PATHS_PER_COMMAND = 500


def parse_submission_output(text: str, token: str, count: int) -> list[SubmissionOutcome]:
    """The outcome of every sbatch of a submission script's output, in the batch's order (the
    script's lanes print theirs one lane after the other). Raises `UnexpectedOutput` unless
    every one of the `count` sbatch calls is there whole, once: its stdout, stderr and exit
    markers in that order, nothing of another job between them."""
    outcomes: dict[int, SubmissionOutcome] = {}
    current: int | None = None
    section: str | None = None
    captured: dict[str, list[str]] = {"stdout": [], "stderr": []}
    for line in text.split("\n"):
        if not line.startswith(token + " "):
            if section is not None:
                captured[section].append(line)
            continue
        kind, _, rest = line[len(token) + 1 :].partition(" ")
        index_text, _, status_text = rest.partition(" ")
        index = int(index_text) if index_text.isdigit() else -1
        if not 0 <= index < count or index in outcomes:
            raise UnexpectedOutput(f"a submission marker is out of place: {line!r}")
        if kind == "stdout" and section is None:
            current, section = index, kind
            captured = {"stdout": [], "stderr": []}
        elif kind == "stderr" and section == "stdout" and index == current:
            section = kind
        elif kind == "exit" and section == "stderr" and index == current and status_text.isdigit():
            outcomes[index] = SubmissionOutcome(
                exit_status=int(status_text),
                stdout=_without_marker_padding(captured["stdout"]),
                stderr=_without_marker_padding(captured["stderr"]),
            )
            current = section = None
        else:
            raise UnexpectedOutput(f"unreadable submission marker: {line!r}")
    if len(outcomes) != count:
        raise UnexpectedOutput(f"the submission printed {len(outcomes)} of {count} outcomes")
    return [outcomes[index] for index in range(count)]


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


# --- scancel ------------------------------------------------------------------------------------

# What scancel says about ids that have ended or are unknown: cancelling them is already done.
_ALREADY_ENDED = ("invalid job id specified", "already completing or completed")


def scancel_arguments(job_ids: Sequence[str]) -> list[str]:
    return ["scancel", *valid_job_ids(job_ids)]


def only_ended_jobs_refused(stderr: str) -> bool:
    """Whether every error scancel printed is about a job that has ended already."""
    errors = [line for line in stderr.splitlines() if line.strip()]
    return bool(errors) and all(
        any(message in line.lower() for message in _ALREADY_ENDED) for line in errors
    )
