"""Offers have a kind (issue 27): preemptible core-hours as before, or reserved blocks of whole
cores for the whole window. What a listing of each kind must be, what it holds of the
partition's calendar, what a bid or a purchase of a block holds, and that the two kinds' prices
are never mixed. The scheduler's side of a reserved sale is tested on the Slurm test cluster
(test_reserved_capacity.py)."""

from datetime import timedelta
from decimal import Decimal

import pytest

from marketplace import services
from marketplace.models import Cluster, Offer
from marketplace.services.backends import local_backend
from tests.conftest import client_for
from tests.factories import PartitionFactory
from tests.marketplace.test_market_api import (
    API,
    admin_membership,
    assert_refused,
    clear,
    iso,
    market,  # noqa: F401 - a fixture
    offer_body,
    offer_for_sale,
    place_bid,
    snapshot,
    wallet,
    whole_hour,
)


def reserved_body(market, **changes):  # noqa: F811
    """Two cores of `debug` for the eight hours after the auction closes, a day from now."""
    closes = whole_hour(days=1)
    values = {
        "capacity": "reserved",
        "quantity": 2,
        "auction_closes_at": iso(closes),
        "window_start": iso(closes),
        "window_end": iso(closes + timedelta(hours=8)),
        "reserve_price": "0.50",
        "buy_now_price": "0.80",
        "max_per_buyer": 2,
    }
    return offer_body(market, **{**values, **changes})


def test_a_reserved_offer_is_whole_cores_for_a_whole_number_of_hours(market):  # noqa: F811
    answer = client_for(market.owner_admin).post(
        f"{API}/offers/", reserved_body(market), format="json"
    )

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["capacity"], body["quantity"], body["quantity_unit"], body["unit_hours"]) == (
        "reserved",
        "2",
        "cores",
        8,
    )
    assert body["preemption_grace_seconds"] is None
    assert Offer.objects.get().capacity == "reserved"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        # 90 minutes: a reserved window is whole hours.
        ({"window_end": 1.5}, "window_end", "whole number of hours"),
        # The window has begun: a block is sold for its whole window.
        ({"window_start": -24.5, "window_end": -16.5}, "window_start", "before it starts"),
        # Buy-now open into the window.
        ({"auction_closes_at": 1}, "auction_closes_at", "closes by its start"),
        # More cores than the partition has.
        ({"quantity": 257}, "quantity", "256 cores"),
    ],
)
def test_a_reserved_listing_that_cannot_be_held_whole_is_refused(
    market,  # noqa: F811
    changes,
    field,
    words,
):
    closes = whole_hour(days=1)
    body = reserved_body(market)
    for name, value in changes.items():
        body[name] = value if name == "quantity" else iso(closes + timedelta(hours=value))
    before = snapshot()

    answer = client_for(market.owner_admin).post(f"{API}/offers/", body, format="json")

    refusal = assert_refused(answer, 400, "invalid", field)
    assert any(words in message for message in refusal["extra"]["fields"][field]), refusal
    assert snapshot() == before


def test_reserved_gpus_are_sold_in_whole_nodes(market):  # noqa: F811
    # `debug` has 8 GPUs on 4 nodes: 2 a node.
    odd = client_for(market.owner_admin).post(
        f"{API}/offers/", reserved_body(market, resource="gpu", quantity=3), format="json"
    )
    whole = client_for(market.owner_admin).post(
        f"{API}/offers/", reserved_body(market, resource="gpu", quantity=4), format="json"
    )

    refusal = assert_refused(odd, 400, "invalid", "quantity")
    assert "multiple of the 2 GPUs" in refusal["extra"]["fields"]["quantity"][0]
    assert whole.status_code == 201, whole.content
    assert whole.json()["quantity_unit"] == "GPUs"


@pytest.mark.parametrize("capacity", ["preemptible", "reserved"])
def test_a_kind_the_cluster_cannot_hold_is_not_listed(market, capacity):  # noqa: F811
    reason = "PreemptType is preempt/none: nothing would ever preempt the market's jobs."
    Cluster.objects.filter(pk=market.cluster.pk).update(
        **{f"sells_{capacity}": False, f"{capacity}_refusal": reason}
    )
    body = reserved_body(market) if capacity == "reserved" else offer_body(market)
    before = snapshot()

    answer = client_for(market.owner_admin).post(f"{API}/offers/", body, format="json")

    refusal = assert_refused(answer, 409, "capacity_not_sold")
    assert refusal["extra"] == {
        "cluster": str(market.cluster.uuid),
        "capacity": capacity,
        "reason": reason,
    }
    assert reason in refusal["detail"]
    assert snapshot() == before


def test_an_unknown_kind_is_a_400_naming_it(market):  # noqa: F811
    answer = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market, capacity="spot"), format="json"
    )

    assert_refused(answer, 400, "invalid", "capacity")


def test_a_reserved_block_takes_its_cores_in_every_hour_of_the_calendar(market):  # noqa: F811
    # 200 of the 256 cores reserved for 8 hours; a preemptible offer over the same hours may
    # take at most the 56 left in each.
    reserved = client_for(market.owner_admin).post(
        f"{API}/offers/", reserved_body(market, quantity=200, max_per_buyer=None), format="json"
    )
    closes = whole_hour(days=1)
    window = {
        "window_start": iso(closes),
        "window_end": iso(closes + timedelta(hours=8)),
        "auction_closes_at": iso(closes - timedelta(hours=1)),
        "max_per_buyer": None,
    }
    too_much = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market, quantity=8 * 57, **window), format="json"
    )
    fits = client_for(market.owner_admin).post(
        f"{API}/offers/", offer_body(market, quantity=8 * 56, **window), format="json"
    )
    calendar = client_for(market.owner_admin).get(
        f"{API}/clusters/{market.cluster.uuid}/partitions/debug/calendar/",
        {"start": iso(closes), "hours": 8},
    )

    assert reserved.status_code == 201, reserved.content
    refusal = assert_refused(too_much, 409, "partition_capacity_exceeded")
    assert refusal["extra"]["hours"][0]["sold"] == "200.00"
    assert fits.status_code == 201, fits.content
    assert [(hour["sold"], hour["free"]) for hour in calendar.json()["hours"]] == [
        ("256.00", "0.00")
    ] * 8


def test_a_reserved_gpu_block_takes_its_nodes_cores_on_the_cpu_calendar(market):  # noqa: F811
    # 4 GPUs are 2 whole nodes of 64 cores each.
    client_for(market.owner_admin).post(
        f"{API}/offers/", reserved_body(market, resource="gpu", quantity=4), format="json"
    )

    calendar = client_for(market.owner_admin).get(
        f"{API}/clusters/{market.cluster.uuid}/partitions/debug/calendar/",
        {"start": iso(whole_hour(days=1)), "hours": 1},
    )

    assert calendar.json()["hours"][0]["sold"] == "128.00"


def reserved_offer(market, **fields):  # noqa: F811
    """Two cores for the eight hours of the window (reserve 0.50, buy-now 0.80 a core-hour)."""
    closes = whole_hour(days=1)
    values = {
        "capacity": "reserved",
        "quantity": 2,
        "reserve_price": Decimal("0.50"),
        "buy_now_price": Decimal("0.80"),
        "auction_closes_at": closes,
        "window_start": closes,
        "window_end": closes + timedelta(hours=8),
    }
    return offer_for_sale(market, **{**values, **fields})


def test_a_bid_on_a_block_holds_its_price_for_every_core_hour(market):  # noqa: F811
    offer = reserved_offer(market)

    bid = place_bid(market.team, offer, 2, "0.60")

    # 2 cores x 8 hours x 0.60.
    assert bid.hold.amount == Decimal("9.600000")
    assert wallet(market.team) == (Decimal("990.400000"), Decimal("9.600000"))


def test_a_bid_for_more_cores_than_the_block_has_is_refused(market):  # noqa: F811
    offer = reserved_offer(market)

    answer = client_for(market.team_admin).post(
        f"{API}/offers/{offer.uuid}/bids/",
        {"organization": str(market.team.uuid), "quantity": 3, "price": "0.60"},
        format="json",
    )

    refusal = assert_refused(answer, 400, "invalid", "quantity")
    assert refusal["extra"]["fields"]["quantity"] == ["The offer has 2 units."]


def test_the_price_history_keeps_the_two_kinds_apart(market, settings, tmp_path):  # noqa: F811
    settings.LOCAL_CLUSTER_ROOT = str(tmp_path)
    preemptible = offer_for_sale(market, reserve_price=Decimal("0.10"), buy_now_price=None)
    place_bid(market.team, preemptible, 10, "0.10")
    clear(preemptible)
    # A block on the local scheduler, whose reservation needs no cluster.
    local = Cluster.objects.create(
        organization=market.owner,
        name="local",
        backend=Cluster.Backend.LOCAL,
        slurm_account="local",
        status=Cluster.Status.ONLINE,
        sells_reserved=True,
    )
    partition = PartitionFactory(cluster=local, name="local", cpus=2, nodes=1, gpus=0)
    block = reserved_offer(market, partition=partition, cluster=local, quantity=1)
    place_bid(market.rival, block, 1, "0.90")
    clear(block, closed_at=block.window_start - timedelta(minutes=30))

    history = {
        kind: client_for(market.team_admin)
        .get(f"{API}/offers/price-history/", {"capacity": kind} if kind else {})
        .json()["results"]
        for kind in ("", "preemptible", "reserved")
    }

    assert [row["clearing_price"] for row in history[""]] == ["0.100000"]
    assert [row["clearing_price"] for row in history["preemptible"]] == ["0.100000"]
    # One bid for the one core: nothing left unserved, so the reserve.
    assert [(row["capacity"], row["clearing_price"]) for row in history["reserved"]] == [
        ("reserved", "0.500000")
    ]
    won = block.allocations.get()
    assert (won.block, won.quantity) == (1, 8)
    assert [held.name for held in local_backend().reservations()] == [won.reservation]


def test_a_member_cannot_buy_a_block_and_nothing_is_held(market):  # noqa: F811
    offer = reserved_offer(market)
    membership = admin_membership(market.team)
    membership.role = "member"
    membership.save()
    before = snapshot()

    answer = client_for(market.team_admin).post(
        f"{API}/offers/{offer.uuid}/buy/",
        {"organization": str(market.team.uuid), "quantity": 1},
        format="json",
    )

    assert_refused(answer, 403, "permission_denied")
    assert snapshot() == before
    assert not services.reserved_clusters()
