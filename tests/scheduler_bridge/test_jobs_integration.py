"""Jobs end to end on the real Slurm test cluster: through the API, a real Celery worker
submits them over SSH and a poll (sent every second, as beat would) follows and settles them.

The jobs of the module are submitted together at the start and run side by side on the
cluster's 2 CPUs (the time-limit job alone takes a minute and more); each test then checks
one of them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal

import pytest

from billing.models import Entry, Transaction
from billing.selectors import ledger_verify
from hpc.ssh import SSHConnection
from marketplace.models import Cluster
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobRun, JobState
from tests.conftest import client_for, tenants_jobs_cancel, wait_for
from tests.factories import (
    MembershipFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
    ssh_host_key_line,
)

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("3.00")


@dataclass
class Scenario:
    client: object
    allocation: object
    other_allocation: object
    jobs: dict[str, str]  # what -> job id
    testcluster: object

    def job(self, what: str) -> dict:
        return self.client.get(f"/api/v1/jobs/{self.jobs[what]}/").json()

    def wait_ended(self, what: str, timeout: float = 150) -> dict:
        return wait_for(
            lambda: (job := self.job(what))["state"] in ENDED and job, timeout=timeout, interval=1
        )


ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}


def _sacct(
    testcluster, job_id: str, fields: str = "JobID,State,ElapsedRaw,AllocTRES"
) -> list[list[str]]:
    with SSHConnection(testcluster.ssh_settings()) as connection:
        answer = connection.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                "-D",
                f"--jobs={job_id}",
                f"--format={fields}",
            ]
        )
    return [line.split("|") for line in answer.stdout.splitlines() if line]


def real_cluster(testcluster) -> Cluster:
    """A cluster row of the real test cluster whose jobs run as the fixed pool's tenants."""
    return cluster_on_testcluster(testcluster, pool="fixed")


@pytest.fixture
def scenario(testcluster, celery_worker, poller):
    cluster = real_cluster(testcluster)
    partition = cluster.partitions.get()
    team = funded_organization("1000", name="Integration Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(team, partition=partition, quantity=40, price=PRICE)
    other_allocation = allocation_bought(partition=partition, quantity=40, price=PRICE)
    client = client_for(member)

    def submit(**fields) -> str:
        answer = client.post(
            "/api/v1/jobs/",
            {"allocation": str(allocation.uuid), "time_limit_minutes": 2, **fields},
            format="json",
        )
        assert answer.status_code == 201, answer.json()
        return answer.json()["id"]

    # In this order on the 2 CPUs: the first two start at once; the third needs both CPUs and
    # waits (it is cancelled while it waits); the others wait their turn on the CPU the
    # cancelled running job frees, while the time-limit job keeps the other for a minute.
    jobs = {
        "cancel_running": submit(name="cancel me running", script="#!/bin/bash\nsleep 300\n"),
        "timeout": submit(
            name="sleeps past its limit", script="#!/bin/bash\nsleep 600\n", time_limit_minutes=1
        ),
        "cancel_pending": submit(
            name="cancel me pending", script="#!/bin/bash\nsleep 300\n", cpus_per_task=2
        ),
        "completes": submit(
            name="hello",
            script=(
                "#!/bin/bash\n"
                'echo "hello from $SLURM_JOB_ID with $GREETING"\n'
                # 2 s of CPU, not of the clock: on a busy machine the clock runs ahead of it.
                "python3 -c 'import time\nend = time.process_time() + 2\n"
                "while time.process_time() < end: pass'\n"
                "echo to-stderr >&2\n"
            ),
            environment={"GREETING": "bonjour"},
        ),
        "array": submit(
            name="sweep",
            script='#!/bin/bash\nsleep 1\necho "task $SLURM_ARRAY_TASK_ID"\n',
            array="0-19",
        ),
    }
    yield Scenario(client, allocation, other_allocation, jobs, testcluster)
    # A failed test leaves its jobs on the shared cluster: they would hold its 2 CPUs.
    tenants_jobs_cancel(testcluster)


def check_jobs_run_on_the_cluster_and_are_charged_once_for_what_they_used(scenario):
    job = scenario.wait_ended("completes")

    assert job["state"] == "completed", job
    assert job["exit_code"] == 0
    history = [event["state"] for event in job["history"]]
    assert history[:2] == ["queued", "submitted"] and history[-1] == "completed"
    assert history.index("pending") < history.index("running")  # it waited its turn
    # Output, read over SFTP
    stdout = scenario.client.get(f"/api/v1/jobs/{job['id']}/output/").content.decode()
    assert stdout.startswith(f"hello from {job['scheduler_job_id']} with bonjour")
    stderr = scenario.client.get(f"/api/v1/jobs/{job['id']}/output/?stream=stderr").content
    assert stderr == b"to-stderr\n"
    # Usage is what sacct reports: allocated CPUs x elapsed
    [[_, state, elapsed, tres]] = _sacct(scenario.testcluster, job["scheduler_job_id"])
    cpus = int(dict(part.split("=") for part in tres.split(","))["cpu"])
    units = (Decimal(cpus * int(elapsed)) / 3600).quantize(Decimal("0.000001"))
    assert state == "COMPLETED"
    assert job["usage"]["units"] == f"{units.normalize():f}"
    assert job["usage"]["elapsed_seconds"] == int(elapsed)
    assert Decimal(job["usage"]["cpu_seconds"]) >= Decimal("1.5")
    assert Decimal("0.3") < Decimal(job["efficiency"]["cpu"]) <= 1
    # One charge of units x price, split into the owner's earnings and the fee
    cost = (units * PRICE).quantize(Decimal("0.000001"))
    assert job["cost"] == f"{cost:.6f}"
    [charge] = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job["id"])
    amounts = {entry.kind: entry.amount for entry in charge.entries.all()}
    fee = (cost * Decimal("0.10")).quantize(Decimal("0.000001"))
    assert amounts == {
        Entry.Kind.CHARGE: -cost,
        Entry.Kind.EARNING: cost - fee,
        Entry.Kind.FEE: fee,
    }
    assert JobRun.objects.filter(task__job__uuid=job["id"]).count() == 1


def check_a_20_task_array_runs_and_is_charged_per_task(scenario):
    job = scenario.wait_ended("array")

    assert job["state"] == "completed", job
    assert [task["index"] for task in job["tasks"]] == list(range(20))
    assert {task["state"] for task in job["tasks"]} == {"completed"}
    runs = JobRun.objects.filter(task__job__uuid=job["id"])
    assert runs.count() == 20
    assert (
        Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job["id"]).count() == 20
    )
    assert sum(run.cost for run in runs) == Decimal(job["cost"])
    output = scenario.client.get(f"/api/v1/jobs/{job['id']}/output/?task=7").content
    assert output == b"task 7\n"
    assert scenario.client.get(f"/api/v1/jobs/{job['id']}/output/").status_code == 400


def check_a_running_job_is_cancelled_with_scancel_and_pays_what_it_ran(scenario):
    wait_for(lambda: scenario.job("cancel_running")["state"] == "running", timeout=120, interval=1)
    time.sleep(2)

    answer = scenario.client.post(f"/api/v1/jobs/{scenario.jobs['cancel_running']}/cancel/")

    assert answer.status_code == 202
    job = scenario.wait_ended("cancel_running", timeout=60)
    assert job["state"] == "cancelled"
    assert Decimal(job["usage"]["units"]) > 0
    again = scenario.client.post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "job_already_ended"


def check_a_job_past_its_time_limit_ends_timeout_and_pays_its_time_limit_no_more(scenario):
    job = scenario.wait_ended("timeout", timeout=200)

    assert job["state"] == "timeout", job
    [[_, state, elapsed, _]] = _sacct(scenario.testcluster, job["scheduler_job_id"])
    assert state == "TIMEOUT" and int(elapsed) >= 60
    # 1 core x 1 minute, rounded up to the micro-unit
    assert job["usage"]["units"] == job["reserved_units"] == "0.016667"
    assert job["cost"] == "0.050001"
    run = JobRun.objects.get(task__job__uuid=job["id"])
    assert run.metered_units == (Decimal(int(elapsed)) / 3600).quantize(Decimal("0.000001"))
    # Slurm ends it at its limit or up to its timer's next check after: never less than that.
    assert run.units == Decimal("0.016667") <= run.metered_units


def check_a_job_pending_on_the_cluster_is_cancelled_and_pays_nothing(scenario):
    job_id = scenario.jobs["cancel_pending"]
    wait_for(lambda: scenario.job("cancel_pending")["state"] == "pending", timeout=60, interval=1)
    # Slurm gives no reason until its scheduler's first pass over the job
    wait_for(
        lambda: scenario.job("cancel_pending")["state_reason"] in {"Resources", "Priority"},
        timeout=30,
        interval=1,
    )

    assert scenario.client.post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 202

    job = scenario.wait_ended("cancel_pending", timeout=60)
    assert job["state"] == "cancelled"
    assert job["started_at"] is None
    assert (job["usage"]["units"], job["cost"]) == ("0", "0.000000")
    assert not Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job_id).exists()


def test_jobs_run_side_by_side_on_the_real_cluster(scenario):
    """Each check waits for its own job; they all run at once."""
    check_a_job_pending_on_the_cluster_is_cancelled_and_pays_nothing(scenario)
    check_a_running_job_is_cancelled_with_scancel_and_pays_what_it_ran(scenario)
    check_jobs_run_on_the_cluster_and_are_charged_once_for_what_they_used(scenario)
    check_a_20_task_array_runs_and_is_charged_per_task(scenario)
    check_a_job_past_its_time_limit_ends_timeout_and_pays_its_time_limit_no_more(scenario)
    check_refused_jobs_never_reach_the_cluster(scenario, scenario.testcluster)
    allocation = scenario.allocation
    allocation.refresh_from_db()
    charged = sum(Job.objects.filter(allocation=allocation).values_list("units", flat=True))
    assert (allocation.reserved, allocation.used) == (0, charged)
    assert ledger_verify() == []


def check_refused_jobs_never_reach_the_cluster(scenario, testcluster):
    client, allocation = scenario.client, scenario.allocation
    before = Job.objects.count()
    refusals = [
        (
            {"script": "#!/bin/bash\n#SBATCH --walltime=9999\necho hi\n"},
            400,
            "sbatch_directive_unknown",
        ),
        ({"cpus_per_task": 2, "time_limit_minutes": 60 * 24}, 402, "allocation_exhausted"),
        ({"allocation": str(scenario.other_allocation.uuid)}, 400, "invalid"),
    ]
    for changes, status, code in refusals:
        body = {
            "allocation": str(allocation.uuid),
            "name": "refused",
            "script": "#!/bin/bash\necho hi\n",
            "time_limit_minutes": 1,
            **changes,
        }
        answer = client.post("/api/v1/jobs/", body, format="json")
        assert (answer.status_code, answer.json()["code"]) == (status, code)

    assert Job.objects.count() == before
    users = ",".join(tenant.user for tenant in testcluster.fixed_pool.tenants)
    with SSHConnection(testcluster.ssh_settings()) as connection:
        names = connection.run(
            ["squeue", "--noheader", f"--user={users}", "--format=%j"]
        ).stdout.split()
    ours = {f"cs-{job_id}" for job_id in scenario.jobs.values()}
    platform_names = {name for name in names if name.startswith("cs-")}
    known = {f"cs-{uuid}" for uuid in Job.objects.values_list("uuid", flat=True)}
    assert platform_names <= known | ours


@pytest.mark.django_db
def test_a_host_that_offers_another_key_gets_no_job_and_the_cluster_is_marked(testcluster):
    cluster = real_cluster(testcluster)
    Cluster.objects.filter(pk=cluster.pk).update(ssh_host_key=ssh_host_key_line())
    allocation = allocation_bought(partition=cluster.partitions.get(), quantity=10)
    member = MembershipFactory(organization=allocation.organization, role="member")
    job = services.job_submit(
        actor=member,
        allocation=allocation,
        request=services.JobRequest(name="x", script="#!/bin/bash\ntrue\n", time_limit_minutes=1),
    )

    assert services.cluster_jobs_submit(cluster_id=cluster.pk) == 0

    cluster.refresh_from_db()
    job.refresh_from_db()
    assert cluster.status == Cluster.Status.HOST_KEY_MISMATCH
    assert "the pinned key is" in cluster.status_detail
    assert job.state == JobState.QUEUED and "not the pinned key" in job.state_reason
    # and the next attempt sends nothing at all
    assert services.cluster_jobs_submit(cluster_id=cluster.pk) == 0
    job.refresh_from_db()
    assert job.state_reason.startswith("Waiting: the cluster's host offered another key")
