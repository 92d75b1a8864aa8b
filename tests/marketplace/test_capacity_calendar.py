"""The capacity calendar on PostgreSQL: a partition never sells more core-hours (or GPU-hours)
in any hour than it has, summed over every offer open or sold on it; a listing or an extension
that would is refused with `partition_capacity_exceeded` and the hours that clash, and writes
nothing. Twenty listings at once that together would oversell: none does."""

from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from django.utils import timezone

from computeshare.errors import ValidationFailed
from marketplace import capacity, errors, selectors, services
from marketplace.models import Offer, OfferDemand, Partition
from organizations.models import Membership
from tests.concurrency import kinds, run_together
from tests.factories import ClusterFactory, MembershipFactory, PartitionFactory

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


@pytest.fixture
def partition() -> Partition:
    """16 CPUs and 2 GPUs, next to another partition of the same cluster."""
    cluster = ClusterFactory()
    PartitionFactory(cluster=cluster, name="other", cpus=16, gpus=2)
    return PartitionFactory(cluster=cluster, name="batch", cpus=16, gpus=2)


@pytest.fixture
def owner(partition: Partition) -> Membership:
    return MembershipFactory(organization=partition.cluster.organization, role="admin")


@pytest.fixture
def day() -> datetime:
    """Midnight (UTC) of the day after tomorrow: windows on whole hours, all in the future."""
    return capacity.hour_floor(timezone.now()).replace(hour=0) + timedelta(days=2)


def listing(
    partition: Partition, start: datetime, hours: int, quantity: int, **changes: Any
) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "cluster": partition.cluster,
        "partition": partition.name,
        "resource": "cpu",
        "quantity": quantity,
        "window_start": start,
        "window_end": start + hours * HOUR,
        "reserve_price": "1.00",
        "auction_closes_at": start - HOUR,
    }
    fields.update(changes)
    return fields


def offer_rows() -> list[tuple[Any, ...]]:
    return list(
        Offer.objects.order_by("pk").values_list(
            "pk", "quantity", "window_end", "status", "updated_at"
        )
    )


def test_two_offers_that_overlap_may_not_together_pass_what_the_partition_has(
    owner, partition, day
):
    # 16 CPUs for 10 hours: 160 core-hours. The first offer takes 10 cores an hour.
    services.offer_create(actor=owner, **listing(partition, day, 10, 100))
    before = offer_rows()

    with pytest.raises(errors.PartitionCapacityExceeded) as refused:
        # 7 cores an hour over hours 5 to 14: hours 5 to 9 would carry 17.
        services.offer_create(actor=owner, **listing(partition, day + 5 * HOUR, 10, 70))

    assert (refused.value.status_code, refused.value.code) == (409, "partition_capacity_exceeded")
    assert refused.value.extra == {
        "partition": "batch",
        "resource": "cpu",
        "capacity_per_hour": 16,
        "hour_count": 5,
        "hours": [
            {
                "start": (day + hour * HOUR).isoformat(),
                "sold": "10.00",
                "asked": "7.00",
                "capacity": 16,
            }
            for hour in range(5, 10)
        ],
    }
    assert offer_rows() == before


def test_what_is_left_in_each_hour_can_still_be_listed_to_the_last_core(owner, partition, day):
    services.offer_create(actor=owner, **listing(partition, day, 10, 100))

    # 6 cores an hour over the same 10 hours: exactly full.
    services.offer_create(actor=owner, **listing(partition, day, 10, 60))

    hours = selectors.partition_calendar(partition, "cpu", day, day + 10 * HOUR)
    assert [(hour.sold, hour.free) for hour in hours] == [(Fraction(16), Fraction(0))] * 10
    with pytest.raises(errors.PartitionCapacityExceeded) as refused:
        services.offer_create(actor=owner, **listing(partition, day + 9 * HOUR, 1, 1))
    assert refused.value.extra["hours"] == [
        {"start": (day + 9 * HOUR).isoformat(), "sold": "16.00", "asked": "1.00", "capacity": 16}
    ]


def test_windows_that_only_touch_do_not_clash(owner, partition, day):
    services.offer_create(actor=owner, **listing(partition, day, 10, 160))

    later = services.offer_create(actor=owner, **listing(partition, day + 10 * HOUR, 10, 160))

    assert later.quantity == 160


def test_a_window_inside_an_hour_counts_against_that_hour_only(owner, partition, day):
    # 8 core-hours over 30 minutes inside hour 3 take 8 of that hour's 16. An offer of 8 an
    # hour over hours 3 and 4 then fits hour 3 exactly, and clashes with a full hour 4 only.
    start = day + 3 * HOUR + timedelta(minutes=15)
    services.offer_create(
        actor=owner, **listing(partition, start, 1, 8, window_end=start + HOUR / 2)
    )
    services.offer_create(actor=owner, **listing(partition, day + 4 * HOUR, 1, 16))

    with pytest.raises(errors.PartitionCapacityExceeded) as refused:
        services.offer_create(actor=owner, **listing(partition, day + 3 * HOUR, 2, 16))

    assert [
        (hour["start"], hour["sold"], hour["asked"]) for hour in refused.value.extra["hours"]
    ] == [((day + 4 * HOUR).isoformat(), "16.00", "8.00")]


def test_other_partitions_and_the_other_resource_are_counted_apart(owner, partition, day):
    services.offer_create(actor=owner, **listing(partition, day, 10, 160))

    gpu = services.offer_create(actor=owner, **listing(partition, day, 10, 20, resource="gpu"))
    other = Partition.objects.get(cluster=partition.cluster, name="other")
    elsewhere = services.offer_create(actor=owner, **listing(other, day, 10, 160))

    assert (gpu.quantity, elsewhere.partition.name) == (20, "other")
    with pytest.raises(errors.PartitionCapacityExceeded) as refused:
        services.offer_create(actor=owner, **listing(partition, day, 1, 1, resource="gpu"))
    assert refused.value.extra["resource"] == "gpu"
    assert refused.value.extra["capacity_per_hour"] == 2


def test_a_cancelled_offer_gives_its_hours_back(owner, partition, day):
    first = services.offer_create(actor=owner, **listing(partition, day, 10, 160))
    services.offer_cancel(actor=owner, offer=first)

    second = services.offer_create(actor=owner, **listing(partition, day, 10, 160))

    assert second.quantity == 160


def test_a_cleared_offer_keeps_what_it_sold_and_frees_the_rest(owner, partition, day):
    first = services.offer_create(actor=owner, **listing(partition, day, 10, 160))
    # As the auction's clearing leaves it: 40 units sold.
    Offer.objects.filter(pk=first.pk).update(status=Offer.Status.CLEARED, units_sold=40)

    services.offer_create(actor=owner, **listing(partition, day, 10, 120))

    with pytest.raises(errors.PartitionCapacityExceeded):
        services.offer_create(actor=owner, **listing(partition, day, 10, 10))
    hours = selectors.partition_calendar(partition, "cpu", day - HOUR, day + 11 * HOUR)
    assert [hour.sold for hour in hours] == [0] + [Fraction(16)] * 10 + [0]


def test_an_offer_whose_window_started_is_spread_from_the_hour_it_was_listed(owner, partition):
    now = timezone.now()
    started = services.offer_create(
        actor=owner,
        **listing(partition, now - 5 * HOUR, 10, 64, auction_closes_at=now + timedelta(minutes=30)),
    )

    hours = selectors.partition_calendar(partition, "cpu", started.window_start, started.window_end)
    listed_hour = capacity.hour_floor(started.created_at)
    assert [hour.sold for hour in hours if hour.start < listed_hour] == [0] * 5
    assert sum(hour.sold for hour in hours) == 64
    assert max(hour.sold for hour in hours) <= 16


def test_a_cleared_offer_whose_rows_were_moved_into_the_past_is_spread_over_its_window(
    owner, partition
):
    # Given an offer listed now whose auction and window were then moved a week back, as the
    # demo's seed writes its history: its row says it was listed (created) after its auction
    # closed and in the last hour of its window.
    now = timezone.now()
    window_end = capacity.hour_floor(now) + timedelta(minutes=1)
    window_start = window_end - timedelta(days=7)
    offer = services.offer_create(
        actor=owner,
        **listing(partition, now + 2 * HOUR, 24, 160, auction_closes_at=now + HOUR),
    )
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=window_start - timedelta(minutes=1),
        window_start=window_start,
        window_end=window_end,
        status=Offer.Status.CLEARED,
        units_sold=160,
    )

    # When the calendar reads the week
    hours = selectors.partition_calendar(partition, "cpu", window_start, window_end)

    # Then its 160 units are spread evenly over the week (about 0.95 an hour), not all into the
    # hour it was created in: an offer is listed before its auction closes, whatever its row says.
    length = Fraction(7 * 24)  # the window's hours
    assert sum(hour.sold for hour in hours) == 160
    assert max(hour.sold for hour in hours) == Fraction(160) / length
    assert hours[-1].sold == Fraction(160) / length / 60  # its last minute


def test_growing_an_offer_past_the_calendar_is_refused_and_changes_nothing(owner, partition, day):
    # 10 cores an hour in hours 0-9; 6 in hours 5-14 (so hours 5-9 are full); 16 in 15-19.
    offer = services.offer_create(actor=owner, **listing(partition, day, 10, 100))
    services.offer_create(actor=owner, **listing(partition, day + 5 * HOUR, 10, 60))
    services.offer_create(actor=owner, **listing(partition, day + 15 * HOUR, 5, 80))
    before = offer_rows()

    with pytest.raises(errors.PartitionCapacityExceeded) as more_units:
        services.offer_extend(actor=owner, offer=offer, quantity=110)
    with pytest.raises(errors.PartitionCapacityExceeded) as later_end:
        # 100 units over 20 hours is 5 an hour: hours 15-19 would carry 21.
        services.offer_extend(actor=owner, offer=offer, window_end=day + 20 * HOUR)

    assert [hour["start"] for hour in more_units.value.extra["hours"]] == [
        (day + hour * HOUR).isoformat() for hour in range(5, 10)
    ]
    assert [(hour["sold"], hour["asked"]) for hour in later_end.value.extra["hours"]] == [
        ("16.00", "5.00")
    ] * 5
    assert offer_rows() == before


def test_an_offer_grows_into_free_hours(owner, partition, day):
    offer = services.offer_create(actor=owner, **listing(partition, day, 10, 100))

    grown = services.offer_extend(
        actor=owner, offer=offer, quantity=200, window_end=day + 20 * HOUR
    )

    grown.refresh_from_db()
    assert (grown.quantity, grown.window_end) == (200, day + 20 * HOUR)
    hours = selectors.partition_calendar(partition, "cpu", day, day + 20 * HOUR)
    assert {hour.sold for hour in hours} == {Fraction(10)}


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"quantity": 99}, "quantity", "At least 100: an offer only grows."),
        ({"quantity": "1.5"}, "quantity", "A whole number of units."),
        ({"window_end": "tomorrow"}, "window_end", "A date and time with a time zone."),
        ({}, "quantity", "Give a larger quantity, a later window end, or both."),
        (
            {"quantity": 10_000},
            "quantity",
            "The partition has at most 160 cpu units in this window.",
        ),
    ],
)
def test_an_extension_s_bad_input_is_refused_by_field(
    owner, partition, day, changes, field, message
):
    offer = services.offer_create(actor=owner, **listing(partition, day, 10, 100))
    before = offer_rows()

    with pytest.raises(ValidationFailed) as refused:
        services.offer_extend(actor=owner, offer=offer, **changes)

    assert refused.value.extra["fields"][field] == [message]
    assert offer_rows() == before


def test_the_window_of_an_offer_with_bids_stays_as_it_was_bid_on(owner, partition, day):
    offer = services.offer_create(actor=owner, **listing(partition, day, 10, 100))
    OfferDemand.objects.create(offer=offer, shard=0, bid_count=1, units_bid=5)
    before = offer_rows()

    with pytest.raises(errors.OfferNotExtendable) as refused:
        services.offer_extend(actor=owner, offer=offer, window_end=day + 12 * HOUR)

    assert refused.value.extra == {"bid_count": 1, "units_sold": 0}
    assert offer_rows() == before
    # More units are still welcome.
    assert services.offer_extend(actor=owner, offer=offer, quantity=120).quantity == 120


@pytest.mark.django_db(transaction=True)
def test_twenty_listings_at_once_that_would_oversell_leave_exactly_what_fits():
    """16 CPUs for 10 hours; twenty owners' admins each list 4 cores an hour (40 units) over
    the same window at the same moment: four fit, sixteen are refused, no hour is oversold."""
    cluster = ClusterFactory()
    partition = PartitionFactory(cluster=cluster, name="batch", cpus=16, gpus=0)
    admins = [MembershipFactory(organization=cluster.organization, role="admin") for _ in range(20)]
    day = capacity.hour_floor(timezone.now()).replace(hour=0) + timedelta(days=2)

    outcomes = run_together(
        [
            lambda admin=admin: services.offer_create(
                actor=admin, **listing(partition, day, 10, 40)
            )
            for admin in admins
        ]
    )

    assert kinds(outcomes) == {"Offer": 4, "PartitionCapacityExceeded": 16}, outcomes
    assert Offer.objects.filter(partition=partition).count() == 4
    hours = selectors.partition_calendar(partition, "cpu", day, day + 10 * HOUR)
    assert [hour.sold for hour in hours] == [Fraction(16)] * 10
    refused = [
        outcome for outcome in outcomes if isinstance(outcome, errors.PartitionCapacityExceeded)
    ]
    assert {outcome.extra["hours"][0]["sold"] for outcome in refused} == {"16.00"}


@pytest.mark.django_db(transaction=True)
def test_extensions_racing_listings_never_oversell():
    """Ten extensions of one offer and ten new listings at once, on a partition with room for
    a few of them: whatever wins, no hour carries more than the partition has."""
    cluster = ClusterFactory()
    partition = PartitionFactory(cluster=cluster, name="batch", cpus=16, gpus=0)
    admins = [MembershipFactory(organization=cluster.organization, role="admin") for _ in range(20)]
    day = capacity.hour_floor(timezone.now()).replace(hour=0) + timedelta(days=2)
    offer = services.offer_create(actor=admins[0], **listing(partition, day, 10, 40))

    calls = [
        lambda admin=admin, units=40 + 20 * (index + 1): services.offer_extend(
            actor=admin, offer=offer, quantity=units
        )
        for index, admin in enumerate(admins[:10])
    ] + [
        lambda admin=admin: services.offer_create(actor=admin, **listing(partition, day, 10, 30))
        for admin in admins[10:]
    ]
    outcomes = run_together(calls)

    assert set(kinds(outcomes)) <= {"Offer", "PartitionCapacityExceeded", "ValidationFailed"}
    hours = selectors.partition_calendar(partition, "cpu", day, day + 10 * HOUR)
    assert max(hour.sold for hour in hours) <= 16
    total = sum(Offer.objects.filter(partition=partition).values_list("quantity", flat=True))
    assert Decimal(total) == sum(
        Decimal(hour.sold.numerator) / hour.sold.denominator for hour in hours
    )


def test_the_demo_s_history_fits_its_partition_in_every_hour(settings, tmp_path_factory):
    # Given the demo's seed: a past week's cleared offers on a partition of a few cores
    from django.core.management import call_command

    from tests.conftest import local_cluster_root

    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    call_command("demo_seed", verbosity=0)
    partition = Partition.objects.get(cluster__name="aurora-local")
    now = timezone.now()

    # When the calendar reads the last week and the coming one
    hours = selectors.partition_calendar(partition, "cpu", now - timedelta(days=7), now + HOUR)

    # Then no hour carries more than the partition has: each offer is spread over its window
    assert max(hour.sold for hour in hours) <= partition.cpus
    assert all(hour.bought <= hour.sold for hour in hours)
