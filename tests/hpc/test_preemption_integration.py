"""Preemption on the real Slurm test cluster, set up as an owner would (`cluster-setup
--preemption normal --reservations` and the slurm.conf lines it prints): a team's job runs on
idle cores, the owner's own researcher submits a job that needs every core, and Slurm takes
the cores back. What `hpc.slurm.preemption` says Slurm 22.05 does is shown here, as the
platform's poll will read it (`sacct --duplicates`, `squeue`):

- the market job's batch script gets SIGTERM (it asked `--signal=B:TERM@GraceTime`) as soon as
  the owner's job is waiting for its cores, GraceTime seconds before it is stopped;
- the run ends `PREEMPTED` in sacct, its End the end of the grace; the job waits in the queue
  (`PENDING`, `BeginTime` then `Resources`) under the same id, and its next run, a row of its
  own with a new Submit time, starts once the owner's job has ended;
- a job that ends during its grace is `COMPLETED`, and is not run again.

In fixed mode the team's job runs under the market QOS; in managed mode under the team's own,
made preemptable the same way. Each test cancels its jobs and leaves the accounts as it found
them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from hpc.slurm import accounts as slurm_accounts
from hpc.slurm.parsers import parse_parsable2
from hpc.slurm.preemption import Preemption, qos_preemption_remove, team_qos_preemptable
from hpc.ssh import SSHConnection

pytestmark = pytest.mark.slurm

# The batch script of a team's job: it logs when each run starts and when it gets SIGTERM,
# and keeps running (a job that wants to run again saves its state and waits for the end).
MARKET_SCRIPT = """#!/bin/bash
log="$HOME/preemption-$SLURM_JOB_ID.log"
echo "start $(date +%s) ${SLURM_RESTART_COUNT:-0}" >> "$log"
trap 'echo "term $(date +%s) ${SLURM_RESTART_COUNT:-0}" >> "$log"' TERM
for second in $(seq 290); do sleep 1; done
"""
# The same, but it ends when told to stop.
QUITTER_SCRIPT = MARKET_SCRIPT.replace('>> "$log"\' TERM', '>> "$log"; exit 0\' TERM')
OWNER_SECONDS = 5
SACCT_FIELDS = ["JobIDRaw", "State", "QOS", "Submit", "Start", "End"]


@dataclass(frozen=True)
class Run:
    """One row of `sacct --duplicates -X` for a job: one run of it."""

    state: str
    qos: str
    submit: datetime
    start: datetime | None
    end: datetime | None


@pytest.fixture
def connection(testcluster: Any) -> Iterator[SSHConnection]:
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


@dataclass
class Jobs:
    """What a test submits: its jobs' ids, and the logs its market jobs write in their
    tenants' homes (tenant, file)."""

    ids: list[str] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)


@pytest.fixture
def jobs(connection: SSHConnection, testcluster: Any) -> Iterator[Jobs]:
    """The test's jobs: cancelled afterwards and gone from the queue, their logs removed (the
    next team to lease the tenant finds its home empty)."""
    submitted = Jobs()
    yield submitted
    if submitted.ids:
        connection.run(["scancel", *submitted.ids], timeout=30)
        wait_until(lambda: not queue_of(connection, *submitted.ids), 60)
    for tenant, log in submitted.logs:
        connection.run(["rm", "-f", log], as_user=tenant, timeout=30)


@pytest.fixture
def team_account(connection: SSHConnection, testcluster: Any) -> Iterator[str]:
    """A managed team's account, its QOS preemptable as the platform makes it, with the managed
    pool's last tenant in it; afterwards the tenant is back in the idle account and the account
    and its QOS are gone (out of the owner QOS's Preempt list first)."""
    pool = testcluster.managed_pool
    tenant = pool.tenants[-1].user
    account = slurm_accounts.account_name_for(str(uuid.uuid4()))
    cluster_name = testcluster.cluster_name
    try:
        slurm_accounts.account_ensure(
            connection,
            cluster_name=cluster_name,
            account=account,
            description="ComputeShare buyer",
            organization="Preemption Lab",
        )
        team_qos_preemptable(
            connection,
            qos=account,
            preemption=Preemption(
                owner_qos=(testcluster.owner.qos,),
                grace_seconds=testcluster.preemption_grace_seconds,
            ),
        )
        slurm_accounts.account_limit_set(
            connection,
            cluster_name=cluster_name,
            account=account,
            cpu_minutes=600,
            gpu_minutes=None,
        )
        slurm_accounts.tenant_join(
            connection, cluster_name=cluster_name, user=tenant, account=account
        )
        yield account
    finally:
        connection.run(["scancel", "--account", account], timeout=30)
        wait_until(lambda: not queue_of(connection, account=account), 60)
        slurm_accounts.tenant_leave(
            connection,
            cluster_name=cluster_name,
            user=tenant,
            account=account,
            idle_account=pool.idle_account,
        )
        qos_preemption_remove(connection, qos=account)
        for kind in ("account", "qos"):
            connection.run(
                ["sacctmgr", "-i", "delete", kind, "where", f"name={account}"],
                timeout=30,
                check=False,
            )


def wait_until(condition: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)
    return value


def queue_of(
    connection: SSHConnection, *job_ids: str, account: str | None = None
) -> list[tuple[str, str, str]]:
    """(job id, state, reason) of the jobs still in the queue."""
    which = [f"--jobs={','.join(job_ids)}"] if job_ids else [f"--account={account}"]
    result = connection.run(
        ["squeue", "--noheader", *which, "--format=%i|%T|%r"], timeout=30, check=False
    )
    return [tuple(line.split("|")) for line in result.stdout.splitlines() if line]  # type: ignore[misc]


def runs_of(connection: SSHConnection, job_id: str) -> list[Run]:
    """Every run of the job in accounting, oldest first (`sacct --duplicates`)."""
    result = connection.run(
        [
            "sacct",
            "--noheader",
            "--parsable2",
            "--duplicates",
            "--allocations",
            f"--jobs={job_id}",
            f"--format={','.join(SACCT_FIELDS)}",
        ],
        timeout=30,
    )
    return [
        Run(
            state=row["State"],
            qos=row["QOS"],
            submit=moment(row["Submit"]),  # type: ignore[arg-type]
            start=moment(row["Start"]),
            end=moment(row["End"]),
        )
        for row in parse_parsable2(result.stdout, SACCT_FIELDS)
    ]


def moment(text: str) -> datetime | None:
    """A time sacct printed (in UTC: the bridge runs Slurm's commands with TZ=UTC)."""
    if text in ("Unknown", "None", ""):
        return None
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def submit_market_job(
    connection: SSHConnection,
    tenant: str,
    testcluster: Any,
    jobs: Jobs,
    *,
    script: str = MARKET_SCRIPT,
    qos: str | None = None,
) -> str:
    """A team's job of one CPU, as the platform submits one on preemptible capacity: requeued
    when preempted, its script told by SIGTERM GraceTime seconds before."""
    grace = testcluster.preemption_grace_seconds
    arguments = [
        "sbatch",
        "--parsable",
        f"--partition={testcluster.partition}",
        "--cpus-per-task=1",
        "--time=5",
        "--requeue",
        f"--signal=B:TERM@{grace}",
        "--output=/dev/null",
        "--job-name=market-job",
    ]
    if qos is not None:
        arguments.append(f"--qos={qos}")
    job_id = connection.run(
        arguments, as_user=tenant, stdin=script.encode(), timeout=30
    ).stdout.strip()
    jobs.ids.append(job_id)
    jobs.logs.append((tenant, f"preemption-{job_id}.log"))
    wait_until(lambda: queue_of(connection, job_id) == [(job_id, "RUNNING", "None")], 30)
    return job_id


def log_of(connection: SSHConnection, tenant: str, job_id: str) -> list[tuple[str, int, int]]:
    """(event, unix time, restart count) lines the market job's runs wrote."""
    result = connection.run(
        ["cat", f"preemption-{job_id}.log"], as_user=tenant, timeout=30, check=False
    )
    return [
        (event, int(when), int(restarts))
        for event, when, restarts in (line.split() for line in result.stdout.splitlines())
    ]


def owner_takes_every_core(connection: SSHConnection, testcluster: Any, jobs: Jobs) -> str:
    """The owner's researcher submits a job that needs every CPU of the partition."""
    counts = connection.run(
        ["sinfo", "--noheader", f"--partition={testcluster.partition}", "--format=%C"], timeout=30
    )
    cpus = int(counts.stdout.strip().split("/")[-1])  # allocated/idle/other/total
    job_id = testcluster.owner.submit(f"#!/bin/bash\nsleep {OWNER_SECONDS}\n", cpus=cpus)
    jobs.ids.append(job_id)
    return job_id


def preempted_then_run_again(
    connection: SSHConnection, testcluster: Any, tenant: str, market: str, owner: str
) -> tuple[list[Run], list[Run], set[str], list[tuple[str, int, int]]]:
    """Follows the market job from the owner's submission until its next run has started:
    its runs, the owner's, the (state, reason) it was seen in while requeued, and its log."""
    waiting: set[str] = set()

    def running_again() -> bool:
        for _, state, reason in queue_of(connection, market):
            if state == "PENDING":
                waiting.add(f"{state} {reason}")
        runs = runs_of(connection, market)
        return len(runs) == 2 and runs[1].state == "RUNNING"

    grace = testcluster.preemption_grace_seconds
    # The grace, KillWait (5 s), the owner's job, and the credential's lifetime (11 s) before a
    # requeued job may start.
    wait_until(running_again, grace + OWNER_SECONDS + 60)
    return (
        runs_of(connection, market),
        runs_of(connection, owner),
        waiting,
        log_of(connection, tenant, market),
    )


def assert_preempted_and_run_again(
    testcluster: Any,
    market_runs: list[Run],
    owner_runs: list[Run],
    waiting: set[str],
    log: list[tuple[str, int, int]],
    qos: str,
) -> None:
    grace = testcluster.preemption_grace_seconds
    [preempted, again] = market_runs
    [owners] = owner_runs
    assert (preempted.state, preempted.qos) == ("PREEMPTED", qos)
    assert (again.state, again.qos) == ("RUNNING", qos)
    assert (owners.state, owners.qos) == ("COMPLETED", testcluster.owner.qos)
    assert preempted.start is not None and preempted.end is not None
    assert owners.start is not None and owners.end is not None and again.start is not None
    # The owner's job waited out the grace (and KillWait), then had the cores.
    assert owners.submit < preempted.end <= owners.start
    # The next run is a new row: resubmitted when the first was stopped, started after the
    # owner's job ended.
    assert again.submit >= preempted.end
    assert again.start >= owners.end
    assert waiting <= {"PENDING BeginTime", "PENDING Resources"} and waiting
    # The script heard SIGTERM when the grace began, at least GraceTime seconds before its run
    # ended (the requeue comes at the scheduler's next look at the owner's job after the grace:
    # sched_interval 2 s and bf_interval 5 s here), and its next run started over
    # (SLURM_RESTART_COUNT 1).
    events = [(event, restarts) for event, _, restarts in log]
    assert events[:2] == [("start", 0), ("term", 0)]
    assert ("start", 1) in events
    term = next(when for event, when, _ in log if event == "term")
    assert grace - 2 <= preempted.end.timestamp() - term <= grace + 10


def test_the_owners_job_preempts_a_fixed_tenants_market_job_which_runs_again_after_it(
    connection, testcluster, jobs
):
    tenant = testcluster.fixed_pool.tenants[0].user
    market = submit_market_job(connection, tenant, testcluster, jobs, qos=testcluster.market_qos)

    owner = owner_takes_every_core(connection, testcluster, jobs)

    market_runs, owner_runs, waiting, log = preempted_then_run_again(
        connection, testcluster, tenant, market, owner
    )
    assert_preempted_and_run_again(
        testcluster, market_runs, owner_runs, waiting, log, qos=testcluster.market_qos
    )


def test_a_fixed_tenants_job_runs_under_the_market_qos_whatever_it_asks(
    connection, testcluster, jobs
):
    tenant = testcluster.fixed_pool.tenants[1].user
    # Without --qos: the market QOS is the tenants' default.
    market = submit_market_job(connection, tenant, testcluster, jobs)
    shown = connection.run(["squeue", "--noheader", f"--jobs={market}", "--format=%q"])
    assert shown.stdout.strip() == testcluster.market_qos

    # Asking for the owner's QOS is refused: it is not the tenants' to use.
    refused = connection.run(
        ["sbatch", f"--qos={testcluster.owner.qos}", "--time=1", "--wrap=true"],
        as_user=tenant,
        timeout=30,
        check=False,
    )
    assert refused.exit_status == 1
    assert "Invalid qos specification" in refused.stderr


def test_the_owners_job_preempts_a_managed_teams_job_under_the_teams_own_qos(
    connection, testcluster, jobs, team_account
):
    tenant = testcluster.managed_pool.tenants[-1].user
    # No --qos: the team's account has its own QOS only, preemptable like the market's.
    market = submit_market_job(connection, tenant, testcluster, jobs)

    owner = owner_takes_every_core(connection, testcluster, jobs)

    market_runs, owner_runs, waiting, log = preempted_then_run_again(
        connection, testcluster, tenant, market, owner
    )
    assert_preempted_and_run_again(
        testcluster, market_runs, owner_runs, waiting, log, qos=team_account
    )


def test_a_job_that_ends_during_its_grace_is_completed_and_not_run_again(
    connection, testcluster, jobs
):
    tenant = testcluster.fixed_pool.tenants[2].user
    quitter = submit_market_job(
        connection, tenant, testcluster, jobs, script=QUITTER_SCRIPT, qos=testcluster.market_qos
    )

    owner = owner_takes_every_core(connection, testcluster, jobs)

    wait_until(lambda: not queue_of(connection, quitter), 30)
    # slurmdbd may show a job that ran for a second with its QOS "Unknown" for a moment.
    [run] = wait_until(
        lambda: [
            run
            for run in runs_of(connection, quitter)
            if run.state != "RUNNING" and run.qos != "Unknown"
        ],
        30,
    )
    assert (run.state, run.qos) == ("COMPLETED", testcluster.market_qos)
    assert [event for event, _, _ in log_of(connection, tenant, quitter)] == ["start", "term"]
    # The owner's job did not wait out the grace: the cores were free at once.
    [owners] = wait_until(
        lambda: [run for run in runs_of(connection, owner) if run.start is not None], 30
    )
    assert run.end is not None and owners.start is not None
    assert owners.start >= run.end
    assert (owners.start - run.end).total_seconds() < testcluster.preemption_grace_seconds
