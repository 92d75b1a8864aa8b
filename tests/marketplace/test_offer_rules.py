"""The rules of listing, bidding and buying, through the services: each refusal names its
field or its code, and writes nothing (no offer, bid, allocation, hold or ledger row; balances
and the offer's figures as they were)."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing import selectors as billing_selectors
from billing import services as billing
from billing.errors import BudgetExceeded, InsufficientFunds
from billing.models import Entry, Hold, Transaction
from billing.selectors import Wallet
from computeshare.errors import PermissionDenied, ValidationFailed
from marketplace import errors, services
from marketplace.models import Allocation, Bid, Cluster, Offer, Partition
from organizations.models import Membership, Organization
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    funded_organization,
)

pytestmark = pytest.mark.django_db

D = Decimal


# --- Helpers -----------------------------------------------------------------------------------


def admin_of(organization: Organization) -> Membership:
    return MembershipFactory(organization=organization, role=Membership.Role.ADMIN)


def team(name: str, funds: str = "500") -> Membership:
    return admin_of(funded_organization(funds, name=name))


@dataclass(frozen=True)
class Snapshot:
    counts: tuple[int, ...]
    offers: list[tuple[Any, ...]]
    holds: list[tuple[Any, ...]]
    wallets: list[Wallet]


def snapshot() -> Snapshot:
    return Snapshot(
        counts=(
            Offer.objects.count(),
            Bid.objects.count(),
            Allocation.objects.count(),
            Hold.objects.count(),
            Transaction.objects.count(),
            Entry.objects.count(),
        ),
        offers=list(
            Offer.objects.order_by("pk").values_list(
                "pk", "status", "units_sold", "bid_count", "units_bid", "updated_at"
            )
        ),
        holds=list(Hold.objects.order_by("pk").values_list("pk", "status", "amount", "released")),
        wallets=[
            billing_selectors.wallet_get(organization)
            for organization in Organization.objects.order_by("pk")
        ],
    )


# --- offer_create --------------------------------------------------------------------------------


@pytest.fixture
def partition() -> Partition:
    """A partition of 4 CPUs and no GPUs ("cpu-only") next to one of 16 CPUs and 2 GPUs."""
    cluster = ClusterFactory()
    PartitionFactory(cluster=cluster, name="gpu", cpus=16, gpus=2)
    return PartitionFactory(cluster=cluster, name="cpu-only", cpus=4, gpus=0)


@pytest.fixture
def owner(partition: Partition) -> Membership:
    return admin_of(partition.cluster.organization)


def offer_fields(listed: Partition, now: datetime, **changes: Any) -> dict[str, Any]:
    """A valid listing: 40 core-hours of a 4-CPU partition over a 10-hour window (all it has),
    the auction closing an hour before the window starts."""
    fields = {
        "cluster": listed.cluster,
        "partition": listed.name,
        "resource": "cpu",
        "quantity": 40,
        "window_start": now + timedelta(hours=2),
        "window_end": now + timedelta(hours=12),
        "reserve_price": "1.50",
        "buy_now_price": "2.50",
        "auction_closes_at": now + timedelta(hours=1),
        "max_per_buyer": 20,
    }
    fields.update(changes)
    return fields


def test_a_valid_offer_is_listed_with_what_was_asked(owner, partition):
    now = timezone.now()
    fields = offer_fields(partition, now)

    offer = services.offer_create(actor=owner, **fields)

    offer.refresh_from_db()
    assert (
        offer.cluster,
        offer.partition,
        offer.resource,
        offer.quantity,
        offer.window_start,
        offer.window_end,
        offer.reserve_price,
        offer.buy_now_price,
        offer.auction_closes_at,
        offer.max_per_buyer,
        offer.created_by,
    ) == (
        partition.cluster,
        partition,
        "cpu",
        40,
        now + timedelta(hours=2),
        now + timedelta(hours=12),
        D("1.50"),
        D("2.50"),
        now + timedelta(hours=1),
        20,
        owner.user,
    )
    assert (offer.status, offer.units_sold, offer.bid_count, offer.units_bid) == ("open", 0, 0, 0)
    assert (offer.clearing_price, offer.cleared_at, offer.remaining) == (None, None, 40)


def test_optional_fields_may_be_left_out(owner, partition):
    offer = services.offer_create(
        actor=owner,
        **offer_fields(partition, timezone.now(), buy_now_price=None, max_per_buyer=""),
    )

    assert (offer.buy_now_price, offer.max_per_buyer) == (None, None)


def test_gpu_hours_are_counted_from_the_partition_s_gpus(owner, partition):
    fields = offer_fields(partition, timezone.now(), partition="gpu", resource="gpu", quantity=20)

    assert services.offer_create(actor=owner, **fields).quantity == 20

    fields["quantity"] = 21
    with pytest.raises(ValidationFailed) as refused:
        services.offer_create(actor=owner, **fields)
    assert refused.value.extra == {
        "fields": {"quantity": ["The partition has at most 20 gpu units in this window."]}
    }


# Each case: the changes to a valid listing (a callable of `now` for times), and the exact
# problems the service reports.
INVALID_OFFERS = {
    "window end before start": (
        lambda now: {
            "window_start": now + timedelta(hours=5),
            "window_end": now + timedelta(hours=4),
        },
        {"window_end": ["Must be after the window starts."]},
    ),
    "window end equal to start": (
        lambda now: {
            "window_start": now + timedelta(hours=4),
            "window_end": now + timedelta(hours=4),
        },
        {"window_end": ["Must be after the window starts."]},
    ),
    "window end in the past": (
        lambda now: {
            "window_start": now - timedelta(hours=3),
            "window_end": now - timedelta(hours=1),
            # What a 4-CPU partition has in two hours, so that only the times are wrong.
            "quantity": 8,
            "max_per_buyer": None,
        },
        {
            "window_end": ["Must be in the future."],
            # The close is in the future, so it is necessarily after such a window.
            "auction_closes_at": ["Must be before the window ends."],
        },
    ),
    "auction closing after the window": (
        lambda now: {"auction_closes_at": now + timedelta(hours=13)},
        {"auction_closes_at": ["Must be before the window ends."]},
    ),
    "auction closing as the window ends": (
        lambda now: {"auction_closes_at": now + timedelta(hours=12)},
        {"auction_closes_at": ["Must be before the window ends."]},
    ),
    "auction close in the past": (
        lambda now: {"auction_closes_at": now - timedelta(minutes=1)},
        {"auction_closes_at": ["Must be in the future."]},
    ),
    "naive window start": (
        lambda now: {"window_start": timezone.make_naive(now) + timedelta(hours=2)},
        {"window_start": ["A date and time with a time zone."]},
    ),
    "reserve of zero": (
        lambda now: {"reserve_price": "0", "buy_now_price": None},
        {"reserve_price": ["Must be more than zero."]},
    ),
    "negative reserve": (
        lambda now: {"reserve_price": "-1.50", "buy_now_price": None},
        {"reserve_price": ["Must be more than zero."]},
    ),
    "reserve not a number": (
        lambda now: {"reserve_price": "cheap", "buy_now_price": None},
        {"reserve_price": ["Not a decimal number."]},
    ),
    "reserve finer than a micro-unit": (
        lambda now: {"reserve_price": "1.0000001", "buy_now_price": None},
        {"reserve_price": ["At most 6 decimal places."]},
    ),
    "buy-now below the reserve": (
        lambda now: {"buy_now_price": "1.49"},
        {"buy_now_price": ["Must be at least the reserve price."]},
    ),
    "buy-now of zero": (
        lambda now: {"buy_now_price": "0"},
        {"buy_now_price": ["Must be more than zero."]},
    ),
    "unknown partition": (
        lambda now: {"partition": "nosuch"},
        {"partition": ["The cluster has no partition of this name that is up."]},
    ),
    "gpu-hours on a partition without gpus": (
        lambda now: {"resource": "gpu"},
        {"resource": ["This partition has no GPUs."]},
    ),
    "unknown resource": (
        lambda now: {"resource": "ram"},
        {"resource": ["Either `cpu` (core-hours) or `gpu` (GPU-hours)."]},
    ),
    "quantity of zero": (lambda now: {"quantity": 0}, {"quantity": ["At least 1."]}),
    "negative quantity": (lambda now: {"quantity": -5}, {"quantity": ["At least 1."]}),
    "fractional quantity": (
        lambda now: {"quantity": "2.5"},
        {"quantity": ["A whole number of units."]},
    ),
    "float quantity": (lambda now: {"quantity": 2.0}, {"quantity": ["A whole number of units."]}),
    "boolean quantity": (
        lambda now: {"quantity": True},
        {"quantity": ["A whole number of units."]},
    ),
    "more units than the partition has in the window": (
        lambda now: {"quantity": 41},
        {"quantity": ["The partition has at most 40 cpu units in this window."]},
    ),
    "cap per buyer above the quantity": (
        lambda now: {"quantity": 10, "max_per_buyer": 11},
        {"max_per_buyer": ["Must not be more than the quantity."]},
    ),
    "cap per buyer of zero": (lambda now: {"max_per_buyer": 0}, {"max_per_buyer": ["At least 1."]}),
}


@pytest.mark.parametrize("case", list(INVALID_OFFERS), ids=list(INVALID_OFFERS))
def test_an_invalid_offer_is_refused_naming_its_field(owner, partition, case):
    changes, problems = INVALID_OFFERS[case]
    now = timezone.now()
    before = snapshot()

    with pytest.raises(ValidationFailed) as refused:
        services.offer_create(actor=owner, **offer_fields(partition, now, **changes(now)))

    assert (refused.value.status_code, refused.value.code) == (400, "invalid")
    assert refused.value.extra == {"fields": problems}
    assert snapshot() == before


def test_a_partition_that_is_down_cannot_be_listed(owner, partition):
    Partition.objects.filter(pk=partition.pk).update(is_up=False)
    before = snapshot()

    with pytest.raises(ValidationFailed) as refused:
        services.offer_create(actor=owner, **offer_fields(partition, timezone.now()))

    assert refused.value.extra == {
        "fields": {"partition": ["The cluster has no partition of this name that is up."]}
    }
    assert snapshot() == before


def test_every_problem_is_reported_at_once(owner, partition):
    now = timezone.now()
    fields = offer_fields(
        partition, now, quantity=0, reserve_price="0", buy_now_price=None, partition="nosuch"
    )

    with pytest.raises(ValidationFailed) as refused:
        services.offer_create(actor=owner, **fields)

    assert refused.value.extra == {
        "fields": {
            "quantity": ["At least 1."],
            "reserve_price": ["Must be more than zero."],
            "partition": ["The cluster has no partition of this name that is up."],
        }
    }


@pytest.mark.parametrize(
    "status", [Cluster.Status.UNVERIFIED, Cluster.Status.UNREACHABLE, Cluster.Status.SUSPENDED]
)
def test_a_cluster_that_is_not_online_cannot_list(owner, partition, status):
    Cluster.objects.filter(pk=partition.cluster_id).update(status=status)
    partition.cluster.refresh_from_db()
    before = snapshot()

    with pytest.raises(errors.ClusterNotOnline) as refused:
        services.offer_create(actor=owner, **offer_fields(partition, timezone.now()))

    assert (refused.value.status_code, refused.value.code) == (409, "cluster_not_online")
    assert refused.value.extra == {"cluster": str(partition.cluster.uuid), "status": status}
    assert snapshot() == before


def test_a_member_who_is_not_an_admin_cannot_list(partition):
    member = MembershipFactory(organization=partition.cluster.organization)
    before = snapshot()

    with pytest.raises(PermissionDenied) as refused:
        services.offer_create(actor=member, **offer_fields(partition, timezone.now()))

    assert (refused.value.status_code, refused.value.code) == (403, "permission_denied")
    assert snapshot() == before


def test_an_admin_of_another_organization_cannot_list(partition):
    stranger = team("Elsewhere")
    before = snapshot()

    with pytest.raises(PermissionDenied) as refused:
        services.offer_create(actor=stranger, **offer_fields(partition, timezone.now()))

    assert (refused.value.status_code, refused.value.code) == (403, "permission_denied")
    assert snapshot() == before


def test_only_the_owner_s_admins_can_cancel(partition):
    offer = OfferFactory(partition=partition)
    member = MembershipFactory(organization=partition.cluster.organization)
    stranger = team("Elsewhere")
    before = snapshot()

    for actor in (member, stranger):
        with pytest.raises(PermissionDenied):
            services.offer_cancel(actor=actor, offer=offer)

    assert snapshot() == before


# --- bid_place -----------------------------------------------------------------------------------


@pytest.fixture
def offer() -> Offer:
    """100 core-hours, reserve 1.00, buy-now 2.00, at most 30 per buyer; closes in an hour."""
    return OfferFactory(
        quantity=100, reserve_price=D("1.00"), buy_now_price=D("2.00"), max_per_buyer=30
    )


def test_a_bid_holds_price_times_quantity_and_shows_in_the_demand(offer):
    buyer = team("A")

    bid = services.bid_place(actor=buyer, offer=offer, quantity=20, price="1.25", min_quantity=5)

    bid.refresh_from_db()
    assert (bid.status, bid.price, bid.quantity, bid.min_quantity, bid.placed_by) == (
        Bid.Status.OPEN,
        D("1.25"),
        20,
        5,
        buyer.user,
    )
    assert (bid.hold.amount, bid.hold.reference, bid.hold.reference_kind) == (
        D(25),
        bid.uuid,
        "bid",
    )
    assert billing_selectors.wallet_get(buyer.organization) == Wallet(
        available=D(475), held=D(25), earnings=D(0), currency="USD"
    )
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid, offer.units_sold) == (1, 20, 0)


INVALID_BIDS = {
    "price below the reserve": (
        {"quantity": 10, "price": "0.99"},
        {"price": ["Must be at least the reserve price, 1.00 USD per core-hour."]},
    ),
    "price of zero": ({"quantity": 10, "price": "0"}, {"price": ["Must be more than zero."]}),
    "price not a number": ({"quantity": 10, "price": "lots"}, {"price": ["Not a decimal number."]}),
    "minimum above the quantity": (
        {"quantity": 10, "price": "1.50", "min_quantity": 11},
        {"min_quantity": ["Must not be more than the quantity."]},
    ),
    "minimum of zero": (
        {"quantity": 10, "price": "1.50", "min_quantity": 0},
        {"min_quantity": ["At least 1."]},
    ),
    "quantity above the offer's": (
        {"quantity": 101, "price": "1.50"},
        {"quantity": ["The offer has 100 units."]},
    ),
    "quantity of zero": ({"quantity": 0, "price": "1.50"}, {"quantity": ["At least 1."]}),
    "fractional quantity": (
        {"quantity": "1.5", "price": "1.50"},
        {"quantity": ["A whole number of units."]},
    ),
}


@pytest.mark.parametrize("case", list(INVALID_BIDS), ids=list(INVALID_BIDS))
def test_an_invalid_bid_is_refused_naming_its_field(offer, case):
    asked, problems = INVALID_BIDS[case]
    buyer = team("A")
    before = snapshot()

    with pytest.raises(ValidationFailed) as refused:
        services.bid_place(actor=buyer, offer=offer, **asked)

    assert (refused.value.status_code, refused.value.code) == (400, "invalid")
    assert refused.value.extra == {"fields": problems}
    assert snapshot() == before


def test_an_organization_cannot_bid_on_or_buy_its_own_offer(offer):
    seller = admin_of(offer.cluster.organization)
    billing.wallet_open(seller.organization)
    billing.wallet_adjust(organization=seller.organization, amount="500", memo="Funds", actor=None)
    before = snapshot()
    own = {"organization": ["An organization cannot buy its own capacity."]}

    with pytest.raises(ValidationFailed) as bid_refused:
        services.bid_place(actor=seller, offer=offer, quantity=10, price="1.50")
    with pytest.raises(ValidationFailed) as buy_refused:
        services.offer_buy(actor=seller, offer=offer, quantity=10)

    assert bid_refused.value.extra == buy_refused.value.extra == {"fields": own}
    assert snapshot() == before


def test_a_member_who_is_not_an_admin_cannot_bid_or_buy(offer):
    member = MembershipFactory(organization=funded_organization("500", name="A"))
    before = snapshot()

    with pytest.raises(PermissionDenied):
        services.bid_place(actor=member, offer=offer, quantity=10, price="1.50")
    with pytest.raises(PermissionDenied):
        services.offer_buy(actor=member, offer=offer, quantity=10)

    assert snapshot() == before


def test_the_cap_per_buyer_counts_open_bids_and_purchases_together(offer):
    buyer = team("A")
    services.offer_buy(actor=buyer, offer=offer, quantity=10)
    services.bid_place(actor=buyer, offer=offer, quantity=15, price="1.50")
    before = snapshot()

    with pytest.raises(errors.MaxPerBuyerExceeded) as bid_refused:
        services.bid_place(actor=buyer, offer=offer, quantity=6, price="1.50")
    with pytest.raises(errors.MaxPerBuyerExceeded) as buy_refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=6)

    for refused in (bid_refused, buy_refused):
        assert (refused.value.status_code, refused.value.code) == (409, "max_per_buyer_exceeded")
        assert refused.value.extra == {"max_per_buyer": 30, "already": 25, "asked": 6}
    assert snapshot() == before
    # Up to the cap is fine, and another organization has a cap of its own.
    services.bid_place(actor=buyer, offer=offer, quantity=5, price="1.50")
    services.offer_buy(actor=team("B"), offer=offer, quantity=30)


def test_a_withdrawn_bid_no_longer_counts_towards_the_cap(offer):
    buyer = team("A")
    bid = services.bid_place(actor=buyer, offer=offer, quantity=30, price="1.50")

    services.bid_withdraw(actor=buyer, bid=bid)

    assert services.bid_place(actor=buyer, offer=offer, quantity=30, price="1.10").quantity == 30


def test_a_bid_the_wallet_cannot_cover_is_refused_with_nothing_written(offer):
    buyer = team("A", funds="29.99")
    before = snapshot()

    with pytest.raises(InsufficientFunds) as refused:
        services.bid_place(actor=buyer, offer=offer, quantity=20, price="1.50")

    assert (refused.value.status_code, refused.value.code) == (402, "insufficient_funds")
    assert refused.value.extra == {
        "available": "29.990000",
        "required": "30.00",
        "currency": "USD",
    }
    assert snapshot() == before
    assert not Bid.objects.exists()


def test_a_bid_past_the_budget_is_refused_with_nothing_written(offer):
    buyer = team("A", funds="500")
    billing.budget_set(
        organization=buyer.organization, monthly_limit=D("40.00"), alert_thresholds=[]
    )
    services.bid_place(actor=buyer, offer=offer, quantity=10, price="1.50")  # 15 of 40
    before = snapshot()

    with pytest.raises(BudgetExceeded) as refused:
        services.bid_place(actor=buyer, offer=offer, quantity=17, price="1.50")  # 25.50 more

    assert (refused.value.status_code, refused.value.code) == (402, "budget_exceeded")
    assert refused.value.extra == {
        "monthly_limit": "40.00",
        "committed_and_spent": "15.000000",
        "requested": "25.50",
        "currency": "USD",
    }
    assert snapshot() == before
    # Exactly up to the limit is allowed.
    services.bid_place(actor=buyer, offer=offer, quantity=10, price="2.50")


@pytest.mark.parametrize("state", ["closed", "cleared", "cancelled"])
def test_a_bid_on_an_offer_no_longer_open_is_refused(offer, state):
    buyer = team("A")
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - timedelta(seconds=1)
    )
    if state == "cleared":
        services.auction_clear(offer_id=offer.pk)
    elif state == "cancelled":
        Offer.objects.filter(pk=offer.pk).update(
            status=Offer.Status.CANCELLED, auction_closes_at=timezone.now() + timedelta(hours=1)
        )
    before = snapshot()

    with pytest.raises(errors.OfferNotOpen) as bid_refused:
        services.bid_place(actor=buyer, offer=offer, quantity=10, price="1.50")
    with pytest.raises(errors.OfferNotOpen) as buy_refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=10)

    for refused in (bid_refused, buy_refused):
        assert (refused.value.status_code, refused.value.code) == (409, "offer_not_open")
        assert refused.value.extra["status"] == {"closed": "open"}.get(state, state)
    assert snapshot() == before


def test_an_offer_on_a_suspended_cluster_takes_no_bids_or_purchases(offer):
    buyer = team("A")
    services.cluster_suspend(cluster=offer.cluster, reason="Abuse report")
    before = snapshot()

    with pytest.raises(errors.OfferNotOpen) as bid_refused:
        services.bid_place(actor=buyer, offer=offer, quantity=10, price="1.50")
    with pytest.raises(errors.OfferNotOpen) as buy_refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=10)

    for refused in (bid_refused, buy_refused):
        assert (refused.value.code, refused.value.detail, refused.value.extra) == (
            "offer_not_open",
            "This offer's cluster is not available for sale now.",
            {"status": "open", "cluster_status": "suspended"},
        )
    assert snapshot() == before


# --- offer_buy -----------------------------------------------------------------------------------


def test_buying_now_makes_an_allocation_at_the_buy_now_price(offer):
    buyer = team("A")

    allocation = services.offer_buy(actor=buyer, offer=offer, quantity=12)

    allocation.refresh_from_db()
    assert (
        allocation.organization,
        allocation.offer,
        allocation.source,
        allocation.bid,
        allocation.quantity,
        allocation.unit_price,
        allocation.hold.amount,
        allocation.hold.reference,
        (allocation.window_start, allocation.window_end),
    ) == (
        buyer.organization,
        offer,
        Allocation.Source.BUY_NOW,
        None,
        12,
        D("2.00"),
        D(24),
        allocation.uuid,
        (offer.window_start, offer.window_end),
    )
    assert billing_selectors.wallet_get(buyer.organization).available == D(476)
    offer.refresh_from_db()
    assert (offer.units_sold, offer.remaining, offer.bid_count) == (12, 88, 0)


def test_an_offer_without_a_buy_now_price_cannot_be_bought_now():
    offer = OfferFactory(buy_now_price=None)
    buyer = team("A")
    before = snapshot()

    with pytest.raises(errors.BuyNowNotOffered) as refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=1)

    assert (refused.value.status_code, refused.value.code) == (409, "buy_now_not_offered")
    assert snapshot() == before


def test_buying_more_than_is_left_is_refused():
    offer = OfferFactory(quantity=100, buy_now_price=D("2.00"))
    services.offer_buy(actor=team("A"), offer=offer, quantity=90)
    buyer = team("B")
    before = snapshot()

    with pytest.raises(errors.InsufficientQuantity) as refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=11)

    assert (refused.value.status_code, refused.value.code) == (409, "insufficient_quantity")
    assert refused.value.extra == {"remaining": 10, "asked": 11}
    assert snapshot() == before
    # What is left can be bought, and then nothing more.
    services.offer_buy(actor=buyer, offer=offer, quantity=10)
    with pytest.raises(errors.InsufficientQuantity):
        services.offer_buy(actor=buyer, offer=offer, quantity=1)


@pytest.mark.parametrize("quantity", [0, -1, "2.5", None])
def test_buying_a_quantity_that_is_not_a_positive_whole_number_is_refused(offer, quantity):
    buyer = team("A")
    before = snapshot()

    with pytest.raises(ValidationFailed) as refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=quantity)

    assert set(refused.value.extra["fields"]) == {"quantity"}
    assert snapshot() == before


def test_a_purchase_the_wallet_cannot_cover_is_refused_with_nothing_written(offer):
    buyer = team("A", funds="19.99")
    before = snapshot()

    with pytest.raises(InsufficientFunds) as refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=10)

    assert (refused.value.status_code, refused.value.code) == (402, "insufficient_funds")
    assert refused.value.extra["required"] == "20.000000"
    assert snapshot() == before


def test_a_purchase_past_the_budget_is_refused_with_nothing_written(offer):
    buyer = team("A", funds="500")
    billing.budget_set(
        organization=buyer.organization, monthly_limit=D("19.00"), alert_thresholds=[]
    )
    before = snapshot()

    with pytest.raises(BudgetExceeded) as refused:
        services.offer_buy(actor=buyer, offer=offer, quantity=10)

    assert (refused.value.status_code, refused.value.code) == (402, "budget_exceeded")
    assert refused.value.extra["requested"] == "20.000000"
    assert snapshot() == before


def test_an_admin_of_another_organization_cannot_withdraw_a_bid(offer):
    """The API finds the bid through a selector scoped to the caller; the service must not rely
    on that alone (every other write of the market checks whose object it is)."""
    bid = services.bid_place(actor=team("A"), offer=offer, quantity=10, price="1.50")
    stranger = team("B")
    before = snapshot()

    with pytest.raises(PermissionDenied):
        services.bid_withdraw(actor=stranger, bid=bid)

    assert snapshot() == before
