"""Right-sizing advice and the ready templates on the real Slurm test cluster: jobs submitted
through the API, carried by a real Celery worker and settled by the poll; the advice is checked
against sacct's own figures, read here over SSH, and against the platform's price rules.

All the jobs are submitted together and share the cluster's 2 CPUs; the longest (12 s) runs
beside the others, so the module takes about half a minute of cluster time."""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

import pytest

from billing.selectors import ledger_verify
from hpc.ssh import SSHConnection
from tests.conftest import client_for, tenants_jobs_cancel, wait_for
from tests.factories import (
    MembershipFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
)

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("3.00")
MICRO = Decimal("0.000001")
ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}

# Keeps one core busy for 10 seconds (as much of it as the machine gives), on a job that asks
# for two.
ONE_CORE_OF_TWO = """#!/bin/bash
python3 -c 'import time
end = time.time() + 10
while time.time() < end: pass'
"""
# Holds about 64 MiB for 12 seconds (long enough for two of accounting's samples, every 5 s),
# in a 5-minute limit: 25 times its run.
SHORT_IN_A_LONG_LIMIT = """#!/bin/bash
python3 -c 'import time
block = bytearray(64 * 1024 * 1024)
time.sleep(12)
print(len(block))'
"""


def sacct_steps(testcluster, job_id: str) -> list[dict[str, str]]:
    """sacct's own record of the job and its steps, as the service user reads it."""
    fields = ["JobID", "ElapsedRaw", "TotalCPU", "MaxRSS", "AllocTRES", "ReqTRES"]
    with SSHConnection(testcluster.ssh_settings()) as connection:
        answer = connection.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                f"--jobs={job_id}",
                f"--format={','.join(fields)}",
            ]
        )
    return [dict(zip(fields, line.split("|"), strict=True)) for line in answer.stdout.splitlines()]


def seconds_of(total_cpu: str) -> Decimal:
    """sacct's TotalCPU (`[DD-][HH:]MM:SS[.mmm]`) in seconds."""
    days, _, clock = total_cpu.rpartition("-")
    parts = [Decimal(part) for part in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, Decimal(0))
    hours, minutes, seconds = parts
    return ((Decimal(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def bytes_of(size: str) -> int:
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
    match = re.fullmatch(r"([0-9.]+)([KMG]?)", size)
    assert match, size
    return round(float(match[1]) * units[match[2]])


def price_of(core_seconds: int) -> Decimal:
    """The platform's charge for core-seconds at PRICE, to the micro-unit, computed here."""
    units = (Decimal(core_seconds) / 3600).quantize(MICRO, rounding=ROUND_HALF_UP)
    return (units * PRICE).quantize(MICRO, rounding=ROUND_HALF_UP)


def reservation(cores: int, minutes: int) -> Decimal:
    return (Decimal(cores * minutes) / 60).quantize(MICRO, rounding=ROUND_CEILING)


@pytest.fixture
def client_and_allocation(testcluster, celery_worker, poller):
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    team = funded_organization("1000", name="Sizing Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=40, price=PRICE
    )
    yield client_for(member), allocation
    tenants_jobs_cancel(testcluster)


def test_advice_and_templates_on_the_real_cluster(client_and_allocation, testcluster):
    client, allocation = client_and_allocation

    def submit(**fields) -> str:
        answer = client.post(
            "/api/v1/jobs/", {"allocation": str(allocation.uuid), **fields}, format="json"
        )
        assert answer.status_code == 201, answer.json()
        return answer.json()["id"]

    templates = {row["id"]: row for row in client.get("/api/v1/job-templates/").json()["results"]}
    assert set(templates) == {"python-sweep", "openmp", "mpi-srun", "checkpoint", "gpu"}

    def from_template(slug: str, **changes) -> str:
        fields = {
            key: templates[slug][key]
            for key in ("name", "script", "time_limit_minutes", "cpus_per_task", "ntasks")
        }
        fields.update(nodes=templates[slug]["nodes"], template=slug)
        if templates[slug]["array"]:
            fields["array"] = templates[slug]["array"]
        return submit(**{**fields, **changes})

    jobs = {
        "two_cores_one_used": submit(
            name="asks 2 uses 1", script=ONE_CORE_OF_TWO, cpus_per_task=2, time_limit_minutes=2
        ),
        "long_limit": submit(
            name="12 s in 5 min",
            script=SHORT_IN_A_LONG_LIMIT,
            time_limit_minutes=5,
            mem_per_cpu=512,
        ),
        "openmp": from_template("openmp"),
        "mpi": from_template("mpi-srun"),
        # Four rows of the sweep are enough to see it run two at a time.
        "sweep": from_template("python-sweep", array="0-3%2"),
    }

    def ended(what: str) -> dict:
        last: dict = {}

        def done() -> dict | bool:
            last.update(client.get(f"/api/v1/jobs/{jobs[what]}/").json())
            return last["state"] in ENDED and last["sizing_advice"] is not None and dict(last)

        try:
            return wait_for(done, timeout=150, interval=1)
        except pytest.fail.Exception:
            pytest.fail(f"{what} did not end with advice: {last}")

    # 2 cores asked, 1 used: the advice's figures are sacct's and the platform's prices.
    job = ended("two_cores_one_used")
    assert job["state"] == "completed", job
    steps = sacct_steps(testcluster, job["scheduler_job_id"])
    record, *job_steps = steps
    elapsed = int(record["ElapsedRaw"])
    cpu = sum(seconds_of(step["TotalCPU"]) for step in job_steps)
    assert "cpu=2" in record["AllocTRES"]
    used = (cpu / elapsed).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    # One thread uses one core at most; on a machine shared with other work it may get less.
    assert Decimal("0.05") <= used <= Decimal("1.05"), steps
    cost, cost_if_one = price_of(2 * elapsed), price_of(elapsed)
    advice = job["sizing_advice"]["cores"]
    assert advice == {
        "asked": 2,
        "used": f"{used:.2f}",
        "suggested_cpus_per_task": 1,
        "suggested": 1,
        "cost": f"{cost:.6f}",
        "cost_if_suggested": f"{cost_if_one:.6f}",
        "text": f"Asked for 2 cores, used {used.normalize():f} on average: ask for 1, this run "
        f"would have cost {cost_if_one.normalize():f} instead of {cost.normalize():f} USD.",
    }
    assert job["cost"] == f"{cost:.6f}"  # what was charged is what the advice says
    assert job["sizing_advice"]["suggested_sizes"]["cpus_per_task"] == 1

    # A 5-minute limit for a 12-second run: a 1-minute limit reserves 5 times less.
    job = ended("long_limit")
    assert job["state"] == "completed", job
    record, *job_steps = sacct_steps(testcluster, job["scheduler_job_id"])
    elapsed = int(record["ElapsedRaw"])
    assert 11 <= elapsed <= 25
    assert "mem=512M" in record["ReqTRES"]  # mem_per_cpu reached sbatch
    suggested = max(1, math.ceil(Decimal(elapsed) * Decimal("1.5") / 60))
    assert suggested == 1
    reserved, reserved_if = reservation(1, 5), reservation(1, suggested)
    assert job["reserved_units"] == f"{reserved.normalize():f}"
    time_advice = job["sizing_advice"]["time"]
    assert time_advice == {
        "limit_minutes": 5,
        "longest_run_seconds": elapsed,
        "suggested_limit_minutes": 1,
        "reserved_units": f"{reserved.normalize():f}",
        "reserved_units_if_suggested": f"{reserved_if.normalize():f}",
        "reservation_ratio": "5.0",
        "text": f"Ran {elapsed} seconds of a 5-minute limit: a 1-minute limit reserves 5 times "
        f"less ({reserved_if.normalize():f} units instead of {reserved.normalize():f}) and may "
        "start sooner.",
    }
    # Memory: the largest MaxRSS of its steps against the 512 MiB asked.
    max_rss = max(bytes_of(step["MaxRSS"]) for step in job_steps if step["MaxRSS"])
    assert 64 * 1024**2 <= max_rss < 200 * 1024**2
    assert job["max_rss_bytes"] == max_rss
    max_rss_mib = (Decimal(max_rss) / 1024**2).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    per_cpu = math.ceil(Decimal(max_rss) / 1024**2 * Decimal("1.25") / 16) * 16
    memory = job["sizing_advice"]["memory"]
    assert memory["asked_mib"] == 512
    assert memory["max_rss_mib"] == f"{max_rss_mib:.2f}"
    assert memory["suggested_mem_per_cpu"] == per_cpu
    assert job["sizing_advice"]["suggested_sizes"] == {
        "time_limit_minutes": 1,
        "mem_per_cpu": per_cpu,
    }

    # The templates ran as they say on the cluster's one node.
    job = ended("openmp")
    assert job["state"] == "completed", job
    output = client.get(f"/api/v1/jobs/{job['id']}/output/").content.decode()
    assert re.fullmatch(r"threads=2 sum=1\.6449340[0-9]{2}\n", output), output
    job = ended("mpi")
    assert job["state"] == "completed", job
    output = client.get(f"/api/v1/jobs/{job['id']}/output/").content.decode()
    assert output.splitlines()[-1] == f"total={sum(range(10_000_000))}"
    assert {line.split(" on ")[0] for line in output.splitlines()[:2]} == {
        "rank 0 of 2",
        "rank 1 of 2",
    }
    job = ended("sweep")
    assert job["state"] == "completed", job
    assert [task["state"] for task in job["tasks"]] == ["completed"] * 4
    for task in range(4):
        text = client.get(f"/api/v1/jobs/{job['id']}/output/?task={task}").content.decode()
        rate = 0.1 * (task + 1)
        population = 0.01
        for _ in range(100):
            population += rate * population * (1 - population)
        assert text == f"rate={rate:.1f} population={population:.6f}\n"
    assert job["template"] == "python-sweep"

    assert ledger_verify() == []
