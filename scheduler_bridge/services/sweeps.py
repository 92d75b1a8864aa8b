"""Parameter sweeps: a team's script run once per row of a table, as one Slurm array job, and
every row's result gathered into one table once the tasks have ended.

A sweep is a thin layer over the array path of jobs: `sweep_submit` builds the array's wrapper
script (`sweep_tables.sweep_array_script`) and submits it with `job_submit`, which reserves
`cores x time limit` for every task and queues the job; the poll follows and charges each task
as any array's. "Retry failed" submits the failed rows alone as a new array job, which reserves
and is charged for those rows only. When a job's files have been fetched (`job_results_collect`,
ADR 0012), `sweep_results_gather` reads each of its rows' results from platform storage."""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from computeshare.errors import FieldErrors, ValidationFailed
from computeshare.states import status_move, status_save_all
from marketplace.models import Allocation
from organizations.models import Membership
from scheduler_bridge import errors
from scheduler_bridge.job_files import input_name_problem, job_files_storage
from scheduler_bridge.job_requests import JobPlan, JobRequest
from scheduler_bridge.models import (
    ENDED_STATES,
    RESULTS_FINAL,
    Job,
    JobFile,
    JobState,
    JobTask,
    Sweep,
    SweepJob,
    SweepRow,
)
from scheduler_bridge.services.planning import DirectivesRead, job_request_check
from scheduler_bridge.services.submission import job_submit
from scheduler_bridge.services.sweep_tables import (
    array_expression,
    last_line,
    row_folder,
    sweep_array_script,
    sweep_table_parse,
)


@dataclass(frozen=True)
class SweepRequest:
    name: str
    script: str
    table: str  # CSV: a header of column names, one row per task
    concurrency: int
    result_source: str
    result_file: str = ""
    # Per task; None: the script's #SBATCH line, or the default.
    time_limit_minutes: int | None = None
    cpus_per_task: int | None = None


# What a sweep sets itself of a job's options: the script's own are overridden with why.
SWEEP_SETS = {
    "array": "A sweep's array is its table: one task per row, `concurrency` at once.",
    "output": "A sweep keeps each task's stdout, where its result is read from.",
    "error": "A sweep keeps each task's stderr beside its stdout.",
    "input": "A sweep's task reads its row from its arguments and variables.",
    "open-mode": "A sweep keeps each task's stdout, where its result is read from.",
    "dependency": "A sweep's tasks wait for nothing but their turn.",
}


def _read(team_script: str) -> DirectivesRead:
    """How a sweep's job reads its directives: from the team's script, which its wrapper runs,
    without what the sweep sets itself."""
    return DirectivesRead(directives_from=team_script, not_for_this_job=SWEEP_SETS)


def _sweep_request_check(allocation: Allocation, request: SweepRequest) -> JobPlan:
    """The team's script and sizes as a job's would be checked (`job_request_check`: its
    #SBATCH lines read, an interpreter line, the partition's limits), and the result's
    naming; returns the plan of one task."""
    problems = FieldErrors()
    if request.result_source not in Sweep.ResultSource.values:
        problems.add("result_source", "`file` or `stdout`.")
    elif request.result_source == Sweep.ResultSource.FILE:
        problem = input_name_problem(request.result_file)
        if problem is not None:
            problems.add("result_file", problem)
    elif request.result_file:
        problems.add("result_file", "Only for a `file` result.")
    if request.concurrency < 1:
        problems.add("concurrency", "Must be at least 1.")
    problems.raise_if_any()
    plan, _ = job_request_check(
        allocation,
        _job_request(request, script=request.script, array=None),
        _read(request.script),
    )
    return plan


def _job_request(request: SweepRequest, *, script: str, array: str | None) -> JobRequest:
    return JobRequest(
        name=request.name or None,
        script=script,
        time_limit_minutes=request.time_limit_minutes,
        cpus_per_task=request.cpus_per_task,
        array=array,
    )


@transaction.atomic
def sweep_submit(*, actor: Membership, allocation: Allocation, request: SweepRequest) -> Sweep:
    """Accepts a sweep: one array job of one task per table row, at most `concurrency` running
    at once, reserved and queued by `job_submit` in this transaction. Refuses a bad table
    (400, `sweep_*` codes), a bad script or size (400, as a job's), too little allocation (402
    `allocation_exhausted`) with nothing written."""
    table = sweep_table_parse(request.table, max_rows=settings.SWEEP_MAX_ROWS)
    script = request.script
    plan = _sweep_request_check(allocation, request)
    rows = list(enumerate(table.rows))
    job = job_submit(
        actor=actor,
        allocation=allocation,
        request=_job_request(
            replace(request, name=plan.name),
            script=sweep_array_script(team_script=script, columns=table.columns, rows=rows),
            array=array_expression(len(rows), request.concurrency),
        ),
        read=_read(script),
    )
    sweep = Sweep.objects.create(
        organization_id=allocation.organization_id,
        allocation=allocation,
        submitted_by=actor.user,
        name=job.name,
        script=script,
        columns=list(table.columns),
        concurrency=request.concurrency,
        time_limit_minutes=job.time_limit_minutes,
        cpus_per_task=job.cpus_per_task,
        result_source=request.result_source,
        result_file=request.result_file,
    )
    SweepJob.objects.create(sweep=sweep, job=job, attempt=1)
    tasks = {task.array_task_id: task for task in JobTask.objects.filter(job=job)}
    SweepRow.objects.bulk_create(
        SweepRow(sweep=sweep, index=index, values=list(values), task=tasks[index])
        for index, values in rows
    )
    return sweep


@transaction.atomic
def sweep_retry_failed(*, actor: Membership, sweep: Sweep) -> SweepJob:
    """Submits the rows whose task did not complete as one new array job (task `i` runs the
    `i`-th of them), which reserves for those rows only and is charged for them only; their
    results go back to `pending` until it ends. 409 `sweep_still_running` before the sweep has
    ended, 409 `sweep_nothing_to_retry` when no row failed."""
    sweep = Sweep.objects.select_for_update().get(pk=sweep.pk)
    if sweep.organization_id != actor.organization_id:
        raise ValidationFailed(fields={"sweep": ["No such sweep."]})
    if sweep.state != Sweep.State.ENDED:
        raise errors.SweepStillRunning()
    failed = list(
        SweepRow.objects.filter(sweep=sweep, result_state=SweepRow.ResultState.FAILED).order_by(
            "index"
        )
    )
    if not failed:
        raise errors.SweepNothingToRetry()
    attempt = 1 + max(job.attempt for job in SweepJob.objects.filter(sweep=sweep))
    allocation = Allocation.objects.get(pk=sweep.allocation_id)
    job = job_submit(
        actor=actor,
        allocation=allocation,
        request=JobRequest(
            name=f"{sweep.name} (retry {attempt - 1})"[:200],
            script=sweep_array_script(
                team_script=sweep.script,
                columns=sweep.columns,
                rows=[(row.index, row.values) for row in failed],
            ),
            time_limit_minutes=sweep.time_limit_minutes,
            cpus_per_task=sweep.cpus_per_task,
            array=array_expression(len(failed), sweep.concurrency),
        ),
        read=_read(sweep.script),
    )
    sweep_job = SweepJob.objects.create(sweep=sweep, job=job, attempt=attempt)
    tasks = {task.array_task_id: task for task in JobTask.objects.filter(job=job)}
    now = timezone.now()
    for position, row in enumerate(failed):
        row.task = tasks[position]
        row.attempts += 1
        status_move(row, SweepRow.ResultState.PENDING, field="result_state")
        row.result = ""
        row.result_detail = ""
        row.updated_at = now
    status_save_all(
        failed, ["task", "attempts", "result_state", "result", "result_detail", "updated_at"]
    )
    status_move(sweep, Sweep.State.RUNNING, field="state")
    sweep.ended_at = None
    sweep.save(update_fields=["state", "ended_at", "updated_at"])
    return sweep_job


def _read_stored(row: JobFile | None) -> str | None:
    if row is None or not row.stored:
        return None
    with job_files_storage().open(row.stored, "rb") as handle:
        # Only what can be kept is read: a task may write a large file.
        data = handle.read(settings.SWEEP_RESULT_MAX_CHARS * 4 + 4)
    return bytes(data).decode("utf-8", errors="replace")


def _row_result(sweep: Sweep, row: SweepRow, job: Job, files: dict[str, JobFile]) -> None:
    """Sets the row's result from its task's files (fetched into storage)."""
    task = row.task
    if sweep.result_source == Sweep.ResultSource.FILE:
        name = f"{row_folder(row.index)}/{sweep.result_file}"
        text = _read_stored(files.get(name))
        value = text.strip() if text is not None else None
        where = f"`{name}`"
    else:
        name = f"stdout-{task.array_task_id}.txt"
        text = _read_stored(files.get(name))
        value = last_line(text) if text is not None else None
        where = "the task's stdout"
    limit = settings.SWEEP_RESULT_MAX_CHARS
    detail = ""
    if value is not None and len(value) > limit:
        value, detail = value[:limit], f"Cut at {limit} characters."
    if task.state != JobState.COMPLETED:
        status_move(row, SweepRow.ResultState.FAILED, field="result_state")
        exit_code = f", exit code {task.exit_code}" if task.exit_code is not None else ""
        detail = f"The task ended {task.get_state_display().lower()}{exit_code}."
    elif value is None or value == "":
        status_move(row, SweepRow.ResultState.MISSING, field="result_state")
        if job.results_state != Job.ResultsState.READY:
            detail = f"The job's files could not be fetched ({job.get_results_state_display()})."
        elif text is None:
            detail = (
                f"{where} was not written."
                if sweep.result_source == "file"
                else ("The task wrote no stdout.")
            )
        else:
            detail = f"{where} is empty."
    else:
        status_move(row, SweepRow.ResultState.OK, field="result_state")
    row.result = value or ""
    row.result_detail = detail[:500]


def sweep_results_gather(*, job_id: int) -> int:
    """Gathers the results of the sweep rows that `job_id` ran, once the job has ended and its
    files are final (fetched, or known never to come), and ends the sweep when no row waits.
    Idempotent: rows already gathered are left alone. Returns how many rows it gathered."""
    sweep_job = SweepJob.objects.filter(job_id=job_id).select_related("job", "sweep").first()
    if sweep_job is None:
        return 0
    job = sweep_job.job
    if job.state not in ENDED_STATES or job.results_state not in RESULTS_FINAL:
        return 0
    files = {
        row.name: row
        for row in JobFile.objects.filter(job=job, kind=JobFile.Kind.RESULT).exclude(stored="")
    }
    with transaction.atomic():
        sweep = Sweep.objects.select_for_update().get(pk=sweep_job.sweep_id)
        rows = list(
            SweepRow.objects.filter(
                sweep=sweep, task__job=job, result_state=SweepRow.ResultState.PENDING
            ).select_related("task")
        )
        now = timezone.now()
        for row in rows:
            _row_result(sweep, row, job, files)
            row.updated_at = now
        status_save_all(rows, ["result_state", "result", "result_detail", "updated_at"])
        waiting = SweepRow.objects.filter(
            sweep=sweep, result_state=SweepRow.ResultState.PENDING
        ).exists()
        if not waiting and sweep.state == Sweep.State.RUNNING:
            status_move(sweep, Sweep.State.ENDED, field="state")
            sweep.ended_at = now
            sweep.save(update_fields=["state", "ended_at", "updated_at"])
    return len(rows)
