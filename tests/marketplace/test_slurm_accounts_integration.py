"""Managed Slurm accounts on the real test cluster: a purchase on a `managed` cluster becomes an
account of the buying organization, associated with the service user, whose GrpTRESMins holds
every CPU minute the organization bought there. What the cluster enforces is read back with
`sacctmgr`. Each test deletes the accounts it made, so that a rerun starts clean."""

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
from marketplace import services
from marketplace.models import Allocation, Cluster, Membership, Offer, Organization, SlurmAccount
from marketplace.tasks import slurm_accounts_reconcile_task
from scheduler_bridge.slurm.accounts import account_name_for
from scheduler_bridge.slurm.errors import ClusterUnreachable
from scheduler_bridge.slurm.parsers import parse_parsable2
from scheduler_bridge.slurm.ssh import SSHConnection
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
    """(account, user, GrpTRESMins) of every association of `account`, sorted."""
    fields = ["Account", "User", "GrpTRESMins"]
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


def enforced(account: str, cpu_minutes: int) -> list[tuple[str, str, str]]:
    """What sacctmgr shows for a managed account limited to `cpu_minutes`: the account's own
    association with the limit, and the service user's association under it."""
    return [(account, "", f"cpu={cpu_minutes}"), (account, SERVICE_USER, "")]


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


def set_by_hand(slurm: SSHConnection, testcluster: Any, account: str, limit: str) -> None:
    slurm.run(
        [
            "sacctmgr",
            "-i",
            "modify",
            "account",
            "where",
            f"name={account}",
            f"cluster={testcluster.cluster_name}",
            "set",
            f"GrpTRESMins={limit}",
        ],
        timeout=30,
    )


@dataclass
class Buyer:
    organization: Organization
    membership: Membership
    account: str
    """The name of its Slurm account on a managed cluster."""


def buyer_of(slurm: SSHConnection, name: str, request: pytest.FixtureRequest) -> Iterator[Buyer]:
    """A funded team, whose Slurm account is deleted from the cluster after the test."""
    organization = funded_organization("1000", name=name)
    membership = MembershipFactory(organization=organization, role=Membership.Role.ADMIN)
    account = account_name_for(str(organization.uuid))
    yield Buyer(organization, membership, account)
    if "celery_worker" in request.fixturenames:
        # A sync still queued or running would make the account again after it is deleted.
        wait_for(worker_settled, WORKER_TIMEOUT)
    # Unchecked: "Nothing deleted" is fine when the test made no account.
    slurm.run(
        ["sacctmgr", "-i", "delete", "user", SERVICE_USER, f"account={account}"],
        timeout=30,
        check=False,
    )
    slurm.run(["sacctmgr", "-i", "delete", "account", account], timeout=30, check=False)
    assert associations(slurm, account) == []


def worker_settled() -> bool:
    """Whether the worker has no task queued, prefetched or running. Tasks are acknowledged
    late, so a task leaves the broker's `unacked` hash only once it has run."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        return broker.llen("celery") == 0 and broker.hlen("unacked") == 0
    finally:
        broker.close()


@pytest.fixture
def buyer(slurm: SSHConnection, request: pytest.FixtureRequest) -> Iterator[Buyer]:
    yield from buyer_of(slurm, "Quantum Lab", request)


@pytest.fixture
def other_buyer(slurm: SSHConnection, request: pytest.FixtureRequest) -> Iterator[Buyer]:
    yield from buyer_of(slurm, "Photon Lab", request)


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
    )
    cluster = services.cluster_verify(actor=owner, cluster=cluster)
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
    managed_cluster, buyer, slurm
):
    offer = cpu_offer(managed_cluster)
    buy(buyer, offer, 5)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, None, None, "")
    assert associations(slurm, buyer.account) == []
    before = timezone.now()

    synced = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert synced == 1
    assert associations(slurm, buyer.account) == enforced(buyer.account, 5 * 60)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")
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
    assert associations(slurm, buyer.account) == enforced(buyer.account, 300)

    buy(buyer, second, 7)
    synced = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert synced == 1
    assert associations(slurm, buyer.account) == enforced(buyer.account, (5 + 7) * 60)
    assert account_row(managed_cluster, buyer) == (buyer.account, 720, 0, 720, 0, "")
    recorded = changes_recorded_for(slurm, buyer.account)
    synced_at = SlurmAccount.objects.get(cluster=managed_cluster).synced_at

    again = services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert again == 1
    assert associations(slurm, buyer.account) == enforced(buyer.account, 720)
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
    assert associations(slurm, buyer.account) == enforced(buyer.account, 180)
    assert associations(slurm, other.account) == enforced(other.account, 240)


@pytest.mark.django_db
def test_the_periodic_reconcile_puts_back_a_limit_changed_by_hand(
    managed_cluster, buyer, slurm, testcluster
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)
    set_by_hand(slurm, testcluster, buyer.account, "cpu=1")
    assert associations(slurm, buyer.account) == enforced(buyer.account, 1)

    clusters = services.slurm_account_clusters_to_reconcile()
    for cluster_id in clusters:
        services.slurm_accounts_sync(cluster_id=cluster_id)

    assert clusters == [managed_cluster.pk]
    assert associations(slurm, buyer.account) == enforced(buyer.account, 300)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")


@pytest.mark.django_db
def test_the_reconcile_makes_the_account_again_when_it_was_deleted_by_hand(
    managed_cluster, buyer, slurm
):
    buy(buyer, cpu_offer(managed_cluster), 5)
    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)
    slurm.run(["sacctmgr", "-i", "delete", "user", SERVICE_USER, f"account={buyer.account}"])
    slurm.run(["sacctmgr", "-i", "delete", "account", buyer.account])
    assert associations(slurm, buyer.account) == []

    services.slurm_accounts_sync(cluster_id=managed_cluster.pk)

    assert associations(slurm, buyer.account) == enforced(buyer.account, 300)


@pytest.mark.django_db
def test_a_fixed_cluster_makes_no_accounts(fixed_cluster, buyer, slurm):
    buy(buyer, cpu_offer(fixed_cluster), 5)

    synced = services.slurm_accounts_sync(cluster_id=fixed_cluster.pk)

    assert synced == 0
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

    wait_for(lambda: associations(slurm, buyer.account) == enforced(buyer.account, 300), 60)
    wait_for(lambda: SlurmAccount.objects.filter(synced_at__isnull=False).exists())
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")

    set_by_hand(slurm, testcluster, buyer.account, "cpu=1")
    slurm_accounts_reconcile_task.delay()

    wait_for(lambda: associations(slurm, buyer.account) == enforced(buyer.account, 300), 60)
    wait_for(worker_settled, WORKER_TIMEOUT)
    assert associations(slurm, buyer.account) == enforced(buyer.account, 300)


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
    assert outcomes["clearing"].cleared is True, outcomes["clearing"]
    assert sorted(
        Allocation.objects.filter(organization=buyer.organization).values_list("source", "quantity")
    ) == [("auction", 3), ("buy_now", 2)]
    assert SlurmAccount.objects.get(cluster=managed_cluster).wanted_cpu_minutes == (3 + 2) * 60
    # Each commit queued a sync; the later one reads the final row, and the worker runs them in
    # order.
    wait_for(worker_settled, WORKER_TIMEOUT)
    assert account_row(managed_cluster, buyer) == (buyer.account, 300, 0, 300, 0, "")
    assert associations(slurm, buyer.account) == enforced(buyer.account, 300)
