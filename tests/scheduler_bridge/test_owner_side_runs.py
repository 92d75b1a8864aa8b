"""Runs the owner's side ended count in its track record once each, however often settlement
sees them; runs the job itself ended, or the team cancelled, never do. (The test cluster cannot
fail a node or preempt a job without being reconfigured, so the runs here are accounting's
records as the poll reads them; the reachability and hardware parts of the record are tested
against the real cluster in test_idle_integration.py.)"""

from dataclasses import replace

import pytest

from marketplace import selectors
from marketplace.models import OwnerSideRunEnd
from scheduler_bridge import services
from scheduler_bridge.models import JobRun
from tests.scheduler_bridge.test_settlement import SUBMIT, run_record, submitted_job

pytestmark = pytest.mark.django_db


def test_each_run_ended_by_the_owner_s_side_is_counted_once_by_its_slurm_state():
    job = submitted_job()
    task = job.tasks.get()
    node_fail = run_record(state="node_fail", raw="501")
    boot_fail = run_record(state="node_fail", raw="502", submit=SUBMIT.replace(minute=5))
    # Slurm's BOOT_FAIL is read as a node failure; the record keeps Slurm's own word.
    boot_fail = replace(boot_fail, scheduler_state="BOOT_FAIL")
    preempted = run_record(state="preempted", raw="503", submit=SUBMIT.replace(minute=10))
    completed = run_record(raw="504", submit=SUBMIT.replace(minute=15), elapsed=60)

    services.job_task_settle(task_id=task.pk, runs=[node_fail, boot_fail, preempted], final=None)
    # Seen again (the next poll, the nightly reconciliation): nothing more is counted.
    services.job_task_settle(
        task_id=task.pk, runs=[node_fail, boot_fail, preempted, completed], final=completed
    )

    assert JobRun.objects.count() == 4
    assert sorted(
        OwnerSideRunEnd.objects.values_list("raw_job_id", "scheduler_state", "ended_at")
    ) == [
        ("501", "NODE_FAIL", SUBMIT),
        ("502", "BOOT_FAIL", SUBMIT.replace(minute=5)),
        ("503", "PREEMPTED", SUBMIT.replace(minute=10)),
    ]
    record = selectors.track_record(job.cluster, now=SUBMIT.replace(hour=5))
    assert (record.run_ends, record.runs_ended_by_owner, record.is_clean) == (
        {"BOOT_FAIL": 1, "NODE_FAIL": 1, "PREEMPTED": 1},
        3,
        False,
    )


def test_runs_the_job_or_the_team_ended_leave_the_record_clean():
    job = submitted_job()
    task = job.tasks.get()
    failed = run_record(state="failed", raw="601")
    cancelled = run_record(state="cancelled", raw="602", submit=SUBMIT.replace(minute=1))

    services.job_task_settle(task_id=task.pk, runs=[failed, cancelled], final=cancelled)

    assert not OwnerSideRunEnd.objects.exists()
    assert selectors.track_record(job.cluster, now=SUBMIT.replace(hour=5)).is_clean
