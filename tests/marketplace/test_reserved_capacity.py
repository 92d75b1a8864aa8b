"""Reserved capacity on the real Slurm test cluster (issue 27): a purchase or a winning bid of
a block gets its advance reservation for the team's tenant before any money moves, a block
Slurm will not hold is not sold, and the periodic check puts back or reports what drifted.
The test cluster's node has 2 cores; every reservation is deleted after each test
(`on_testcluster`)."""

import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import Hold
from hpc.slurm.reservations import parse_reservations
from hpc.ssh import SSHConnection
from hpc.types import Reservation, platform_reservation_name
from marketplace import services
from marketplace.models import Allocation, Bid, Offer, PendingReservation, TenantLease
from notifications.models import Notification
from organizations.models import Membership
from tests.conftest import client_for
from tests.factories import MembershipFactory, OfferFactory, funded_organization
from tests.marketplace.test_market_api import API, assert_refused, wallet
from tests.marketplace.test_market_races import releases_applied

pytestmark = pytest.mark.django_db(transaction=True)


def hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def reservations(testcluster) -> dict[str, Reservation]:
    with SSHConnection(testcluster.ssh_settings()) as connection:
        shown = connection.run(["scontrol", "show", "reservation", "--oneliner"], timeout=30)
    return {reservation.name: reservation for reservation in parse_reservations(shown.stdout)}


def scontrol(testcluster, *arguments: str) -> None:
    """An `scontrol` of the owner's, by hand (as the service user, a Slurm administrator)."""
    with SSHConnection(testcluster.ssh_settings()) as connection:
        connection.run(["scontrol", *arguments], timeout=30)


def owner_takes_the_cores(testcluster, start: datetime, end: datetime, cores: int) -> None:
    """The owner reserves `cores` of the node for maintenance, outside the market."""
    scontrol(
        testcluster,
        "create",
        "reservation",
        f"ReservationName=owner-maintenance-{uuid.uuid4().hex[:6]}",
        f"StartTime={start.astimezone(UTC):%Y-%m-%dT%H:%M:%S}",
        f"EndTime={end.astimezone(UTC):%Y-%m-%dT%H:%M:%S}",
        "Users=root",
        "PartitionName=debug",
        f"CoreCnt={cores}",
    )


def block_offer(cluster, *, quantity: int = 1, hours: int = 2, **fields) -> Offer:
    """A reserved offer of the test cluster's `debug` partition whose window starts at the top
    of the next hour but one, its auction open until then."""
    start = hour(timezone.now()) + timedelta(hours=2)
    values = {
        "partition": cluster.partitions.get(),
        "cluster": cluster,
        "capacity": "reserved",
        "quantity": quantity,
        "reserve_price": Decimal("0.50"),
        "buy_now_price": Decimal("0.80"),
        "auction_closes_at": start,
        "window_start": start,
        "window_end": start + timedelta(hours=hours),
    }
    return OfferFactory(**{**values, **fields})


def team_with_admin(name: str):
    team = funded_organization("100", name=name)
    admin = MembershipFactory(organization=team, role=Membership.Role.ADMIN)
    return team, admin


def buy(admin, offer: Offer, quantity: int, **headers):
    return client_for(admin.user).post(
        f"{API}/offers/{offer.uuid}/buy/",
        {"organization": str(admin.organization.uuid), "quantity": quantity},
        format="json",
        **headers,
    )


def test_a_bought_block_is_held_by_slurm_for_the_team_alone(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster, hours=2)
    team, admin = team_with_admin("Quantum Lab")

    answer = buy(admin, offer, 1, HTTP_IDEMPOTENCY_KEY="block-1")
    again = buy(admin, offer, 1, HTTP_IDEMPOTENCY_KEY="block-1")

    assert answer.status_code == 201, answer.content
    assert again.json() == answer.json()
    allocation = Allocation.objects.get()
    body = answer.json()
    assert (body["capacity"], body["block"], body["quantity"]) == ("reserved", 1, "2")
    assert body["reservation"] == platform_reservation_name(allocation.uuid)
    # 1 core x 2 hours x 0.80 a core-hour.
    assert body["held"] == "1.600000"
    assert wallet(team) == (Decimal("98.400000"), Decimal("1.600000"))
    lease = TenantLease.objects.get(organization=team, status="active")
    held = reservations(testcluster)
    assert list(held) == [allocation.reservation]
    reservation = held[allocation.reservation]
    assert (reservation.users, reservation.cpus, reservation.partition) == (
        (lease.account.username,),
        1,
        "debug",
    )
    assert (reservation.start, reservation.end) == (offer.window_start, offer.window_end)
    assert not PendingReservation.objects.exists()
    assert Offer.objects.get(pk=offer.pk).units_sold == 1


def test_a_block_slurm_will_not_hold_is_refused_before_any_money_moves(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster, quantity=2)
    owner_takes_the_cores(testcluster, offer.window_start, offer.window_end, cores=1)
    team, admin = team_with_admin("Quantum Lab")
    holds_before = Hold.objects.count()

    answer = buy(admin, offer, 2)

    refusal = assert_refused(answer, 409, "reservation_refused")
    assert "busy" in refusal["extra"]["reason"].lower(), refusal
    assert not Allocation.objects.exists()
    assert Hold.objects.count() == holds_before
    assert wallet(team) == (Decimal("100.000000"), Decimal("0.000000"))
    assert Offer.objects.get(pk=offer.pk).units_sold == 0
    assert not PendingReservation.objects.exists()
    assert [name for name in reservations(testcluster) if name.startswith("cs-")] == []


def test_a_purchase_the_wallet_cannot_pay_gives_its_block_back(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster, quantity=2, hours=100, buy_now_price=Decimal("1.00"))
    _team, admin = team_with_admin("Quantum Lab")  # 100 in the wallet, the block costs 200

    answer = buy(admin, offer, 2)

    assert_refused(answer, 402, "insufficient_funds")
    assert not Allocation.objects.exists()
    assert not PendingReservation.objects.exists()
    assert reservations(testcluster) == {}


def test_the_clearing_skips_a_bid_whose_block_slurm_refuses(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster, quantity=2)
    # The owner took one of the two cores by hand: a block of two cannot be held, one can.
    owner_takes_the_cores(testcluster, offer.window_start, offer.window_end, cores=1)
    big, big_admin = team_with_admin("Big Lab")
    small, small_admin = team_with_admin("Small Lab")
    big_bid = services.bid_place(actor=big_admin, offer=offer, quantity=2, price="0.90")
    small_bid = services.bid_place(actor=small_admin, offer=offer, quantity=1, price="0.70")
    Offer.objects.filter(pk=offer.pk).update(auction_closes_at=timezone.now())

    outcome = services.auction_clear(offer_id=offer.pk)
    releases_applied()

    assert (outcome.cleared, outcome.units_sold, outcome.winners) == (True, 1, 1)
    # The refused bid's units went unserved at 0.90; the price is the lowest winning bid's.
    assert outcome.price == Decimal("0.700000")
    big_bid.refresh_from_db()
    small_bid.refresh_from_db()
    assert (big_bid.status, small_bid.status, small_bid.quantity_won) == ("lost", "won", 1)
    assert wallet(big) == (Decimal("100.000000"), Decimal("0.000000"))
    allocation = Allocation.objects.get()
    assert (allocation.organization, allocation.block, allocation.quantity) == (small, 1, 2)
    assert wallet(small) == (Decimal("98.600000"), Decimal("1.400000"))
    ours = {name for name in reservations(testcluster) if name.startswith("cs-")}
    assert ours == {allocation.reservation}
    assert not PendingReservation.objects.exists()


def test_the_check_puts_back_a_reservation_deleted_or_changed_by_hand(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster)
    _team, admin = team_with_admin("Quantum Lab")
    allocation = services.offer_buy(actor=admin, offer=offer, quantity=1)
    tenant = reservations(testcluster)[allocation.reservation].users

    scontrol(testcluster, "delete", f"ReservationName={allocation.reservation}")
    recreated = services.reservations_check(cluster_id=cluster.pk)
    after_delete = reservations(testcluster)[allocation.reservation]
    scontrol(
        testcluster, "update", f"ReservationName={allocation.reservation}", "Users=cs-fixed-04"
    )
    mended = services.reservations_check(cluster_id=cluster.pk)
    after_change = reservations(testcluster)[allocation.reservation]
    quiet = services.reservations_check(cluster_id=cluster.pk)

    assert recreated.repaired == (allocation.reservation,)
    assert (after_delete.users, after_delete.cpus, after_delete.end) == (
        tenant,
        1,
        offer.window_end,
    )
    assert mended.repaired == (allocation.reservation,)
    assert after_change.users == tenant
    assert (quiet.matched, quiet.repaired, quiet.problems) == (1, (), ())
    allocation.refresh_from_db()
    assert allocation.reservation_problem == ""
    assert allocation.reservation_checked_at is not None


def test_the_check_removes_reservations_of_no_allocation(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster)
    crashed = platform_reservation_name(uuid.uuid4())  # a sale that died before its allocation
    young = platform_reservation_name(uuid.uuid4())  # a sale still under way
    for name in (crashed, young):
        scontrol(
            testcluster,
            "create",
            "reservation",
            f"ReservationName={name}",
            f"StartTime={offer.window_start.astimezone(UTC):%Y-%m-%dT%H:%M:%S}",
            f"EndTime={offer.window_end.astimezone(UTC):%Y-%m-%dT%H:%M:%S}",
            "Users=cs-fixed-01",
            "PartitionName=debug",
            "CoreCnt=1",
        )
    team, _ = team_with_admin("Quantum Lab")
    old = PendingReservation.objects.create(cluster=cluster, organization=team, name=crashed)
    PendingReservation.objects.filter(pk=old.pk).update(
        created_at=timezone.now() - PendingReservation.STALE_AFTER - timedelta(minutes=1)
    )
    PendingReservation.objects.create(cluster=cluster, organization=team, name=young)

    report = services.reservations_check(cluster_id=cluster.pk)

    assert report.removed == (crashed,)
    assert set(reservations(testcluster)) == {young}
    assert list(PendingReservation.objects.values_list("name", flat=True)) == [young]


def test_a_reservation_that_cannot_be_put_back_is_told_once(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster, quantity=2)
    team, admin = team_with_admin("Quantum Lab")
    MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)
    allocation = services.offer_buy(actor=admin, offer=offer, quantity=2)
    # The owner deletes the block and reserves the whole node for something else.
    scontrol(testcluster, "delete", f"ReservationName={allocation.reservation}")
    owner_takes_the_cores(testcluster, offer.window_start, offer.window_end, cores=2)

    first = services.reservations_check(cluster_id=cluster.pk)
    second = services.reservations_check(cluster_id=cluster.pk)

    assert len(first.problems) == 1 and "deleted on the cluster" in first.problems[0]
    assert second.problems == first.problems
    allocation.refresh_from_db()
    assert "could not be put back" in allocation.reservation_problem
    told = Notification.objects.filter(kind="reservation_problem")
    # The team's admin and the owner's admin, each once.
    assert sorted(told.values_list("organization_id", flat=True)) == sorted(
        [team.pk, cluster.organization_id]
    )
    answer = client_for(admin.user).get(f"{API}/allocations/{allocation.uuid}/")
    assert answer.json()["reservation_problem"] == allocation.reservation_problem


def test_closing_the_allocation_takes_its_reservation_back(on_testcluster, testcluster):
    cluster = on_testcluster(pool="fixed")
    offer = block_offer(cluster)
    _team, admin = team_with_admin("Quantum Lab")
    allocation = services.offer_buy(actor=admin, offer=offer, quantity=1)
    assert allocation.reservation in reservations(testcluster)

    closed = services.allocation_close(
        allocation_id=allocation.pk, now=offer.window_end + timedelta(seconds=1)
    )

    assert closed
    assert reservations(testcluster) == {}
    assert Bid.objects.count() == 0
