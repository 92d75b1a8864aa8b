"""SlurmBackend against the real test cluster over SSH, as the service user acting as a tenant of
the fixed pool. The cluster has 2 CPUs and other people's jobs: every job here is a few seconds
long and carries a unique name, and only those are cancelled. The cluster is this machine, so a
file an injected command would create on the login node is visible here."""

import posixpath
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hpc.backends.slurm import SlurmBackend
from hpc.errors import RemoteCommandFailed
from hpc.ssh import SSHConnection
from hpc.types import (
    CANCELLED,
    COMPLETED,
    PENDING,
    RUNNING,
    JobSpec,
    Tenant,
)

pytestmark = pytest.mark.slurm

# Normally a few seconds; other people's jobs can hold the 2 CPUs for a while.
WAIT_SECONDS = 120


@pytest.fixture(scope="module")
def unique():
    return uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def tenant(testcluster) -> Tenant:
    account = testcluster.fixed_pool.tenants[0]
    return Tenant(account.user, account.home)


@pytest.fixture(scope="module")
def backend(testcluster, unique, tenant):
    connection = SSHConnection(testcluster.ssh_settings())
    backend = SlurmBackend(connection, command_timeout=30)
    yield backend
    connection.run(["rm", "-rf", f"{tenant.home}/computeshare-tests/{unique}"], as_user=tenant.user)
    backend.close()


def job(unique: str, label: str, script: str, testcluster, **changes) -> JobSpec:
    account = testcluster.fixed_pool.tenants[0]
    values = {
        "name": f"cs-test-{label}-{unique}",
        "script": "#!/bin/sh\n" + script,
        "directory": f"computeshare-tests/{unique}/{label}",
        "partition": testcluster.partition,
        "account": testcluster.fixed_pool.account,
        "time_limit_minutes": 1,
        "tenant": Tenant(account.user, account.home),
    }
    return JobSpec(**{**values, **changes})


def wait_for_ended_runs(backend: SlurmBackend, job_ids: list[str], count: int):
    """The runs of `job_ids` once `count` of them have ended (accounting lags a little behind
    the end)."""
    deadline = time.monotonic() + WAIT_SECONDS
    records = []
    while time.monotonic() < deadline:
        records = backend.runs(job_ids)
        if len([record for record in records if record.is_ended]) >= count:
            return records
        time.sleep(0.5)
    pytest.fail(f"the runs did not end within {WAIT_SECONDS} s: {records}")


def test_a_batch_submits_a_job_and_an_array_and_refuses_a_bad_partition(
    backend, testcluster, unique, tenant
):
    single = job(unique, "single", "echo hello; sleep 1\n", testcluster)
    array = job(unique, "array", 'echo "task $SLURM_ARRAY_TASK_ID"\n', testcluster, array="0-2")
    refused = job(unique, "refused", "echo never\n", testcluster, partition="no-such-partition")
    unnamable = job(unique, "unnamable", "echo never\n", testcluster, name="cs-a\nb")
    started = datetime.now(UTC) - timedelta(minutes=1)

    results = backend.submit([single, array, refused, unnamable])

    assert [result.name for result in results] == [single.name, array.name, refused.name, "cs-a\nb"]
    assert results[0].scheduler_job_id.isdigit() and results[0].error is None
    assert results[1].scheduler_job_id.isdigit() and results[1].error is None
    assert results[2].scheduler_job_id is None
    assert "invalid partition" in results[2].error.lower()
    assert results[2].is_transient is False
    assert results[3].scheduler_job_id is None
    assert "control character" in results[3].error
    single_id, array_id = results[0].scheduler_job_id, results[1].scheduler_job_id

    queued = [
        entry for entry in backend.queue([tenant.user]) if entry.name in (single.name, array.name)
    ]
    found = backend.find([single.name, array.name, refused.name], [tenant.user])
    other = testcluster.fixed_pool.tenants[1].user
    records = wait_for_ended_runs(backend, [single_id, array_id], count=4)

    assert {entry.array_job_id for entry in queued} <= {single_id, array_id}
    assert all(entry.state in (PENDING, RUNNING) or entry.state == "completing" for entry in queued)
    assert {entry.user for entry in queued} <= {tenant.user}
    assert found == {single.name: single_id, array.name: array_id}
    # A name is looked up among the given tenants' jobs only: another team's job may take any.
    assert backend.find([single.name], [other]) == {}
    by_job = {record.job_id: record for record in records}
    assert set(by_job) == {single_id, f"{array_id}_0", f"{array_id}_1", f"{array_id}_2"}
    assert all(record.state == COMPLETED and record.exit_code == 0 for record in records)
    assert all(record.allocated_cpus == 1 for record in records)
    assert all(record.user == tenant.user for record in records)
    assert by_job[single_id].elapsed_seconds >= 1
    assert by_job[single_id].start_time <= by_job[single_id].end_time
    assert by_job[f"{array_id}_2"].array_task_id == 2
    assert backend.output_tail(tenant, single.directory, "stdout", None, 1024) == b"hello\n"
    assert backend.output_tail(tenant, single.directory, "stdout", None, 3) == b"lo\n"
    assert backend.output_tail(tenant, single.directory, "stderr", None, 1024) == b""
    assert backend.output_tail(tenant, array.directory, "stdout", 2, 1024) == b"task 2\n"
    assert backend.output_tail(tenant, array.directory, "stdout", 7, 1024) == b""
    recent = backend.runs_of_users([tenant.user], started, datetime.now(UTC) + timedelta(minutes=1))
    assert {single_id, f"{array_id}_1"} <= {record.job_id for record in recent}
    assert all(record.user == tenant.user for record in recent)


def test_in_two_lanes_a_job_whose_files_cannot_be_written_is_refused_alone(
    backend, testcluster, unique, tenant
):
    """The batch's sbatch calls run in two lanes (`SlurmBackend.submit_lanes`): the outcomes
    come back in the batch's order, and a job whose directory cannot be made (a file is in its
    way) is refused with the reason, without stopping the jobs of either lane."""
    assert backend.submit_lanes == 2
    in_the_way = f"{tenant.home}/computeshare-tests/{unique}/in-the-way"
    backend.connection.run(["mkdir", "-p", posixpath.dirname(in_the_way)], as_user=tenant.user)
    backend.connection.run(["touch", in_the_way], as_user=tenant.user)
    specs = [job(unique, f"lane-{index}", "true\n", testcluster) for index in range(4)]
    specs[1] = replace(specs[1], directory=f"computeshare-tests/{unique}/in-the-way/job")

    results = backend.submit(specs)

    ids = [result.scheduler_job_id for result in results]
    # Each id is the one sbatch gave that job: the cluster knows it by the job's own name.
    found = backend.find([specs[index].name for index in (0, 2, 3)], [tenant.user])
    backend.cancel(tenant, [job_id for job_id in ids if job_id])
    assert [result.name for result in results] == [spec.name for spec in specs]
    assert ids[1] is None and results[1].is_transient is False
    assert f"cannot write the job files in {tenant.home}/computeshare-tests/{unique}" in (
        results[1].error
    )
    assert all(job_id and job_id.isdigit() for job_id in ids[0:1] + ids[2:])
    assert found == {specs[index].name: ids[index] for index in (0, 2, 3)}


def test_cancel_ends_a_job_cancelled_and_cancelling_it_again_is_fine(
    backend, testcluster, unique, tenant
):
    spec = job(unique, "cancelled", "sleep 50\n", testcluster)
    [result] = backend.submit([spec])
    job_id = result.scheduler_job_id

    backend.cancel(tenant, [job_id])
    [record] = wait_for_ended_runs(backend, [job_id], count=1)
    backend.cancel(tenant, [job_id, job_id])

    assert record.state == CANCELLED
    assert record.scheduler_state.startswith("CANCELLED")
    assert job_id not in {entry.array_job_id for entry in backend.queue([tenant.user])}


def test_another_tenant_cannot_cancel_the_job(backend, testcluster, unique, tenant):
    spec = job(unique, "not-yours", "sleep 50\n", testcluster)
    [result] = backend.submit([spec])
    job_id = result.scheduler_job_id
    other = testcluster.fixed_pool.tenants[1]

    with pytest.raises(RemoteCommandFailed, match=r"(?i)permission|denied|not allowed"):
        backend.cancel(Tenant(other.user, other.home), [job_id])
    queued = {entry.array_job_id for entry in backend.queue([tenant.user])}
    backend.cancel(tenant, [job_id])

    assert job_id in queued


def test_names_environment_and_scripts_arrive_as_data_never_as_commands(
    backend, testcluster, unique, tenant
):
    marker = Path(f"/tmp/pwned-{unique}")  # the login node is this machine
    hostile = f'it\'s "quoted" $(touch {marker}) `touch {marker}`; touch {marker} | ü ✓ 計算 $HOME'
    spec = job(
        unique,
        "injection",
        f'# {hostile}\nprintf \'%s\\n\' "$HOSTILE" "$SECOND"\n',
        testcluster,
        # slurmdbd stores a `"` of a name as a backtick: names may not hold one (`spec_problem`).
        name=f"cs-test-{unique} {hostile.replace(chr(34), '')}",
        environment={"HOSTILE": hostile + "\nnext line", "SECOND": f"$(touch {marker})"},
    )

    [result] = backend.submit([spec])
    found = backend.find([spec.name], [tenant.user])
    [record] = wait_for_ended_runs(backend, [result.scheduler_job_id], count=1)
    script_path = f"{tenant.home}/{spec.directory}/job.sh"
    with (
        backend.connection.sftp(as_user=tenant.user) as sftp,
        sftp.open(script_path) as handle,
    ):
        written_script = handle.read().decode()
        mode = sftp.stat(script_path).st_mode & 0o777

    assert result.error is None
    assert found == {spec.name: result.scheduler_job_id}
    assert (record.state, record.name) == (COMPLETED, spec.name)
    assert written_script == spec.script
    assert mode == 0o700
    output = backend.output_tail(tenant, spec.directory, "stdout", None, 4096).decode()
    assert output == f"{hostile}\nnext line\n$(touch {marker})\n"
    assert not marker.exists()


def test_a_job_from_before_tenants_is_cancelled_as_the_service_user(backend, testcluster):
    """A job submitted before jobs ran as tenants is the service user's own: cancelling it (a
    job without a tenant) acts as the service user. (The service user runs nothing any more:
    its job pends for ever in the idle account, which is all this needs.)"""
    answer = backend.connection.run(
        [
            "sbatch",
            "--parsable",
            f"--account={testcluster.managed_pool.idle_account}",
            f"--partition={testcluster.partition}",
            "--time=1",
            "--output=/dev/null",
            "--wrap=true",
        ]
    )
    job_id = answer.stdout.strip()

    backend.cancel(None, [job_id])
    [record] = wait_for_ended_runs(backend, [job_id], count=1)

    assert (record.state, record.user, record.elapsed_seconds) == (
        CANCELLED,
        testcluster.user,
        0,
    )
