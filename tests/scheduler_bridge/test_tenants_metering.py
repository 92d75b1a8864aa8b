"""Metering follows the Unix user: every run of a team's tenant is the team's, on a real cluster.

One team's jobs do what a job can do to its own accounting: submit another job from inside
itself (`sbatch`, a job the platform never saw submitted), requeue itself (`scontrol requeue`:
two runs under one id), and resize itself (it grows through an `salloc --dependency=expand`
allocation whose CPU it takes, Slurm's own way to resize a job on a single node; the test
cluster has `permit_job_expansion` and `cred_expire=10`, so a requeued job runs again after
11 seconds). Every run of each is charged to the team, to the micro-unit of what `sacct`
records (allocated CPUs x elapsed seconds), and every job ends with its reservation released."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from billing.selectors import ledger_verify
from hpc.ssh import SSHConnection
from scheduler_bridge.models import Job, JobRun
from tests.conftest import client_for, wait_for
from tests.factories import MembershipFactory, allocation_bought, funded_organization

pytestmark = [pytest.mark.slurm, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("3.00")
MICRO = Decimal("0.000001")
ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}

PARENT_SCRIPT = """#!/bin/bash
child=$(sbatch --parsable --job-name=made-by-a-job --time=1 --output=/dev/null --wrap='sleep 3')
echo "child $child"
sleep 2
"""

REQUEUE_SCRIPT = """#!/bin/bash
echo "run ${SLURM_RESTART_COUNT:-0}"
if [ "${SLURM_RESTART_COUNT:-0}" -eq 0 ]; then
  sleep 3
  scontrol requeue "$SLURM_JOB_ID"
  sleep 60
fi
sleep 2
"""

# A single node cannot shrink a job by nodes: the job grows instead, taking the CPU of an
# allocation made to expand it, which leaves a RESIZING record before the larger run.
GROW_SCRIPT = """#!/bin/bash
me=$SLURM_JOB_ID
sleep 3
out=$(env -u SLURM_JOB_ID -u SLURM_JOBID salloc --no-shell --job-name=expander --time=1 -n1 \\
  --dependency=expand:$me 2>&1)
helper=$(echo "$out" | sed -n 's/.*Granted job allocation \\([0-9]*\\).*/\\1/p')
echo "helper $helper"
scontrol update JobId=$helper NumNodes=0 >/dev/null
scancel $helper
scontrol update JobId=$me NumNodes=ALL >/dev/null
scontrol show job $me | grep -o 'NumCPUs=[0-9]*'
sleep 4
"""


def sacct_runs(testcluster, job_id: str) -> list[tuple[str, Decimal]]:
    """(State, core-hours) of every run of a job as accounting recorded it, in order."""
    with SSHConnection(testcluster.ssh_settings()) as connection:
        lines = connection.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                "-D",
                f"--jobs={job_id}",
                "--format=State,ElapsedRaw,AllocTRES,Submit",
            ]
        ).stdout.splitlines()
    runs = []
    for line in sorted(lines, key=lambda line: line.rsplit("|", 1)[1]):
        state, elapsed, tres, _ = line.split("|")
        cpus = int(dict(item.split("=") for item in tres.split(","))["cpu"]) if tres else 0
        runs.append((state.split()[0], (Decimal(cpus * int(elapsed)) / 3600).quantize(MICRO)))
    return runs


def charged_runs(job: Job) -> list[tuple[str, Decimal, Decimal]]:
    return [
        (run.state, run.units, run.cost)
        for run in JobRun.objects.filter(task__job=job).order_by("submit_time")
    ]


def test_every_run_of_the_tenant_is_charged_to_its_team(testcluster, on_testcluster, poller):
    cluster = on_testcluster(pool="fixed")
    team = funded_organization("500", name="Metered Lab")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=20, price=PRICE
    )
    client = client_for(member)

    def submit(name: str, script: str) -> str:
        answer = client.post(
            "/api/v1/jobs/",
            {
                "allocation": str(allocation.uuid),
                "name": name,
                "script": script,
                "time_limit_minutes": 2,
            },
            format="json",
        )
        assert answer.status_code == 201, answer.json()
        return answer.json()["id"]

    parent_id = submit("parent", PARENT_SCRIPT)
    requeuer_id = submit("requeues itself", REQUEUE_SCRIPT)
    grower_id = submit("grows itself", GROW_SCRIPT)

    def all_ended():
        jobs = Job.objects.filter(allocation=allocation)
        return jobs.count() >= 5 and all(job.state in ENDED for job in jobs)

    try:
        wait_for(all_ended, timeout=240, interval=1)
    finally:
        print(  # what the jobs were doing, when a run never ends
            list(
                Job.objects.filter(allocation=allocation).values_list(
                    "name", "origin", "state", "state_reason", "scheduler_job_id"
                )
            )
        )

    parent = Job.objects.get(uuid=parent_id)
    child_slurm_id = re.search(
        r"child (\d+)", client.get(f"/api/v1/jobs/{parent_id}/output/").content.decode()
    ).group(1)
    grower_output = client.get(f"/api/v1/jobs/{grower_id}/output/").content.decode()
    helper_slurm_id = re.search(r"helper (\d+)", grower_output).group(1)
    assert "NumCPUs=2" in grower_output

    # The job a job submitted is the team's, found among its tenant's runs, and listed as such.
    child = Job.objects.get(cluster=cluster, scheduler_job_id=child_slurm_id)
    assert (child.origin, child.organization_id, child.lease_id) == (
        Job.Origin.TENANT,
        team.pk,
        parent.lease_id,
    )
    assert (child.name, child.state) == ("made-by-a-job", "completed")
    [(_, units)] = sacct_runs(testcluster, child_slurm_id)
    assert charged_runs(child) == [("completed", units, (units * PRICE).quantize(MICRO))]
    usage = client.get(f"/api/v1/organizations/{team.uuid}/usage/").json()
    row = next(row for row in usage["results"] if row["job"] == str(child.uuid))
    assert (row["origin"], row["scheduler_job_id"], row["units"]) == (
        "tenant",
        child_slurm_id,
        f"{units.normalize():f}",
    )

    # Each run of the requeued job, charged with its own usage.
    requeuer = Job.objects.get(uuid=requeuer_id)
    recorded = sacct_runs(testcluster, requeuer.scheduler_job_id)
    assert [state for state, _ in recorded] == ["REQUEUED", "COMPLETED"]
    assert charged_runs(requeuer) == [
        ("requeued", recorded[0][1], (recorded[0][1] * PRICE).quantize(MICRO)),
        ("completed", recorded[1][1], (recorded[1][1] * PRICE).quantize(MICRO)),
    ]
    assert requeuer.state == "completed"
    assert requeuer.units == recorded[0][1] + recorded[1][1]

    # The job that resized itself: its run before the resize and its larger run after it.
    grower = Job.objects.get(uuid=grower_id)
    recorded = sacct_runs(testcluster, grower.scheduler_job_id)
    assert [state for state, _ in recorded] == ["RESIZING", "COMPLETED"]
    assert charged_runs(grower) == [
        ("resized", recorded[0][1], (recorded[0][1] * PRICE).quantize(MICRO)),
        ("completed", recorded[1][1], (recorded[1][1] * PRICE).quantize(MICRO)),
    ]
    assert grower.state == "completed"
    # The allocation that expanded it is the team's too, and it ended (its CPU went to the job).
    helper = Job.objects.get(cluster=cluster, scheduler_job_id=helper_slurm_id)
    assert (helper.origin, helper.state) == (Job.Origin.TENANT, "completed")

    # Nothing stays reserved; what was used is what every run was charged.
    allocation.refresh_from_db()
    jobs = Job.objects.filter(allocation=allocation)
    assert allocation.reserved == 0
    assert allocation.used == sum(job.units for job in jobs)
    assert sum(run.units for run in JobRun.objects.filter(task__job__in=jobs)) == allocation.used
    assert ledger_verify() == []
