"""The offers page's rows and cards, kept in the cache under a digest of everything they draw
(marketplace/views/offer_fragments.py): each kind of change shows on the very next page, every
value a fragment draws is in its key and nothing else is drawn, a fragment cached for other
values (by an earlier test, on the same Redis) is never shown, and a page from the cache reads
the same queries as one rendered whole."""

import datetime
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.template import Engine
from django.template.loader import render_to_string
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from hpc.slurm.inventory import ClusterInventory, PartitionInfo
from marketplace import selectors, services
from marketplace.models import Cluster, ClusterOutage, Offer, OwnerSideRunEnd, Partition
from marketplace.services.clusters import cluster_inventory_store
from marketplace.views import offer_fragments
from marketplace.views.offer_fragments import OfferListing
from tests.factories import OfferFactory, UserFactory
from tests.web import test_market_pages as market_pages
from tests.web.test_money_pages import html

# The market pages' fixtures: an owner with the online cluster `hpc1` and its partition `debug`
# (4 nodes of 64 CPUs, 256 GB and 2 a100 GPUs), a buyer with 1000 in its wallet, and an offer of
# 100 core-hours there at a reserve of 1.00 and a buy-now price of 3.00.
owner = market_pages.owner
buyer = market_pages.buyer
offer = market_pages.offer
membership = market_pages.membership

pytestmark = pytest.mark.django_db

HOUR = datetime.timedelta(hours=1)
ANY_STATUS = {"status": ""}


def listing(client: Any, offer: Offer, query: dict[str, str] | None = None) -> OfferListing:
    response = client.get(reverse("offer-list"), query or {})
    assert response.status_code == 200
    marker = f'data-offer="{offer.uuid}"'
    return next(item for item in response.context["listings"] if marker in item.row)


def shown(client: Any, offer: Offer, query: dict[str, str] | None = None) -> tuple[str, str]:
    """The text of the offer's row and of its card, as the page shows them."""
    page = html(client.get(reverse("offer-list"), query or {}))
    row = page.by_id("offers").find("tr", data_offer=str(offer.uuid))
    card = page.by_id("offer-cards").find("li", data_offer=str(offer.uuid))
    return row.text(), card.text()


# --- Each kind of change, on the next page -----------------------------------------------------


def test_a_bid_shows_on_the_next_page(client, buyer, offer):
    row, card = shown(client, offer)
    assert "0 / 0" in row
    assert "0 bids, 0 units" in card

    services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=40, price="2.5"
    )

    row, card = shown(client, offer)
    assert "1 / 40" in row
    assert "1 bid, 40 units" in card


def test_a_purchase_shows_on_the_next_page(client, buyer, offer):
    assert "100 / 100" in shown(client, offer)[0]

    services.offer_buy(actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=15)

    row, card = shown(client, offer)
    assert "85 / 100" in row
    assert "85 / 100" in card


def test_a_cancellation_shows_on_the_next_page(client, owner, offer):
    row, card = shown(client, offer, ANY_STATUS)
    assert "Cancelled" not in row

    services.offer_cancel(actor=membership(owner.admin, owner.organization), offer=offer)

    row, card = shown(client, offer, ANY_STATUS)
    assert "Cancelled" in row
    assert "Cancelled" in card


def test_a_renamed_cluster_shows_on_the_next_page(client, owner, offer):
    assert shown(client, offer)[1].startswith("hpc1/debug")

    # As the admin site renames it: no service does.
    Cluster.objects.filter(pk=owner.cluster.pk).update(name="fjord")

    row, card = shown(client, offer)
    assert row.startswith("fjord ")
    assert card.startswith("fjord/debug")


def test_new_hardware_found_by_a_verification_shows_on_the_next_page(client, owner, offer):
    row, card = shown(client, offer)
    assert "64 CPUs" in row
    assert "Clean record" in card

    cluster_inventory_store(
        owner.cluster,
        ClusterInventory(
            cluster_name="hpc1",
            slurm_version="23.11.4",
            partitions=(
                PartitionInfo(
                    name="debug",
                    nodes=4,
                    cpus=192,
                    gpus=8,
                    max_time_minutes=1440,
                    is_up=True,
                    is_default=True,
                    cpus_per_node=48,
                    memory_per_node_mb=262144,
                    gpus_per_node=2,
                    gpu_types=("a100",),
                    features=("avx2", "ib"),
                ),
            ),
        ),
    )

    # The partition's figures, and the change in its owners' track record.
    for where in shown(client, offer):
        assert "48 CPUs" in where
        assert "1 hardware change" in where


def test_a_track_record_change_shows_on_the_next_page(client, owner, offer):
    assert "Clean record, 90 days" in shown(client, offer)[0]

    now = timezone.now()
    ClusterOutage.objects.create(cluster=owner.cluster, started_at=now - HOUR, source="poll")
    OwnerSideRunEnd.objects.create(
        cluster=owner.cluster,
        raw_job_id="7",
        submit_time=now,
        scheduler_state="NODE_FAIL",
        ended_at=now,
    )

    for where in shown(client, offer):
        assert "Clean record" not in where
        assert "1 run ended by the owner" in where


def test_the_track_records_days_show_on_the_next_page(client, offer, settings):
    assert "Clean record, 90 days" in shown(client, offer)[0]

    settings.TRACK_RECORD_DAYS = 30

    assert "Clean record, 30 days" in shown(client, offer)[0]


def test_another_currency_or_time_zone_shows_on_the_next_page(client, offer, settings):
    before = listing(client, offer)

    settings.PLATFORM_CURRENCY = "EUR"
    in_euros = listing(client, offer)
    with timezone.override(datetime.timezone(datetime.timedelta(hours=5))):
        later = listing(client, offer)

    assert "USD" in before.row
    assert "EUR" in in_euros.row
    assert "USD" not in in_euros.row + in_euros.card
    window = (offer.window_start + 5 * HOUR).astimezone(datetime.UTC)
    assert f"{window:%Y-%m-%d %H:%M}" in later.row
    assert len({before, in_euros, later}) == 3


# --- Every value drawn is in the key, and nothing else is drawn --------------------------------


# For each value a fragment draws, a change the page shows.
CHANGES: list[tuple[type[Model], str, Callable[[Any], Any]]] = [
    (Offer, "uuid", lambda _: uuid.uuid4()),
    (Offer, "resource", lambda _: "gpu"),
    (Offer, "capacity", lambda _: "reserved"),
    (Offer, "quantity", lambda _: 120),
    (Offer, "units_sold", lambda _: 10),
    (Offer, "window_start", lambda current: current + HOUR),
    (Offer, "window_end", lambda current: current + HOUR),
    (Offer, "reserve_price", lambda _: Decimal("1.25")),
    (Offer, "buy_now_price", lambda _: Decimal("3.50")),
    (Offer, "auction_closes_at", lambda current: current + HOUR),
    (Offer, "status", lambda _: "cleared"),
    (Offer, "bid_count", lambda _: 3),
    (Offer, "units_bid", lambda _: 70),
    (Partition, "name", lambda _: "gpu"),
    (Partition, "cpus_per_node", lambda _: 48),
    (Partition, "memory_per_node_mb", lambda _: 131072),
    (Partition, "gpus_per_node", lambda _: 4),
    (Partition, "gpu_types", lambda _: ["h100"]),
    (Partition, "features", lambda _: ["sve"]),
    (Partition, "nodes_differ", lambda _: True),
    (Cluster, "name", lambda _: "fjord"),
]


def test_every_value_the_fragments_draw_has_a_change_below():
    assert {(model, name) for model, name, _ in CHANGES} == {
        *((Offer, name) for name in offer_fragments.OFFER_FIELDS),
        *((Partition, name) for name in offer_fragments.PARTITION_FIELDS),
        *((Cluster, name) for name in offer_fragments.CLUSTER_FIELDS),
    }


@pytest.mark.parametrize(
    ("model", "name", "change"), CHANGES, ids=[f"{m.__name__}.{n}" for m, n, _ in CHANGES]
)
def test_a_change_of_any_value_drawn_shows_on_the_next_page(client, offer, model, name, change):
    row = {Offer: offer, Partition: offer.partition, Cluster: offer.cluster}[model]
    before = client.get(reverse("offer-list"), ANY_STATUS).context["listings"]
    assert client.get(reverse("offer-list"), ANY_STATUS).context["listings"] == before

    model._default_manager.filter(pk=row.pk).update(**{name: change(getattr(row, name))})

    (after,) = client.get(reverse("offer-list"), ANY_STATUS).context["listings"]
    assert after.row != before[0].row
    assert after.card != before[0].card


def test_the_fragments_draw_nothing_but_their_keys_values(client, owner):
    """Drawn from the offer as read, the fragments are those rendered from the key's values:
    a template that drew anything else (here all set apart from their defaults) would differ."""
    drawn = OfferFactory(
        partition=owner.partition,
        capacity="reserved",
        quantity=2,
        buy_now_price=Decimal("3.00"),
        max_per_buyer=1,
        created_by=UserFactory(),
        clearing_price=Decimal("2.00"),
        units_sold_at_auction=1,
        cleared_at=timezone.now(),
        units_sold=1,
    )
    Partition.objects.filter(pk=owner.partition.pk).update(nodes_differ=True, is_up=False)
    cached = listing(client, drawn)

    offer = selectors.offer_list().get(pk=drawn.pk)
    context = {"offer": offer, "record": selectors.track_record(offer.cluster)}
    assert cached.row == render_to_string(offer_fragments.ROW_TEMPLATE, context).strip()
    assert cached.card == render_to_string(offer_fragments.CARD_TEMPLATE, context).strip()


# --- Never another offer's fragment ------------------------------------------------------------


def test_a_fragment_cached_for_other_values_is_never_shown(client, owner):
    """As a test after another finds the cache (Redis outlives a test's database) with a
    fragment for an offer of the same id: that offer's values are not these."""
    same_id = uuid.uuid4()
    earlier = OfferFactory(uuid=same_id, partition=owner.partition, reserve_price=Decimal("1.00"))
    assert "1.00 USD per core-hour" in shown(client, earlier)[0]
    earlier.delete()

    later = OfferFactory(uuid=same_id, partition=owner.partition, reserve_price=Decimal("2.00"))

    row, card = shown(client, later)
    assert "2.00 USD per core-hour" in row
    assert "2.00 USD per core-hour" in card
    assert "1.00 USD" not in row + card


def test_a_template_or_code_change_changes_every_key():
    engine = Engine.get_default()
    include = '{% include "marketplace/market/_capacity.html" %}'

    versions = {
        offer_fragments._version_of(engine.from_string(source))
        for source in ("<tr>", "<tr> ", include)
    }

    assert len(versions) == 3


# --- Queries and renders ------------------------------------------------------------------------


def test_a_page_from_the_cache_reads_the_same_queries_and_renders_no_fragment(client, owner):
    OfferFactory.create_batch(3, partition=owner.partition)
    with CaptureQueriesContext(connection) as rendered_queries:
        rendered = client.get(reverse("offer-list"))
    with CaptureQueriesContext(connection) as cached_queries:
        cached = client.get(reverse("offer-list"))

    def fragments_rendered(response: Any) -> int:
        names = [template.name for template in response.templates]
        return names.count(offer_fragments.ROW_TEMPLATE) + names.count(
            offer_fragments.CARD_TEMPLATE
        )

    assert fragments_rendered(rendered) == 6
    assert fragments_rendered(cached) == 0
    assert cached.context["listings"] == rendered.context["listings"]
    assert len(cached_queries) == len(rendered_queries)
