"""The services over the `local` backend (the demo's cluster): a job is submitted, followed by
the poll, settled and charged, with the same states as on Slurm."""

import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import Transaction
from marketplace.models import Cluster
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobRun, JobState
from scheduler_bridge.services.backends import backend_for
from tests.conftest import local_cluster_root
from tests.factories import ClusterFactory, MembershipFactory, PartitionFactory, allocation_bought

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def local_allocation(settings, tmp_path_factory):
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    cluster = ClusterFactory(backend=Cluster.Backend.LOCAL, ssh_host="", ssh_user="")
    partition = PartitionFactory(cluster=cluster, name="local", cpus=2, nodes=1, gpus=0)
    return allocation_bought(partition=partition, quantity=10, price="6.00")


def _submit(allocation, **fields) -> Job:
    member = MembershipFactory(organization=allocation.organization, role="member")
    request = services.JobRequest(
        **{"name": "local", "script": "#!/bin/bash\necho hi\n", "time_limit_minutes": 5, **fields}
    )
    return services.job_submit(actor=member, allocation=allocation, request=request)


def _poll_until_ended(job: Job, timeout: float = 30) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        services.cluster_poll(cluster_id=job.cluster_id)
        job.refresh_from_db()
        if job.is_ended:
            return job
        time.sleep(0.3)
    pytest.fail(f"the job is still {job.state}")


def test_a_local_job_runs_and_is_charged_what_it_used(local_allocation):
    job = _submit(
        local_allocation,
        script=(
            '#!/bin/bash\necho "hello $GREETING"\n'
            # 1.5 s of CPU, not of the clock: on a busy machine the clock runs ahead of it.
            "python3 -c 'import time\nend = time.process_time() + 1.5\n"
            "while time.process_time() < end: pass'\n"
        ),
        environment={"GREETING": "from the demo"},
    )

    # Submitted here, or by a Celery worker of the session that took the task the commit sent.
    services.cluster_jobs_submit(cluster_id=job.cluster_id)
    job = _poll_until_ended(job)

    assert job.state == JobState.COMPLETED and job.exit_code == 0
    assert job.submitted_at is not None
    output = services.job_output(job=job, stream="stdout", tail_bytes=100, array_task_id=None)
    assert output == b"hello from the demo\n"
    assert job.elapsed_seconds >= 1 and job.cpu_seconds >= Decimal("1.2")
    assert job.units == (Decimal(job.elapsed_seconds) / 3600).quantize(Decimal("0.000001"))
    assert job.cost == (job.units * 6).quantize(Decimal("0.000001"))
    assert Transaction.objects.filter(kind="charge", reference=job.uuid).count() == 1
    local_allocation.refresh_from_db()
    assert (local_allocation.used, local_allocation.reserved) == (job.units, 0)


def test_a_local_array_and_a_cancelled_job(local_allocation):
    array = _submit(
        local_allocation, array="0-3", script="#!/bin/bash\necho $SLURM_ARRAY_TASK_ID\n"
    )
    sleeper = _submit(local_allocation, script="#!/bin/bash\nsleep 60\n")
    services.cluster_jobs_submit(cluster_id=array.cluster_id)

    array = _poll_until_ended(array)
    services.job_cancel(actor=MembershipFactory(organization=sleeper.organization), job=sleeper)
    services.job_cancel_remote(job_id=sleeper.pk)
    sleeper = _poll_until_ended(sleeper)

    assert array.state == JobState.COMPLETED
    assert sorted(array.tasks.values_list("state", flat=True)) == ["completed"] * 4
    assert services.job_output(job=array, stream="stdout", tail_bytes=10, array_task_id=2) == b"2\n"
    assert sleeper.state == JobState.CANCELLED


def test_a_local_array_of_tasks_under_a_second_shows_its_start_elapsed_and_efficiency(
    local_allocation,
):
    """Tasks that end before any poll sees them run, each in less than the whole second that
    accounting counts: the job still starts when its first task did, each task has its start,
    and the job has an efficiency (its CPU time over one core-second per task)."""
    array = _submit(
        local_allocation, array="0-2", script="#!/bin/bash\necho $SLURM_ARRAY_TASK_ID\n"
    )
    services.cluster_jobs_submit(cluster_id=array.cluster_id)
    backend = backend_for(array.cluster)
    array.refresh_from_db()
    deadline = time.monotonic() + 60  # a loaded machine runs the suite at nice 19
    while not (
        len(records := backend.runs([array.scheduler_job_id])) == 3
        and all(record.is_ended for record in records)
    ):
        assert time.monotonic() < deadline, "the tasks did not end"
        time.sleep(0.2)

    array = _poll_until_ended(array)

    tasks = list(array.tasks.order_by("array_task_id"))
    runs = {run.task_id: run for run in JobRun.objects.filter(task__job=array)}
    assert array.state == JobState.COMPLETED
    # An `echo` takes milliseconds; on a loaded machine one may pass a whole second.
    counted = sum(max(task.elapsed_seconds, 1) for task in tasks)
    assert all(task.started_at == runs[task.pk].started_at is not None for task in tasks)
    assert array.started_at == min(task.started_at for task in tasks)
    assert array.allocated_core_seconds == counted
    assert array.efficiency == min(
        Decimal(1), (array.cpu_seconds / counted).quantize(Decimal("0.0001"))
    )


def test_the_nightly_reconciliation_charges_a_run_that_no_poll_settled(local_allocation):
    job = _submit(local_allocation, script="#!/bin/bash\nsleep 1\n")
    services.cluster_jobs_submit(cluster_id=job.cluster_id)
    job.refresh_from_db()
    backend = backend_for(job.cluster)
    deadline = time.monotonic() + 20
    while not any(run.is_ended for run in backend.runs([job.scheduler_job_id])):
        assert time.monotonic() < deadline, "the local job did not end"
        time.sleep(0.2)

    assert services.cluster_reconcile(cluster_id=job.cluster_id) == 1
    assert services.cluster_reconcile(cluster_id=job.cluster_id) == 0

    run = JobRun.objects.get(task__job=job)
    assert run.source == JobRun.Source.RECONCILIATION and run.units > 0
    # The poll then ends the job, and charges nothing more
    job = _poll_until_ended(job)
    assert job.state == JobState.COMPLETED and job.units == run.units
    assert Transaction.objects.filter(kind="charge", reference=job.uuid).count() == 1


def test_a_job_neither_queued_nor_in_accounting_becomes_undetermined_never_completed(
    local_allocation, settings
):
    settings.JOBS_MISSING_GRACE_SECONDS = 0
    job = _submit(local_allocation)
    Job.objects.filter(pk=job.pk).update(submit_lease_until=timezone.now() + timedelta(hours=1))
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id="987654")

    report = services.cluster_poll(cluster_id=job.cluster_id)

    job.refresh_from_db()
    assert report.backend_calls == ["queue", "runs"]
    assert job.state == JobState.UNDETERMINED
    assert "accounting has no record" in job.state_reason
    local_allocation.refresh_from_db()
    assert local_allocation.reserved == job.reserved_units  # still reserved: it may be running


def test_nothing_is_submitted_to_a_suspended_cluster(local_allocation):
    job = _submit(local_allocation)
    Cluster.objects.filter(pk=job.cluster_id).update(status=Cluster.Status.SUSPENDED)

    assert services.cluster_jobs_submit(cluster_id=job.cluster_id) == 0

    job.refresh_from_db()
    assert (job.state, job.state_reason) == (
        JobState.QUEUED,
        "Waiting: the cluster is suspended.",
    )
    assert job.submit_attempts == 0


def test_a_script_with_its_own_sbatch_lines_runs_on_the_demos_cluster(local_allocation):
    """The demo reads a script's #SBATCH lines as Slurm would: the sizes, the array and the
    output named with %x %A %a (stderr with it), input from a file of the job's folder, in
    append mode; a task's output is read back where it went."""
    script = (
        "#!/bin/bash\n"
        "#SBATCH --job-name=demo-run --time=2 --cpus-per-task=1\n"
        "#SBATCH --array=0-2%2 --output=logs/%x-%A_%a.log --open-mode=append\n"
        "#SBATCH --mail-user=ada@example.org\n"
        'echo "task $SLURM_ARRAY_TASK_ID on $SLURM_JOB_NAME"\n'
        "echo oops >&2\n"
    )
    member = MembershipFactory(organization=local_allocation.organization, role="member")
    job = services.job_submit(
        actor=member, allocation=local_allocation, request=services.JobRequest(script=script)
    )
    services.cluster_jobs_submit(cluster_id=job.cluster_id)
    job = _poll_until_ended(job)

    assert (job.name, job.time_limit_minutes, job.array, job.task_count) == (
        "demo-run",
        2,
        "0-2%2",
        3,
    )
    assert job.state == JobState.COMPLETED
    assert [each["option"] for each in job.directives["overridden"]] == ["--mail-user"]
    output = services.job_output(job=job, stream="stdout", tail_bytes=100, array_task_id=1)
    assert output == f"task 1 on cs-{job.uuid}\noops\n".encode()
    folder = backend_for(job.cluster).root / job.directory / "logs"  # type: ignore[attr-defined]
    assert sorted(path.name for path in folder.iterdir()) == [
        f"demo-run-{job.scheduler_job_id}_{index}.log" for index in range(3)
    ]
    assert (
        "# [computeshare: honoured --job-name --time --cpus-per-task] SBATCH"
        in (folder.parent / "job.sh").read_text()
    )


def test_the_demos_cluster_refuses_what_it_cannot_run_before_anything_is_held(local_allocation):
    member = MembershipFactory(organization=local_allocation.organization, role="member")
    from scheduler_bridge import errors

    with pytest.raises(errors.SbatchDirectiveNotSupported, match="runs no a signal"):
        services.job_submit(
            actor=member,
            allocation=local_allocation,
            request=services.JobRequest(script="#!/bin/bash\n#SBATCH -t 2 --signal=USR1@30\n"),
        )

    local_allocation.refresh_from_db()
    assert local_allocation.reserved == 0 and not Job.objects.exists()
