"""Following jobs: `computeshare jobs list`, `show`, `wait` (to the end, with a progress bar
over the tasks), `output` (its tail, and what it adds with --follow) and `cancel`."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from computeshare_cli import figures
from computeshare_cli.context import State, org_option, pass_state
from computeshare_cli.errors import ExitCode
from computeshare_cli.output import (
    Column,
    fields_print,
    json_print,
    money,
    percent,
    rows_print,
    stderr,
)

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


@click.command("list")
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
    rows_print(rows, JOB_COLUMNS, as_json=state.as_json, empty="No job.")


@click.command("show")
@click.argument("job_id")
@pass_state
def jobs_show(state: State, job_id: str) -> None:
    """One job: sizes, state, usage, cost, and its array's tasks by state."""
    job = state.detail("job", job_id)
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


@click.command("wait")
@click.argument("job_id")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True)
@pass_state
def jobs_wait(state: State, job_id: str, interval: float) -> None:
    """Follow a job to its end with a progress bar over its tasks; exit status 8 unless it
    completed."""
    job_id = state.resolve("job", job_id)
    job = job_wait(state, job_id, interval=interval)
    job_end_print(state, job)
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


def job_end_print(state: State, job: dict[str, Any]) -> None:
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


@click.command("output")
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


@click.command("cancel")
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
