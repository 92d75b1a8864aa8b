"""What the `local` scheduler says about its jobs, as `squeue` and `sacct` say it on Slurm: the
queue, the runs of given jobs or of a time window, and the jobs known by name. Read from the
records its supervisors write (`local_state`), each unended task of a dead supervisor ended
first (`local_supervision.settled`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

from hpc.backends.local_state import StateDirectory, TaskRecord, now_utc
from hpc.backends.local_supervision import settled

# The local backend spells its states as Slurm does, and reads them with Slurm's one table.
from hpc.slurm.accounting import api_state
from hpc.types import QueueEntry, RunRecord

PARTITION = "local"
# `find` answers for jobs submitted this recently, as `sacct` does for "the last days".
FIND_WINDOW = timedelta(days=7)
_JOB_ID = re.compile(r"([0-9]+)(?:_([0-9]+))?")


def tasks_of(state: StateDirectory, job_id: str) -> list[TaskRecord] | None:
    """The task records a job id names (`123`, an array's `123_4`); None when it is not one."""
    match = _JOB_ID.fullmatch(job_id)
    if match is None:
        return None
    records = state.read_tasks(int(match[1]))
    if match[2] is not None:
        records = [record for record in records if record.array_task_id == int(match[2])]
    return records


def find(state: StateDirectory, names: Sequence[str]) -> dict[str, str]:
    """The jobs submitted under these names within `FIND_WINDOW`, by name."""
    since = now_utc() - FIND_WINDOW
    found = {}
    for name in names:
        entry = state.read_name(name)
        if entry is not None and entry[1] >= since:
            found[name] = str(entry[0])
    return found


def queue(state: StateDirectory) -> list[QueueEntry]:
    """Every unended local task."""
    entries = []
    liveness: dict[int, bool] = {}
    for job_id in state.active_job_ids():
        for record in settled(state, state.read_tasks(job_id), liveness):
            if not record.is_ended:
                entries.append(
                    QueueEntry(
                        job_id=_display_id(record),
                        array_job_id=str(record.job_id),
                        array_task_id=record.array_task_id,
                        name=record.name,
                        state=api_state(record.scheduler_state),
                        scheduler_state=record.scheduler_state,
                        reason=record.reason,
                        partition=PARTITION,
                        cpus=record.requested_cpus,
                        start_time=record.start_time,
                    )
                )
    return entries


def runs(state: StateDirectory, job_ids: Sequence[str]) -> list[RunRecord]:
    """Each task of the jobs named once; ids that name no job are passed over."""
    seen: set[int] = set()
    found = []
    liveness: dict[int, bool] = {}
    for job_id in job_ids:
        for record in settled(state, tasks_of(state, job_id) or [], liveness):
            if record.raw_job_id not in seen:
                seen.add(record.raw_job_id)
                found.append(_run_record(record))
    return found


def runs_between(state: StateDirectory, start: datetime, end: datetime) -> list[RunRecord]:
    """Every run recorded here that was in the system (submitted, and not yet ended) at some
    time between `start` and `end`. Reads every job the root has held that may overlap the
    window: a job directory last changed before `start` whose job is not active ended before
    the window, unread."""
    active = set(state.active_job_ids())
    found = []
    liveness: dict[int, bool] = {}
    for entry in os.scandir(state.jobs):
        if not entry.name.isdigit():
            continue
        job_id = int(entry.name)
        if job_id not in active and entry.stat().st_mtime < start.timestamp():
            continue
        for record in settled(state, state.read_tasks(job_id), liveness):
            if record.submit_time <= end and (record.end_time is None or record.end_time >= start):
                found.append(_run_record(record))
    return sorted(found, key=lambda run: int(run.raw_job_id))


def _display_id(record: TaskRecord) -> str:
    if record.array_task_id is None:
        return str(record.job_id)
    return f"{record.job_id}_{record.array_task_id}"


def _run_record(record: TaskRecord) -> RunRecord:
    elapsed = record.elapsed_seconds
    if not record.is_ended and record.start_time is not None:
        elapsed = max(0, int((now_utc() - record.start_time).total_seconds()))
    return RunRecord(
        job_id=_display_id(record),
        raw_job_id=str(record.raw_job_id),
        array_job_id=str(record.job_id),
        array_task_id=record.array_task_id,
        name=record.name,
        state=api_state(record.scheduler_state),
        scheduler_state=record.scheduler_state,
        exit_code=record.exit_code,
        submit_time=record.submit_time,
        start_time=record.start_time,
        end_time=record.end_time,
        elapsed_seconds=elapsed,
        allocated_cpus=record.allocated_cpus,
        allocated_gpus=0,
        cpu_seconds=record.cpu_seconds,
        time_limit_minutes=record.time_limit_minutes,
        reason=record.reason,
        partition=PARTITION,
        requested_cpus=record.requested_cpus,
    )
