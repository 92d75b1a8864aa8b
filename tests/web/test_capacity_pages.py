"""The capacity page and the track record on the market's pages, through Django's test client:
who sees what, a listing refused on the owner's offers page with the hours that clash, a stale
suggestion refused with nothing written, and the offers page's queries that stay the same
however many clusters it shows."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from marketplace import capacity, services
from marketplace.models import ClusterOutage, HardwareChange, Offer, OwnerSideRunEnd
from tests.factories import ClusterFactory, MembershipFactory, OfferFactory, PartitionFactory
from tests.web import test_market_pages as market_pages
from tests.web.test_money_pages import html

# The market pages' fixtures: an owner with the online cluster `hpc1` and its 256-CPU partition
# `debug`, and the times of a valid listing.
owner = market_pages.owner
times = market_pages.times
Owner = market_pages.Owner
local = market_pages.local
offer_data = market_pages.offer_data
offers_url = market_pages.offers_url

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def capacity_url(owner: Owner) -> str:
    return reverse("cluster-capacity", args=[owner.cluster.uuid])


def test_the_capacity_page_is_its_owners_only(client, owner):
    outsider = MembershipFactory(role="admin").user
    client.force_login(outsider)

    assert client.get(capacity_url(owner)).status_code == 404
    assert (
        client.post(reverse("cluster-suggested-offer", args=[owner.cluster.uuid])).status_code
        == 404
    )

    client.force_login(owner.member)
    response = client.get(capacity_url(owner))
    assert response.status_code == 200
    document = html(response)
    assert document.find(css_class="btn-success") is None  # members see, admins list


def test_a_listing_that_clashes_is_shown_on_the_form_with_its_hours(client, owner, times):
    client.force_login(owner.admin)
    start = capacity.hour_floor(times["start"]) + HOUR
    data = offer_data(
        owner,
        times,
        quantity=str(256 * 2),
        window_start=local(start),
        window_end=local(start + 2 * HOUR),
        buy_now_price="",
    )
    assert client.post(offers_url(owner.organization), data).status_code == 302
    before = Offer.objects.count()

    response = client.post(offers_url(owner.organization), {**data, "quantity": "1"})

    assert response.status_code == 409
    text = html(response).by_id("offer-create").text()
    assert "Hours that clash (UTC):" in text
    assert f"{start:%Y-%m-%d %H}:00 (256.00 of 256 sold, this asks 0.50)" in text
    assert Offer.objects.count() == before


def test_a_suggestion_taken_meanwhile_is_refused_and_nothing_is_listed(client, owner):
    client.force_login(owner.admin)
    start = capacity.hour_floor(timezone.now()) + 3 * HOUR
    admin = owner.organization.memberships.get(user=owner.admin)
    services.offer_create(
        actor=admin,
        cluster=owner.cluster,
        partition="debug",
        resource="cpu",
        quantity=256 * 2,
        window_start=start,
        window_end=start + 2 * HOUR,
        auction_closes_at=start - HOUR,
        reserve_price="1.00",
    )
    before = Offer.objects.count()

    response = client.post(
        reverse("cluster-suggested-offer", args=[owner.cluster.uuid]),
        {
            "partition": "debug",
            "resource": "cpu",
            "quantity": "20",
            "window_start": start.isoformat(),
            "window_end": (start + 2 * HOUR).isoformat(),
            "auction_closes_at": (start - HOUR).isoformat(),
            "reserve_price": "0.80",
        },
    )

    assert response.status_code == 409
    refusal = html(response).by_id("suggestion-refused").text()
    assert "Hours that clash (UTC):" in refusal
    assert Offer.objects.count() == before


def test_sold_per_hour_counts_what_buyers_bought_and_marks_what_is_only_listed(client, owner):
    # Given two offers tomorrow from 10:00 to 12:00: one listed and not sold (128 core-hours,
    # 64 an hour), one whose auction sold 100 of its 200 (50 of 100 an hour)
    admin = owner.organization.memberships.get(user=owner.admin)
    start = capacity.hour_floor(timezone.now()).replace(hour=10) + timedelta(days=1)

    def listed(quantity: int) -> Offer:
        return services.offer_create(
            actor=admin,
            cluster=owner.cluster,
            partition="debug",
            resource="cpu",
            quantity=quantity,
            window_start=start,
            window_end=start + 2 * HOUR,
            auction_closes_at=start - HOUR,
            reserve_price="1.00",
        )

    listed(128)
    cleared = listed(200)
    Offer.objects.filter(pk=cleared.pk).update(status=Offer.Status.CLEARED, units_sold=100)
    client.force_login(owner.member)

    # When the owner opens the capacity page
    document = html(client.get(capacity_url(owner)))

    # Then each of those hours shows 50 sold (the listed offer is not), 64 listed, 142 free
    calendar = document.find(data_resource="cpu").find(data_field="calendar")
    cell = calendar.find(data_hour=start.isoformat())
    assert cell.attrs["data-sold"] == "50.00"
    assert cell.attrs["data-listed"] == "64.00"
    assert cell.attrs["data-free"] == "142.00"
    assert "cs-listed" in cell.classes
    assert cell.attrs["title"] == (
        f"{start:%a %H:%M}: 50.00 of 256 sold, 64.00 listed and not sold yet, 142.00 free to list"
    )
    before = calendar.find(data_hour=(start - HOUR).isoformat())
    assert (before.attrs["data-sold"], before.attrs["data-listed"]) == ("0.00", "0.00")


def test_offers_show_their_owners_track_record_and_how_it_is_computed(client, owner):
    offer = OfferFactory(partition=owner.partition)
    now = timezone.now()
    ClusterOutage.objects.create(
        cluster=owner.cluster,
        started_at=now - timedelta(hours=3),
        ended_at=now - HOUR,
        source="poll",
    )
    OwnerSideRunEnd.objects.create(
        cluster=owner.cluster,
        raw_job_id="7",
        submit_time=now,
        scheduler_state="NODE_FAIL",
        ended_at=now,
    )
    HardwareChange.objects.create(
        cluster=owner.cluster,
        partition="debug",
        before={"nodes": 4, "cpus": 256, "gpus": 8},
        after={"nodes": 3, "cpus": 192, "gpus": 6},
    )
    client.force_login(MembershipFactory().user)

    listing = html(client.get(reverse("offer-list")))
    detail = html(client.get(reverse("offer-detail", args=[offer.uuid])))

    row = next(
        node for node in listing.find_all("tr") if node.attrs.get("data-offer") == str(offer.uuid)
    )
    assert "1 run ended by the owner · 0 min down while sold · 1 hardware change" in row.text()
    record = detail.by_id("offer-track-record").text()
    assert "1 run of teams' jobs ended by the owner's side (a node failed: 1)" in record
    assert (
        "Unreachable 0 min while teams had hours bought there (2 h 00 min in 1 outage in all)"
        in record
    )
    assert "How this is computed" in record


def test_the_offers_page_reads_track_records_in_the_same_queries_however_many_clusters(
    client, owner
):
    client.force_login(owner.admin)
    OfferFactory(partition=owner.partition)
    ClusterOutage.objects.create(cluster=owner.cluster, started_at=timezone.now(), source="poll")
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("offer-list"))
    for _ in range(5):
        partition = PartitionFactory(cluster=ClusterFactory())
        OfferFactory(partition=partition)
        ClusterOutage.objects.create(
            cluster=partition.cluster, started_at=timezone.now(), source="poll"
        )
    with CaptureQueriesContext(connection) as many:
        client.get(reverse("offer-list"))

    assert len(many) == len(few)


def test_an_owner_grows_an_offer_from_the_offers_page_until_the_calendar_refuses(client, owner):
    client.force_login(owner.admin)
    admin = owner.organization.memberships.get(user=owner.admin)
    start = capacity.hour_floor(timezone.now()) + 3 * HOUR
    grown = services.offer_create(
        actor=admin,
        cluster=owner.cluster,
        partition="debug",
        resource="cpu",
        quantity=256,
        window_start=start,
        window_end=start + 2 * HOUR,
        auction_closes_at=start - HOUR,
        reserve_price="1.00",
    )
    services.offer_create(
        actor=admin,
        cluster=owner.cluster,
        partition="debug",
        resource="cpu",
        quantity=256,
        window_start=start + 2 * HOUR,
        window_end=start + 3 * HOUR,
        auction_closes_at=start - HOUR,
        reserve_price="1.00",
    )
    url = reverse("offer-extend", args=[grown.uuid])
    page = html(client.get(offers_url(owner.organization)))
    assert page.find(css_class="form-control") is not None

    more = client.post(url, {"quantity": "512", "window_end": local(start + 2 * HOUR)}, follow=True)
    refused = client.post(
        url, {"quantity": "512", "window_end": local(start + 3 * HOUR)}, follow=True
    )

    grown.refresh_from_db()
    assert (grown.quantity, grown.window_end) == (512, start + 2 * HOUR)
    texts = [alert.text() for alert in html(refused).find_all(css_class="alert-dismissible")]
    assert any(
        "now sells 512 units" in text
        for text in [alert.text() for alert in html(more).find_all(css_class="alert-dismissible")]
    )
    assert any("debug" in text and "Hours that clash (UTC):" in text for text in texts), texts
