"""Faults on the real Slurm test cluster, each showing that no job is lost and no run is charged
twice: the SSH connection dropped in the middle of a batch of sbatch; sshd and slurmctld
stopped while jobs run and started again; a Celery worker killed with SIGKILL while it submits
and while it settles; the same settlement delivered twice at once.

Leases and deadlines are short here (8 s instead of minutes), so that what a dead worker or an
unclear submission leaves behind is taken up again within the test. The tests that need no
Celery worker call the services in the test process: each step then happens when the test says.

Stopping a daemon stops it for everyone using the test cluster at that moment; each outage is a
few seconds and the cluster is brought up again in `finally` (`faults.daemon_stopped`)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import transaction

from billing.models import Transaction
from billing.selectors import ledger_verify
from hpc.pool import default_pool
from marketplace.models import Allocation, Cluster
from marketplace.services import ssh_settings_for
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.models import ENDED_STATES, ClusterPoll, Job, JobRun, JobState
from scheduler_bridge.tasks import cluster_poll_task
from tests.conftest import wait_for
from tests.factories import MembershipFactory, allocation_bought, funded_organization
from tests.scheduler_bridge.faults import (
    ClusterShell,
    SettlementOrder,
    controller_paused,
    daemon_stopped,
    drop_connection,
    local_queue,
    process_environment,
    settle_together,
)
from tests.scheduler_bridge.test_jobs_integration import real_cluster
from tests.workers import WorkerProcess, tasks_routed_to, worker_start

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 8
PRICE = Decimal("3.00")
# A second of CPU time at least: ElapsedRaw is whole seconds, and a run of 0 s costs nothing,
# which would leave no charge to count.
SLEEP_1 = "#!/bin/bash\nsleep 1\n"
POLL_TASK = "scheduler_bridge.tasks.cluster_poll_task"


@dataclass
class Bought:
    """A real cluster row for the test cluster and an allocation on it, with a member."""

    cluster: Cluster
    allocation: Allocation
    member: Membership
    shell: ClusterShell


@pytest.fixture
def fast(settings):
    """Short leases and deadlines for the calls the test makes in its own process."""
    settings.JOBS_SUBMIT_LEASE_SECONDS = LEASE_SECONDS
    settings.JOBS_POLL_LEASE_SECONDS = LEASE_SECONDS
    settings.JOBS_COMMAND_TIMEOUT_SECONDS = 8
    return settings


@pytest.fixture(autouse=True)
def own_queue() -> Iterator[str]:
    """Every task this test sends (the submission enqueued after each job's commit, the polls)
    goes to a queue of the test's own, which only the test's own workers consume: a session
    `celery_worker` left running by an earlier test (it consumes every queue) must not
    submit or settle these jobs behind the test's back. What is left in the queue is purged."""
    with tasks_routed_to(f"faults-{uuid.uuid4().hex[:8]}") as queue:
        yield queue


@pytest.fixture
def bought(testcluster) -> Iterator[Bought]:
    cluster = real_cluster(testcluster)
    team = funded_organization("1000", name="Fault Team")
    member = MembershipFactory(organization=team, role="member")
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=40, price=PRICE
    )
    shell = ClusterShell(testcluster.ssh_settings())
    yield Bought(cluster, allocation, member, shell)
    # A failed test leaves its jobs on the shared cluster, also those it never learned the id
    # of: they are found by name.
    names = [job.scheduler_name for job in Job.objects.filter(cluster=cluster)]
    shell.cancel_named(names)
    default_pool.close_all()


@pytest.fixture
def worker_environment(fast) -> dict[str, str]:
    return process_environment(
        JOBS_SUBMIT_LEASE_SECONDS=str(LEASE_SECONDS),
        JOBS_POLL_LEASE_SECONDS=str(LEASE_SECONDS),
        JOBS_COMMAND_TIMEOUT_SECONDS="8",
    )


@pytest.fixture
def workers(own_queue: str, worker_environment: dict[str, str], tmp_path: Path):
    """Starts workers on the test's queue; every one still running is stopped at the end."""
    started: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        worker = worker_start(
            queue=own_queue,
            name=name,
            log_path=tmp_path / f"{name}.log",
            environment=worker_environment,
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def submit(
    bought: Bought, count: int = 1, *, script: str = SLEEP_1, array: str | None = None
) -> list[Job]:
    """Accepts `count` jobs in one transaction: their submission tasks are sent together after
    the commit, as when many jobs arrive at once."""
    request = services.JobRequest(
        name="fault test", script=script, time_limit_minutes=1, array=array
    )
    with transaction.atomic():
        return [
            services.job_submit(actor=bought.member, allocation=bought.allocation, request=request)
            for _ in range(count)
        ]


def states(jobs: list[Job]) -> list[str]:
    return list(
        Job.objects.filter(pk__in=[job.pk for job in jobs])
        .order_by("created_at", "pk")
        .values_list("state", flat=True)
    )


def all_started(jobs: list[Job]) -> bool:
    """Every job has started on the cluster (it may have ended already: on the shared 2 CPUs
    two jobs do not always run side by side)."""
    return all(
        state in (JobState.RUNNING, JobState.COMPLETING) or state in ENDED_STATES
        for state in states(jobs)
    )


def all_ended(jobs: list[Job]) -> bool:
    return all(state in ENDED_STATES for state in states(jobs))


def poll_until(bought: Bought, condition: Callable[[], bool], timeout: float = 180) -> None:
    """Polls the cluster in this process once a second, as beat would, until `condition`.
    The timeouts are generous: other people's jobs on the shared 2 CPUs can come first."""
    deadline = time.monotonic() + timeout
    while True:
        services.cluster_poll(cluster_id=bought.cluster.pk)
        if condition():
            return
        if time.monotonic() > deadline:
            pytest.fail(f"not reached within {timeout:g} s: {states_summary(bought)}")
        time.sleep(1)


def states_summary(bought: Bought) -> dict[str, int]:
    summary: dict[str, int] = {}
    for state in Job.objects.filter(cluster=bought.cluster).values_list("state", flat=True):
        summary[state] = summary.get(state, 0) + 1
    return summary


@contextmanager
def poller(cluster: Cluster) -> Iterator[None]:
    """Sends the cluster's poll task every second while the block runs. The test sends
    `cluster_poll_task` itself rather than `jobs_poll_task`: the latter's fan-out is sent by the
    worker, whose routes send it to the `cluster` queue, which the test's workers do not
    consume."""
    stop = threading.Event()

    def send() -> None:
        while not stop.wait(1.0):
            cluster_poll_task.delay(cluster.pk)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def assert_each_name_submitted_once(bought: Bought, jobs: list[Job]) -> None:
    """Slurm knows every job's name exactly once, under the id the platform recorded."""
    found = bought.shell.job_ids_by_name([job.scheduler_name for job in jobs])
    recorded = {
        f"cs-{job_uuid}": {scheduler_id}
        for job_uuid, scheduler_id in Job.objects.filter(
            pk__in=[job.pk for job in jobs]
        ).values_list("uuid", "scheduler_job_id")
    }
    assert found == recorded


def assert_each_run_charged_once(bought: Bought, jobs: list[Job]) -> None:
    """Every task of every job completed, has one run, and that run one charge; the allocation
    holds nothing back for them any more and the ledger balances."""
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.COMPLETED, (job.uuid, job.state, job.state_reason)
        runs = JobRun.objects.filter(task__job=job)
        charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job.uuid)
        assert runs.count() == job.task_count
        assert charges.count() == job.task_count
        assert set(runs.values_list("charge_id", flat=True)) == set(
            charges.values_list("pk", flat=True)
        )
        assert sum(runs.values_list("cost", flat=True)) == job.cost > 0
    allocation = Allocation.objects.get(pk=bought.allocation.pk)
    charged = sum(Job.objects.filter(allocation=allocation).values_list("units", flat=True))
    assert (allocation.reserved, allocation.used) == (0, charged)
    assert ledger_verify() == []


def ended_runs(bought: Bought, job: Job) -> int:
    return sum(run.is_ended for run in bought.shell.runs(job.scheduler_job_id))


# --- The SSH connection dropped during sbatch ---------------------------------------------------


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_connection_dropped_during_sbatch_loses_no_job_and_submits_none_twice(
    bought, fast, settings, lanes
):
    """In one lane the shell stops at the drop, in the middle of the batch. In two, the lanes
    have read the whole batch before the first sbatch and finish it on the login node: either
    way the worker cannot know, and the next attempt finds by name what reached the cluster."""
    settings.JOBS_SUBMIT_LANES = lanes
    jobs = submit(bought, 20)
    names = [job.scheduler_name for job in jobs]
    bridge_connection = default_pool.connection(ssh_settings_for(bought.cluster))
    assert bridge_connection.transport is not None
    client_port = bridge_connection.transport.sock.getsockname()[1]
    dropped: list[object] = []

    def drop_at_the_first_job() -> None:
        try:
            bought.shell.wait_until_queued(names[0])
            # The batch's next sbatch waits on the paused controller while the connection is
            # found and dropped: an unloaded machine otherwise ran all 20 meanwhile.
            with controller_paused():
                drop_connection(client_port)
            dropped.append(True)
        except Exception as error:  # shown by the assertion below
            dropped.append(error)

    dropper = threading.Thread(target=drop_at_the_first_job)
    dropper.start()

    submitted = services.cluster_jobs_submit(cluster_id=bought.cluster.pk)

    dropper.join(60)
    assert dropped == [True]
    assert submitted == 0
    # The outcome of the batch is unclear: every job stays queued, claimed, with the reason.
    for job in Job.objects.filter(pk__in=[job.pk for job in jobs]):
        assert (job.state, job.submit_attempts) == (JobState.QUEUED, 1)
        assert job.state_reason.startswith("Waiting to reach the cluster:")
    time.sleep(1)  # an sbatch that was running when the connection dropped has finished
    reached = bought.shell.job_ids_by_name(names)
    if lanes == 1:
        assert 1 <= len(reached) < 20, "the connection dropped in the middle of the batch"
    else:
        assert 1 <= len(reached) <= 20
    assert all(len(ids) == 1 for ids in reached.values())

    # While the lease runs (an sbatch may still be running) a second attempt leaves them be.
    assert services.cluster_jobs_submit(cluster_id=bought.cluster.pk) == 0
    time.sleep(LEASE_SECONDS)
    # Then the jobs that reached the cluster are found by name, the others submitted.
    assert services.cluster_jobs_submit(cluster_id=bought.cluster.pk) == 20

    for name, ids in reached.items():
        assert Job.objects.get(uuid=name.removeprefix("cs-")).scheduler_job_id == ids.pop()
    poll_until(bought, lambda: all_ended(jobs))
    assert_each_name_submitted_once(bought, jobs)
    assert_each_run_charged_once(bought, jobs)


# --- sshd stopped while jobs run ------------------------------------------------------------


def test_jobs_that_end_while_sshd_is_down_are_followed_again_and_charged_once(bought, fast):
    jobs = submit(bought, 2, script="#!/bin/bash\nsleep 6\n")
    poll_until(bought, lambda: all_started(jobs))
    job_ids = [Job.objects.get(pk=job.pk).scheduler_job_id for job in jobs]
    before = states(jobs)

    with daemon_stopped("sshd"):
        for _ in range(3):
            report = services.cluster_poll(cluster_id=bought.cluster.pk)
            assert report is not None and report.error
            time.sleep(1)
        poll = ClusterPoll.objects.get(cluster=bought.cluster)
        assert poll.consecutive_failures == 3
        cluster = bought.cluster
        assert poll.last_error == (
            f"cannot connect to {cluster.ssh_host}:{cluster.ssh_port}: connection refused"
        )
        # The jobs end on the cluster while nobody can reach it; nothing is called ended here.
        wait_for(lambda: local_queue(job_ids) == [], timeout=30, interval=0.5)
        assert states(jobs) == before

    poll_until(bought, lambda: all_ended(jobs), timeout=30)
    poll = ClusterPoll.objects.get(cluster=bought.cluster)
    assert (poll.consecutive_failures, poll.last_error) == (0, "")
    assert_each_name_submitted_once(bought, jobs)
    assert_each_run_charged_once(bought, jobs)
    assert all(job.elapsed_seconds >= 6 for job in Job.objects.filter(pk__in=[j.pk for j in jobs]))


# --- slurmctld stopped and started ------------------------------------------------------------


def test_slurmctld_stopped_and_started_loses_no_job_and_charges_each_once(bought, fast):
    running = submit(bought, 2, script="#!/bin/bash\nsleep 25\n")
    poll_until(bought, lambda: all_started(running))
    before = states(running)

    with daemon_stopped("slurmctld"):
        # squeue waits about 18 s for a controller that does not answer; the poll gives up at
        # its deadline, a transient failure.
        fast.JOBS_COMMAND_TIMEOUT_SECONDS = 3
        for _ in range(2):
            report = services.cluster_poll(cluster_id=bought.cluster.pk)
            assert report is not None and "did not finish within 3 s: squeue" in report.error
        assert ClusterPoll.objects.get(cluster=bought.cluster).consecutive_failures == 2
        assert states(running) == before
        # A job accepted meanwhile: sbatch gives up after about 9 s with Slurm's reason, and
        # the job waits with it shown.
        fast.JOBS_COMMAND_TIMEOUT_SECONDS = 15
        [late] = submit(bought)
        assert services.cluster_jobs_submit(cluster_id=bought.cluster.pk) == 0
        late.refresh_from_db()
        assert late.state == JobState.QUEUED
        assert late.state_reason.startswith("Waiting to reach the cluster:")
        assert "Unable to contact slurm controller" in late.state_reason
        fast.JOBS_COMMAND_TIMEOUT_SECONDS = 8

    jobs = [*running, late]
    poll_until(bought, lambda: all_ended(jobs))
    assert_each_name_submitted_once(bought, jobs)
    assert_each_run_charged_once(bought, jobs)
    # The running jobs kept running under slurmd through the outage.
    assert all(
        job.elapsed_seconds >= 25 for job in Job.objects.filter(pk__in=[j.pk for j in running])
    )


# --- A worker killed during submission and during settlement ---------------------------------


@pytest.mark.celery
def test_a_worker_killed_during_submission_loses_no_job_and_submits_none_twice(bought, workers):
    submitter = workers("submitter")
    jobs = submit(bought, 24)  # the worker takes them all in one batch
    names = [job.scheduler_name for job in jobs]

    bought.shell.wait_until_queued(names[0])
    submitter.kill()

    time.sleep(1)  # an sbatch running when the worker died has finished
    reached = bought.shell.job_ids_by_name(names)
    # A batch is one command on the login node (it writes the scripts and runs sbatch for each),
    # which goes on after the worker that sent it dies: usually every job has reached the
    # cluster, sometimes only the first ones. Either way the worker died in the middle of the
    # batch as the platform sees it: after sbatch, before recording any job as submitted.
    assert 1 <= len(reached) <= 24
    assert states(jobs) == [JobState.QUEUED] * 24
    # A new worker: once the dead one's lease has run out, a poll finds the jobs that reached
    # the cluster by name (and submits any that did not), none of them twice.
    workers("submitter-again")
    with poller(bought.cluster):
        wait_for(lambda: all_ended(jobs), timeout=180, interval=1)
    assert_each_name_submitted_once(bought, jobs)
    assert_each_run_charged_once(bought, jobs)


def settling(job: Job) -> int:
    return JobRun.objects.filter(task__job=job).count()


@pytest.mark.celery
def test_a_worker_killed_during_settlement_charges_each_task_once(bought, workers):
    """The kill must land while the worker settles the 20 tasks one transaction after the
    other (some settled, some not). The test watches the settled count and kills at the first;
    should the worker have settled all 20 by then (it takes a few hundred ms), the test tries
    again with a new array, at most three times, rather than slow the product down."""
    settled_at_kill = 0
    for attempt in range(3):
        settler = workers(f"settler-{attempt}")
        [job] = submit(bought, array="0-19")  # the worker submits it
        wait_for(lambda job=job: states([job]) == ["submitted"], timeout=30, interval=0.2)
        job.refresh_from_db()
        # Nobody polls meanwhile: all 20 tasks end, and one poll has 20 to settle.
        wait_for(lambda job=job: ended_runs(bought, job) == 20, timeout=180, interval=1)

        cluster_poll_task.delay(bought.cluster.pk)
        deadline = time.monotonic() + 30
        while settling(job) == 0 and time.monotonic() < deadline:
            time.sleep(0.002)
        settler.kill()
        settled_at_kill = settling(job)
        if settled_at_kill < 20:
            break
    assert 1 <= settled_at_kill < 20, (
        f"the worker should die in the middle of the settlement: {settled_at_kill} of 20 "
        f"settled at the kill, attempt {attempt + 1} of 3"
    )
    task_states = list(job.tasks.values_list("is_released", flat=True))
    assert task_states.count(True) == settled_at_kill  # each settled task is settled whole

    # A new worker: once the dead one's poll lease has run out, a poll settles the others.
    workers("settler-again")
    with poller(bought.cluster):
        wait_for(lambda: all_ended([job]), timeout=120, interval=1)
    assert_each_run_charged_once(bought, [job])


# --- The same settlement delivered twice -------------------------------------------------------


@pytest.mark.celery
def test_the_same_settlement_delivered_twice_at_once_charges_once(bought, workers, tmp_path):
    twins = [workers("twin-a"), workers("twin-b")]
    raced, redelivered = submit(bought, 2, array="0-5")  # the workers submit them
    wait_for(lambda: JobState.QUEUED not in states([raced, redelivered]), timeout=30)
    raced.refresh_from_db()
    redelivered.refresh_from_db()
    wait_for(
        lambda: ended_runs(bought, raced) == ended_runs(bought, redelivered) == 6,
        timeout=180,
        interval=1,
    )

    # Two processes settle the first array's tasks at the same moment, as two deliveries of
    # one settlement would.
    records = bought.shell.runs(raced.scheduler_job_id)
    orders = []
    for task in raced.tasks.all():
        runs = [record for record in records if record.array_task_id == task.array_task_id]
        orders.append(SettlementOrder(task.pk, runs, final=runs[-1]))
    charged = settle_together(orders, tmp_path)
    assert [first + second for first, second in zip(*charged, strict=True)] == [1] * 6

    # The same poll task (one id) delivered twice, to two workers at once.
    task_id = str(uuid.uuid4())
    for _ in range(2):
        cluster_poll_task.apply_async((bought.cluster.pk,), task_id=task_id)
    wait_for(lambda: sum(len(twin.results(POLL_TASK)) for twin in twins) == 2, timeout=60)
    results = sorted(result for twin in twins for result in twin.results(POLL_TASK))
    # One settles the 6 runs; the other found the poll taken (None) or nothing left (0).
    assert results in (["0", "6"], ["6", "None"])
    assert_each_run_charged_once(bought, [raced, redelivered])


# --- A worker killed between settling a job's last task and updating the job -------------------


def test_a_job_whose_last_task_was_settled_by_a_worker_that_then_died_ends_at_the_next_poll(
    bought, fast
):
    """The poll settles each task in a transaction of its own, then brings the job's state in
    line with its tasks in another: a SIGKILL between the two commits leaves every task settled
    and the job still `running`. The next poll must end it, and charge nothing again."""
    [job] = submit(bought)
    assert services.cluster_jobs_submit(cluster_id=bought.cluster.pk) == 1
    job.refresh_from_db()
    wait_for(lambda: ended_runs(bought, job) == 1, timeout=180, interval=1)
    # What the dead worker's poll committed before it died: the task settled, the job not.
    runs = bought.shell.runs(job.scheduler_job_id)
    services.job_task_settle(task_id=job.tasks.get().pk, runs=runs, final=runs[-1])
    assert states([job]) == [JobState.SUBMITTED]

    services.cluster_poll(cluster_id=bought.cluster.pk)

    assert states([job]) == [JobState.COMPLETED]
    assert_each_run_charged_once(bought, [job])


# --- an array cancelled on the cluster while its tasks pend ------------------------------------


def test_an_array_cancelled_outside_the_platform_while_it_pends_ends_at_the_next_polls(
    bought, fast
):
    """The team (or the owner) cancels an array on the cluster while one task runs and the rest
    still wait as one placeholder record: every task ends as soon as accounting has it, without
    waiting out the grace period of jobs that left no trace, and what never ran is charged
    nothing and given back."""
    fast.JOBS_MISSING_GRACE_SECONDS = 3600
    [job] = submit(bought, script="#!/bin/bash\nsleep 30\n", array="0-4%1")
    poll_until(bought, lambda: JobState.RUNNING in job_task_states(job))
    time.sleep(2)  # a run of whole seconds, so that the task that ran has something to pay

    bought.shell.cancel_named([job.scheduler_name])

    poll_until(bought, lambda: all_ended([job]), timeout=60)
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    ran, *never_ran = job.tasks.order_by("array_task_id")
    # Seen once under load in CI (a run that had been seen running charged nothing): what the
    # platform recorded of the run and what accounting holds now, to tell the two apart.
    assert (ran.state, ran.cost > 0) == (JobState.CANCELLED, True), (
        list(
            JobRun.objects.filter(task=ran).values(
                "state", "scheduler_state", "elapsed_seconds", "units", "cost"
            )
        ),
        bought.shell.runs(job.scheduler_job_id),
    )
    assert [(task.state, task.units, task.started_at) for task in never_ran] == [
        (JobState.CANCELLED, 0, None)
    ] * 4
    assert all(task.is_released for task in job.tasks.all())
    allocation = Allocation.objects.get(pk=bought.allocation.pk)
    assert (allocation.reserved, allocation.used) == (0, ran.units)
    assert ledger_verify() == []


def job_task_states(job: Job) -> list[str]:
    return list(job.tasks.values_list("state", flat=True))
