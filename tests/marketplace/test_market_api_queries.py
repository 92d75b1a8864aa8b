"""The market's list endpoints run the same few queries for a page of 10 rows as for a page of
200: related rows come in the page's own query or one prefetch, never one query per row."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import Hold, ReferenceKind
from computeshare.models import User
from marketplace import services
from marketplace.models import Allocation, Bid, Cluster, Offer, Partition
from organizations.models import Membership
from tests.conftest import client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    funded_organization,
)
from tests.marketplace.test_market_api import API

pytestmark = pytest.mark.django_db

ROWS = 250


@pytest.fixture
def buyer(db: None) -> Membership:
    """An admin of a funded team; the viewer of every list."""
    return MembershipFactory(organization=funded_organization("1000"), role=Membership.Role.ADMIN)


@pytest.fixture
def partitions(buyer: Membership) -> list[Partition]:
    """Ten partitions on five clusters of five owners, the buyer's team owning one of them."""
    owners = [buyer.organization, *OrganizationFactory.create_batch(4)]
    clusters = [ClusterFactory(organization=owner) for owner in owners]
    return [
        PartitionFactory(cluster=cluster, name=name)
        for cluster in clusters
        for name in ("debug", "batch")
    ]


def offers_on(partitions: list[Partition], **fields: Any) -> list[Offer]:
    return Offer.objects.bulk_create(
        [
            OfferFactory.build(partition=partitions[row % len(partitions)], **fields)
            for row in range(ROWS)
        ]
    )


def holds_for(buyer: Membership, kind: str) -> list[Hold]:
    return Hold.objects.bulk_create(
        [
            Hold(
                organization=buyer.organization,
                amount=Decimal("2"),
                placed=Decimal("2"),
                reference_kind=kind,
            )
            for _ in range(ROWS)
        ]
    )


def queries_for(user: User, path: str, page_size: int) -> int:
    """The number of queries a page of `page_size` rows takes, after checking it is full."""
    client = client_for(user)
    with CaptureQueriesContext(connection) as queries:
        answer = client.get(f"{path}{'&' if '?' in path else '?'}page_size={page_size}")
    assert answer.status_code == 200, answer.content
    assert answer.json()["count"] == ROWS
    assert len(answer.json()["results"]) == page_size
    return len(queries)


def assert_flat(user: User, path: str, expected: int) -> None:
    assert (queries_for(user, path, 10), queries_for(user, path, 200)) == (expected, expected)


def test_offer_list(buyer, partitions):
    offers_on(partitions)

    # The token, the count, the page with its clusters and partitions.
    assert_flat(buyer.user, f"{API}/offers/", 3)
    assert_flat(buyer.user, f"{API}/offers/?resource=cpu&ordering=-reserve_price", 3)


def test_price_history(buyer, partitions):
    cleared_at = timezone.now() - timedelta(days=1)
    offers_on(
        partitions,
        status=Offer.Status.CLEARED,
        clearing_price=Decimal("1.25"),
        units_sold=60,
        units_sold_at_auction=60,
        cleared_at=cleared_at,
        auction_closes_at=cleared_at,
    )

    # The token, the count, the page with its clusters and partitions.
    assert_flat(buyer.user, f"{API}/offers/price-history/", 3)
    # One more: the cluster that `cluster=` names is looked up first.
    cluster = Cluster.objects.get(partitions=partitions[0])
    Offer.objects.update(cluster=cluster, partition=partitions[0])
    assert_flat(
        buyer.user,
        f"{API}/offers/price-history/?cluster={cluster.uuid}&partition=debug&resource=cpu",
        4,
    )


def test_bid_list(buyer, partitions):
    offers = Offer.objects.bulk_create(
        [OfferFactory.build(partition=partition) for partition in partitions]
    )
    holds = holds_for(buyer, ReferenceKind.BID)
    Bid.objects.bulk_create(
        [
            Bid(
                offer=offers[row % len(offers)],
                organization=buyer.organization,
                placed_by=buyer.user,
                price=Decimal("2"),
                quantity=1,
                hold=hold,
            )
            for row, hold in enumerate(holds)
        ]
    )

    # The token, the count, the page with its offers, organizations and holds.
    assert_flat(buyer.user, f"{API}/bids/", 3)
    assert_flat(buyer.user, f"{API}/bids/?status=open&organization={buyer.organization.uuid}", 3)


def test_allocation_list(buyer, partitions):
    offers = Offer.objects.bulk_create(
        [OfferFactory.build(partition=partition) for partition in partitions]
    )
    holds = holds_for(buyer, ReferenceKind.ALLOCATION)
    Allocation.objects.bulk_create(
        [
            Allocation(
                organization=buyer.organization,
                offer=offers[row % len(offers)],
                cluster=offers[row % len(offers)].cluster,
                partition=offers[row % len(offers)].partition,
                resource=offers[row % len(offers)].resource,
                window_start=offers[row % len(offers)].window_start,
                window_end=offers[row % len(offers)].window_end,
                source=Allocation.Source.BUY_NOW,
                quantity=1,
                unit_price=Decimal("2"),
                hold=hold,
            )
            for row, hold in enumerate(holds)
        ]
    )

    # The token, the count, the page with its organizations, offers, clusters, partitions and
    # holds.
    assert_flat(buyer.user, f"{API}/allocations/", 3)
    assert_flat(buyer.user, f"{API}/allocations/?status=upcoming", 3)


def test_cluster_list(buyer):
    owners = [buyer.organization, *OrganizationFactory.create_batch(4)]
    clusters = Cluster.objects.bulk_create(
        [ClusterFactory.build(organization=owners[row % len(owners)]) for row in range(ROWS)]
    )
    Partition.objects.bulk_create(
        [
            PartitionFactory.build(cluster=cluster, name=name)
            for cluster in clusters
            for name in ("debug", "batch")
        ]
    )

    # The token, the caller's organizations (who owns what), the count, the page with its
    # organizations, and one prefetch of the page's partitions.
    assert_flat(buyer.user, f"{API}/clusters/", 5)


def test_offer_list_stays_flat_with_bids_and_sales(buyer, partitions):
    """The aggregate demand shown on each offer is kept on the offer's row, not counted."""
    offers = offers_on(partitions, buy_now_price=Decimal("3"))
    team = MembershipFactory(organization=funded_organization("1000"), role=Membership.Role.ADMIN)
    for offer in offers[:20]:
        services.bid_place(actor=team, offer=offer, quantity=1, price="2")
        services.offer_buy(actor=team, offer=offer, quantity=1)

    assert_flat(buyer.user, f"{API}/offers/", 3)


# --- the offers list's count, reused for a few seconds -------------------------------------------


@pytest.fixture
def counts_reused(settings):
    """The count cache as deployed (the test settings turn it off), empty."""
    from computeshare.api import LIST_COUNTS

    settings.OFFER_LIST_COUNT_CACHE_SECONDS = 5
    LIST_COUNTS.clear()
    yield
    LIST_COUNTS.clear()


def test_offer_list_reuses_a_busy_lists_count_and_keeps_pages_exact(
    buyer, partitions, counts_reused
):
    offers_on(partitions)
    client = client_for(buyer.user)
    path = f"{API}/offers/?resource=cpu&page_size=100"
    matching = Offer.objects.filter(resource="cpu").count()
    assert matching > 100

    with CaptureQueriesContext(connection) as first:
        counted = client.get(path).json()
    with CaptureQueriesContext(connection) as second:
        reused = client.get(path).json()
    # The token, the count, the page; then the token and the page.
    assert (len(first), len(second)) == (3, 2)
    assert counted["count"] == reused["count"] == matching

    # New offers: a page with more after it may show the count of a few seconds ago...
    offers_on(partitions)
    assert client.get(path).json()["count"] == matching
    # ...but `next` and the last page's count are exact, and never fewer than the rows seen.
    total = Offer.objects.filter(resource="cpu").count()
    last_page = -(-total // 100)
    last = client.get(f"{path}&page={last_page}").json()
    assert last["count"] == total
    assert last["next"] is None
    assert client.get(f"{path}&page={last_page - 1}").json()["next"] is not None
    assert client.get(f"{path}&page={last_page + 1}").status_code == 404
    # Other filters are counted on their own.
    assert client.get(f"{API}/offers/?page_size=100").json()["count"] == Offer.objects.count()


def test_offer_list_one_page_is_counted_from_its_rows(buyer, partitions, counts_reused):
    offers_on(partitions)
    client = client_for(buyer.user)

    with CaptureQueriesContext(connection) as queries:
        answer = client.get(f"{API}/offers/?page_size=200&partition=debug").json()

    # The token and the page: the page's rows are all there is.
    assert len(queries) == 2
    debug = Offer.objects.filter(partition__name="debug").count()
    assert answer["count"] == len(answer["results"]) == debug
    assert answer["next"] is None


def test_offers_are_read_without_their_clusters_private_keys(buyer, partitions):
    """The key is decrypted as each row is read: only what connects to the cluster reads it."""
    offer = offers_on(partitions)[0]
    client = client_for(buyer.user)
    browser = Client()
    browser.force_login(buyer.user)

    with CaptureQueriesContext(connection) as queries:
        assert client.get(f"{API}/offers/{offer.uuid}/").status_code == 200
        assert client.get(f"{API}/offers/").status_code == 200
        assert browser.get("/offers/").status_code == 200

    assert not any("ssh_private_key" in query["sql"] for query in queries.captured_queries)
