"""`computeshare jobs submit` and `jobs quote`: a script's request from the command's flags
(the flags given win over the script's #SBATCH lines, as on sbatch's command line), the
allocation it draws on, and the upload of its input files."""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from computeshare_cli import figures
from computeshare_cli.client import ApiClient, new_idempotency_key
from computeshare_cli.context import State, pass_state
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.ids import CANDIDATES_SHOWN
from computeshare_cli.jobs.following import job_end_print, job_wait
from computeshare_cli.output import (
    cell,
    fields_print,
    json_print,
    money,
    quantity,
    stderr,
    stdout,
)
from computeshare_cli.parsing import (
    ArgumentError,
    InputFile,
    environment_parse,
    input_files_parse,
)

F = TypeVar("F", bound=Callable[..., Any])


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


@click.command("submit")
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
        job_end_print(state, job)
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


@click.command("quote")
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
