"""Managed Slurm accounts on the real test cluster: a purchase on a `managed` cluster becomes an
account of the buying organization and a NoDecay QOS of the same name, whose GrpTRESMins holds
what the organization may still use there (the quantity of its open allocations and what its
closed ones used). The service user has no association with it; the team's leased tenant is
moved in and out. What the cluster enforces is read back with `sacctmgr`. Each test deletes the
accounts and QOS it made, so that a rerun starts clean."""

import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection as database
from django.db import transaction
from django.utils import timezone

from billing.models import Account
from billing.services.ledger import accounts_open
from hpc.errors import ClusterUnreachable
from hpc.slurm import accounts as slurm_accounts
from hpc.slurm import preemption as slurm_preemption
from hpc.slurm.accounts import (
    account_name_for,
)
from hpc.slurm.parsers import parse_parsable2
from hpc.ssh import SSHConnection
from marketplace import services
from marketplace.models import Allocation, Cluster, Offer, SlurmAccount, TenantAccount, TenantLease
from marketplace.tasks import slurm_accounts_reconcile_task
from organizations.models import Membership, Organization
from tests.conftest import wait_for
from tests.factories import (
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    funded_organization,
)

pytestmark = pytest.mark.slurm

WORKER_TIMEOUT = 60
SERVICE_USER = "computeshare"


@pytest.fixture
def slurm(testcluster: Any) -> Iterator[SSHConnection]:
    """A connection of our own to the cluster, to check what it enforces."""
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


def associations(slurm: SSHConnection, account: str) -> list[tuple[str, str, str]]:
    """(account, user, QOS) of every association of `account`, sorted."""
    fields = ["Account", "User", "QOS"]
    result = slurm.run(
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


def enforced(slurm: SSHConnection, account: str) -> tuple[list[tuple[str, str, str]], str | None]:
    """What the cluster holds for a team: the associations of its account, and its QOS's
    `GrpTRESMins|Flags` (None without a QOS)."""
    result = slurm.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "qos",
            "where",
            f"name={account}",
            "format=GrpTRESMins,Flags",
        ],
        timeout=30,
    )
    return associations(slurm, account), result.stdout.strip() or None


def limited_to(account: str, cpu_minutes: int) -> tuple[list[tuple[str, str, str]], str]:
    """What the cluster shows for a managed account limited to `cpu_minutes`: the account's own
    association, whose only QOS is the team's, no user in it (the service user least of all),
    and the limit on the QOS."""
    return [(account, "", account)], f"cpu={cpu_minutes}|NoDecay"


def changes_recorded_for(slurm: SSHConnection, account: str) -> int:
    """How many changes slurmdbd has recorded for the account and its associations: a write that
    changes nothing adds none."""
    result = slurm.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "where",
            f"account={account}",
            "format=ID",
        ],
        timeout=30,
    )
    ids = "|".join(line.strip() for line in result.stdout.splitlines() if line.strip())
    mentions = re.compile(rf"'{re.escape(account)}'|\bid_assoc=({ids})\b")
    history = slurm.run(["sacctmgr", "--noheader", "--parsable2", "list", "transactions"])
    return sum(1 for line in history.stdout.splitlines() if mentions.search(line))


def set_by_hand(slurm: SSHConnection, account: str, limit: str) -> None:
    slurm.run(
        [
            "sacctmgr",
            "-i",
            "modify",
            "qos",
            "where",
            f"name={account}",
            "set",
            f"GrpTRESMins={limit}",
        ],
        timeout=30,
    )


def delete_by_hand(slurm: SSHConnection, testcluster: Any, account: str) -> None:
    """Deletes the account and its QOS, after its tenants' jobs are gone and their default is
    the idle account again; "Nothing deleted" (exit 1) is fine when there was none."""
    slurm.run(["scancel", "--account", account], timeout=30)
    wait_for(lambda: not slurm.run(["squeue", "--noheader", "--account", account]).stdout)
    for user in {user for _, user, _ in associations(slurm, account) if user}:
        slurm.run(
            [
                "sacctmgr",
                "-i",
                "modify",
                "user",
                "where",
                f"name={user}",
                f"cluster={testcluster.cluster_name}",
                "set",
                f"defaultaccount={testcluster.managed_pool.idle_account}",
            ],
            timeout=30,
        )
    # The QOS leaves the owner QOS's Preempt lists first (slurmdbd would keep it there), and
    # deleting the account deletes its users' associations too.
    slurm_preemption.qos_preemption_remove(slurm, qos=account)
    for kind in ("account", "qos"):
        result = slurm.run(
            ["sacctmgr", "-i", "delete", kind, "where", f"name={account}"], timeout=30, check=False
        )
        assert result.exit_status == 0 or result.stdout.strip() == "Nothing deleted", result


@dataclass
class Buyer:
    organization: Organization
    membership: Membership
    account: str
    """The name of its Slurm account on a managed cluster."""


def buyer_of(
    slurm: SSHConnection, testcluster: Any, name: str, request: pytest.FixtureRequest
) -> Iterator[Buyer]:
    """A funded team, whose Slurm account and QOS are deleted from the cluster after the
    test."""
    organization = funded_organization("1000", name=name)
    membership = MembershipFactory(organization=organization, role=Membership.Role.ADMIN)
    account = account_name_for(str(organization.uuid))
    yield Buyer(organization, membership, account)
    if "celery_worker" in request.fixturenames:
        # A sync still queued or running would make the account again after it is deleted.
        wait_for(worker_settled, WORKER_TIMEOUT)
    delete_by_hand(slurm, testcluster, account)


def worker_settled() -> bool:
    """Whether the worker has no task queued, prefetched or running. Tasks are acknowledged
    late, so a task leaves the broker's `unacked` hash only once it has run."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        return broker.llen("celery") == 0 and broker.hlen("unacked") == 0
    finally:
        broker.close()


@pytest.fixture
def buyer(
    slurm: SSHConnection, testcluster: Any, request: pytest.FixtureRequest
) -> Iterator[Buyer]:
    yield from buyer_of(slurm, testcluster, "Quantum Lab", request)


@pytest.fixture
def other_buyer(
    slurm: SSHConnection, testcluster: Any, request: pytest.FixtureRequest
) -> Iterator[Buyer]:
    yield from buyer_of(slurm, testcluster, "Photon Lab", request)


def verified_cluster(testcluster: Any, *, account_mode: str, name: str) -> Cluster:
    """A cluster registered and verified against the test cluster, as its owners would."""
    owner = MembershipFactory(
        organization=OrganizationFactory(name=f"{name} owners"), role=Membership.Role.ADMIN
    )
    cluster = services.cluster_create(
        actor=owner,
        name=name,
        ssh_host=testcluster.host,
        ssh_port=testcluster.port,
        ssh_user=testcluster.user,
        ssh_private_key=testcluster.private_key,
        ssh_host_key=testcluster.host_key,
        account_mode=account_mode,
        slurm_account=SERVICE_USER if account_mode == Cluster.AccountMode.FIXED else None,
        tenant_group=testcluster.tenant_pool(account_mode).group,
        sftp_server=testcluster.sftp_server,
    )
    cluster, _ = services.cluster_verify(actor=owner, cluster=cluster)
    assert cluster.status == Cluster.Status.ONLINE
    return cluster


@pytest.fixture
def managed_cluster(testcluster: Any) -> Cluster:
    return verified_cluster(testcluster, account_mode=Cluster.AccountMode.MANAGED, name="Managed")


@pytest.fixture
def fixed_cluster(testcluster: Any) -> Cluster:
    return verified_cluster(testcluster, account_mode=Cluster.AccountMode.FIXED, name="Fixed")


def cpu_offer(cluster: Cluster, quantity: int = 100, **fields: Any) -> Offer:
    """An open CPU offer on the verified partition, with a buy-now price unless `fields` say
    otherwise. The 30-day window of the factory holds far more core-hours than `quantity` on
    the test partition."""
    partition = cluster.partitions.get(name="debug")
    fields.setdefault("buy_now_price", Decimal("2.00"))
    offer = OfferFactory(partition=partition, cluster=cluster, quantity=quantity, **fields)
    window_hours = (offer.window_end - offer.window_start).total_seconds() / 3600
    assert partition.cpus * window_hours >= quantity
    return offer


def buy(buyer: Buyer, offer: Offer, units: int) -> Allocation:
    return services.offer_buy(actor=buyer.membership, offer=offer, quantity=units)


def account_row(cluster: Cluster, buyer: Buyer) -> tuple[Any, ...]:
    return SlurmAccount.objects.values_list(
        "name",
        "wanted_cpu_minutes",
        "wanted_gpu_minutes",
        "applied_cpu_minutes",
        "applied_gpu_minutes",
        "last_error",
    ).get(cluster=cluster, organization=buyer.organization)


# --- Syncing in the test's own process ---------------------------------------------------------


@pytest.mark.django_db
def test_a_purchase_makes_the_account_of_the_team_with_the_minutes_bought(
    managed_cluster, buyer, slurm, testcluster
):
    offer = cpu_offer(managed_cluster)
    buy(buyer, offer, 5)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, None, None, "")
    assert associations(slurm, buyer.account) == []
    before = timezone.now()

    synced = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert synced == 1
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 5 * 60)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")
    # The cluster sells preemptible capacity: the team's QOS, the one its jobs run under, is
    # preempted by the owner's like the market QOS, after the same grace.
    assert (managed_cluster.owner_qos, managed_cluster.preemption_grace_seconds) == (
        [testcluster.owner.qos],
        testcluster.preemption_grace_seconds,
    )
    records = {
        record.name: record
        for record in slurm_preemption.qos_preemption_read(
            slurm, names=[buyer.account, testcluster.owner.qos]
        )
    }
    assert records[buyer.account] == slurm_preemption.QosPreemption(
        buyer.account, 0, testcluster.preemption_grace_seconds, "requeue", ()
    )
    assert buyer.account in records[testcluster.owner.qos].preempts
    account = SlurmAccount.objects.get(cluster=managed_cluster)
    assert account.is_in_sync
    assert account.synced_at >= before
    described = slurm.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "account",
            buyer.account,
            "format=Account,Descr,Org",
        ]
    ).stdout.splitlines()
    # sacctmgr lowercases both texts.
    assert described == [
        f"{buyer.account}|computeshare buyer {buyer.organization.uuid}|quantum lab"
    ]


@pytest.mark.django_db
def test_a_second_purchase_raises_the_limit_to_the_sum_and_a_rerun_changes_nothing(
    managed_cluster, buyer, slurm
):
    first, second = cpu_offer(managed_cluster), cpu_offer(managed_cluster)
    buy(buyer, first, 5)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)

    buy(buyer, second, 7)
    synced = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert synced == 1
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, (5 + 7) * 60)
    assert account_row(managed_cluster, buyer) == (buyer.account, 720, 0, 720, 0, "")
    recorded = changes_recorded_for(slurm, buyer.account)
    synced_at = SlurmAccount.objects.get(cluster=managed_cluster).synced_at

    again = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert again == 1
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 720)
    assert account_row(managed_cluster, buyer) == (buyer.account, 720, 0, 720, 0, "")
    assert changes_recorded_for(slurm, buyer.account) == recorded
    assert SlurmAccount.objects.get(cluster=managed_cluster).synced_at > synced_at


@pytest.mark.django_db
def test_two_teams_get_one_account_each_with_their_own_limit(
    managed_cluster, buyer, other_buyer, slurm
):
    other = other_buyer
    offer = cpu_offer(managed_cluster)
    buy(buyer, offer, 3)
    buy(other, offer, 4)

    synced = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert synced == 2
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 180)
    assert enforced(slurm, other.account) == limited_to(other.account, 240)


@pytest.mark.django_db
def test_the_periodic_reconcile_puts_back_a_limit_changed_by_hand(
    managed_cluster, buyer, slurm, testcluster
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)
    set_by_hand(slurm, buyer.account, "cpu=1")
    # What an older version did: every job ran as the service user in the team's account.
    slurm.run(
        [
            "sacctmgr",
            "-i",
            "add",
            "user",
            SERVICE_USER,
            f"account={buyer.account}",
            f"cluster={testcluster.cluster_name}",
        ],
        timeout=30,
    )
    assert enforced(slurm, buyer.account) == (
        [(buyer.account, "", buyer.account), (buyer.account, SERVICE_USER, buyer.account)],
        "cpu=1|NoDecay",
    )

    clusters = services.slurm_account_clusters_to_reconcile()
    for cluster_id in clusters:
        services.slurm_accounts_sync(cluster_id=cluster_id)

    assert clusters == [managed_cluster.pk]
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")


@pytest.mark.django_db
def test_the_reconcile_makes_the_account_again_when_it_was_deleted_by_hand(
    managed_cluster, buyer, slurm, testcluster
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)
    delete_by_hand(slurm, testcluster, buyer.account)
    assert enforced(slurm, buyer.account) == ([], None)

    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)


@pytest.mark.django_db
def test_a_fixed_cluster_makes_no_accounts(fixed_cluster, buyer, slurm):
    buy(buyer, cpu_offer(fixed_cluster), 5)
    lease = TenantLease.objects.get(cluster=fixed_cluster, organization=buyer.organization)

    synced = services.slurm_accounts_sync(cluster_id=fixed_cluster.pk)
    joined = services.tenant_slurm_join(lease_id=lease.pk)
    left = services.tenant_slurm_leave(lease_id=lease.pk)

    assert (synced, joined, left) == (0, False, False)
    lease.refresh_from_db()
    assert lease.prepared_at is None
    assert not SlurmAccount.objects.exists()
    assert services.slurm_account_clusters_to_reconcile() == []
    assert associations(slurm, buyer.account) == []


@pytest.mark.django_db
def test_a_sync_that_cannot_reach_the_cluster_keeps_the_reason_on_the_row(
    managed_cluster, buyer, slurm
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nothing_listens = probe.getsockname()[1]
    Cluster.objects.filter(pk=managed_cluster.pk).update(ssh_port=nothing_listens)

    with pytest.raises(ClusterUnreachable) as failed:
        services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert failed.value.is_transient
    assert account_row(managed_cluster, buyer) == (
        buyer.account,
        300,
        0,
        None,
        None,
        str(failed.value),
    )
    assert SlurmAccount.objects.get(cluster=managed_cluster).synced_at is None
    assert associations(slurm, buyer.account) == []


# --- Closed windows ------------------------------------------------------------------------------


def close(allocation: Allocation, used: str) -> None:
    """Closes the allocation's window as the close leaves it, with `used` units used."""
    Allocation.objects.filter(pk=allocation.pk).update(closed_at=timezone.now(), used=Decimal(used))


def plan(cluster: Cluster, buyer: Buyer) -> SlurmAccount:
    with transaction.atomic():
        account = services.slurm_account_plan(cluster=cluster, organization=buyer.organization)
    assert account is not None
    return account


@pytest.mark.django_db
def test_a_closed_window_counts_what_it_used_and_the_open_one_what_it_holds(
    managed_cluster, buyer, slurm
):
    closed = buy(buyer, cpu_offer(managed_cluster), 5)
    still_open = buy(buyer, cpu_offer(managed_cluster), 7)
    close(closed, "1.500001")

    plan(managed_cluster, buyer)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    # (1.500001 + 7) core-hours = 510.00006 minutes, rounded up.
    assert account_row(managed_cluster, buyer) == (buyer.account, 511, 0, 511, 0, "")
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 511)

    close(still_open, "0.25")
    plan(managed_cluster, buyer)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    # The hours the windows left unused are gone: 1.750001 core-hours, 105.00006 minutes.
    assert account_row(managed_cluster, buyer) == (buyer.account, 106, 0, 106, 0, "")
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 106)


@pytest.mark.django_db
def test_a_team_with_nothing_left_on_the_cluster_may_run_nothing_there(
    managed_cluster, buyer, slurm
):
    close(buy(buyer, cpu_offer(managed_cluster), 5), "0")

    plan(managed_cluster, buyer)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    # Zero CPU minutes, not "no limit".
    assert account_row(managed_cluster, buyer) == (buyer.account, 0, 0, 0, 0, "")
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 0)


# --- The lease's tenant in the team's account ---------------------------------------------------


def default_account(slurm: SSHConnection, testcluster: Any, user: str) -> str:
    return slurm.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "user",
            "where",
            f"name={user}",
            f"cluster={testcluster.cluster_name}",
            "format=DefaultAccount",
        ],
        timeout=30,
    ).stdout.strip()


@pytest.fixture
def tenant(managed_cluster: Cluster, testcluster: Any) -> str:
    """The account a lease of this module takes: the pool's third, the others retired for the
    test, so that these tests meet neither the lease tests (which take the first accounts) nor
    the library's (the last)."""
    user = testcluster.managed_pool.tenants[-2].user
    TenantAccount.objects.filter(cluster=managed_cluster).exclude(username=user).update(
        status=TenantAccount.Status.RETIRED
    )
    return user


@pytest.mark.django_db
def test_a_leased_tenant_joins_the_teams_account_under_its_limit_and_leaves_it(
    managed_cluster, buyer, tenant, slurm, testcluster
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    lease = TenantLease.objects.get(cluster=managed_cluster, organization=buyer.organization)
    assert (lease.account.username, lease.prepared_at) == (tenant, None)
    before = timezone.now()

    joined = services.tenant_slurm_join(lease_id=lease.pk)

    assert joined is True
    lease.refresh_from_db()
    assert lease.prepared_at >= before
    # The account was made and synced first: the tenant never runs without the team's limit.
    assert enforced(slurm, buyer.account) == (
        [(buyer.account, "", buyer.account), (buyer.account, tenant, buyer.account)],
        "cpu=300|NoDecay",
    )
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")
    assert default_account(slurm, testcluster, tenant) == buyer.account

    left = services.tenant_slurm_leave(lease_id=lease.pk)

    assert left is True
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)
    assert default_account(slurm, testcluster, tenant) == managed_cluster.tenant_idle_account
    assert managed_cluster.tenant_idle_account == testcluster.managed_pool.idle_account


@pytest.mark.django_db
def test_a_lease_that_ended_while_its_tenant_joined_puts_the_tenant_back_at_once(
    managed_cluster, buyer, tenant, slurm, testcluster, monkeypatch
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    lease = TenantLease.objects.get(cluster=managed_cluster, organization=buyer.organization)
    join = slurm_accounts.tenant_join

    def join_while_the_lease_ends(*args: Any, **kwargs: Any) -> bool:
        joined = join(*args, **kwargs)
        TenantLease.objects.filter(pk=lease.pk).update(status=TenantLease.Status.ENDING)
        return joined

    monkeypatch.setattr(slurm_accounts, "tenant_join", join_while_the_lease_ends)

    joined = services.tenant_slurm_join(lease_id=lease.pk)

    assert joined is False
    lease.refresh_from_db()
    assert lease.prepared_at is None
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)
    assert default_account(slurm, testcluster, tenant) == testcluster.managed_pool.idle_account


@pytest.mark.django_db
def test_a_lease_that_is_no_longer_active_does_not_join(managed_cluster, buyer, tenant, slurm):
    buy(buyer, cpu_offer(managed_cluster), 5)
    lease = TenantLease.objects.get(cluster=managed_cluster, organization=buyer.organization)
    TenantLease.objects.filter(pk=lease.pk).update(status=TenantLease.Status.ENDING)

    joined = services.tenant_slurm_join(lease_id=lease.pk)

    assert joined is False
    lease.refresh_from_db()
    assert lease.prepared_at is None
    assert enforced(slurm, buyer.account) == ([], None)


# --- Through the real Celery worker ------------------------------------------------------------


@pytest.fixture
def platform_accounts() -> None:
    """The platform's accounts, as migration 0002 leaves them (a transactional test's flush
    removes them)."""
    accounts_open([(None, kind) for kind in Account.PLATFORM_KINDS])


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_purchase_reaches_the_cluster_through_the_worker_and_the_reconcile_task_holds_it(
    celery_worker, platform_accounts, managed_cluster, buyer, slurm, testcluster
):
    offer = cpu_offer(managed_cluster)

    buy(buyer, offer, 5)

    wait_for(lambda: enforced(slurm, buyer.account) == limited_to(buyer.account, 300), 60)
    wait_for(lambda: SlurmAccount.objects.filter(synced_at__isnull=False).exists())
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")

    set_by_hand(slurm, buyer.account, "cpu=1")
    slurm_accounts_reconcile_task.delay()

    wait_for(lambda: enforced(slurm, buyer.account) == limited_to(buyer.account, 300), 60)
    wait_for(worker_settled, WORKER_TIMEOUT)
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)


# --- Concurrent allocations of one team --------------------------------------------------------


def lock_waits() -> int:
    """Sessions of the test database waiting on a lock that another transaction holds."""
    with database.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_clearing_and_a_purchase_of_one_team_at_once_plan_every_minute_bought(
    celery_worker, platform_accounts, managed_cluster, buyer, slurm
):
    """A buy-now and the clearing of an auction the same team won, in two transactions that
    overlap: the account must end up wanting the minutes of both allocations. Each plans the
    account from the allocations it can see, so only a lock taken before that read keeps the
    later one from writing a total without the other's units. (Today that lock is the cluster
    row, which the offer's `select_for_update` also locks through its join.)"""
    auction = cpu_offer(managed_cluster, reserve_price=Decimal("1.00"), buy_now_price=None)
    bought_now = cpu_offer(managed_cluster)
    # A bid at the reserve clears at the reserve: its hold is kept whole, so the clearing
    # releases nothing and never locks the team's wallet.
    services.bid_place(actor=buyer.membership, offer=auction, quantity=3, price="1.00")
    purchase_made = threading.Event()
    may_commit = threading.Event()
    outcomes: dict[str, Any] = {}

    def purchase() -> None:
        try:
            with transaction.atomic():
                outcomes["purchase"] = buy(buyer, bought_now, 2)
                purchase_made.set()
                may_commit.wait(30)
        except Exception as error:
            outcomes["purchase"] = error
        finally:
            purchase_made.set()
            database.close()

    def clearing() -> None:
        try:
            outcomes["clearing"] = services.auction_clear(
                offer_id=auction.pk, now=auction.auction_closes_at + timedelta(seconds=1)
            )
        except Exception as error:
            outcomes["clearing"] = error
        finally:
            database.close()

    purchaser = threading.Thread(target=purchase)
    purchaser.start()
    assert purchase_made.wait(30)
    clearer = threading.Thread(target=clearing)
    clearer.start()
    # Let the purchase commit once the clearing waits for it (or has finished without waiting).
    wait_for(lambda: lock_waits() or not clearer.is_alive(), timeout=30)
    may_commit.set()
    purchaser.join(30)
    clearer.join(30)
    assert not purchaser.is_alive() and not clearer.is_alive()

    assert isinstance(outcomes["purchase"], Allocation), outcomes["purchase"]
    assert not isinstance(outcomes["clearing"], Exception), repr(outcomes["clearing"])
    assert outcomes["clearing"].cleared is True
    assert sorted(
        Allocation.objects.filter(organization=buyer.organization).values_list("source", "quantity")
    ) == [("auction", 3), ("buy_now", 2)]
    assert SlurmAccount.objects.get(cluster=managed_cluster).wanted_cpu_minutes == (3 + 2) * 60
    # Each commit queued a sync; the later one reads the final row, and the worker runs them in
    # order.
    wait_for(worker_settled, WORKER_TIMEOUT)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")
    assert enforced(slurm, buyer.account) == limited_to(buyer.account, 300)
