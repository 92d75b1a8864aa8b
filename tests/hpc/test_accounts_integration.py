"""Managed accounts on the real Slurm test cluster, over SSH. Each test works on an account and
a QOS of its own (from a random organization UUID) and deletes both afterwards. The tenant is
the managed pool's last account (a fresh lease takes the first ones, the marketplace tests of
the accounts the third), and it is back in the idle account after each test."""

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from hpc.errors import RemoteCommandFailed
from hpc.slurm.accounts import (
    AccountLimit,
    TenantInAnotherAccount,
    account_ensure,
    account_limit_get,
    account_limit_set,
    account_max_jobs_get,
    account_name_for,
    default_accounts_get,
    tenant_join,
    tenant_leave,
)
from hpc.slurm.parsers import parse_parsable2
from hpc.slurm.preemption import (
    OwnerQosMissing,
    Preemption,
    QosPreemption,
    qos_preemption_read,
    qos_preemption_remove,
    team_qos_preemptable,
)
from hpc.slurm.sacctmgr import (
    AccountMissing,
    AssociationInUse,
    TresNotTracked,
)
from hpc.ssh import SSHConnection

pytestmark = pytest.mark.slurm


@pytest.fixture
def connection(testcluster: Any) -> Iterator[SSHConnection]:
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


@pytest.fixture
def pool(testcluster: Any) -> Any:
    return testcluster.managed_pool


def new_account(created: list[str]) -> str:
    name = account_name_for(str(uuid.uuid4()))
    created.append(name)
    return name


@pytest.fixture
def accounts(connection: SSHConnection, testcluster: Any, pool: Any) -> Iterator[list[str]]:
    """The accounts a test makes: afterwards their jobs are cancelled, the tenants in them go
    back to the idle account, and the accounts and their QOS are deleted."""
    created: list[str] = []
    yield created
    for name in created:
        # The service user, an operator at least, may cancel anyone's jobs.
        connection.run(["scancel", "--account", name], timeout=30)
        wait_until(lambda name=name: not queued(connection, name))
        for user in {user for _, user, *_ in associations(connection, name) if user}:
            sacctmgr(
                connection,
                "modify",
                "user",
                "where",
                f"name={user}",
                f"cluster={testcluster.cluster_name}",
                "set",
                f"defaultaccount={pool.idle_account}",
            )
        # Deleting the account deletes its users' associations too (no jobs are left); its
        # QOS leaves every Preempt list first. "Nothing deleted" (exit 1) is fine: the test may
        # not have made it.
        qos_preemption_remove(connection, qos=name)
        for kind in ("account", "qos"):
            result = connection.run(
                ["sacctmgr", "-i", "delete", kind, "where", f"name={name}"], timeout=30, check=False
            )
            assert result.exit_status == 0 or result.stdout.strip() == "Nothing deleted", result


@pytest.fixture
def account(accounts: list[str]) -> str:
    """A fresh account name, deleted from accounting after the test with its QOS."""
    return new_account(accounts)


def sacctmgr(connection: SSHConnection, *arguments: str) -> str:
    return connection.run(["sacctmgr", "-i", *arguments], timeout=30).stdout


def associations(connection: SSHConnection, account: str) -> list[tuple[str, ...]]:
    """(account, user, QOS, default QOS, GrpTRESMins) of every association of `account`, as
    sacctmgr shows them, sorted."""
    fields = ["Account", "User", "QOS", "DefaultQOS", "GrpTRESMins"]
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "where",
            f"account={account}",
            f"format={','.join(fields)}",
        ],
        timeout=30,
    )
    return sorted(tuple(row.values()) for row in parse_parsable2(result.stdout, fields))


def accounts_of(connection: SSHConnection, user: str) -> list[str]:
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "where",
            f"user={user}",
            "format=Account",
        ],
        timeout=30,
    )
    return sorted(result.stdout.split())


def qos_of(connection: SSHConnection, name: str) -> tuple[str, str] | None:
    """(GrpTRESMins, Flags) of the QOS, or None when there is none."""
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "qos",
            "where",
            f"name={name}",
            "format=GrpTRESMins,Flags",
        ],
        timeout=30,
    )
    rows = [tuple(line.split("|")) for line in result.stdout.splitlines()]
    assert len(rows) <= 1
    return rows[0] if rows else None  # type: ignore[return-value]


def queued(connection: SSHConnection, account: str) -> list[tuple[str, str, str]]:
    """(state, reason, QOS) of the account's jobs still in the queue."""
    result = connection.run(
        ["squeue", "--noheader", "--account", account, "--format", "%T|%r|%q"],
        timeout=30,
    )
    return [tuple(line.split("|")) for line in result.stdout.splitlines()]  # type: ignore[misc]


def accounted(connection: SSHConnection, job_id: str) -> str:
    """The job's state in slurmdbd (empty until slurmctld has reported it)."""
    result = connection.run(
        ["sacct", "--noheader", "--parsable2", "-X", "--jobs", job_id, "--format", "State"],
        timeout=30,
    )
    return result.stdout.strip()


def wait_until(condition: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def ensure(connection: SSHConnection, testcluster: Any, account: str, **texts: str) -> bool:
    return account_ensure(
        connection,
        cluster_name=testcluster.cluster_name,
        account=account,
        description=texts.get("description", "ComputeShare buyer"),
        organization=texts.get("organization", "Quantum Lab"),
    )


def set_limit(
    connection: SSHConnection,
    testcluster: Any,
    account: str,
    cpu_minutes: int | None,
    gpu_minutes: int | None = None,
) -> bool:
    return account_limit_set(
        connection,
        cluster_name=testcluster.cluster_name,
        account=account,
        cpu_minutes=cpu_minutes,
        gpu_minutes=gpu_minutes,
    )


def get_limit(connection: SSHConnection, testcluster: Any, account: str) -> AccountLimit | None:
    return account_limit_get(connection, cluster_name=testcluster.cluster_name, account=account)


def join(connection: SSHConnection, testcluster: Any, user: str, account: str) -> bool:
    return tenant_join(
        connection, cluster_name=testcluster.cluster_name, user=user, account=account
    )


def leave(connection: SSHConnection, testcluster: Any, pool: Any, user: str, account: str) -> bool:
    return tenant_leave(
        connection,
        cluster_name=testcluster.cluster_name,
        user=user,
        account=account,
        idle_account=pool.idle_account,
    )


def default_of(connection: SSHConnection, testcluster: Any, user: str) -> str | None:
    return default_accounts_get(
        connection, users=[user], cluster_name=testcluster.cluster_name
    ).get(user)


# --- The team's account and QOS ------------------------------------------------------------------


def test_ensure_creates_the_qos_and_the_account_once_without_any_user(
    connection, testcluster, account
):
    created = ensure(connection, testcluster, account)
    created_again = ensure(connection, testcluster, account)

    assert (created, created_again) == (True, False)
    assert qos_of(connection, account) == ("", "NoDecay")
    # The account's only QOS is its own, and no user (the service user least of all) is in it.
    assert associations(connection, account) == [(account, "", account, account, "")]


def test_ensure_puts_back_what_was_changed_by_hand(connection, testcluster, account):
    ensure(connection, testcluster, account)
    sacctmgr(connection, "modify", "qos", "where", f"name={account}", "set", "flags=DenyOnLimit")
    # An older version kept the limit on the account's association, which decays.
    sacctmgr(
        connection,
        "modify",
        "account",
        "where",
        f"name={account}",
        f"cluster={testcluster.cluster_name}",
        "set",
        "qos=normal",
        "defaultqos=-1",
        "GrpTRESMins=cpu=6000",
    )
    assert qos_of(connection, account) == ("", "DenyOnLimit")
    assert associations(connection, account) == [(account, "", "normal", "", "cpu=6000")]

    repaired = ensure(connection, testcluster, account)
    repaired_again = ensure(connection, testcluster, account)

    assert (repaired, repaired_again) == (True, False)
    assert qos_of(connection, account) == ("", "NoDecay")
    assert associations(connection, account) == [(account, "", account, account, "")]


def test_free_text_reaches_sacctmgr_as_one_cleaned_value(connection, testcluster, account):
    ensure(
        connection,
        testcluster,
        account,
        description='Buyer "Quantum Lab" | $(id)',
        organization="Quantum Lab's, Inc. = 42",
    )

    shown = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "account",
            account,
            "format=Account,Description,Organization",
        ],
        timeout=30,
    ).stdout

    # sacctmgr lowercases both fields itself.
    assert shown == f"{account}|buyer quantum lab id|quantum lab s inc. 42\n"


def test_the_cpu_limit_is_set_on_the_qos_only_when_it_differs(connection, testcluster, account):
    ensure(connection, testcluster, account)
    assert get_limit(connection, testcluster, account) == AccountLimit(account, None, None)

    first = set_limit(connection, testcluster, account, cpu_minutes=6000)
    identical = set_limit(connection, testcluster, account, cpu_minutes=6000)
    assert qos_of(connection, account) == ("cpu=6000", "NoDecay")
    changed = set_limit(connection, testcluster, account, cpu_minutes=9000)

    assert (first, identical, changed) == (True, False, True)
    assert get_limit(connection, testcluster, account) == AccountLimit(account, 9000, None)
    # The association carries no limit of its own.
    assert associations(connection, account) == [(account, "", account, account, "")]

    # The test cluster does not account for GPUs, so it cannot hold a GPU limit.
    with pytest.raises(TresNotTracked, match="AccountingStorageTRES=gres/gpu"):
        set_limit(connection, testcluster, account, cpu_minutes=9000, gpu_minutes=120)
    assert get_limit(connection, testcluster, account) == AccountLimit(account, 9000, None)

    cleared = set_limit(connection, testcluster, account, cpu_minutes=None)
    cleared_again = set_limit(connection, testcluster, account, cpu_minutes=None)

    assert (cleared, cleared_again) == (True, False)
    assert qos_of(connection, account) == ("", "NoDecay")


def test_an_account_that_does_not_exist_has_no_limit_to_get_or_set(
    connection, testcluster, account
):
    assert get_limit(connection, testcluster, account) is None
    with pytest.raises(AccountMissing):
        set_limit(connection, testcluster, account, cpu_minutes=6000)
    with pytest.raises(AccountMissing):
        account_max_jobs_get(connection, cluster_name=testcluster.cluster_name, account=account)
    assert associations(connection, account) == []
    assert qos_of(connection, account) is None


def test_a_cluster_accounting_does_not_know_fails_with_sacctmgrs_reason(connection, account):
    with pytest.raises(RemoteCommandFailed) as failed:
        account_ensure(
            connection,
            cluster_name="no-such-cluster",
            account=account,
            description="",
            organization="",
        )

    assert failed.value.exit_status == 1
    assert "This cluster 'no-such-cluster' doesn't exist." in failed.value.stderr


# --- Tenants -------------------------------------------------------------------------------------


def test_the_idle_account_runs_nothing_and_idle_tenants_default_to_it(
    connection, testcluster, pool
):
    users = [tenant.user for tenant in pool.tenants]

    max_jobs = account_max_jobs_get(
        connection, cluster_name=testcluster.cluster_name, account=pool.idle_account
    )
    defaults = default_accounts_get(
        connection, users=[*users, "no-such-user"], cluster_name=testcluster.cluster_name
    )

    assert max_jobs == 0
    # The last tenant is this module's; the others may be leased by other tests meanwhile.
    assert defaults[users[-1]] == pool.idle_account
    assert set(defaults) == set(users)


def test_a_tenant_joins_the_teams_account_and_leaves_it_for_the_idle_one(
    connection, testcluster, pool, account
):
    tenant = pool.tenants[-1].user
    ensure(connection, testcluster, account)

    joined = join(connection, testcluster, tenant, account)
    joined_again = join(connection, testcluster, tenant, account)

    assert (joined, joined_again) == (True, False)
    assert default_of(connection, testcluster, tenant) == account
    # The tenant's association draws on the team's QOS, the only one it may use.
    assert associations(connection, account) == [
        (account, "", account, account, ""),
        (account, tenant, account, account, ""),
    ]
    assert accounts_of(connection, tenant) == sorted([account, pool.idle_account])
    # A job of the tenant that names no account (one submitted from inside a job) is charged
    # to the team. --test-only has slurmctld check it without queueing a job; it answers on
    # stderr and exits 0 when the job would run.
    tested = connection.run(
        [
            "sbatch",
            "--test-only",
            "--partition",
            testcluster.partition,
            "--time",
            "1",
            "--wrap",
            "true",
        ],
        as_user=tenant,
        timeout=30,
    )
    assert "to start at" in tested.stderr

    left = leave(connection, testcluster, pool, tenant, account)
    left_again = leave(connection, testcluster, pool, tenant, account)

    assert (left, left_again) == (True, False)
    assert default_of(connection, testcluster, tenant) == pool.idle_account
    assert accounts_of(connection, tenant) == [pool.idle_account]
    assert associations(connection, account) == [(account, "", account, account, "")]


def test_a_tenant_cannot_join_an_account_that_was_never_ensured(
    connection, testcluster, pool, account
):
    tenant = pool.tenants[-1].user

    with pytest.raises(AccountMissing, match=f"account {account} does not exist"):
        join(connection, testcluster, tenant, account)

    assert default_of(connection, testcluster, tenant) == pool.idle_account
    assert accounts_of(connection, tenant) == [pool.idle_account]


def test_a_tenant_still_in_another_teams_account_cannot_join(
    connection, testcluster, pool, accounts
):
    tenant = pool.tenants[-1].user
    first, second = new_account(accounts), new_account(accounts)
    ensure(connection, testcluster, first)
    ensure(connection, testcluster, second)
    join(connection, testcluster, tenant, first)

    with pytest.raises(TenantInAnotherAccount, match=f"{tenant} still has an association"):
        join(connection, testcluster, tenant, second)

    assert default_of(connection, testcluster, tenant) == first
    assert accounts_of(connection, tenant) == sorted([first, pool.idle_account])
    assert associations(connection, second) == [(second, "", second, second, "")]


def test_the_teams_qos_holds_a_tenants_job_that_would_pass_the_limit(
    connection, testcluster, pool, account
):
    """GrpTRESMins=cpu=1 and a job of 2 CPUs for 1 minute (2 CPU minutes). With
    AccountingStorageEnforce=associations,limits,qos,safe Slurm accepts the job and keeps it
    pending with the reason QOSGrpCPUMinutesLimit: it never starts."""
    tenant = pool.tenants[-1].user
    ensure(connection, testcluster, account)
    set_limit(connection, testcluster, account, cpu_minutes=1)
    join(connection, testcluster, tenant, account)

    job_id = connection.run(
        [
            "sbatch",
            "--parsable",
            "--partition",
            testcluster.partition,
            "--ntasks",
            "2",
            "--time",
            "1",
            "--wrap",
            "true",
        ],
        as_user=tenant,
        timeout=30,
    ).stdout.strip()
    # The reason is the scheduler's answer when it considered the job (sched_interval=2 on
    # the test cluster): it will not start it.
    wait_until(
        lambda: queued(connection, account) == [("PENDING", "QOSGrpCPUMinutesLimit", account)]
    )

    # Once slurmdbd knows the job (slurmctld tells it within a second or two; sacctmgr checks
    # its table, not the queue), sacctmgr keeps the tenant in the account while the job is
    # queued. The default has gone back to the idle account already.
    wait_until(lambda: accounted(connection, job_id) == "PENDING")
    with pytest.raises(AssociationInUse, match=rf"jobs still active \({job_id}\)") as refused:
        leave(connection, testcluster, pool, tenant, account)
    assert refused.value.job_ids == (job_id,)
    assert default_of(connection, testcluster, tenant) == pool.idle_account
    assert tenant in {user for _, user, *_ in associations(connection, account)}

    connection.run(["scancel", job_id], as_user=tenant, timeout=30)
    wait_until(lambda: not queued(connection, account))
    assert leave(connection, testcluster, pool, tenant, account) is True
    assert accounts_of(connection, tenant) == [pool.idle_account]


# --- A team's QOS on a cluster that sells preemptible capacity ----------------------------------


def qos_preemption_of(connection: SSHConnection, *names: str) -> dict[str, QosPreemption]:
    return {record.name: record for record in qos_preemption_read(connection, names=names)}


def test_a_teams_qos_is_made_preemptable_once_and_leaves_every_preempt_list(
    connection, testcluster, account
):
    owner = testcluster.owner.qos
    grace = testcluster.preemption_grace_seconds
    preemption = Preemption(owner_qos=(owner,), grace_seconds=grace)
    ensure(connection, testcluster, account)

    made = team_qos_preemptable(connection, qos=account, preemption=preemption)
    made_again = team_qos_preemptable(connection, qos=account, preemption=preemption)

    assert (made, made_again) == (True, False)
    records = qos_preemption_of(connection, account, owner)
    assert records[account] == QosPreemption(account, 0, grace, "requeue", ())
    assert {testcluster.market_qos, account} <= set(records[owner].preempts)
    # Its limit and NoDecay are the account's business, untouched.
    assert qos_of(connection, account) == ("", "NoDecay")

    # Changed by hand on the cluster: put back.
    sacctmgr(connection, "modify", "qos", "where", f"name={account}", "set", "preemptmode=cancel")
    sacctmgr(connection, "modify", "qos", "where", f"name={owner}", "set", f"preempt-={account}")
    assert team_qos_preemptable(connection, qos=account, preemption=preemption) is True
    records = qos_preemption_of(connection, account, owner)
    assert records[account].preempt_mode == "requeue"
    assert account in records[owner].preempts

    removed = qos_preemption_remove(connection, qos=account)
    removed_again = qos_preemption_remove(connection, qos=account)

    assert (removed, removed_again) == (True, False)
    assert account not in qos_preemption_of(connection, owner)[owner].preempts
    assert testcluster.market_qos in qos_preemption_of(connection, owner)[owner].preempts


def test_a_missing_team_or_owner_qos_is_refused_and_nothing_changes(
    connection, testcluster, account
):
    preemption = Preemption(owner_qos=(testcluster.owner.qos,), grace_seconds=10)
    before = qos_preemption_of(connection, testcluster.owner.qos)

    with pytest.raises(AccountMissing, match=f"the QOS {account} does not exist"):
        team_qos_preemptable(connection, qos=account, preemption=preemption)
    ensure(connection, testcluster, account)
    gone = Preemption(owner_qos=("cs-no-such-qos",), grace_seconds=10)
    with pytest.raises(OwnerQosMissing, match="cs-no-such-qos"):
        team_qos_preemptable(connection, qos=account, preemption=gone)

    assert qos_preemption_of(connection, testcluster.owner.qos) == before
    assert qos_preemption_of(connection, account)[account].preempt_mode == "cluster"
