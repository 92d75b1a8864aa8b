"""The two kinds of capacity on the real Slurm test cluster, through the public API (issue 27),
with a real Celery worker submitting and a poll every second, as beat would:

- preemptible: a team's job runs on idle cores; the owner's own researcher submits a job that
  needs both of the node's cores; the team's run ends PREEMPTED in sacct and is not charged,
  Slurm queues the job again, and once the owner's job has ended its next run is charged
  exactly what sacct says;
- reserved: a block of 1 of the node's 2 cores: the owner's 2-core job waits while the team's
  1-core job starts at once in the reservation; when the allocation ends the reservation goes
  and the owner's job runs;
- a node that fails under a running job (`scontrol update state=down`): that run is not
  charged, the job runs again and that run is.

The test cluster is set up as an owner would (`cluster-setup --preemption normal
--reservations`, a 10 s GraceTime); its node has 2 CPUs."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from hpc.ssh import SSHConnection
from marketplace import services as market
from marketplace.models import Allocation, Offer
from notifications.models import Notification
from tests.conftest import client_for, wait_for
from tests.factories import MembershipFactory, OfferFactory, funded_organization

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("3.00")
# The first run works until it is stopped (on SIGTERM it says so, then waits to be requeued);
# the next runs end after a few seconds.
MARKET_SCRIPT = """#!/bin/bash
run=${SLURM_RESTART_COUNT:-0}
echo "run $run starts" | tee -a events.log
trap 'echo "SIGTERM in run $run" >> events.log; while true; do sleep 1; done' TERM
if [ "$run" = 0 ]; then
    for second in $(seq 280); do sleep 1; done
fi
sleep 3
echo "run $run done" | tee -a events.log
"""


def sacct_runs(testcluster, job_id: str) -> list[dict[str, str]]:
    """Every run of the job as accounting has it (`--duplicates`), oldest first."""
    fields = ["JobIDRaw", "State", "QOS", "Reservation", "ElapsedRaw", "AllocCPUS", "Submit"]
    with SSHConnection(testcluster.ssh_settings()) as connection:
        answer = connection.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                "--duplicates",
                f"--jobs={job_id}",
                f"--format={','.join(fields)}",
            ],
            timeout=30,
        )
    rows = [dict(zip(fields, line.split("|"), strict=True)) for line in answer.stdout.splitlines()]
    return sorted(rows, key=lambda row: row["Submit"])


def charge_of(elapsed: str, cpus: str) -> Decimal:
    """What a run costs: allocated CPUs x elapsed, in core-hours to the micro-unit, at PRICE
    (as test_jobs_integration.py works it out from sacct)."""
    units = (Decimal(int(cpus) * int(elapsed)) / 3600).quantize(Decimal("0.000001"))
    return (units * PRICE).quantize(Decimal("0.000001"))


def squeue_state(testcluster, job_id: str) -> str:
    with SSHConnection(testcluster.ssh_settings()) as connection:
        answer = connection.run(
            ["squeue", "--noheader", f"--jobs={job_id}", "--format=%T"], timeout=30, check=False
        )
    return answer.stdout.strip()


def owner_verified_cluster(testcluster):
    """An owner registers the test cluster's fixed pool and verifies it through the API (the
    suite's Celery worker runs the verification); the cluster and its owner's API client.
    Verification finds both kinds of capacity held by Slurm."""
    owners = funded_organization("0", name="Aurora Owners")
    admin = client_for(MembershipFactory(organization=owners, role="admin").user)
    pool = testcluster.fixed_pool
    registered = admin.post(
        "/api/v1/clusters/",
        {
            "organization": str(owners.uuid),
            "name": "aurora",
            "ssh_host": testcluster.host,
            "ssh_port": testcluster.port,
            "ssh_user": testcluster.user,
            "ssh_private_key": testcluster.private_key,
            "ssh_host_key": testcluster.host_key,
            "account_mode": "fixed",
            "slurm_account": pool.account,
            "tenant_group": pool.group,
            "market_qos": testcluster.market_qos,
        },
        format="json",
    )
    assert registered.status_code == 201, registered.json()
    cluster_id = registered.json()["id"]
    assert admin.post(f"/api/v1/clusters/{cluster_id}/verify/").status_code == 202

    def verified() -> dict | None:
        body = admin.get(f"/api/v1/clusters/{cluster_id}/").json()
        return body if body["verification"]["status"] != "running" else None

    body = wait_for(verified, timeout=120, interval=1)
    assert body["verification"]["status"] == "succeeded", body["verification"]
    assert body["capacity_kinds"] == ["preemptible", "reserved"]
    assert body["preemption_grace_seconds"] == testcluster.preemption_grace_seconds
    return body, admin


def listed(owner_admin, cluster: dict, **terms) -> dict:
    answer = owner_admin.post(
        "/api/v1/offers/",
        {
            "cluster": cluster["id"],
            "partition": cluster["partitions"][0]["name"],
            "resource": "cpu",
            "reserve_price": str(PRICE),
            "buy_now_price": str(PRICE),
            **terms,
        },
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()


def team_on(name: str):
    team = funded_organization("500", name=name)
    admin = MembershipFactory(organization=team, role="admin").user
    member = MembershipFactory(organization=team, role="member").user
    return team, client_for(admin), client_for(member)


def preemptible_offer(cluster) -> Offer:
    now = timezone.now()
    return OfferFactory(
        partition=cluster.partitions.get(),
        cluster=cluster,
        quantity=20,
        reserve_price=PRICE,
        buy_now_price=PRICE,
        auction_closes_at=now + timedelta(hours=1),
        window_start=now - timedelta(minutes=1),
        window_end=now + timedelta(hours=3),
    )


def bought(admin, team, offer: Offer, quantity: int) -> dict:
    answer = admin.post(
        f"/api/v1/offers/{offer.uuid}/buy/",
        {"organization": str(team.uuid), "quantity": quantity},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()


def submitted(member, allocation: dict, **fields) -> dict:
    answer = member.post(
        "/api/v1/jobs/",
        {
            "allocation": allocation["id"],
            "name": "market job",
            "script": MARKET_SCRIPT,
            "time_limit_minutes": 6,
            **fields,
        },
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()


def job_of(member, job: dict) -> dict:
    return member.get(f"/api/v1/jobs/{job['id']}/").json()


def test_the_owners_job_preempts_a_market_job_whose_next_run_alone_is_charged(
    on_testcluster, testcluster, celery_worker, poller
):
    cluster, owner_admin = owner_verified_cluster(testcluster)
    now = timezone.now()
    offer = listed(
        owner_admin,
        cluster,
        capacity="preemptible",
        quantity=4,
        window_start=(now - timedelta(minutes=1)).isoformat(),
        window_end=(now + timedelta(hours=3)).isoformat(),
        auction_closes_at=(now + timedelta(hours=1)).isoformat(),
    )
    assert (offer["capacity"], offer["quantity_unit"]) == ("preemptible", "core-hours")
    team, admin, member = team_on("Spot Team")
    allocation = bought(admin, team, Offer.objects.get(uuid=offer["id"]), 4)
    job = submitted(member, allocation)
    running = wait_for(
        lambda: (seen := job_of(member, job))["state"] == "running" and seen, timeout=90
    )
    slurm_id = running["scheduler_job_id"]

    owners = testcluster.owner.submit("#!/bin/bash\nsleep 8\n", cpus=2)

    # Preempted after the 10 s grace, queued again, run again once the owner's job ended.
    ended = wait_for(
        lambda: (seen := job_of(member, job))["state"] == "completed" and seen,
        timeout=240,
        interval=1,
    )
    runs = sacct_runs(testcluster, slurm_id)
    owner_run = sacct_runs(testcluster, owners)
    assert [run["State"] for run in runs] == ["PREEMPTED", "COMPLETED"], runs
    assert {run["QOS"] for run in runs} == {testcluster.market_qos}
    assert owner_run[0]["State"] == "COMPLETED" and owner_run[0]["QOS"] == testcluster.owner.qos
    assert ended["preemptions"] == 1
    assert [(run["state"], run["charged"]) for run in ended["runs"]] == [
        ("preempted", False),
        ("completed", True),
    ]
    assert ended["runs"][0]["cost"] == "0.000000"
    second = runs[1]
    assert ended["cost"] == f"{charge_of(second['ElapsedRaw'], second['AllocCPUS']):.6f}"
    assert ended["runs"][1]["cost"] == ended["cost"]
    assert (ended["qos"], ended["capacity"]) == (testcluster.market_qos, "preemptible")
    told = Notification.objects.filter(kind="job_preempted")
    assert told.count() == 1 and "not charged" in told.get().body
    # Its stdout is the last run's (Slurm truncates it on a requeue); the log it kept in its
    # folder shows SIGTERM at the start of the grace (the platform's --signal), again when
    # Slurm stopped it at the grace's end, then the next run from the start.
    output = member.get(f"/api/v1/jobs/{job['id']}/output/").content.decode()
    assert output == "run 1 starts\nrun 1 done\n"
    wait_for(lambda: member.get(f"/api/v1/jobs/{job['id']}/files/").json()["state"] == "ready", 60)
    events = member.get(f"/api/v1/jobs/{job['id']}/files/events.log")
    assert b"".join(events.streaming_content).decode() == (
        "run 0 starts\nSIGTERM in run 0\nSIGTERM in run 0\nrun 1 starts\nrun 1 done\n"
    )


def test_a_reserved_core_is_the_teams_at_once_while_the_owners_job_waits(
    on_testcluster, testcluster, celery_worker, poller
):
    cluster, owner_admin = owner_verified_cluster(testcluster)
    # A block of one of the two cores for the hour from 15 s on (the listing and the purchase
    # take a second or two): its auction (and buy-now) closes when the window starts.
    start = (timezone.now() + timedelta(seconds=15)).replace(microsecond=0)
    offer = listed(
        owner_admin,
        cluster,
        capacity="reserved",
        quantity=1,
        window_start=start.isoformat(),
        window_end=(start + timedelta(hours=1)).isoformat(),
        auction_closes_at=start.isoformat(),
    )
    assert (offer["quantity_unit"], offer["unit_hours"]) == ("cores", 1)
    team, admin, member = team_on("Block Team")
    allocation = bought(admin, team, Offer.objects.get(uuid=offer["id"]), 1)
    assert (allocation["block"], allocation["quantity"], allocation["held"]) == (
        1,
        "1",
        "3.000000",
    )
    wait_for(lambda: timezone.now() > start + timedelta(seconds=1), timeout=25, interval=0.2)

    owners = testcluster.owner.submit("#!/bin/bash\nsleep 5\n", cpus=2)
    job = submitted(
        member,
        allocation,
        script="#!/bin/bash\nsleep 6\necho in the block\n",
        time_limit_minutes=2,
    )
    running = wait_for(
        lambda: (seen := job_of(member, job))["state"] in ("running", "completed") and seen,
        timeout=60,
    )
    assert squeue_state(testcluster, owners) == "PENDING"
    assert running["reservation"] == allocation["reservation"]
    ended = wait_for(
        lambda: (seen := job_of(member, job))["state"] == "completed" and seen, timeout=90
    )
    [run] = sacct_runs(testcluster, ended["scheduler_job_id"])
    assert run["Reservation"] == allocation["reservation"]
    assert ended["cost"] == f"{charge_of(run['ElapsedRaw'], run['AllocCPUS']):.6f}"
    assert squeue_state(testcluster, owners) == "PENDING"  # the block is still held

    # The allocation ends (as its window would): the reservation goes, the owner's job runs.
    row = Allocation.objects.get(uuid=allocation["id"])
    wait_for(lambda: market.allocation_close(allocation_id=row.pk, now=row.window_end), 30)
    with SSHConnection(testcluster.ssh_settings()) as connection:
        shown = connection.run(["scontrol", "show", "reservation"], timeout=30).stdout
    assert allocation["reservation"] not in shown
    wait_for(lambda: squeue_state(testcluster, owners) in ("RUNNING", ""), timeout=60)


def test_a_run_a_node_failure_ended_is_not_charged_and_the_next_one_is(
    on_testcluster, testcluster, celery_worker, poller
):
    cluster = on_testcluster(pool="fixed")
    team, admin, member = team_on("Node Team")
    allocation = bought(admin, team, preemptible_offer(cluster), 20)
    job = submitted(member, allocation)
    running = wait_for(
        lambda: (seen := job_of(member, job))["state"] == "running" and seen, timeout=90
    )
    node = node_of(testcluster)
    with SSHConnection(testcluster.ssh_settings()) as connection:
        connection.run(
            ["scontrol", "update", f"nodename={node}", "state=down", "reason=computeshare-test"],
            timeout=30,
        )
        try:
            ended = wait_for(
                lambda: (seen := job_of(member, job))["state"] == "completed" and seen,
                timeout=240,
                interval=1,
            )
        finally:
            # The node comes back by itself (ReturnToService=2); resume it if it has not.
            connection.run(
                ["scontrol", "update", f"nodename={node}", "state=resume"], timeout=30, check=False
            )
    runs = sacct_runs(testcluster, running["scheduler_job_id"])
    assert [run["State"] for run in runs] == ["NODE_FAIL", "COMPLETED"], runs
    assert [(run["state"], run["charged"]) for run in ended["runs"]] == [
        ("node_fail", False),
        ("completed", True),
    ]
    assert ended["preemptions"] == 0
    assert ended["cost"] == f"{charge_of(runs[1]['ElapsedRaw'], runs[1]['AllocCPUS']):.6f}"


def node_of(testcluster) -> str:
    with SSHConnection(testcluster.ssh_settings()) as connection:
        return connection.run(["sinfo", "--noheader", "--format=%N"], timeout=30).stdout.strip()
