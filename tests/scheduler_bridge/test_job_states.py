"""Jobs' and tasks' states change only through their tables (`Job.TRANSITIONS`,
`JobTask.TRANSITIONS`), checked by `computeshare.states`: a move the table refuses raises, or
in bulk leaves the row as it was, and changes nothing."""

import pytest

from computeshare.states import TransitionRefused, status_move_all
from scheduler_bridge import services
from scheduler_bridge.models import ENDED_STATES, Job, JobEvent, JobState, JobTask
from tests.scheduler_bridge.test_settlement import run_record, submitted_job


def test_the_tables_allow_only_the_moves_that_happen():
    # Before the cluster: sbatch's answer, or an end without a run.
    assert Job.TRANSITIONS[JobState.QUEUED] == {
        JobState.SUBMITTED,
        JobState.CANCELLED,
        JobState.FAILED,
    }
    # Slurm reports the cluster's states in any order: a requeued job pends after it ran.
    assert JobState.PENDING in Job.TRANSITIONS[JobState.RUNNING]
    assert JobState.RUNNING in Job.TRANSITIONS[JobState.UNDETERMINED]
    # An array's state may show `submitted` again; a task's never does (the queue never says so).
    assert JobState.SUBMITTED in Job.TRANSITIONS[JobState.PENDING]
    assert JobState.SUBMITTED not in JobTask.TRANSITIONS[JobState.PENDING]
    for state in ENDED_STATES:
        assert Job.TRANSITIONS[state] == set()
        # A task's end the queue showed is replaced by accounting's, never by a queue state.
        assert JobTask.TRANSITIONS[state] == ENDED_STATES - {state}
    for table in (Job.TRANSITIONS, JobTask.TRANSITIONS):
        assert all(JobState.QUEUED not in targets for targets in table.values())
        assert set(table) == set(JobState.values)


@pytest.mark.django_db
def test_a_refused_move_of_a_job_raises_and_changes_nothing():
    job = submitted_job()
    services.job_task_settle(task_id=job.tasks.get().pk, runs=[run_record()], final=run_record())
    job = services.job_state_refresh(job_id=job.pk)
    assert job.state == JobState.COMPLETED
    events = list(JobEvent.objects.filter(job=job).values_list("state", flat=True))

    with pytest.raises(TransitionRefused):
        services.job_state_record(job, JobState.RUNNING, "seen again")

    job.refresh_from_db()
    assert (job.state, job.state_reason) == (JobState.COMPLETED, "")
    assert list(JobEvent.objects.filter(job=job).values_list("state", flat=True)) == events


@pytest.mark.django_db
def test_a_bulk_move_leaves_the_rows_whose_table_refuses_it():
    job = submitted_job(array="0-2")
    first, second, third = job.tasks.order_by("array_task_id")
    JobTask.objects.filter(pk=first.pk).update(state=JobState.RUNNING)
    JobTask.objects.filter(pk=second.pk).update(state=JobState.COMPLETED)

    moved = status_move_all(
        JobTask.objects.filter(job=job), JobState.PENDING, field="state", state_reason="Requeued"
    )

    assert moved == 2
    assert dict(job.tasks.values_list("pk", "state")) == {
        first.pk: JobState.PENDING,
        second.pk: JobState.COMPLETED,
        third.pk: JobState.PENDING,
    }
    assert JobTask.objects.get(pk=second.pk).state_reason == ""
    with pytest.raises(TransitionRefused):
        status_move_all(
            JobTask.objects.filter(job=job),
            JobState.PENDING,
            field="state",
            from_statuses=[JobState.COMPLETED],
        )
    assert JobTask.objects.get(pk=second.pk).state == JobState.COMPLETED
