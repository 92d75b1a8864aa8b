"""A parameter sweep end to end on the real Slurm test cluster, through the API: a 100-row table
of a short Python script runs as one array of 100 tasks, 2 at a time on the cluster's 2 CPUs,
each task given its row as variables and arguments; its results come back as one 100-row table
equal to what the script computes. Five rows fail the first time; "retry failed" runs those
five alone, as a new array job reserved and charged for five tasks only."""

from __future__ import annotations

import csv
import io
import time
import uuid
from decimal import Decimal

import pytest

from billing.models import Transaction
from billing.selectors import ledger_verify
from scheduler_bridge.models import Job, JobRun, Sweep, SweepRow
from tests.conftest import client_for, wait_for
from tests.factories import (
    MembershipFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
)

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("3.00")
# Fails once for rows labelled `flaky` (it leaves a marker in the tenant's home, under the
# sweep's own token, so that its retry completes), and checks that the arguments are the row.
SCRIPT = """#!/usr/bin/env python3
import os, sys, time
x, y, label, token = (os.environ[name] for name in ("x", "y", "label", "token"))
assert sys.argv[1:] == [x, y, label, token], sys.argv
marker = os.path.join(os.environ["HOME"], f"sweep-marker-{token}-{x}")
if label == "flaky":
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(3)
    time.sleep(1.2)  # a retried row runs over a second: its charge is not zero
os.makedirs("out", exist_ok=True)
with open("out/value.txt", "w") as result:
    result.write(f"{int(x) * float(y) + 1!r}\\n")
print("row done")
"""
FLAKY = {3, 17, 42, 64, 99}


def table(token: str) -> tuple[str, dict[int, str]]:
    lines = ["x,y,label,token"]
    expected = {}
    for x in range(100):
        y = f"{(x % 7) * 0.25 + 0.5}"
        lines.append(f"{x},{y},{'flaky' if x in FLAKY else 'plain'},{token}")
        expected[x] = repr(x * float(y) + 1)
    return "\r\n".join(lines) + "\r\n", expected


@pytest.fixture
def team(testcluster, celery_worker, poller):
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    organization = funded_organization("1000", name="Sweep Team")
    member = MembershipFactory(organization=organization, role="member").user
    allocation = allocation_bought(
        organization, partition=cluster.partitions.get(), quantity=40, price=PRICE
    )
    return client_for(member), allocation


def wait_ended(client, sweep_id: str, timeout: float) -> dict:
    return wait_for(
        lambda: (
            (data := client.get(f"/api/v1/sweeps/{sweep_id}/").json())["state"] == "ended" and data
        ),
        timeout=timeout,
        interval=0.5,
    )


def test_a_100_row_sweep_gathers_its_results_and_retries_its_failed_rows_alone(team):
    client, allocation = team
    token = uuid.uuid4().hex[:12]
    text, expected = table(token)
    started = time.monotonic()

    answer = client.post(
        "/api/v1/sweeps/",
        {
            "allocation": str(allocation.uuid),
            "name": "squares",
            "script": SCRIPT,
            "table": text,
            "time_limit_minutes": 2,
            "concurrency": 2,
            "result_source": "file",
            "result_file": "out/value.txt",
        },
        format="json",
    )

    assert answer.status_code == 201, answer.json()
    created = answer.json()
    sweep_id = created["id"]
    [first] = created["jobs"]
    assert first["array"] == "0-99%2" and first["task_count"] == 100
    # 1 core x 2 minutes for each of the 100 rows, as any array reserves
    assert Decimal(first["reserved_units"]) == Decimal("0.033334") * 100
    assert {row["state"] for row in created["rows"]} == {"queued"}
    assert created["rows"][5]["parameters"] == {
        "x": "5",
        "y": "1.75",
        "label": "plain",
        "token": token,
    }

    sweep = wait_ended(client, sweep_id, timeout=170)
    first_pass = time.monotonic() - started
    print(f"\n100-row sweep: submitted to results gathered in {first_pass:.1f} s")

    job = Job.objects.get(uuid=first["id"])
    results = client.get(f"/api/v1/sweeps/{sweep_id}/results/").json()
    assert results["count"] == 100 and results["columns"] == ["x", "y", "label", "token"]
    by_row = {row["index"]: row for row in results["rows"]}
    assert sorted(by_row) == list(range(100))
    for index, row in by_row.items():
        if index in FLAKY:
            assert (row["state"], row["result_state"], row["exit_code"]) == ("failed", "failed", 3)
            assert row["result"] == ""
            assert row["result_detail"] == "The task ended failed, exit code 3."
        else:
            assert (row["state"], row["result_state"]) == ("completed", "ok"), row
            assert row["result"] == expected[index], index
    assert sweep["counts"] == {
        "states": {"completed": 95, "failed": 5},
        "results": {"ok": 95, "failed": 5},
    }
    # Every task's run was recorded and settled once; those that ran under a second of
    # Slurm's elapsed time cost nothing and post no charge.
    first_runs = JobRun.objects.filter(task__job=job)
    assert first_runs.count() == 100
    first_charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=first["id"])
    first_charge_count = first_charges.count()
    assert first_charge_count == first_runs.exclude(cost=0).count()
    charges_before = Transaction.objects.filter(kind=Transaction.Kind.CHARGE).count()

    retried = client.post(f"/api/v1/sweeps/{sweep_id}/retry-failed/")

    assert retried.status_code == 201, retried.json()
    second = retried.json()["jobs"][1]
    assert (second["attempt"], second["array"], second["task_count"]) == (2, "0-4%2", 5)
    assert Decimal(second["reserved_units"]) == Decimal("0.033334") * 5
    again = client.post(f"/api/v1/sweeps/{sweep_id}/retry-failed/")
    assert again.status_code == 409 and again.json()["code"] == "sweep_still_running"

    sweep = wait_ended(client, sweep_id, timeout=90)
    print(f"retry of 5 rows ended in {time.monotonic() - started - first_pass:.1f} s")

    assert sweep["counts"]["results"] == {"ok": 100}
    rows = client.get(f"/api/v1/sweeps/{sweep_id}/results/").json()["rows"]
    assert {row["index"]: row["result"] for row in rows} == expected
    assert {row["index"] for row in rows if row["attempts"] == 2} == FLAKY
    assert {row["job"] for row in rows if row["index"] in FLAKY} == {second["id"]}
    # The retry charged its five tasks, and nothing else was charged again.
    retry_job = Job.objects.get(uuid=second["id"])
    retry_runs = JobRun.objects.filter(task__job=retry_job)
    assert retry_runs.count() == 5
    assert all(run.cost > 0 for run in retry_runs)
    retry_charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=second["id"])
    assert retry_charges.count() == 5
    assert Transaction.objects.filter(kind=Transaction.Kind.CHARGE).count() == charges_before + 5
    assert first_charges.count() == first_charge_count
    assert JobRun.objects.filter(task__job=job).count() == 100
    assert sum(run.cost for run in retry_runs) == retry_job.cost
    assert Decimal(sweep["jobs"][1]["cost"]) == retry_job.cost
    assert ledger_verify() == []

    download = client.get(f"/api/v1/sweeps/{sweep_id}/results.csv")
    assert download.status_code == 200
    assert download["Content-Type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(download.content.decode())))
    assert lines[0] == [
        "row",
        "x",
        "y",
        "label",
        "token",
        "result",
        "result_state",
        "task_state",
        "exit_code",
        "detail",
    ]
    assert [(int(line[0]), line[5], line[6]) for line in lines[1:]] == [
        (index, expected[index], "ok") for index in range(100)
    ]
    assert Sweep.objects.get(uuid=sweep_id).state == "ended"
    assert SweepRow.objects.filter(sweep__uuid=sweep_id).count() == 100
