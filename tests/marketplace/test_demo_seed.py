"""The demo's seed (issue 30): a few weeks of history for the charts, the idle grid and the track
record on the first visit, whose times make sense: nobody bids on an auction that closed or
before they joined, each notice comes when its event happened (an auction's at its clearing, an
allocation's "ends soon" before it ends), and the demo's own periodic tasks tell nothing late."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing.selectors import ledger_verify
from marketplace import notices, selectors
from marketplace.models import Allocation, Bid, Cluster, Offer
from notifications.models import Notification
from organizations.models import Membership
from tests.conftest import local_cluster_root

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(settings, tmp_path_factory):
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    started = timezone.now()
    call_command("demo_seed", verbosity=0)
    return started


def _allocation_of(notification: Notification) -> Allocation:
    return Allocation.objects.get(uuid=notification.key.rsplit(":", 1)[1])


def test_the_history_spans_weeks_of_auctions_idle_time_and_track_record(seeded):
    cluster = Cluster.objects.get(name="aurora-local")
    partition = cluster.partitions.get()

    cleared = list(Offer.objects.filter(status=Offer.Status.CLEARED).order_by("auction_closes_at"))
    assert len(cleared) == 6
    assert seeded - cleared[0].auction_closes_at > timedelta(days=34)
    # Every hour of the week has idle samples, night and weekend idler than working hours.
    grid = selectors.idle_pattern(partition, "cpu")
    assert all(cell is not None for day in grid for cell in day)
    monday_noon, monday_night, sunday = grid[0][12], grid[0][2], grid[6][12]
    assert monday_noon is not None and monday_night is not None and sunday is not None
    assert monday_noon.share < monday_night.share < sunday.share
    record = selectors.track_record(cluster)
    assert record.outages == 1
    assert record.unreachable_seconds == 40 * 60
    assert record.run_ends == {"NODE_FAIL": 1, "PREEMPTED": 2}
    assert ledger_verify() == []


def test_nobody_bids_on_a_closed_auction_or_before_joining(seeded):
    bids = list(Bid.objects.select_related("offer", "organization"))
    assert len(bids) == 12
    for bid in bids:
        assert bid.offer.created_at < bid.created_at < bid.offer.auction_closes_at, bid
        joined = Membership.objects.filter(organization=bid.organization).earliest("created_at")
        assert joined.created_at < bid.created_at
    for offer in Offer.objects.filter(status=Offer.Status.CLEARED):
        assert offer.created_at < offer.auction_closes_at <= offer.cleared_at
        assert offer.cleared_at - offer.auction_closes_at < timedelta(minutes=1)


def test_each_notice_comes_when_its_event_happened(seeded):
    notifications = list(Notification.objects.all())
    kinds = {notification.kind for notification in notifications}
    assert {"auction_cleared", "auction_won", "allocation_starting", "allocation_ending"} <= kinds
    for notification in notifications:
        assert notification.created_at <= seeded
        if notification.kind in ("auction_cleared", "auction_won", "bid_outbid"):
            offer = Offer.objects.get(uuid=notification.key.split(":")[2])
            assert offer.auction_closes_at <= notification.created_at, notification.key
            assert notification.created_at - offer.auction_closes_at < timedelta(minutes=5)
        elif notification.kind == "allocation_starting":
            allocation = _allocation_of(notification)
            assert allocation.window_start <= notification.created_at < allocation.window_end
        elif notification.kind == "allocation_ending":
            # "Ends soon" before it ends, never after.
            allocation = _allocation_of(notification)
            ends_in = allocation.window_end - notification.created_at
            assert timedelta(0) < ends_in <= timedelta(hours=1), notification.key
    # Each allocation whose window ended was told both, and was closed at its end.
    for allocation in Allocation.objects.filter(window_end__lt=seeded):
        told = {n.kind for n in notifications if n.key.endswith(str(allocation.uuid))}
        assert told == {"allocation_starting", "allocation_ending"}, allocation
        assert allocation.closed_at is not None and allocation.closed_at >= allocation.window_end


def test_the_demo_s_periodic_tasks_tell_nothing_late_and_a_second_seed_adds_nothing(seeded):
    counts = (Offer.objects.count(), Bid.objects.count(), Notification.objects.count())

    # What beat runs first when the demo starts, then the seed again (every `make demo` runs it),
    notices.allocation_notices_due()
    call_command("demo_seed", verbosity=0)

    # adds no notice: the history's were told at their times.
    assert (Offer.objects.count(), Bid.objects.count(), Notification.objects.count()) == counts
