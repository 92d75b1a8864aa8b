"""`computeshare jobs ...`: submit a script (with input files), quote it, follow it to its end,
read its output as it grows, cancel it, and list and download the files it wrote."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import click
import httpx
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from computeshare_cli import figures
from computeshare_cli.client import ApiClient, new_idempotency_key
from computeshare_cli.context import State, org_option, pass_state
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.ids import CANDIDATES_SHOWN
from computeshare_cli.output import (
    Column,
    cell,
    fields_print,
    json_print,
    money,
    percent,
    quantity,
    size_text,
    stderr,
    stdout,
    table_print,
)
from computeshare_cli.parsing import (
    ArgumentError,
    InputFile,
    download_target,
    environment_parse,
    input_files_parse,
)

F = TypeVar("F", bound=Callable[..., Any])

ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}
# The job's `results_state` while its files are not yet where the API serves them.
RESULTS_PENDING = {"waiting", "collecting"}
STATES = [
    "queued",
    "submitted",
    "pending",
    "running",
    "completing",
    *sorted(ENDED),
    "undetermined",
]
JOB_COLUMNS: list[Column] = [
    ("id", "id"),
    ("name", "name"),
    ("state", "state"),
    ("array", "array"),
    ("cluster", "cluster_name"),
    ("partition", "partition"),
    ("reserved", "reserved_units"),
    ("cost", "cost", money),
    ("created", "created_at"),
    ("ended", "ended_at"),
]


def time_limit_parse(text: str) -> int:
    """Minutes from `90`, `1:30` (h:mm), `1:30:00` (h:mm:ss, rounded up), `2h` or `45m`."""
    text = text.strip()
    if re.fullmatch(r"\d+m?", text):
        minutes = int(text.rstrip("m"))
    elif re.fullmatch(r"\d+h", text):
        minutes = int(text[:-1]) * 60
    elif match := re.fullmatch(r"(\d+):(\d{1,2})(?::(\d{1,2}))?", text):
        hours, mins, seconds = int(match[1]), int(match[2]), int(match[3] or 0)
        minutes = hours * 60 + mins + (1 if seconds else 0)
    else:
        raise ArgumentError(f"--time {text!r}: minutes (90), h:mm (1:30), 2h or 45m.")
    if minutes < 1:
        raise ArgumentError("--time: at least one minute.")
    return minutes


def job_options(function: F) -> F:
    """The sizes of a job, shared by `submit` and `quote`."""
    options = [
        click.argument("script", type=click.Path(exists=True, dir_okay=False, path_type=Path)),
        click.option(
            "--allocation",
            help="The allocation to draw on: its id or the id's start. Default: your only "
            "active allocation.",
        ),
        click.option(
            "--name", help="Default: the script's --job-name, else the script's file name."
        ),
        click.option(
            "--time",
            "time_limit",
            help="Time limit: 90, 1:30, 2h or 45m. Default: the script's #SBATCH --time.",
        ),
        click.option(
            "--cpus-per-task",
            type=click.IntRange(min=1),
            help="Default: the script's #SBATCH line, else 1.",
        ),
        click.option("--ntasks", type=click.IntRange(min=1), help="Default: the script's, else 1."),
        click.option("--nodes", type=click.IntRange(min=1), help="Default: the script's, else 1."),
        click.option(
            "--gpus",
            type=click.IntRange(min=0),
            help="GPUs for the whole job. Default: the script's, else 0.",
        ),
        click.option(
            "--mem-per-cpu",
            type=click.IntRange(min=1),
            default=None,
            help="Memory per CPU in MiB (sbatch --mem-per-cpu). Default: the script's memory, "
            "else the partition's.",
        ),
        click.option("--array", help="An array: 0-99, 1,3,5 or 0-999%20. Default: the script's."),
        click.option("--env", "env", multiple=True, metavar="NAME=VALUE"),
        click.option(
            "--secret-env",
            multiple=True,
            metavar="NAME=VALUE",
            help="Like --env, kept encrypted and never shown again.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def job_body(
    script: Path,
    *,
    allocation: str,
    name: str | None,
    time_limit: str | None,
    cpus_per_task: int | None,
    ntasks: int | None,
    nodes: int | None,
    gpus: int | None,
    array: str | None,
    env: tuple[str, ...],
    secret_env: tuple[str, ...],
    mem_per_cpu: int | None = None,
) -> dict[str, Any]:
    """The JSON body of POST /jobs/ (and /jobs/quote/) from the command's options. A flag left
    out is left out of the body: the script's #SBATCH line gives it then (the server reads
    them), else the server's default; a flag given wins over the script's line, as on
    sbatch's command line."""
    body: dict[str, Any] = {
        "allocation": allocation,
        "script": script.read_text(),
        "script_name": script.name,
        "environment": environment_parse(env),
    }
    given = {
        "name": name,
        "time_limit_minutes": time_limit_parse(time_limit) if time_limit else None,
        "cpus_per_task": cpus_per_task,
        "ntasks": ntasks,
        "nodes": nodes,
        "gpus": gpus,
        "array": array or None,
        "mem_per_cpu": mem_per_cpu,
    }
    body.update({key: value for key, value in given.items() if value is not None})
    secrets = environment_parse(secret_env)
    if secrets:
        body["secret_environment"] = secrets
    return body


def allocation_choose(state: State, given: str | None) -> str:
    """The allocation a job draws on: `--allocation` (an id or its start), else the caller's
    only active allocation, which is said on stderr. With several, an error lists them to
    choose from; with none, it says how to get one."""
    if given:
        return state.resolve("allocation", given)
    page = state.client().get("/allocations/", {"status": "active", "page_size": CANDIDATES_SHOWN})
    rows: list[dict[str, Any]] = page.get("results", [])
    if len(rows) == 1:
        chosen = rows[0]
        if not state.as_json:
            stderr.print(
                f"Using allocation {chosen['id']} ({_allocation_text(chosen)}), your only "
                "active one.",
                highlight=False,
            )
        return str(chosen["id"])
    if not rows:
        raise CliError(
            "You have no active allocation to run a job on: buy or bid on an offer "
            "(`computeshare offers list`), or see when yours start (`computeshare allocations "
            "list`).",
            code="no_active_allocation",
            exit_code=ExitCode.NOT_FOUND,
        )
    count = int(page.get("count") or len(rows))
    lines = [f"  {row['id']}  {_allocation_text(row)}" for row in rows]
    if count > len(rows):
        lines.append(f"  … and {count - len(rows)} more (`computeshare allocations list`)")
    raise CliError(
        f"You have {count} active allocations: choose one with --allocation (the start of its "
        "id will do):\n" + "\n".join(lines),
        code="allocation_required",
        exit_code=ExitCode.USAGE,
    )


def _allocation_text(row: dict[str, Any]) -> str:
    return (
        f"{cell(row.get('cluster_name'))}/{cell(row.get('partition'))}, "
        f"{cell(row.get('capacity'))}, until {cell(row.get('window_end'))}"
    )


def directives_warn(answer: dict[str, Any]) -> None:
    """Says which of the script's #SBATCH lines the job runs without, and why."""
    for each in (answer.get("directives") or {}).get("overridden", []):
        value = f"={each['value']}" if each.get("value") else ""
        stderr.print(
            f"[yellow]warning[/]: line {each['line']}: {each['option']}{value} overridden: "
            f"{each['why']}",
            markup=True,
            highlight=False,
        )


def multipart_fields(body: dict[str, Any]) -> dict[str, str]:
    """The JSON body as form fields (contract of issue 16): objects as JSON strings, numbers
    as their digits."""
    return {
        key: json.dumps(value) if isinstance(value, dict) else str(value)
        for key, value in body.items()
    }


@click.group()
def jobs() -> None:
    """Submit, follow and collect jobs."""


@jobs.command("submit")
@job_options
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="FILE[:NAME]",
    help="A file for the job's folder (as NAME; default its own name). Repeatable.",
)
@click.option("--wait", is_flag=True, help="Follow the job to its end with a progress bar.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True)
@click.option(
    "--idempotency-key",
    help="Reuse a key to retry a submit safely from a script (default: a new one).",
)
@pass_state
def jobs_submit(
    state: State,
    /,
    script: Path,
    inputs: tuple[str, ...],
    wait: bool,
    interval: float,
    idempotency_key: str | None,
    **sizes: Any,
) -> None:
    """Submit SCRIPT on an allocation: its #SBATCH lines are read as sbatch reads them, and
    the flags given win over them."""
    sizes["allocation"] = allocation_choose(state, sizes["allocation"])
    body = job_body(script, **sizes)
    files = input_files_parse(inputs)
    key = idempotency_key or new_idempotency_key()
    client = state.client()
    if files:
        job = _submit_with_files(client, body, files, key, quiet=state.as_json)
    else:
        job = client.post("/jobs/", body, idempotency_key=key)
    if not state.as_json:
        directives_warn(job)
        stderr.print(
            f"Job {job['id']} {job['state']}: {job['reserved_units']} units reserved, "
            f"at most {figures.amount_text(job['estimated_max_cost'], job.get('currency'))}."
        )
    if wait:
        job = job_wait(state, job["id"], interval=interval)
        _job_end_print(state, job)
        if job["state"] != "completed":
            sys.exit(int(ExitCode.JOB_FAILED))
        return
    if state.as_json:
        json_print(job)
    else:
        stdout.print(job["id"])


def _submit_with_files(
    client: ApiClient, body: dict[str, Any], files: list[InputFile], key: str, *, quiet: bool
) -> dict[str, Any]:
    """POST /jobs/ as multipart with the files under `input_files`, each opened afresh for each
    attempt and read in chunks while it is sent; a bar shows the upload's progress."""
    total = sum(item.size for item in files)
    stack = ExitStack()
    progress = Progress(
        TextColumn("uploading"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=stderr,
        disable=quiet,
        transient=True,
    )
    task = progress.add_task("upload", total=total)

    def parts() -> list[tuple[str, tuple[str, Any, str]]]:
        stack.close()
        progress.reset(task, total=total)
        return [
            (
                "input_files",
                (
                    item.name,
                    _CountingReader(
                        stack.enter_context(item.path.open("rb")),
                        lambda count: progress.advance(task, count),
                    ),
                    "application/octet-stream",
                ),
            )
            for item in files
        ]

    with progress, stack:
        answer: dict[str, Any] = client.post_multipart(
            "/jobs/", multipart_fields(body), parts, idempotency_key=key
        )
    return answer


class _CountingReader(io.RawIOBase):
    """A file that tells `on_read` how many bytes each read gave (for the upload's bar)."""

    def __init__(self, raw: Any, on_read: Callable[[int], object]) -> None:
        self.raw = raw
        self.on_read = on_read
        self.name = getattr(raw, "name", "")

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.raw.read(size)
        self.on_read(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self.raw.seek(offset, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def seekable(self) -> bool:
        return True


@jobs.command("quote")
@job_options
@pass_state
def jobs_quote(state: State, /, script: Path, **sizes: Any) -> None:
    """What SCRIPT would reserve and cost, and when Slurm expects it to start; submits
    nothing and holds nothing."""
    sizes["allocation"] = allocation_choose(state, sizes["allocation"])
    quote = state.client().post("/jobs/quote/", job_body(script, **sizes))
    if state.as_json:
        json_print(quote)
        return
    directives_warn(quote)
    fields_print(
        quote,
        [
            ("units reserved", "reserved_units"),
            ("at most", "estimated_max_cost", money),
            ("allocation left after", "allocation_remaining_after", quantity),
            ("budget left after", "budget_remaining_after", money),
            ("wallet", "wallet_balance", money),
            ("expected start", "expected_start"),
            ("expected start from", "expected_start_source"),
            ("detail", "expected_start_detail"),
        ],
        title="Quote",
    )


@jobs.command("list")
@click.option("--state", "states", multiple=True, type=click.Choice(STATES))
@click.option("--allocation", help="An allocation id, or its start.")
@org_option
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@pass_state
def jobs_list(
    state: State,
    states: tuple[str, ...],
    allocation: str | None,
    organization: str | None,
    limit: int,
) -> None:
    """Your organizations' jobs, newest first."""
    org = state.organization_id(organization) if organization else None
    if allocation:
        allocation = state.resolve("allocation", allocation)
    rows = list(
        state.client().paginate(
            "/jobs/",
            {"state": list(states) or None, "allocation": allocation, "organization": org},
            limit=limit,
        )
    )
    if state.as_json:
        json_print(rows)
        return
    table_print(rows, JOB_COLUMNS, empty="No job.")


@jobs.command("show")
@click.argument("job_id")
@pass_state
def jobs_show(state: State, job_id: str) -> None:
    """One job: sizes, state, usage, cost, and its array's tasks by state."""
    job_id = state.resolve("job", job_id)
    job = state.client().get(f"/jobs/{job_id}/")
    if state.as_json:
        json_print(job)
        return
    _job_fields_print(job)


def _job_fields_print(job: dict[str, Any]) -> None:
    sizes = (
        f"{job['nodes']} node(s), {job['ntasks']} task(s) x {job['cpus_per_task']} CPU(s), "
        f"{job['gpus']} GPU(s)"
    )
    if job.get("mem_per_cpu"):
        sizes += f", {job['mem_per_cpu']} MiB per CPU"
    advice = job.get("sizing_advice") or {}
    advice_text = " ".join(
        part["text"] for part in (advice.get(key) for key in ("cores", "time", "memory")) if part
    )
    fields_print(
        {
            **job,
            "tasks_by_state": _tasks_summary(job),
            "sizes": sizes,
            "advice": advice_text,
            "runs_text": _runs_summary(job),
        },
        [
            ("name", "name"),
            ("state", "state"),
            ("reason", "state_reason"),
            ("slurm id", "scheduler_job_id"),
            ("allocation", "allocation"),
            ("cluster", "cluster_name"),
            ("partition", "partition"),
            ("capacity", "capacity"),
            ("qos", "qos"),
            ("reservation", "reservation"),
            ("preemptions", "preemptions"),
            ("runs", "runs_text"),
            ("array", "array"),
            ("tasks", "tasks_by_state"),
            ("sizes", "sizes"),
            ("time limit (min)", "time_limit_minutes"),
            ("created", "created_at"),
            ("started", "started_at"),
            ("ended", "ended_at"),
            ("exit code", "exit_code"),
            ("reserved units", "reserved_units"),
            ("at most", "estimated_max_cost", money),
            ("units used", "usage.units"),
            ("elapsed (s)", "usage.elapsed_seconds"),
            ("cost", "cost", money),
            ("cpu efficiency", "efficiency.cpu", percent),
            ("advice", "advice"),
        ],
        title=f"Job {job['id']}",
    )


def _runs_summary(job: dict[str, Any]) -> str | None:
    """Each run on a line when a task ran more than once: how it ended, when, and whether it
    was charged (a preempted run is not)."""
    runs = job.get("runs") or []
    if len(runs) <= len(job.get("tasks") or []) or len(runs) < 2:
        return None
    lines = []
    for run in runs:
        task = "" if run["task"] is None else f"task {run['task']}: "
        charged = (
            f"{figures.amount_text(run['cost'], job.get('currency'))} charged"
            if run["charged"]
            else "not charged"
        )
        lines.append(
            f"{task}{run['state']} after {run['elapsed_seconds']} s "
            f"(started {run['started_at'] or '-'}), {charged}"
        )
    return "\n".join(lines)


def _tasks_summary(job: dict[str, Any]) -> str | None:
    tasks = job.get("tasks") or []
    if not tasks:
        return None
    counts = Counter(task["state"] for task in tasks)
    return ", ".join(f"{count} {name}" for name, count in sorted(counts.items()))


@jobs.command("wait")
@click.argument("job_id")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True)
@pass_state
def jobs_wait(state: State, job_id: str, interval: float) -> None:
    """Follow a job to its end with a progress bar over its tasks; exit status 8 unless it
    completed."""
    job_id = state.resolve("job", job_id)
    job = job_wait(state, job_id, interval=interval)
    _job_end_print(state, job)
    if job["state"] != "completed":
        sys.exit(int(ExitCode.JOB_FAILED))


def job_wait(state: State, job_id: str, *, interval: float) -> dict[str, Any]:
    """Polls the job until it has ended and its result files are collected (so that a
    download right after finds them), showing how many of its tasks have ended (a plain job
    is one task). Ctrl-C stops the waiting, not the job."""
    client = state.client()
    progress = Progress(
        TextColumn("[bold]{task.fields[state]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("tasks ended"),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=stderr,
        disable=state.as_json,
    )
    with progress:
        bar = progress.add_task("job", total=None, state="queued", detail="")
        while True:
            job: dict[str, Any] = client.get(f"/jobs/{job_id}/")
            tasks = job.get("tasks") or []
            total = len(tasks) or 1
            ended = sum(task["state"] in ENDED for task in tasks) if tasks else 0
            if job["state"] in ENDED:
                ended = total
            counts = Counter(task["state"] for task in tasks)
            detail = ", ".join(
                f"{counts[name]} {name}" for name in ("running", "pending") if counts.get(name)
            )
            shown = job["state"]
            if job["state"] in ENDED and job.get("results_state") in RESULTS_PENDING:
                shown, detail = f"{job['state']}, collecting its files", ""
            progress.update(bar, total=total, completed=ended, state=shown, detail=detail)
            if job["state"] in ENDED and job.get("results_state") not in RESULTS_PENDING:
                return job
            time.sleep(interval)


def _job_end_print(state: State, job: dict[str, Any]) -> None:
    if state.as_json:
        json_print(job)
        return
    summary = _tasks_summary(job)
    stderr.print(
        f"Job {job['id']} {job['state']}"
        + (f" ({summary})" if summary else "")
        + f": {job['usage']['units']} units, "
        + f"cost {figures.amount_text(job['cost'], job.get('currency'))}."
    )


@jobs.command("output")
@click.argument("job_id")
@click.option("--stderr", "use_stderr", is_flag=True, help="The error stream, not stdout.")
@click.option("--task", type=click.IntRange(min=0), help="An array task's index.")
@click.option("--tail-bytes", type=click.IntRange(min=1), default=65536, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing as the output grows.")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True)
@pass_state
def jobs_output(
    state: State,
    job_id: str,
    use_stderr: bool,
    task: int | None,
    tail_bytes: int,
    follow: bool,
    interval: float,
) -> None:
    """The tail of the job's stdout (or stderr); with --follow, what it adds, until it ends."""
    from computeshare_cli.parsing import new_output

    client = state.client()
    job_id = state.resolve("job", job_id)
    query = {
        "stream": "stderr" if use_stderr else "stdout",
        "task": task,
        "tail_bytes": tail_bytes,
    }
    path = f"/jobs/{job_id}/output/"
    previous = ""
    while True:
        # Whether it had ended is read before the output, so that the last read sees all of it.
        ended = not follow or client.get(f"/jobs/{job_id}/")["state"] in ENDED
        current = client.get_text(path, query)
        sys.stdout.write(new_output(previous, current))
        sys.stdout.flush()
        previous = current
        if ended:
            return
        time.sleep(interval)


@jobs.command("cancel")
@click.argument("job_id")
@pass_state
def jobs_cancel(state: State, job_id: str) -> None:
    """Cancel a job: it never reaches the cluster, or gets scancel there."""
    job_id = state.resolve("job", job_id)
    job = state.client().post(f"/jobs/{job_id}/cancel/")
    if state.as_json:
        json_print(job)
        return
    stderr.print(f"Job {job['id']}: cancel requested ({job['state']}).")


@jobs.command("files")
@click.argument("job_id")
@pass_state
def jobs_files(state: State, job_id: str) -> None:
    """The files the job left in its folder, with their sizes."""
    client = state.client()
    job_id = state.resolve("job", job_id)
    first = client.get(f"/jobs/{job_id}/files/", {"page_size": 1})
    rows = list(client.paginate(f"/jobs/{job_id}/files/"))
    if state.as_json:
        json_print(
            {key: first.get(key) for key in ("state", "truncated", "detail")} | {"results": rows}
        )
        return
    if first.get("state") not in (None, "ready"):
        stderr.print(f"Result files: {first['state']}. {first.get('detail') or ''}".rstrip())
    if first.get("truncated"):
        stderr.print(
            "The job wrote more than the platform keeps: the files past the limit are missing."
        )
    table_print(
        ({**row, "size_text": size_text(row.get("size"))} for row in rows),
        [("name", "name"), ("size", "size_text"), ("bytes", "size"), ("modified", "modified_at")],
        empty="No result files (yet).",
    )


@jobs.command("download")
@click.argument("job_id")
@click.argument("names", nargs=-1)
@click.option("--all", "everything", is_flag=True, help="Every result file (one archive).")
@click.option(
    "-o",
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
)
@click.option(
    "--archive",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --all: keep the .tar.gz as this file instead of unpacking it.",
)
@click.option(
    "--results-timeout",
    type=click.FloatRange(min=0),
    default=300,
    show_default=True,
    help="Seconds to wait for the files of a job that just ended to be collected.",
)
@pass_state
def jobs_download(
    state: State,
    job_id: str,
    names: tuple[str, ...],
    everything: bool,
    output_dir: Path,
    archive: Path | None,
    results_timeout: float,
) -> None:
    """Download result files by NAME, or --all of them, streamed to disk."""
    if everything == bool(names):
        raise ArgumentError("Name the files to download, or give --all (not both).")
    if archive and not everything:
        raise ArgumentError("--archive goes with --all.")
    client = state.client()
    job_id = state.resolve("job", job_id)
    _results_ready(client, job_id, timeout=results_timeout)
    written: list[Path] = []
    if everything:
        if archive:
            _download_to(client, f"/jobs/{job_id}/files.tar.gz", archive, quiet=state.as_json)
            written.append(archive)
        else:
            written.extend(_download_all(client, job_id, output_dir, quiet=state.as_json))
    else:
        for name in names:
            target = download_target(output_dir, name)
            _download_to(client, f"/jobs/{job_id}/files/{name}", target, quiet=state.as_json)
            written.append(target)
    if state.as_json:
        json_print([str(path) for path in written])
    else:
        stderr.print(f"{len(written)} file(s) written under {output_dir}.")


def _results_ready(client: ApiClient, job_id: str, *, timeout: float) -> None:
    """Returns once the job's result files can be downloaded: at once when they are `ready`,
    after waiting while they are collected; else a conflict naming their state."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/jobs/{job_id}/")
        results = job.get("results_state", "ready")
        if results == "ready":
            return
        is_coming = results == "collecting" or (results == "waiting" and job["state"] in ENDED)
        if is_coming and time.monotonic() < deadline:
            time.sleep(1.0)
            continue
        detail = {
            "waiting": "The job has not ended: its files come once it has "
            "(`computeshare jobs wait`).",
            "collecting": "The job's files are still being collected; try again shortly.",
            "failed": "Collecting the job's files failed.",
            "expired": "The job's files were removed after the retention period.",
            "not_kept": "The platform keeps no files of a job its own jobs submitted.",
        }.get(results, f"The job's files are {results}.")
        raise CliError(detail, code=f"results_{results}", exit_code=ExitCode.CONFLICT, status=None)


def _bar(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=stderr,
        disable=quiet,
        transient=True,
    )


def _download_to(client: ApiClient, path: str, target: Path, *, quiet: bool) -> None:
    """Streams the answer to `target` through a temporary file beside it, renamed once the
    whole body has come: an interrupted download never leaves a file that looks complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with client.stream(path) as answer, _bar(quiet) as progress:
        length = answer.headers.get("Content-Length")
        task = progress.add_task(target.name, total=int(length) if length else None)
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 (renamed or removed below)
            dir=target.parent, prefix=f".{target.name}.", suffix=".part", delete=False
        )
        try:
            with handle:
                for chunk in answer.iter_bytes():
                    handle.write(chunk)
                    progress.advance(task, len(chunk))
            if length is not None and Path(handle.name).stat().st_size != int(length):
                raise CliError(
                    f"The download of {target.name} ended early.",
                    code="download_incomplete",
                    exit_code=ExitCode.UNAVAILABLE,
                )
            Path(handle.name).replace(target)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise


def _download_all(client: ApiClient, job_id: str, folder: Path, *, quiet: bool) -> list[Path]:
    """Unpacks the job's files.tar.gz into `folder` as it arrives (tarfile's stream mode reads
    it once, front to back), keeping only regular files whose names stay inside `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with client.stream(f"/jobs/{job_id}/files.tar.gz") as answer, _bar(quiet) as progress:
        task = progress.add_task("files.tar.gz", total=None)
        reader = _ChunkReader(answer.iter_bytes(), lambda n: progress.advance(task, n))
        with tarfile.open(fileobj=reader, mode="r|gz") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                target = download_target(folder, member.name)
                source = archive.extractfile(member)
                if source is None:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with source, target.open("wb") as handle:
                    shutil.copyfileobj(source, handle, 1 << 20)
                written.append(target)
    return written


class _ChunkReader(io.RawIOBase):
    """The chunks of a streamed answer as a file that tarfile can read front to back."""

    def __init__(self, chunks: Iterator[bytes], on_read: Callable[[int], object]) -> None:
        self.chunks = chunks
        self.buffer = memoryview(b"")  # a view, so that taking its front copies nothing
        self.on_read = on_read

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self.buffer:
            try:
                self.buffer = memoryview(next(self.chunks))
            except StopIteration:
                return 0
            except httpx.TransportError as error:
                raise CliError(
                    f"The download was cut off: {error}",
                    code="download_incomplete",
                    exit_code=ExitCode.UNAVAILABLE,
                ) from error
            self.on_read(len(self.buffer))
        size = min(len(target), len(self.buffer))
        target[:size] = self.buffer[:size]
        self.buffer = self.buffer[size:]
        return size
