"""Managed accounts on the real Slurm test cluster, over SSH. Each test works on an account of
its own (from a random organization UUID) and deletes it afterwards."""

import uuid

import pytest

from scheduler_bridge.slurm.accounts import (
    AccountLimit,
    AccountMissing,
    TresNotTracked,
    account_ensure,
    account_limit_get,
    account_limit_set,
    account_name_for,
)
from scheduler_bridge.slurm.errors import RemoteCommandFailed
from scheduler_bridge.slurm.parsers import parse_parsable2
from scheduler_bridge.slurm.ssh import SSHConnection

pytestmark = pytest.mark.slurm


@pytest.fixture
def connection(testcluster):
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


@pytest.fixture
def account(connection):
    """A fresh account name, deleted from accounting after the test with its associations."""
    name = account_name_for(str(uuid.uuid4()))
    yield name
    # Deleting the account deletes its user associations too (there are no jobs under it).
    # "Nothing deleted" (exit 1) is fine: the test may not have created it.
    connection.run(["sacctmgr", "-i", "delete", "account", "where", f"name={name}"], check=False)
    assert associations(connection, name) == []


def associations(connection: SSHConnection, account: str) -> list[tuple[str, str, str]]:
    """(account, user, GrpTRESMins) of every association of `account`, as sacctmgr shows
    them."""
    fields = ["Account", "User", "GrpTRESMins"]
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
    return [tuple(row.values()) for row in parse_parsable2(result.stdout, fields)]


def ensure(connection, testcluster, account, **texts) -> bool:
    return account_ensure(
        connection,
        cluster_name=testcluster.cluster_name,
        account=account,
        user=testcluster.user,
        description=texts.get("description", "ComputeShare buyer"),
        organization=texts.get("organization", "Quantum Lab"),
    )


def set_limit(connection, testcluster, account, cpu_minutes, gpu_minutes=None) -> bool:
    return account_limit_set(
        connection,
        cluster_name=testcluster.cluster_name,
        account=account,
        cpu_minutes=cpu_minutes,
        gpu_minutes=gpu_minutes,
    )


def get_limit(connection, testcluster, account) -> AccountLimit | None:
    return account_limit_get(connection, cluster_name=testcluster.cluster_name, account=account)


def test_ensure_creates_the_account_and_the_service_users_association_once(
    connection, testcluster, account
):
    created = ensure(connection, testcluster, account)
    created_again = ensure(connection, testcluster, account)

    assert (created, created_again) == (True, False)
    assert sorted(associations(connection, account)) == [
        (account, "", ""),
        (account, testcluster.user, ""),
    ]


def test_ensure_restores_a_missing_user_association(connection, testcluster, account):
    ensure(connection, testcluster, account)
    connection.run(
        [
            "sacctmgr",
            "-i",
            "delete",
            "user",
            "where",
            f"name={testcluster.user}",
            f"account={account}",
            f"cluster={testcluster.cluster_name}",
        ],
        timeout=30,
    )
    assert associations(connection, account) == [(account, "", "")]

    assert ensure(connection, testcluster, account) is True
    assert sorted(associations(connection, account)) == [
        (account, "", ""),
        (account, testcluster.user, ""),
    ]


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


def test_a_job_can_run_under_the_ensured_account(connection, testcluster, account):
    ensure(connection, testcluster, account)

    # --test-only asks slurmctld to check the request (account, association, partition)
    # without queueing a job. It reports on stderr and exits 0 when the job would run.
    result = connection.run(
        [
            "sbatch",
            "--test-only",
            "--account",
            account,
            "--partition",
            testcluster.partition,
            "--time",
            "1",
            "--wrap",
            "true",
        ],
        timeout=30,
    )

    assert "to start at" in result.stderr


def test_the_cpu_limit_is_set_only_when_it_differs(connection, testcluster, account):
    ensure(connection, testcluster, account)
    assert get_limit(connection, testcluster, account) == AccountLimit(account, None, None)

    first = set_limit(connection, testcluster, account, cpu_minutes=6000)
    assert associations(connection, account)[0] == (account, "", "cpu=6000")
    identical = set_limit(connection, testcluster, account, cpu_minutes=6000)
    changed = set_limit(connection, testcluster, account, cpu_minutes=9000)

    assert (first, identical, changed) == (True, False, True)
    assert sorted(associations(connection, account)) == [
        (account, "", "cpu=9000"),
        (account, testcluster.user, ""),
    ]
    assert get_limit(connection, testcluster, account) == AccountLimit(account, 9000, None)


def test_none_clears_the_cpu_limit(connection, testcluster, account):
    ensure(connection, testcluster, account)
    set_limit(connection, testcluster, account, cpu_minutes=6000)

    cleared = set_limit(connection, testcluster, account, cpu_minutes=None)
    cleared_again = set_limit(connection, testcluster, account, cpu_minutes=None)

    assert (cleared, cleared_again) == (True, False)
    assert get_limit(connection, testcluster, account) == AccountLimit(account, None, None)


def test_a_gpu_limit_is_refused_because_the_test_cluster_does_not_track_gpus(
    connection, testcluster, account
):
    ensure(connection, testcluster, account)
    set_limit(connection, testcluster, account, cpu_minutes=6000)

    with pytest.raises(TresNotTracked, match="AccountingStorageTRES=gres/gpu"):
        set_limit(connection, testcluster, account, cpu_minutes=6000, gpu_minutes=120)

    assert get_limit(connection, testcluster, account) == AccountLimit(account, 6000, None)


def test_an_account_that_does_not_exist_has_no_limit_to_get_or_set(
    connection, testcluster, account
):
    assert get_limit(connection, testcluster, account) is None
    with pytest.raises(AccountMissing):
        set_limit(connection, testcluster, account, cpu_minutes=6000)
    assert associations(connection, account) == []


def test_a_cluster_accounting_does_not_know_fails_with_sacctmgrs_reason(connection, account):
    with pytest.raises(RemoteCommandFailed) as failed:
        account_ensure(
            connection,
            cluster_name="no-such-cluster",
            account=account,
            user="computeshare",
            description="",
            organization="",
        )

    assert failed.value.exit_status == 1
    assert "This cluster 'no-such-cluster' doesn't exist." in failed.value.stderr
