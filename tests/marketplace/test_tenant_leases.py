"""Leases of tenant accounts through the real services on PostgreSQL: a cluster serves at most as
many teams at once as it has accounts, no account is ever leased to two teams, a clearing gives
the accounts it has to the best bids, and a lease ends once its team has nothing left on the
cluster. The scrub itself talks to the cluster: see tests/scheduler_bridge/test_tenant_scrub.py."""

import threading
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone

from billing import selectors as billing_selectors
from billing import services as billing
from billing.models import Hold, ReferenceKind
from billing.tasks import hold_release_batches_due_task
from hpc.slurm.tenants import PoolAccount
from marketplace import errors, services
from marketplace.models import Allocation, Bid, Offer, TenantAccount, TenantLease
from marketplace.services.tenants import tenant_lease_take
from organizations.models import Membership
from scheduler_bridge import services as job_services
from scheduler_bridge.models import Job, JobState
from scheduler_bridge.selectors import jobs as job_selectors
from tests.concurrency import kinds, run_together
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)

pytestmark = pytest.mark.django_db

D = Decimal


def admin_of_team(name: str) -> Membership:
    return MembershipFactory(
        organization=funded_organization("500", name=name), role=Membership.Role.ADMIN
    )


def offer_on(cluster, **fields) -> Offer:
    partition = cluster.partitions.first() or PartitionFactory(cluster=cluster)
    return OfferFactory(partition=partition, **fields)


def active_leases(cluster) -> set[tuple[str, str]]:
    return set(
        TenantLease.objects.filter(cluster=cluster, status=TenantLease.Status.ACTIVE).values_list(
            "organization__name", "account__username"
        )
    )


# --- Purchases ------------------------------------------------------------------------------


def test_a_team_keeps_one_account_per_cluster_whatever_it_buys():
    cluster = ClusterFactory(tenants=2)
    team = admin_of_team("Helix")
    first = offer_on(cluster, buy_now_price=D("2.00"))
    second = offer_on(cluster, buy_now_price=D("2.00"))

    services.offer_buy(actor=team, offer=first, quantity=5)
    services.offer_buy(actor=team, offer=second, quantity=5)

    assert active_leases(cluster) == {("Helix", "cs-tenant-01")}
    assert TenantAccount.objects.get(cluster=cluster, username="cs-tenant-01").status == "leased"
    assert TenantAccount.objects.get(cluster=cluster, username="cs-tenant-02").status == "available"


@pytest.mark.django_db(transaction=True)
def test_two_teams_buying_the_last_account_at_once_get_one_lease_between_them():
    cluster = ClusterFactory(tenants=1)
    offer = offer_on(cluster, buy_now_price=D("2.00"))
    buyers = [admin_of_team("Helix"), admin_of_team("Nimbus")]

    outcomes = run_together(
        [
            lambda buyer=buyer: services.offer_buy(actor=buyer, offer=offer, quantity=5)
            for buyer in buyers
        ]
    )

    assert kinds(outcomes) == {"Allocation": 1, "TenantAccountsExhausted": 1}
    [winner] = [outcome for outcome in outcomes if isinstance(outcome, Allocation)]
    [refusal] = [outcome for outcome in outcomes if not isinstance(outcome, Allocation)]
    assert refusal.code == "tenant_accounts_exhausted"
    assert refusal.extra == {"tenant_accounts": 1, "free": 0}
    assert active_leases(cluster) == {(winner.organization.name, "cs-tenant-01")}
    # The refused team holds nothing.
    loser = next(buyer for buyer in buyers if buyer.organization_id != winner.organization_id)
    assert not Hold.objects.filter(organization=loser.organization).exists()
    assert billing_selectors.wallet_get(loser.organization).available == D("500")


@pytest.mark.django_db(transaction=True)
def test_one_team_buying_twice_at_once_gets_one_lease():
    cluster = ClusterFactory(tenants=3)
    offers = [offer_on(cluster, buy_now_price=D("1.00")) for _ in range(4)]
    buyer = admin_of_team("Helix")

    outcomes = run_together(
        [
            lambda offer=offer: services.offer_buy(actor=buyer, offer=offer, quantity=3)
            for offer in offers
        ]
    )

    assert kinds(outcomes) == {"Allocation": 4}, outcomes
    assert len(active_leases(cluster)) == 1
    assert TenantAccount.objects.filter(cluster=cluster, status="leased").count() == 1


# --- Clearings ------------------------------------------------------------------------------


def close_and_clear(offer: Offer):
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - timedelta(seconds=1)
    )
    return services.auction_clear(offer_id=offer.pk)


def test_a_clearing_gives_the_free_accounts_to_the_best_bids_and_releases_the_rest():
    cluster = ClusterFactory(tenants=2)
    offer = offer_on(cluster, quantity=100, reserve_price=D("1.00"))
    holder = admin_of_team("Holder")
    services.offer_buy(  # holds cs-tenant-01 already
        actor=holder, offer=offer_on(cluster, buy_now_price=D("1.00")), quantity=1
    )
    bids = {
        name: services.bid_place(
            actor=admin_of_team(name) if name != "Holder" else holder,
            offer=offer,
            quantity=quantity,
            price=price,
        )
        for name, quantity, price in [
            ("Best", 30, "3.00"),
            ("Second", 30, "2.50"),
            ("Holder", 20, "2.00"),
            ("Third", 10, "1.50"),
        ]
    }

    outcome = close_and_clear(offer)
    hold_release_batches_due_task()  # the losers' holds, after the commit (ADR 0025)

    for bid in bids.values():
        bid.refresh_from_db()
    # One account was free: Best takes it; Second would need another and is skipped (its units
    # unserved set the price); Holder has one already and wins; Third needs one too.
    assert {name: (bid.status, bid.quantity_won) for name, bid in bids.items()} == {
        "Best": (Bid.Status.WON, 30),
        "Second": (Bid.Status.LOST, 0),
        "Holder": (Bid.Status.WON, 20),
        "Third": (Bid.Status.LOST, 0),
    }
    assert outcome.price == D(
        "2.00"
    )  # the highest unserved (Second's 2.50), capped at Holder's 2.00
    assert active_leases(cluster) == {("Holder", "cs-tenant-01"), ("Best", "cs-tenant-02")}
    second = bids["Second"]
    assert billing_selectors.wallet_get(second.organization).held == D("0")


def test_a_clearing_where_no_account_is_free_sells_only_to_teams_that_hold_one():
    cluster = ClusterFactory(tenants=1)
    holder = admin_of_team("Holder")
    services.offer_buy(actor=holder, offer=offer_on(cluster, buy_now_price=D("1.00")), quantity=1)
    offer = offer_on(cluster, quantity=10, reserve_price=D("1.00"))
    outsider_bid = services.bid_place(
        actor=admin_of_team("Outsider"), offer=offer, quantity=10, price="5.00"
    )
    holder_bid = services.bid_place(actor=holder, offer=offer, quantity=4, price="1.00")

    close_and_clear(offer)

    outsider_bid.refresh_from_db()
    holder_bid.refresh_from_db()
    assert (outsider_bid.status, holder_bid.status) == (Bid.Status.LOST, Bid.Status.WON)
    assert active_leases(cluster) == {("Holder", "cs-tenant-01")}


# --- Ending -----------------------------------------------------------------------------------


def test_a_lease_ends_once_its_team_has_neither_an_open_allocation_nor_an_unfinished_job():
    cluster = ClusterFactory(tenants=1)
    allocation = allocation_bought(partition=PartitionFactory(cluster=cluster), quantity=10)
    lease = TenantLease.objects.get(cluster=cluster)
    member = MembershipFactory(organization=allocation.organization)
    job = job_services.job_submit(
        actor=member,
        allocation=allocation,
        request=job_services.JobRequest(
            name="x", script="#!/bin/bash\ntrue\n", time_limit_minutes=1
        ),
    )

    assert job.lease == lease
    assert job_selectors.tenant_leases_to_end() == []  # open allocation, queued job

    Allocation.objects.filter(pk=allocation.pk).update(closed_at=timezone.now())
    assert job_selectors.tenant_leases_to_end() == []  # the job is not finished

    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    assert job_selectors.tenant_leases_to_end() == [lease.pk]
    assert job_services.tenant_lease_end_if_idle(lease_id=lease.pk) is True
    assert job_services.tenant_lease_end_if_idle(lease_id=lease.pk) is False
    lease.refresh_from_db()
    assert (lease.status, lease.ending_at is not None) == (TenantLease.Status.ENDING, True)
    # The account is not anyone else's until it has been scrubbed.
    with pytest.raises(errors.TenantAccountsExhausted):
        services.offer_buy(
            actor=admin_of_team("Next"),
            offer=offer_on(cluster, buy_now_price=D("1.00")),
            quantity=1,
        )


# --- The pool as verification reads it ----------------------------------------------------------


def test_the_pool_follows_the_tenant_group_without_touching_a_leased_account():
    cluster = ClusterFactory(
        tenants=[("cs-a", "/home/cs-a"), ("cs-b", "/home/cs-b"), ("cs-c", "/home/cs-c")]
    )
    TenantAccount.objects.filter(cluster=cluster, username="cs-b").update(status="leased")
    TenantAccount.objects.filter(cluster=cluster, username="cs-c").update(status="retired")

    services.tenant_accounts_record(
        cluster=cluster,
        accounts=[PoolAccount("cs-c", "/srv/home/cs-c"), PoolAccount("cs-d", "/home/cs-d")],
    )

    assert set(
        TenantAccount.objects.filter(cluster=cluster).values_list("username", "home", "status")
    ) == {
        ("cs-a", "/home/cs-a", "retired"),  # no longer in the group
        ("cs-b", "/home/cs-b", "leased"),  # a team holds it: retired at a later verification
        ("cs-c", "/srv/home/cs-c", "available"),  # back in the group, with its new home
        ("cs-d", "/home/cs-d", "available"),  # new
    }


def test_a_scrub_while_another_holds_the_lease_returns_without_touching_the_cluster():
    """Two scrubs of one account at once would end each other's processes: the second (a
    retried task, the owners' request) leaves it to the first. The factory's cluster answers
    nothing, so a scrub that tried would raise."""
    cluster = ClusterFactory(tenants=1, ssh_port=9)
    allocation_bought(partition=PartitionFactory(cluster=cluster), quantity=1)
    lease = TenantLease.objects.get(cluster=cluster)
    held_until = timezone.now() + timedelta(minutes=5)
    TenantLease.objects.filter(pk=lease.pk).update(status="ending", scrubbing_until=held_until)

    returned = services.tenant_lease_scrub(lease_id=lease.pk)

    lease.refresh_from_db()
    assert (returned.status, lease.status, lease.scrubbing_until) == (
        "ending",
        "ending",
        held_until,
    )


@pytest.mark.django_db(transaction=True)
def test_a_team_taking_its_lease_does_not_hold_up_its_other_orders_holds():
    """Taking a lease locks the team's row to serialize the team's lease-takings, and nothing
    else: a hold of the same team placed meanwhile (whose row refers to the team, so PostgreSQL
    checks the reference with a share lock on it) goes on. Under `FOR UPDATE` it waited, and two
    purchases of one team could deadlock: one holding the team's row and waiting for the wallet,
    the other holding the wallet and waiting to refer to the team."""
    cluster = ClusterFactory(tenants=2)
    buyer = admin_of_team("Helix")
    locked, finish = threading.Event(), threading.Event()

    def take_and_wait() -> None:
        try:
            with transaction.atomic():
                tenant_lease_take(cluster=cluster, organization_id=buyer.organization_id)
                locked.set()
                finish.wait(10)
        finally:
            connection.close()

    taker = threading.Thread(target=take_and_wait)
    taker.start()
    try:
        assert locked.wait(10)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")
            hold = billing.hold_place(
                organization=buyer.organization,
                amount="1.00",
                reference_kind=ReferenceKind.ALLOCATION,
                reference=uuid.uuid4(),
                memo="Another purchase of the team",
            )
    finally:
        finish.set()
        taker.join(10)
    assert hold.amount == D("1.00")
    assert len(active_leases(cluster)) == 1
