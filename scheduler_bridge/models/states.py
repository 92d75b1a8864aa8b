"""A job's states and a run's ends, and the tables of the moves allowed between them
(`computeshare.states` checks every write against them)."""

from __future__ import annotations

from django.db import models

from hpc.types import ENDED_STATES as HPC_ENDED_STATES


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    SUBMITTED = "submitted", "Submitted"
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETING = "completing", "Completing"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMEOUT = "timeout", "Timed out"
    OUT_OF_MEMORY = "out_of_memory", "Out of memory"
    NODE_FAIL = "node_fail", "Node failure"
    PREEMPTED = "preempted", "Preempted"
    UNDETERMINED = "undetermined", "Undetermined"


class RunState(models.TextChoices):
    """How one run of a task ended: a job's ends, and the two ends of a run that the job asked
    for itself and that another run follows under the same id (both charged)."""

    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMEOUT = "timeout", "Timed out"
    OUT_OF_MEMORY = "out_of_memory", "Out of memory"
    NODE_FAIL = "node_fail", "Node failure"
    PREEMPTED = "preempted", "Preempted"
    REQUEUED = "requeued", "Requeued by the job"
    RESIZED = "resized", "Resized by the job"


# A job's ends are the library's (`hpc.types.ENDED_STATES`, the same strings as these states).
ENDED_STATES = frozenset(JobState(state) for state in HPC_ENDED_STATES)
# On the cluster: the poll follows these.
ACTIVE_STATES = frozenset(
    {
        JobState.SUBMITTED,
        JobState.PENDING,
        JobState.RUNNING,
        JobState.COMPLETING,
        JobState.UNDETERMINED,
    }
)
# The tables of allowed changes (`computeshare.states` checks every write against them).
# Before the cluster has it a job is `queued`: sbatch's answer makes it `submitted`, or it ends
# without ever running (cancelled, or refused: failed). On the cluster the states are what the
# poll reads, and Slurm does not report them in a fixed order: a requeued job pends again
# after it ran, a poll may first see a job running, completing or already in accounting, and
# one the poll lost sight of (`undetermined`) is found again in any state. So every move among
# the cluster's states, and from any of them to an end, is real; what never is: back to
# `queued`, into the cluster's states without `submitted` first, and out of an end.
_ON_THE_CLUSTER = ACTIVE_STATES | ENDED_STATES
_BEFORE_THE_CLUSTER = {JobState.SUBMITTED, JobState.CANCELLED, JobState.FAILED}
# A job's state is its tasks' (for an array, its most advanced task's: `job_state_from_tasks`),
# so it may show `submitted` again when the tasks it showed end before the poll has seen the
# others. Its end is final: it is recorded once every task has settled.
JOB_TRANSITIONS: dict[str, set[str]] = {
    JobState.QUEUED: set(_BEFORE_THE_CLUSTER),
    **{state: set(_ON_THE_CLUSTER - {state}) for state in ACTIVE_STATES},
    **{state: set() for state in ENDED_STATES},
}
# A task's state is what the queue says of it, then what accounting says of its last run: the
# queue never says `submitted`, so a task does not go back to it. An end the queue showed is
# a report until accounting settles the task (`is_released`), and accounting's end replaces it
# (an end is never followed by a state of the queue again).
TASK_TRANSITIONS: dict[str, set[str]] = {
    JobState.QUEUED: set(_BEFORE_THE_CLUSTER),
    **{state: set(_ON_THE_CLUSTER - {state, JobState.SUBMITTED}) for state in ACTIVE_STATES},
    **{state: set(ENDED_STATES - {state}) for state in ENDED_STATES},
}
