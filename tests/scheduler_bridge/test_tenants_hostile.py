"""Teams kept apart on a real cluster: team B's job attacks team A's while it runs.

Both teams buy time on the Slurm test cluster (the fixed pool: each team's jobs run as its own
leased tenant account, through the service user's sudo). A's job keeps a secret in its
environment, in its output and in /tmp, and runs for a while. B's job is told everything about
it (A's account, home, job folder, Slurm id, the service user's home) and tries, one by one, to
read A's files and output, list and kill A's processes, `scancel` and `scontrol update` A's job,
read or write the service user's home and authorized_keys, `sacctmgr modify` anything, and
`sudo` anything. Each attempt prints `ATTACK <name>: blocked` or `ATTACK <name>: BREACH ...`.
Every attempt must be blocked, and A's job must finish untouched and be charged exactly what
Slurm's accounting says it used, as if B did not exist."""

from __future__ import annotations

import re
import textwrap
from decimal import Decimal

import pytest

from billing.models import Transaction
from hpc.ssh import SSHConnection
from scheduler_bridge.models import Job, JobRun
from tests.conftest import client_for, wait_for
from tests.factories import MembershipFactory, allocation_bought, funded_organization

pytestmark = [pytest.mark.slurm, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

PRICE = Decimal("2.00")
ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}

VICTIM_SCRIPT = """#!/bin/bash
echo "victim output $SECRET"
echo "$SECRET" > /tmp/victim-$SLURM_JOB_ID
echo "$SECRET" > kept-secret.txt
# Runs until the test has seen the attacker's job end (it leaves `release` here), at most 100 s.
for i in $(seq 500); do [ -e release ] && break; sleep 0.2; done
cat kept-secret.txt
echo "victim done"
"""

# What B's job tries. Each check prints one line; a command that should fail is run with its
# output captured, so that the line says what happened if it did not fail.
ATTACKER_SCRIPT = textwrap.dedent(
    r"""
    #!/bin/bash
    blocked() { echo "ATTACK $1: blocked"; }
    breach() { echo "ATTACK $1: BREACH $2"; }
    must_fail() {  # name command...
      name=$1; shift
      if out=$("$@" 2>&1); then
        breach "$name" "$(echo "$out" | head -c 200)"
      else
        blocked "$name"
      fi
    }
    none() {  # name count
      if [ "$2" -eq 0 ]; then blocked "$1"; else breach "$1" "$2"; fi
    }
    must_fail read-victim-home ls -A "$VICTIM_HOME"
    must_fail read-victim-environment cat "$VICTIM_DIR/job.environment"
    must_fail read-victim-script cat "$VICTIM_DIR/job.sh"
    must_fail read-victim-output cat "$VICTIM_DIR/stdout.txt"
    must_fail write-victim-home touch "$VICTIM_HOME/planted-by-attacker"
    must_fail read-victim-tmp cat "/tmp/victim-$VICTIM_SLURM_ID"
    visible=$(ps -u "$VICTIM_USER" -o pid= 2>/dev/null | wc -l)
    none list-victim-processes "$visible"
    killed=0
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
      owner=$(stat -c %U "/proc/$pid" 2>/dev/null) || continue
      [ "$owner" = "$USER" ] && continue
      kill -9 "$pid" 2>/dev/null && killed=$((killed + 1))
    done
    none kill-others-processes "$killed"
    must_fail pkill-victim pkill -KILL -u "$VICTIM_USER"
    seen=$(squeue --noheader --user="$VICTIM_USER" --format=%i 2>/dev/null | wc -l)
    none list-victim-jobs "$seen"
    must_fail scancel-victim scancel "$VICTIM_SLURM_ID"
    # Asking for every job of the victim's user finds none to cancel (they are not the
    # attacker's to see): it exits 0 having done nothing, which the victim's end shows.
    scancel --user="$VICTIM_USER" >/dev/null 2>&1
    must_fail scontrol-update-victim scontrol update JobId="$VICTIM_SLURM_ID" TimeLimit=1
    must_fail scontrol-hold-victim scontrol hold "$VICTIM_SLURM_ID"
    must_fail scontrol-requeue-victim scontrol requeue "$VICTIM_SLURM_ID"
    must_fail read-service-home ls -A "$SERVICE_HOME"
    must_fail read-authorized-keys cat "$SERVICE_HOME/.ssh/authorized_keys"
    keys="$SERVICE_HOME/.ssh/authorized_keys"
    must_fail write-authorized-keys sh -c "echo ssh-ed25519 AAAA attacker >> '$keys'"
    must_fail sacctmgr-modify-account \
      sacctmgr -i modify account "$SLURM_JOB_ACCOUNT" set GrpTRESMins=cpu=-1
    must_fail sacctmgr-modify-self sacctmgr -i modify user "$USER" set adminlevel=admin
    must_fail sacctmgr-add-user sacctmgr -i add user "$USER" account=root
    must_fail sudo-anything sudo -n true
    must_fail sudo-as-service-user sudo -n -u "$SERVICE_USER" true
    must_fail sudo-as-victim sudo -n -u "$VICTIM_USER" true
    must_fail su-victim su -c true "$VICTIM_USER" </dev/null
    echo "attacks done"
    """
).lstrip()


def team_with_allocation(name, partition):
    team = funded_organization("500", name=name)
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(team, partition=partition, quantity=20, price=PRICE)
    return client_for(member), allocation


def submit(client, allocation, **fields) -> dict:
    answer = client.post(
        "/api/v1/jobs/",
        {"allocation": str(allocation.uuid), "time_limit_minutes": 2, **fields},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    return answer.json()


def wait_job(client, job_id: str, states: set[str], timeout: float = 180) -> dict:
    def reached():
        job = client.get(f"/api/v1/jobs/{job_id}/").json()
        return job if job["state"] in states else None

    return wait_for(reached, timeout=timeout, interval=1)


def sacct_units(testcluster, job_id: str) -> list[Decimal]:
    """Core-hours of every run of a job as accounting recorded it: allocated CPUs x elapsed."""
    with SSHConnection(testcluster.ssh_settings()) as connection:
        lines = connection.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                "-D",
                f"--jobs={job_id}",
                "--format=ElapsedRaw,AllocTRES",
            ]
        ).stdout.splitlines()
    units = []
    for line in lines:
        elapsed, tres = line.split("|")
        cpus = int(dict(item.split("=") for item in tres.split(","))["cpu"]) if tres else 0
        units.append((Decimal(cpus * int(elapsed)) / 3600).quantize(Decimal("0.000001")))
    return units


def test_a_hostile_team_cannot_see_touch_or_stop_another_teams_job(
    testcluster, on_testcluster, celery_worker, poller
):
    cluster = on_testcluster(pool="fixed")
    partition = cluster.partitions.get()
    victim_client, victim_allocation = team_with_allocation("Victim Lab", partition)
    attacker_client, attacker_allocation = team_with_allocation("Attacker Lab", partition)
    secret = "s3cr3t-of-the-victim"

    victim = submit(
        victim_client,
        victim_allocation,
        name="victim",
        script=VICTIM_SCRIPT,
        environment={"SECRET": secret},
    )
    victim = wait_job(victim_client, victim["id"], {"running"}, timeout=120)
    victim_job = Job.objects.select_related("lease__account").get(uuid=victim["id"])
    victim_account = victim_job.lease.account
    attacker = submit(
        attacker_client,
        attacker_allocation,
        name="attacker",
        script=ATTACKER_SCRIPT,
        environment={
            "VICTIM_USER": victim_account.username,
            "VICTIM_HOME": victim_account.home,
            "VICTIM_DIR": f"{victim_account.home}/{victim_job.directory}",
            "VICTIM_SLURM_ID": victim["scheduler_job_id"],
            "SERVICE_USER": testcluster.user,
            "SERVICE_HOME": f"/home/{testcluster.user}",
        },
    )
    attacker = wait_job(attacker_client, attacker["id"], ENDED)
    with SSHConnection(testcluster.ssh_settings()) as connection:
        connection.run(
            ["touch", f"{victim_account.home}/{victim_job.directory}/release"],
            as_user=victim_account.username,
        )
    attacker_lease = Job.objects.select_related("lease__account").get(uuid=attacker["id"]).lease

    # The two teams ran as two different accounts of the pool.
    assert attacker_lease.account.username != victim_account.username
    assert {attacker_lease.account.username, victim_account.username} <= {
        tenant.user for tenant in testcluster.fixed_pool.tenants
    }
    output = attacker_client.get(f"/api/v1/jobs/{attacker['id']}/output/").content.decode()
    attacks = dict(re.findall(r"^ATTACK ([a-z-]+): (.*)$", output, re.MULTILINE))
    assert len(attacks) == 24, output
    assert {name: outcome for name, outcome in attacks.items() if outcome != "blocked"} == {}
    assert "attacks done" in output
    assert attacker["state"] == "completed"

    victim = wait_job(victim_client, victim["id"], ENDED)
    assert victim["state"] == "completed", victim
    victim_output = victim_client.get(f"/api/v1/jobs/{victim['id']}/output/").content.decode()
    assert victim_output == f"victim output {secret}\n{secret}\nvictim done\n"
    # Charged exactly what accounting says the victim's one run used, once.
    [units] = sacct_units(testcluster, victim["scheduler_job_id"])
    assert Decimal(victim["usage"]["units"]) == units
    assert Decimal(victim["cost"]) == (units * PRICE).quantize(Decimal("0.000001"))
    [run] = JobRun.objects.filter(task__job__uuid=victim["id"])
    assert (run.units, run.state) == (units, "completed")
    charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=victim["id"])
    assert charges.count() == 1
    # Nothing of the attacker's was planted in the victim's home, and nothing of the victim's
    # job was charged to the attacker or the other way round.
    with SSHConnection(testcluster.ssh_settings()) as connection:
        planted = connection.run(
            ["test", "-e", f"{victim_account.home}/planted-by-attacker"],
            check=False,
            as_user=victim_account.username,
        )
        keys = connection.run(["cat", f"/home/{testcluster.user}/.ssh/authorized_keys"]).stdout
    assert planted.exit_status == 1
    assert "attacker" not in keys
    assert not Job.objects.filter(allocation=victim_allocation).exclude(uuid=victim["id"]).exists()
    assert set(
        Job.objects.filter(allocation=attacker_allocation).values_list("uuid", flat=True)
    ) == {attacker_lease.jobs.get().uuid}
    assert secret not in output
