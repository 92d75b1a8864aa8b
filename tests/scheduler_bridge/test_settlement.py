"""Settlement of runs as accounting reports them: what is charged, to whom, and that each run
is charged exactly once however often it is seen (twice in a row, twice at once, by the poll
and by the nightly reconciliation)."""

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from billing.models import Entry, Transaction
from billing.selectors import ledger_verify
from hpc.slurm.accounting import parse_sacct_runs
from hpc.types import RunRecord
from marketplace.models import Allocation
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobRun, JobState, JobTask
from tests.concurrency import run_together
from tests.factories import MembershipFactory, PartitionFactory, allocation_bought

SUBMIT = datetime(2026, 11, 26, 1, 0, 0, tzinfo=UTC)


def run_record(
    job_id="41",
    task=None,
    *,
    state="completed",
    cpus=2,
    elapsed=1800,
    submit=SUBMIT,
    raw=None,
    cpu_seconds=1200.0,
):
    full = job_id if task is None else f"{job_id}_{task}"
    return RunRecord(
        job_id=full,
        raw_job_id=raw or (job_id if task is None else str(1000 + task)),
        array_job_id=job_id,
        array_task_id=task,
        name="cs-x",
        state=state,
        scheduler_state=state.upper(),
        exit_code=0 if state == "completed" else 1,
        submit_time=submit,
        start_time=submit,
        end_time=submit,
        elapsed_seconds=elapsed,
        allocated_cpus=cpus,
        allocated_gpus=0,
        cpu_seconds=cpu_seconds,
        time_limit_minutes=60,
    )


def submitted_job(*, cpus=2, minutes=60, array=None, price="2.00") -> Job:
    allocation = allocation_bought(partition=PartitionFactory(cpus=8), quantity=100, price=price)
    member = MembershipFactory(organization=allocation.organization, role="member")
    job = services.job_submit(
        actor=member,
        allocation=allocation,
        request=services.JobRequest(
            name="sim",
            script="#!/bin/bash\ntrue\n",
            time_limit_minutes=minutes,
            cpus_per_task=cpus,
            array=array,
        ),
    )
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id="41")
    return Job.objects.get(pk=job.pk)


def charges(job):
    return Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job.uuid)


@pytest.mark.django_db
def test_a_run_is_charged_cores_times_elapsed_at_the_unit_price_split_into_earnings_and_fee():
    job = submitted_job()  # reserves 2 cores x 1 h = 2 units
    task = job.tasks.get()

    result = services.job_task_settle(task_id=task.pk, runs=[run_record()], final=run_record())

    assert result == services.Settlement(runs_charged=1, ended=True)
    job = services.job_state_refresh(job_id=job.pk)
    assert job.state == JobState.COMPLETED
    assert (job.units, job.cost) == (Decimal("1"), Decimal("2"))  # 2 cores x 0.5 h x 2.00
    assert job.efficiency == Decimal("0.3333")  # 1200 s of CPU over 2 cores x 1800 s
    [charge] = charges(job)
    assert {entry.kind: entry.amount for entry in charge.entries.all()} == {
        Entry.Kind.CHARGE: Decimal("-2"),
        Entry.Kind.EARNING: Decimal("1.8"),
        Entry.Kind.FEE: Decimal("0.2"),
    }
    allocation = Allocation.objects.get(pk=job.allocation_id)
    assert (allocation.used, allocation.reserved) == (Decimal(1), Decimal(0))
    assert allocation.hold.amount == Decimal(198)  # 100 x 2.00 held, 2.00 captured
    assert ledger_verify() == []


@pytest.mark.django_db
def test_the_same_run_settled_twice_is_charged_once():
    job = submitted_job()
    task = job.tasks.get()

    services.job_task_settle(task_id=task.pk, runs=[run_record()], final=run_record())
    again = services.job_task_settle(task_id=task.pk, runs=[run_record()], final=run_record())

    assert again == services.Settlement(runs_charged=0, ended=False)
    assert charges(job).count() == 1 and JobRun.objects.count() == 1
    allocation = Allocation.objects.get(pk=job.allocation_id)
    assert (allocation.used, allocation.reserved) == (Decimal(1), Decimal(0))


@pytest.mark.django_db(transaction=True)
def test_the_same_settlement_delivered_twice_at_once_charges_once():
    job = submitted_job()
    task = job.tasks.get()

    outcomes = run_together(
        [lambda: services.job_task_settle(task_id=task.pk, runs=[run_record()], final=run_record())]
        * 8
    )

    assert sorted(outcome.runs_charged for outcome in outcomes) == [0] * 7 + [1]
    assert charges(job).count() == 1
    allocation = Allocation.objects.get(pk=job.allocation_id)
    assert (allocation.used, allocation.reserved) == (Decimal(1), Decimal(0))
    assert ledger_verify() == []


@pytest.mark.django_db
def test_usage_is_capped_at_what_the_task_reserved():
    job = submitted_job(cpus=2, minutes=60)  # 2 units
    task = job.tasks.get()
    past_limit = run_record(state="timeout", elapsed=3700)  # slurm kills a little late

    services.job_task_settle(task_id=task.pk, runs=[past_limit], final=past_limit)

    run = JobRun.objects.get()
    assert run.metered_units == Decimal("2.055556")
    assert (run.units, run.cost) == (Decimal(2), Decimal(4))
    assert Allocation.objects.get(pk=job.allocation_id).used == Decimal(2)


@pytest.mark.django_db
def test_owner_caused_ends_are_recorded_but_not_charged():
    job = submitted_job()
    task = job.tasks.get()
    failed_node = run_record(state="node_fail")

    services.job_task_settle(task_id=task.pk, runs=[failed_node], final=failed_node)

    run = JobRun.objects.get()
    assert (run.is_owner_caused, run.metered_units, run.units, run.cost) == (
        True,
        Decimal(1),
        Decimal(0),
        Decimal(0),
    )
    assert not charges(job).exists()
    allocation = Allocation.objects.get(pk=job.allocation_id)
    assert (allocation.used, allocation.reserved) == (0, 0)


@pytest.mark.django_db
def test_a_requeued_job_pays_once_per_run_and_never_past_its_reservation():
    job = submitted_job()  # 2 units
    task = job.tasks.get()
    first = run_record(state="preempted", elapsed=600)  # the requeued run: the owner's doing
    second = run_record(elapsed=3000, submit=SUBMIT.replace(minute=20))

    services.job_task_settle(task_id=task.pk, runs=[first], final=None)
    task.refresh_from_db()
    assert not task.is_released
    services.job_task_settle(task_id=task.pk, runs=[first, second], final=second)

    assert list(JobRun.objects.order_by("submit_time").values_list("units", flat=True)) == [
        Decimal(0),
        Decimal("1.666667"),
    ]
    assert charges(job).count() == 1
    assert Allocation.objects.get(pk=job.allocation_id).reserved == 0


@pytest.mark.django_db
def test_each_array_task_settles_alone_and_the_job_ends_with_the_last():
    job = submitted_job(cpus=1, minutes=60, array="0-2")  # 3 tasks x 1 unit
    tasks = list(job.tasks.order_by("array_task_id"))

    for task in tasks[:2]:
        record = run_record(task=task.array_task_id, cpus=1)
        services.job_task_settle(task_id=task.pk, runs=[record], final=record)
    assert services.job_state_refresh(job_id=job.pk).state == JobState.SUBMITTED
    failing = run_record(task=2, cpus=1, state="failed")
    services.job_task_settle(task_id=tasks[2].pk, runs=[failing], final=failing)

    job = services.job_state_refresh(job_id=job.pk)
    assert job.state == JobState.FAILED  # one failed task fails the sweep
    assert job.units == Decimal("1.5") and charges(job).count() == 3
    assert list(JobTask.objects.filter(job=job).values_list("state", flat=True)) == [
        "completed",
        "completed",
        "failed",
    ]
    assert Allocation.objects.get(pk=job.allocation_id).reserved == 0


@pytest.mark.django_db
def test_an_array_of_tasks_under_a_second_has_its_start_and_efficiency_from_accounting():
    """Array 800 of the recorded sacct output: tasks 0 and 1 ran for less than a second
    (ElapsedRaw 0, Start equal to End), 2 and 3 for one. Settled from those records, the
    job starts when its first task did, its tasks keep accounting's start and elapsed time,
    and its efficiency is its CPU time over one core for one second per task; nothing is
    charged for the seconds accounting did not count."""
    recorded = (
        Path(__file__).parents[1] / "hpc" / "recorded" / "sacct_max_rss_with_steps.txt"
    ).read_text()
    now = datetime(2026, 11, 26, 17, 0, 0, tzinfo=UTC)
    records = {
        record.array_task_id: record
        for record in parse_sacct_runs(recorded, with_steps=True, now=now)
        if record.array_job_id == "800"
    }
    job = submitted_job(cpus=1, minutes=5, array="0-3")

    for task in job.tasks.order_by("array_task_id"):
        record = records[task.array_task_id]
        services.job_task_settle(task_id=task.pk, runs=[record], final=record)
    job = services.job_state_refresh(job_id=job.pk)

    started = datetime(2026, 11, 26, 16, 28, 21, tzinfo=UTC)
    assert (job.state, job.started_at) == (JobState.COMPLETED, started)
    assert job.ended_at == datetime(2026, 11, 26, 16, 28, 23, tzinfo=UTC)
    tasks = list(job.tasks.order_by("array_task_id"))
    assert [(task.started_at, task.elapsed_seconds) for task in tasks] == [
        (started, 0),
        (started, 0),
        (datetime(2026, 11, 26, 16, 28, 22, tzinfo=UTC), 1),
        (datetime(2026, 11, 26, 16, 28, 22, tzinfo=UTC), 1),
    ]
    assert [task.allocated_core_seconds for task in tasks] == [1, 1, 1, 1]
    assert job.cpu_seconds == Decimal("0.063")
    assert (job.elapsed_seconds, job.allocated_core_seconds) == (2, 4)
    assert job.efficiency == Decimal("0.0158")  # 0.063 s of CPU over 4 core-seconds
    assert tasks[0].efficiency == Decimal("0.0150")
    assert job.units == Decimal("0.000556")  # the two whole seconds of tasks 2 and 3
    assert list(JobRun.objects.filter(task__job=job).values_list("elapsed_seconds", flat=True)) == [
        0,
        0,
        1,
        1,
    ]
