"""The market's pages through Django's test client: browsing and filtering offers, an offer's
bid and buy-now forms with the services' refusals beside the fields, withdrawing and
cancelling, the price history and its chart, a team's allocations, an owner's clusters (with
the verification card the page polls) and offers. Who may see and do what is checked on each.
The browser tests walk the same pages in Chromium."""

import datetime
import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing import selectors as billing_selectors
from billing import services as billing
from billing.models import Hold, Transaction
from computeshare.errors import NotFound
from computeshare.models import User
from marketplace import services
from marketplace.charts import price_chart
from marketplace.models import (
    Allocation,
    Bid,
    Cluster,
    ClusterVerification,
    Offer,
    Partition,
    TenantAccount,
    TenantLease,
)
from marketplace.services.verification_checks import UNREACHABLE_REASON
from organizations import selectors as organization_selectors
from organizations.models import Membership, Organization
from tests.conftest import OrganizationWithPeople, client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
    ssh_key_pair,
)
from tests.web.test_money_pages import Node, field_block, html

pytestmark = pytest.mark.django_db

UTC = datetime.UTC


# --- Fixtures and helpers ----------------------------------------------------------------------


@dataclass
class Owner:
    organization: Organization
    admin: User
    member: User
    cluster: Cluster
    partition: Partition


@pytest.fixture
def owner(db: None) -> Owner:
    """An owner organization with an online cluster `hpc1` and its partition `debug` (256
    CPUs, 8 GPUs on 4 nodes)."""
    organization = OrganizationFactory(name="Owner Lab")
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    member = MembershipFactory(organization=organization, role=Membership.Role.MEMBER).user
    cluster = ClusterFactory(organization=organization, name="hpc1")
    partition = PartitionFactory(cluster=cluster, name="debug", max_time_minutes=1440)
    return Owner(organization, admin, member, cluster, partition)


@pytest.fixture
def buyer(team: OrganizationWithPeople) -> OrganizationWithPeople:
    """The team ("Quantum Lab") with 1000 available in its wallet."""
    billing.wallet_open(team.organization)
    billing.wallet_adjust(
        organization=team.organization, amount="1000", memo="Test funds", actor=None
    )
    return team


@pytest.fixture
def offer(owner: Owner) -> Offer:
    """100 core-hours, reserve 1.00, buy now 3.00, the auction closing in an hour."""
    return OfferFactory(partition=owner.partition, buy_now_price=Decimal("3.00"))


def membership(user: User, organization: Organization) -> Membership:
    return Membership.objects.select_related("organization", "user").get(
        user=user, organization=organization
    )


def available(organization: Organization) -> Decimal:
    return billing_selectors.wallet_get(organization).available


def body_rows(document: Node, table_id: str) -> list[Node]:
    table = document.by_id(table_id)
    assert table is not None, f"no table {table_id}"
    return table.find("tbody").find_all("tr")


def cell_texts(row: Node) -> list[str]:
    return [cell.text() for cell in row.find_all("td")]


def messages_of(document: Node) -> list[str]:
    return [alert.text() for alert in document.find_all(css_class="alert-dismissible")]


def bid_data(organization: Organization, quantity: str, price: str, minimum: str = "") -> dict:
    return {
        "bid-organization": str(organization.uuid),
        "bid-quantity": quantity,
        "bid-price": price,
        "bid-min_quantity": minimum,
    }


def money_rows() -> tuple[int, int, int]:
    return Hold.objects.count(), Transaction.objects.count(), Bid.objects.count()


# --- Login and visibility ----------------------------------------------------------------------


def page_urls(team: OrganizationWithPeople, offer: Offer) -> list[str]:
    organization = team.organization.uuid
    return [
        reverse("offer-list"),
        reverse("offer-detail", args=[offer.uuid]),
        reverse("price-history"),
        reverse("organization-allocations", args=[organization]),
        reverse("organization-clusters", args=[organization]),
        reverse("organization-offers", args=[organization]),
        reverse("cluster-verification", args=[offer.cluster.uuid]),
    ]


def test_every_market_page_but_the_public_ones_needs_a_login(client, team, offer):
    public = page_urls(team, offer)[:3]
    for url in page_urls(team, offer)[3:]:
        response = client.get(url)

        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    for url in public:
        assert client.get(url).status_code == 200, url


def test_a_visitor_sees_an_offer_and_is_asked_to_log_in_to_order(client, offer):
    url = reverse("offer-detail", args=[offer.uuid])

    page = client.get(url).content.decode()

    assert 'id="log-in-to-order"' in page
    assert f'href="{reverse("login")}?next={url.replace("/", "%2F")}"' in page
    assert 'id="bid-form"' not in page
    assert 'id="buy-form"' not in page


def test_a_visitors_order_is_sent_to_log_in_and_writes_nothing(client, offer):
    before = money_rows()
    for name in ("offer-bid", "offer-buy"):
        response = client.post(reverse(name, args=[offer.uuid]), {"bid-quantity": "1"})

        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert money_rows() == before


def test_the_organization_pages_are_404_to_outsiders(client, team, owner):
    client.force_login(team.outsider)

    for name in ("organization-allocations", "organization-clusters", "organization-offers"):
        response = client.get(reverse(name, args=[team.organization.uuid]))

        assert response.status_code == 404, name
        assert b"Quantum Lab" not in response.content


def test_the_organization_page_links_the_market_pages_and_the_nav_links_offers(client, team):
    client.force_login(team.member)

    page = html(client.get(reverse("organization-detail", args=[team.organization.uuid])))

    links = [link.attrs["href"] for link in page.by_id("market-links").find_all("a")]
    organization = team.organization.uuid
    assert links == [
        reverse("organization-allocations", args=[organization]),
        f"{reverse('job-new')}?organization={organization}",
        reverse("organization-clusters", args=[organization]),
        reverse("organization-offers", args=[organization]),
        reverse("offer-list"),
        reverse("organization-efficiency", args=[organization]),
    ]
    nav = page.by_id("main-nav")
    assert "Offers" in [link.text() for link in nav.find_all("a")]


# --- Browsing offers ---------------------------------------------------------------------------


def browse(client: Any, **query: str) -> tuple[Any, list[str]]:
    response = client.get(reverse("offer-list"), query)
    rows = body_rows(html(response), "offers")
    return response, [row.attrs.get("data-offer", "") for row in rows if "data-offer" in row.attrs]


def test_the_offers_page_lists_open_offers_with_their_figures(client, buyer, owner, offer):
    services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=40, price="2.5"
    )
    OfferFactory(partition=owner.partition, status=Offer.Status.CANCELLED)
    client.force_login(buyer.member)

    response = client.get(reverse("offer-list"))

    assert response.status_code == 200
    page = html(response)
    rows = body_rows(page, "offers")
    assert len(rows) == 1
    assert rows[0].attrs["data-offer"] == str(offer.uuid)
    window = f"{offer.window_start:%Y-%m-%d %H:%M} → {offer.window_end:%Y-%m-%d %H:%M}"
    assert cell_texts(rows[0]) == [
        "hpc1 Clean record, 90 days",
        "debug",
        "Core-hours",
        "Preemptible",
        "64 CPUs , 256 GB , 2 GPUs (a100) avx2 ib",
        "100 / 100 core-hours",
        window,
        "1.00 USD per core-hour 100.00 USD for 100 core-hours",
        "3.00 USD per core-hour 300.00 USD for 100 core-hours",
        f"{offer.auction_closes_at:%Y-%m-%d %H:%M}",
        "1 / 40",
        "View",
    ]
    assert rows[0].find("a").attrs["href"] == reverse("offer-detail", args=[offer.uuid])
    assert page.find("h2").text() == "1 offer"
    # Open is the default status, shown selected in the filter form.
    status = page.by_id("id_status")
    assert [option.attrs["value"] for option in status.find_all("option", selected="")] == ["open"]


def test_a_reserved_block_shows_its_price_per_core_hour_its_total_and_per_core_per_day(
    client, owner
):
    # Given a block of 2 cores for 6 hours at a reserve of 0.125 per core-hour, buy-now 0.20
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + datetime.timedelta(days=1)
    block = OfferFactory(
        partition=owner.partition,
        capacity="reserved",
        quantity=2,
        reserve_price=Decimal("0.125"),
        buy_now_price=Decimal("0.20"),
        auction_closes_at=start - datetime.timedelta(hours=1),
        window_start=start,
        window_end=start + datetime.timedelta(hours=6),
    )

    # When a visitor reads the offers (table and cards) and the offer's page
    listing = html(client.get(reverse("offer-list")))
    detail = html(client.get(reverse("offer-detail", args=[block.uuid])))

    # Then each says the price per core-hour, the whole block's total (2 cores x 6 hours) and
    # the price of a core for a day, the exact figure on hover
    reserve = "0.125 USD per core-hour 1.50 USD for 2 cores 3.00 USD per core per day"
    buy_now = "0.20 USD per core-hour 2.40 USD for 2 cores 4.80 USD per core per day"
    row = listing.by_id("offers").find("tr", data_offer=str(block.uuid))
    card = listing.by_id("offer-cards").find("li", data_offer=str(block.uuid))
    for where in (row, card):
        assert where.find(data_field="reserve").text() == reserve
        assert where.find(data_field="buy-now").text() == buy_now
    assert detail.by_id("offer-reserve-price").text() == reserve
    assert detail.by_id("offer-buy-now-price").text() == buy_now
    total = detail.by_id("offer-reserve-price").find(data_field="total").find("span")
    assert total.attrs["title"] == "1.50"
    assert detail.find("h1").text() == f"2 cores on {block.cluster.name}/{owner.partition.name}"


def test_an_offer_of_one_core_or_one_core_hour_says_it_in_the_singular(client, owner):
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + datetime.timedelta(days=1)
    window = {
        "auction_closes_at": start - datetime.timedelta(hours=1),
        "window_start": start,
        "window_end": start + datetime.timedelta(hours=6),
    }
    one_core = OfferFactory(partition=owner.partition, capacity="reserved", quantity=1, **window)
    one_hour = OfferFactory(partition=owner.partition, quantity=1, **window)

    def heading(offer: Offer) -> str:
        return html(client.get(reverse("offer-detail", args=[offer.uuid]))).find("h1").text()

    where = f"{one_core.cluster.name}/{owner.partition.name}"
    assert heading(one_core) == f"1 core on {where}"
    assert heading(one_hour) == f"1 core-hour on {where}"


@pytest.fixture
def market(owner: Owner) -> dict[str, Offer]:
    """Five offers to filter and sort: different resources, prices, windows and closes."""
    now = timezone.now()
    other = PartitionFactory(cluster=ClusterFactory(name="hpc2"), name="gpu")

    def make(**fields: Any) -> Offer:
        fields.setdefault("partition", owner.partition)
        return OfferFactory(**fields)

    return {
        "cheap": make(
            reserve_price=Decimal("0.50"),
            auction_closes_at=now + datetime.timedelta(hours=5),
            window_start=now + datetime.timedelta(days=3),
        ),
        "dear": make(
            reserve_price=Decimal("4.00"),
            auction_closes_at=now + datetime.timedelta(hours=2),
            window_start=now + datetime.timedelta(days=1),
        ),
        "mid": make(
            reserve_price=Decimal("2.00"),
            auction_closes_at=now + datetime.timedelta(hours=3),
            window_start=now + datetime.timedelta(days=2),
            quantity=30,
        ),
        "gpu": make(
            partition=other,
            resource="gpu",
            reserve_price=Decimal("1.50"),
            auction_closes_at=now + datetime.timedelta(hours=4),
            window_start=now + datetime.timedelta(hours=5),
        ),
        "cancelled": make(reserve_price=Decimal("0.10"), status=Offer.Status.CANCELLED),
    }


def ids(market: dict[str, Offer], *names: str) -> list[str]:
    return [str(market[name].uuid) for name in names]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, ["dear", "mid", "gpu", "cheap"]),
        ({"ordering": "reserve_price"}, ["cheap", "gpu", "mid", "dear"]),
        ({"ordering": "-reserve_price"}, ["dear", "mid", "gpu", "cheap"]),
        ({"ordering": "window_start"}, ["gpu", "dear", "mid", "cheap"]),
        ({"resource": "gpu"}, ["gpu"]),
        ({"resource": "cpu", "max_price": "2"}, ["mid", "cheap"]),
        ({"partition": "debug", "ordering": "reserve_price"}, ["cheap", "mid", "dear"]),
        ({"min_quantity": "31"}, ["dear", "gpu", "cheap"]),
        ({"status": "cancelled"}, ["cancelled"]),
        ({"status": "", "max_price": "0.5", "ordering": "reserve_price"}, ["cancelled", "cheap"]),
    ],
)
def test_the_offers_page_filters_and_sorts(client, user, market, query, expected):
    client.force_login(user)

    response, shown = browse(client, **query)

    assert response.status_code == 200
    assert shown == ids(market, *expected)


def test_the_window_and_cluster_filters_read_datetime_local_inputs_as_utc(client, user, market):
    client.force_login(user)
    starts = market["mid"].window_start.astimezone(UTC)
    ends = market["mid"].window_end.astimezone(UTC)

    _, before = browse(
        client, window_starts_before=f"{starts:%Y-%m-%dT%H:%M}", ordering="window_start"
    )
    _, after = browse(client, window_ends_after=f"{ends:%Y-%m-%dT%H:%M}", ordering="window_start")

    _, on_cluster = browse(client, cluster=str(market["gpu"].cluster.uuid))

    # `mid` starts within the minute the input names: the input's minute is floored.
    assert before == ids(market, "gpu", "dear")
    assert after == ids(market, "mid", "cheap")
    assert on_cluster == ids(market, "gpu")


@pytest.mark.parametrize(
    "query",
    [
        {"resource": "cpu", "max_price": "2", "ordering": "-reserve_price"},
        {"min_quantity": "31", "ordering": "window_start", "status": "open"},
        {"partition": "gpu", "status": ""},
        {"window_starts_before": "2999-01-01T00:00", "ordering": "reserve_price"},
    ],
)
def test_the_page_and_the_api_filter_identically(client, user, market, query):
    client.force_login(user)
    api_query = {key: value for key, value in query.items() if value != ""}
    if "status" not in query:
        api_query["status"] = "open"

    _, shown = browse(client, **query)
    listed = client_for(user).get("/api/v1/offers/", api_query).json()["results"]

    assert shown == [offer["id"] for offer in listed]
    assert shown


def test_a_bad_filter_is_shown_beside_its_field_with_no_offers(client, user, market):
    client.force_login(user)

    response = client.get(reverse("offer-list"), {"max_price": "cheap", "resource": "tpu"})

    assert response.status_code == 400
    page = html(response)
    price, price_errors = field_block(page, "max_price")
    assert price_errors == ["Enter a number."]
    assert "is-invalid" in price.classes
    _, resource_errors = field_block(page, "resource")
    assert resource_errors == ["Select a valid choice. tpu is not one of the available choices."]
    assert cell_texts(body_rows(page, "offers")[0]) == ["No offer matches these filters."]


def test_the_offers_page_is_paginated_by_50(client, user, owner):
    OfferFactory.create_batch(51, partition=owner.partition)
    client.force_login(user)

    first, first_ids = browse(client, ordering="reserve_price")
    _, second_ids = browse(client, ordering="reserve_price", page="2")

    assert len(first_ids) == 50
    assert len(second_ids) == 1
    assert set(first_ids).isdisjoint(second_ids)
    assert "Page 1 of 2" in html(first).text()
    next_link = html(first).find("a", css_class="page-link")
    assert next_link.attrs["href"] == "?ordering=reserve_price&page=2"


def test_the_offers_page_reads_the_same_number_of_queries_for_any_number_of_offers(
    client, user, owner
):
    client.force_login(user)
    OfferFactory.create_batch(2, partition=owner.partition)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("offer-list"))
    OfferFactory.create_batch(20, partition=PartitionFactory(name="other"))
    with CaptureQueriesContext(connection) as many:
        response = client.get(reverse("offer-list"))

    assert len(body_rows(html(response), "offers")) == 22
    assert len(many) == len(few)


# --- One offer ---------------------------------------------------------------------------------


def offer_url(offer: Offer, name: str = "offer-detail") -> str:
    return reverse(name, args=[offer.uuid])


def test_the_offer_page_shows_hardware_window_prices_and_only_aggregate_demand(
    client, buyer, owner, offer
):
    rival = OrganizationFactory(name="Rival Team")
    billing.wallet_open(rival)
    billing.wallet_adjust(organization=rival, amount="500", memo="Test funds", actor=None)
    rival_admin = MembershipFactory(organization=rival, role=Membership.Role.ADMIN)
    services.bid_place(actor=rival_admin, offer=offer, quantity=40, price="2.75")
    client.force_login(buyer.admin)

    response = client.get(offer_url(offer))

    assert response.status_code == 200
    page = html(response)
    facts = {
        row.find("th").text(): row.find("td").text()
        for row in page.by_id("offer-facts").find_all("tr")
    }
    assert facts == {
        "Cluster": "hpc1 by Owner Lab",
        "Partition": "debug: 4 nodes, 256 CPUs, 8 GPUs, jobs up to 1440 minutes",
        "Each node": "64 CPUs , 256 GB , 2 GPUs (a100) avx2 ib",
        "Kind": facts["Kind"],
        "Left": "100 of 100 core-hours",
        "Window (UTC)": f"{offer.window_start:%Y-%m-%d %H:%M} → {offer.window_end:%Y-%m-%d %H:%M}",
        "Reserve price": "1.00 USD per core-hour 100.00 USD for 100 core-hours",
        "Buy-now price": "3.00 USD per core-hour 300.00 USD for 100 core-hours",
        "Auction closes (UTC)": facts["Auction closes (UTC)"],
        "Teams at once": "This cluster serves up to 24 teams at once; 24 accounts are free now.",
        "Owner's track record": facts["Owner's track record"],
        "Demand": "1 bid for 40 units",
    }
    assert facts["Kind"].startswith("Preemptible: core-hours on cores the owner's own users")
    assert facts["Auction closes (UTC)"].startswith(
        f"{offer.auction_closes_at:%Y-%m-%d %H:%M} (in "
    )
    assert facts["Owner's track record"].startswith(
        "0 runs of teams' jobs ended by the owner's side "
        "Unreachable 0 min while teams had hours bought there "
        "0 changes of verified hardware How this is computed"
    )
    # Another team's bid is never shown: neither its price nor its organization.
    assert "2.75" not in page.text()
    assert "Rival Team" not in page.text()
    assert page.by_id("bids") is None
    history = page.by_id("price-history-link").attrs["href"]
    assert history == (
        f"{reverse('price-history')}?cluster={owner.cluster.uuid}&partition=debug&resource=cpu"
    )
    # The forms list the organizations the user administers, with their wallets for the
    # live preview of the hold.
    assert [option.text() for option in page.by_id("id_bid-organization").find_all("option")] == [
        "Quantum Lab"
    ]
    assert response.context["wallets"] == {
        str(buyer.organization.uuid): {"name": "Quantum Lab", "available": "1000.000000"}
    }
    assert page.by_id("market-wallets") is not None
    assert page.by_id("buy-form").attrs["data-unit-price"] == "3.000000"
    assert page.by_id("offer-cancel") is None


def test_a_member_who_administers_nothing_sees_no_order_forms(client, buyer, offer):
    client.force_login(buyer.member)

    page = html(client.get(offer_url(offer)))

    assert page.by_id("bid-form") is None
    assert page.by_id("buy-form") is None
    assert page.by_id("orders-not-allowed").text() == (
        "Only an admin of an organization can bid or buy."
    )


def test_the_owner_sees_a_cancel_button_while_nobody_has_bid_and_no_order_forms(
    client, buyer, owner, offer
):
    client.force_login(owner.admin)
    before = html(client.get(offer_url(offer)))
    services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=1, price="1"
    )
    after = html(client.get(offer_url(offer)))
    client.force_login(owner.member)
    as_member = html(client.get(offer_url(offer)))

    assert before.by_id("offer-cancel") is not None
    assert before.by_id("bid-form") is None
    assert before.by_id("orders-not-allowed").text() == (
        "Your organization owns this cluster: other teams bid on it."
    )
    assert after.by_id("offer-cancel") is None
    assert as_member.by_id("offer-cancel") is None


def test_buying_before_the_window_says_when_jobs_can_run_and_the_auction_counts_down(
    client, buyer, owner, offer
):
    """The default offer's window starts when its auction closes, in an hour; one whose window
    has begun says nothing of the kind."""
    running = OfferFactory(
        partition=owner.partition,
        buy_now_price=Decimal("3.00"),
        window_start=timezone.now() - datetime.timedelta(hours=1),
    )
    client.force_login(buyer.admin)

    later = html(client.get(offer_url(offer)))
    begun = html(client.get(offer_url(running)))

    note = later.by_id("buy-window-later").text()
    assert note.startswith(f"The window starts {offer.window_start:%Y-%m-%d %H:%M} UTC, in ")
    assert note.endswith("jobs on it can run from then, not before.")
    countdown = later.by_id("auction-countdown").text()
    assert "59 minutes" in countdown or "1 hour" in countdown
    assert begun.by_id("buy-form") is not None and begun.by_id("buy-window-later") is None


def test_an_unknown_offer_is_404(client, user):
    client.force_login(user)

    assert client.get(reverse("offer-detail", args=[uuid.uuid4()])).status_code == 404


def test_an_admin_places_a_bid_and_sees_its_hold(client, buyer, offer):
    client.force_login(buyer.admin)

    response = client.post(
        offer_url(offer, "offer-bid"), bid_data(buyer.organization, "40", "2.50", "10")
    )

    assert response.status_code == 302
    assert response["Location"] == offer_url(offer) + "#your-bids"
    bid = Bid.objects.get()
    assert (bid.organization, bid.placed_by, bid.offer) == (
        buyer.organization,
        buyer.admin,
        offer,
    )
    assert (bid.quantity, bid.min_quantity, bid.price, bid.status) == (
        40,
        10,
        Decimal("2.50"),
        Bid.Status.OPEN,
    )
    assert bid.hold.amount == Decimal("100")
    assert available(buyer.organization) == Decimal("900")
    page = html(client.get(response["Location"]))
    assert messages_of(page) == [
        "Your bid of 40 units at 2.50 USD is placed; 100.00 USD is held on Quantum Lab's "
        "wallet until the auction clears."
    ]
    rows = body_rows(page, "bids")
    assert len(rows) == 1
    texts = cell_texts(rows[0])
    assert texts[1:6] == ["Quantum Lab", "40 (at least 10)", "2.50", "100.00 USD", "Open"]
    assert rows[0].find("form").attrs["action"] == reverse("bid-withdraw", args=[bid.uuid])
    assert page.by_id("offer-demand").text() == "1 bid for 40 units"


@pytest.mark.parametrize(
    ("quantity", "price", "minimum", "field", "message"),
    [
        ("40", "0.99", "", "price", "Must be at least the reserve price, 1.00 USD per core-hour."),
        ("40", "0", "", "price", "Must be more than zero."),
        ("101", "2", "", "quantity", "The offer has 100 units."),
        ("0", "2", "", "quantity", "At least 1."),
        ("10", "2", "11", "min_quantity", "Must not be more than the quantity."),
        ("ten", "2", "", "quantity", "Enter a whole number."),
        ("10", "2.1234567", "", "price", "Ensure that there are no more than 6 decimal places."),
    ],
)
def test_a_refused_bid_is_shown_beside_its_field_and_changes_nothing(
    client, buyer, offer, quantity, price, minimum, field, message
):
    client.force_login(buyer.admin)
    before = money_rows()

    response = client.post(
        offer_url(offer, "offer-bid"), bid_data(buyer.organization, quantity, price, minimum)
    )

    assert response.status_code == 400
    page = html(response)
    invalid, errors = field_block(page, f"bid-{field}")
    assert errors == [message]
    assert "is-invalid" in invalid.classes
    assert invalid.attrs["value"] == {"quantity": quantity, "price": price}.get(field, minimum)
    assert money_rows() == before
    assert available(buyer.organization) == Decimal("1000")
    offer.refresh_from_db()
    assert (offer.bid_count, offer.units_bid) == (0, 0)


def test_a_bid_the_wallet_cannot_cover_is_a_402_with_the_balance(client, buyer, offer):
    client.force_login(buyer.admin)
    before = money_rows()

    response = client.post(offer_url(offer, "offer-bid"), bid_data(buyer.organization, "100", "12"))

    assert response.status_code == 402
    alert = html(response).by_id("bid-form").find(css_class="alert-danger")
    assert alert.text() == (
        "The wallet's available balance does not cover this. Available: 1,000.00 USD; "
        "this needs 1,200.00 USD."
    )
    assert money_rows() == before
    assert available(buyer.organization) == Decimal("1000")


def test_a_bid_past_the_budget_is_a_402_with_the_budget(client, buyer, offer):
    billing.budget_set(
        organization=buyer.organization, monthly_limit=Decimal("150"), alert_thresholds=[]
    )
    client.force_login(buyer.admin)
    before = money_rows()

    response = client.post(offer_url(offer, "offer-bid"), bid_data(buyer.organization, "80", "2"))

    assert response.status_code == 402
    alert = html(response).by_id("bid-form").find(css_class="alert-danger")
    assert alert.text() == (
        "This would take the organization past its monthly budget. Monthly limit: 150.00 USD; "
        "committed and spent: 0.00 USD; this needs 160.00 USD."
    )
    assert money_rows() == before


def test_a_plain_member_cannot_bid_for_the_organization(client, buyer, offer):
    client.force_login(buyer.member)
    before = money_rows()

    response = client.post(offer_url(offer, "offer-bid"), bid_data(buyer.organization, "1", "2"))

    assert response.status_code == 403
    assert money_rows() == before


def test_a_bid_for_an_organization_the_user_is_not_in_is_refused_beside_the_field(
    client, buyer, offer
):
    stranger = OrganizationFactory(name="Stranger Lab")
    client.force_login(buyer.admin)
    before = money_rows()

    response = client.post(offer_url(offer, "offer-bid"), bid_data(stranger, "1", "2"))

    assert response.status_code == 400
    _, errors = field_block(html(response), "bid-organization")
    assert errors == ["You are not a member of this organization."]
    assert money_rows() == before


def test_a_bid_after_the_auction_closed_is_a_409_on_top_of_the_form(client, buyer, offer):
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    client.force_login(buyer.admin)
    before = money_rows()

    response = client.post(offer_url(offer, "offer-bid"), bid_data(buyer.organization, "1", "2"))

    assert response.status_code == 409
    page = html(response)
    # The page no longer offers the forms; the refusal is said at the top of the order column.
    assert page.by_id("order-refused").text() == "This offer no longer takes bids or purchases."
    assert page.by_id("bid-form") is None
    assert money_rows() == before


def test_an_admin_buys_now_and_lands_on_the_allocations(client, buyer, offer):
    client.force_login(buyer.admin)

    response = client.post(
        offer_url(offer, "offer-buy"),
        {"buy-organization": str(buyer.organization.uuid), "buy-quantity": "10"},
    )

    assert response.status_code == 302
    assert response["Location"] == reverse(
        "organization-allocations", args=[buyer.organization.uuid]
    )
    allocation = Allocation.objects.get()
    assert (allocation.organization, allocation.offer, allocation.quantity) == (
        buyer.organization,
        offer,
        10,
    )
    assert (allocation.unit_price, allocation.source) == (
        Decimal("3.00"),
        Allocation.Source.BUY_NOW,
    )
    assert allocation.hold.amount == Decimal("30")
    assert available(buyer.organization) == Decimal("970")
    page = html(client.get(response["Location"]))
    assert messages_of(page) == ["Quantum Lab bought 10 units; 30.00 USD is held for the window."]


@pytest.mark.parametrize(
    ("quantity", "status", "field", "message"),
    [
        ("101", 409, "quantity", "Only 100 units are left for sale."),
        ("0", 400, "quantity", "At least 1."),
    ],
)
def test_a_refused_purchase_is_shown_beside_the_quantity(
    client, buyer, offer, quantity, status, field, message
):
    client.force_login(buyer.admin)
    before = money_rows()

    response = client.post(
        offer_url(offer, "offer-buy"),
        {"buy-organization": str(buyer.organization.uuid), "buy-quantity": quantity},
    )

    assert response.status_code == status
    _, errors = field_block(html(response), f"buy-{field}")
    assert errors == [message]
    assert money_rows() == before
    assert not Allocation.objects.exists()


def test_a_purchase_past_the_cap_per_buyer_names_the_cap(client, buyer, owner):
    offer = OfferFactory(partition=owner.partition, buy_now_price=Decimal("3"), max_per_buyer=20)
    services.offer_buy(actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=15)
    client.force_login(buyer.admin)

    response = client.post(
        offer_url(offer, "offer-buy"),
        {"buy-organization": str(buyer.organization.uuid), "buy-quantity": "6"},
    )

    assert response.status_code == 409
    _, errors = field_block(html(response), "buy-quantity")
    assert errors == [
        "This would take the organization past the offer's cap per buyer. The cap is 20 units; "
        "your organization has 15 already."
    ]
    assert Allocation.objects.count() == 1


def test_withdrawing_a_bid_releases_its_hold(client, buyer, offer):
    bid = services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=40, price="2.5"
    )
    client.force_login(buyer.admin)

    response = client.post(reverse("bid-withdraw", args=[bid.uuid]))

    assert response.status_code == 302
    assert response["Location"] == offer_url(offer)
    bid.refresh_from_db()
    assert bid.status == Bid.Status.WITHDRAWN
    assert bid.hold.amount == Decimal("0")
    assert available(buyer.organization) == Decimal("1000")
    page = html(client.get(response["Location"]))
    assert messages_of(page) == [
        "The bid is withdrawn; its hold of 100.00 USD is back in the available balance."
    ]
    row = body_rows(page, "bids")[0]
    assert cell_texts(row)[4:6] == ["released", "Withdrawn"]
    assert row.find("form") is None


def test_a_member_cannot_withdraw_and_an_outsider_does_not_see_the_bid(client, buyer, offer):
    bid = services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=40, price="2.5"
    )
    before = money_rows()

    client.force_login(buyer.member)
    as_member = client.post(reverse("bid-withdraw", args=[bid.uuid]))
    member_page = html(client.get(offer_url(offer)))
    client.force_login(buyer.outsider)
    as_outsider = client.post(reverse("bid-withdraw", args=[bid.uuid]))

    assert as_member.status_code == 403
    assert as_outsider.status_code == 404
    # The member sees the bid, without a withdraw button.
    assert body_rows(member_page, "bids")[0].find("form") is None
    bid.refresh_from_db()
    assert bid.status == Bid.Status.OPEN
    assert money_rows() == before
    assert available(buyer.organization) == Decimal("900")


def test_a_bid_cannot_be_withdrawn_once_the_auction_closed(client, buyer, offer):
    bid = services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=40, price="2.5"
    )
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    client.force_login(buyer.admin)

    response = client.post(reverse("bid-withdraw", args=[bid.uuid]), follow=True)

    assert messages_of(html(response)) == ["This offer no longer takes bids or purchases."]
    assert body_rows(html(response), "bids")[0].find("form") is None
    bid.refresh_from_db()
    assert bid.status == Bid.Status.OPEN
    assert available(buyer.organization) == Decimal("900")


def test_the_owner_cancels_an_offer_nobody_bid_on(client, owner, offer):
    client.force_login(owner.admin)

    response = client.post(offer_url(offer, "offer-cancel"), follow=True)

    offer.refresh_from_db()
    assert offer.status == Offer.Status.CANCELLED
    page = html(response)
    assert messages_of(page) == ["The offer of 100 Core-hours on hpc1/debug is cancelled."]
    assert page.by_id("offer-status").text() == "Cancelled"
    assert page.by_id("orders-closed") is not None


def test_an_offer_with_bids_is_not_cancelled(client, buyer, owner, offer):
    services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=1, price="1"
    )
    client.force_login(owner.admin)

    response = client.post(offer_url(offer, "offer-cancel"), follow=True)

    assert messages_of(html(response)) == ["An offer with bids or sales cannot be cancelled."]
    offer.refresh_from_db()
    assert offer.status == Offer.Status.OPEN


@pytest.mark.parametrize("who", ["member", "stranger"])
def test_only_an_admin_of_the_owner_cancels(client, buyer, owner, offer, who):
    client.force_login(owner.member if who == "member" else buyer.admin)

    response = client.post(offer_url(offer, "offer-cancel"))

    assert response.status_code == 403
    offer.refresh_from_db()
    assert offer.status == Offer.Status.OPEN


def test_a_cancel_only_goes_back_to_a_page_of_this_site(client, owner, offer):
    client.force_login(owner.admin)

    response = client.post(offer_url(offer, "offer-cancel"), {"next": "https://evil.example/"})

    assert response["Location"] == offer_url(offer)


def test_a_cleared_offer_shows_its_clearing_price_and_the_team_its_won_bid(client, buyer, offer):
    services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=40, price="2.5"
    )
    services.auction_clear(offer_id=offer.pk, now=offer.auction_closes_at)
    client.force_login(buyer.admin)

    page = html(client.get(offer_url(offer)))

    assert page.by_id("offer-status").text() == "Cleared"
    assert page.by_id("offer-clearing-price").text() == (
        "1.00 USD per unit, 40 units sold at auction"
    )
    assert page.by_id("bid-form") is None
    assert cell_texts(body_rows(page, "bids")[0])[4:6] == [
        "kept by the allocation",
        "Won 40 units at 1.00",
    ]


# --- Price history -----------------------------------------------------------------------------


def cleared(offer: Offer, bids: list[tuple[Organization, int, str]]) -> Offer:
    for organization, quantity, price in bids:
        actor = Membership.objects.filter(organization=organization, role="admin").first()
        services.bid_place(actor=actor, offer=offer, quantity=quantity, price=price)
    services.auction_clear(offer_id=offer.pk, now=offer.auction_closes_at)
    offer.refresh_from_db()
    return offer


@pytest.fixture
def history(buyer, owner) -> list[Offer]:
    """Three cleared auctions on hpc1/debug, cpu, a day apart: two sold at their reserve (1.80,
    then 2.50), one sold nothing; and one on GPU-hours at 9.00."""
    start = timezone.now() + datetime.timedelta(hours=1)
    team = buyer.organization

    def closing(days: int, **fields: Any) -> Offer:
        fields.setdefault("partition", owner.partition)
        return OfferFactory(
            auction_closes_at=start + datetime.timedelta(days=days),
            window_start=start + datetime.timedelta(days=days),
            **fields,
        )

    return [
        cleared(closing(0, quantity=10, reserve_price=Decimal("1.8")), [(team, 10, "2")]),
        cleared(closing(1, quantity=10, reserve_price=Decimal("2.5")), [(team, 10, "2.5")]),
        cleared(closing(2), []),
        cleared(
            closing(3, resource="gpu", quantity=5, reserve_price=Decimal("9")), [(team, 5, "9")]
        ),
    ]


def history_url(cluster: Any, partition: str = "debug", resource: str = "cpu") -> str:
    return f"{reverse('price-history')}?cluster={cluster}&partition={partition}&resource={resource}"


def test_the_price_history_lists_and_charts_each_clearing(client, user, owner, history):
    client.force_login(user)

    response = client.get(history_url(owner.cluster.uuid))

    assert response.status_code == 200
    page = html(response)
    assert page.find("h1").text() == (
        "Price history of hpc1/debug, core-hours: preemptible capacity"
    )
    rows = [cell_texts(row) for row in body_rows(page, "price-history")]
    assert rows == [
        [f"{offer.auction_closes_at:%Y-%m-%d %H:%M}", "hpc1", "debug", "Core-hours", price, sold]
        for offer, price, sold in [
            (history[0], "1.80", "10 / 10 core-hours"),
            (history[1], "2.50", "10 / 10 core-hours"),
            (history[2], "no sale", "0 / 100 core-hours"),
        ]
    ]
    # Chart.js draws the chart on the canvas from the points the page carries.
    assert page.by_id("price-chart").tag == "canvas"
    data = json.loads(page.by_id("price-chart-data").text())
    assert data == {
        "unit": "USD",
        "points": [
            {
                "x": int(history[0].auction_closes_at.timestamp() * 1000),
                "y": 1.8,
                "label": "1.80",
            },
            {
                "x": int(history[1].auction_closes_at.timestamp() * 1000),
                "y": 2.5,
                "label": "2.50",
            },
        ],
    }


def test_the_price_history_filters_by_resource_and_is_public(client, user, owner, history):
    client.force_login(user)

    page = html(client.get(history_url(owner.cluster.uuid, resource="gpu")))

    assert [cell_texts(row)[4] for row in body_rows(page, "price-history")] == ["9.00"]
    assert [
        point["label"] for point in json.loads(page.by_id("price-chart-data").text())["points"]
    ] == ["9.00"]


def test_the_price_history_of_an_unknown_cluster_is_an_error_beside_the_field(client, user):
    client.force_login(user)

    response = client.get(history_url(uuid.uuid4()))

    assert response.status_code == 400
    _, errors = field_block(html(response), "cluster")
    assert errors == ["No such cluster."]


def test_the_price_history_without_a_sale_says_so(client, user, owner):
    client.force_login(user)

    page = html(client.get(history_url(owner.cluster.uuid)))

    assert page.by_id("price-chart") is None
    assert page.by_id("price-chart-empty").text() == (
        "No auction has cleared with a sale here yet."
    )


def test_a_price_under_a_cent_keeps_every_digit_on_the_chart():
    moment = datetime.datetime(2030, 5, 1, 12, 0, tzinfo=UTC)
    offer = Offer(auction_closes_at=moment, clearing_price=Decimal("0.0125"))

    chart = price_chart([offer])

    assert chart == {
        "unit": "USD",
        "points": [{"x": 1903867200000, "y": 0.0125, "label": "0.0125"}],
    }


# --- A team's allocations ----------------------------------------------------------------------


def test_the_allocations_page_shows_allocations_and_bids(client, buyer, owner, offer):
    actor = membership(buyer.admin, buyer.organization)
    bought = services.offer_buy(actor=actor, offer=offer, quantity=10)
    auction = OfferFactory(partition=owner.partition, quantity=50)
    services.bid_place(actor=actor, offer=auction, quantity=20, price="2", min_quantity=5)
    services.auction_clear(offer_id=auction.pk, now=auction.auction_closes_at)
    open_offer = OfferFactory(partition=owner.partition)
    services.bid_place(actor=actor, offer=open_offer, quantity=7, price="1.25")
    client.force_login(buyer.member)

    response = client.get(reverse("organization-allocations", args=[buyer.organization.uuid]))

    assert response.status_code == 200
    page = html(response)
    allocations = {
        row.attrs["data-allocation"]: cell_texts(row) for row in body_rows(page, "allocations")
    }
    won = Allocation.objects.get(offer=auction)
    window = f"{offer.window_start:%Y-%m-%d %H:%M} → {offer.window_end:%Y-%m-%d %H:%M}"
    assert allocations[str(bought.uuid)] == [
        "hpc1", "debug", "Core-hours", "10", "0.00", "0.00", "10.00", "3.00", "30.00", window,
        "upcoming bought now",
    ]  # fmt: skip
    auction_window = f"{auction.window_start:%Y-%m-%d %H:%M} → {auction.window_end:%Y-%m-%d %H:%M}"
    assert allocations[str(won.uuid)] == [
        "hpc1", "debug", "Core-hours", "20", "0.00", "0.00", "20.00", "1.00", "20.00",
        auction_window,
        "upcoming won at auction",
    ]  # fmt: skip
    bids = [cell_texts(row)[1:] for row in body_rows(page, "organization-bids")]
    assert bids == [
        ["hpc1/debug core-hours", "7", "1.25", "Open", "0", "—", "8.75"],
        ["hpc1/debug core-hours", "20", "2.00", "Won", "20", "1.00", "kept by the allocation"],
    ]


def test_the_allocations_page_is_empty_for_a_new_team(client, team):
    client.force_login(team.admin)

    page = html(client.get(reverse("organization-allocations", args=[team.organization.uuid])))

    assert cell_texts(body_rows(page, "allocations")[0])[0].startswith("No allocations yet.")
    assert cell_texts(body_rows(page, "organization-bids")[0]) == ["No bids yet."]


def test_the_allocations_page_reads_the_same_number_of_queries_for_any_number_of_rows(
    client, buyer, owner
):
    actor = membership(buyer.admin, buyer.organization)
    url = reverse("organization-allocations", args=[buyer.organization.uuid])
    client.force_login(buyer.admin)

    def add(count: int) -> None:
        for _ in range(count):
            offer = OfferFactory(partition=owner.partition, buy_now_price=Decimal("1"))
            services.offer_buy(actor=actor, offer=offer, quantity=1)
            services.bid_place(actor=actor, offer=offer, quantity=1, price="1")

    add(1)
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    add(6)
    with CaptureQueriesContext(connection) as many:
        response = client.get(url)

    assert len(body_rows(html(response), "allocations")) == 7
    assert len(many) == len(few)


# --- An owner's clusters -----------------------------------------------------------------------


def clusters_url(organization: Organization) -> str:
    return reverse("organization-clusters", args=[organization.uuid])


def register_data(**changes: str) -> dict[str, str]:
    private, public = ssh_key_pair()
    data = {
        "name": "Tiny HPC",
        "ssh_host": "login.tiny-hpc.example.org",
        "ssh_port": "2222",
        "ssh_user": "computeshare",
        "ssh_private_key": private,
        "ssh_host_key": public,
        "account_mode": "managed",
        "slurm_account": "",
    }
    data.update(changes)
    return data


def test_members_see_the_clusters_and_only_admins_the_forms(client, owner):
    client.force_login(owner.member)
    as_member = html(client.get(clusters_url(owner.organization)))
    client.force_login(owner.admin)
    as_admin = html(client.get(clusters_url(owner.organization)))

    card = as_member.by_id(f"cluster-{owner.cluster.uuid}")
    assert card.find("h3").text() == "hpc1"
    assert card.find(data_field="status").text() == "Online"
    assert [
        cell_texts(row) for row in card.find(data_field="partitions").find("tbody").find_all("tr")
    ] == [["debug", "4", "256", "8", "1440 min", "up"]]
    assert card.find("form") is None
    assert "hx-get" not in card.attrs
    assert as_member.by_id("cluster-register") is None
    admin_card = as_admin.by_id(f"cluster-{owner.cluster.uuid}")
    assert admin_card.find("form").attrs["hx-post"] == reverse(
        "cluster-verify", args=[owner.cluster.uuid]
    )
    assert as_admin.by_id("cluster-register") is not None


def test_an_admin_registers_a_cluster(client, owner):
    client.force_login(owner.admin)
    data = register_data()

    response = client.post(clusters_url(owner.organization), data)

    assert response.status_code == 302
    cluster = Cluster.objects.get(name="Tiny HPC")
    assert (cluster.organization, cluster.status) == (owner.organization, "unverified")
    assert (cluster.ssh_host, cluster.ssh_port, cluster.ssh_user) == (
        "login.tiny-hpc.example.org",
        2222,
        "computeshare",
    )
    assert cluster.ssh_private_key == data["ssh_private_key"].strip() + "\n"
    assert cluster.ssh_host_key == data["ssh_host_key"]
    assert (cluster.account_mode, cluster.slurm_account) == ("managed", "")
    page = html(client.get(response["Location"]))
    assert messages_of(page) == [
        f"Tiny HPC is registered with host key {cluster.host_key_fingerprint}. "
        "Verify it to read its partitions."
    ]
    card = page.by_id(f"cluster-{cluster.uuid}")
    assert card.find(data_field="status").text() == "Unverified"
    assert card.find(data_field="fingerprint").text() == cluster.host_key_fingerprint
    assert cluster.host_key_fingerprint.startswith("SHA256:")
    # The private key is never shown again.
    assert data["ssh_private_key"].splitlines()[1] not in page.text()


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"ssh_host": "bad host;rm"}, "ssh_host", "A host name or an IP address."),
        (
            {"ssh_private_key": "not a key"},
            "ssh_private_key",
            "An unencrypted Ed25519, ECDSA or RSA private key in OpenSSH or PEM format.",
        ),
        (
            {"account_mode": "fixed"},
            "slurm_account",
            "The Slurm account every job runs under (fixed mode).",
        ),
        ({"name": "HPC1"}, "name", "Your organization has a cluster of this name."),
        ({"ssh_port": "70000"}, "ssh_port", "A port number from 1 to 65535."),
        ({"ssh_port": "port"}, "ssh_port", "Enter a whole number."),
    ],
)
def test_a_refused_registration_is_shown_beside_the_field(client, owner, changes, field, message):
    client.force_login(owner.admin)

    response = client.post(clusters_url(owner.organization), register_data(**changes))

    assert response.status_code == 400
    invalid, errors = field_block(html(response), field)
    assert errors == [message]
    assert "is-invalid" in invalid.classes
    assert Cluster.objects.count() == 1


def test_a_member_cannot_register_and_an_outsider_does_not_see_the_organization(
    client, owner, team
):
    client.force_login(owner.member)
    as_member = client.post(clusters_url(owner.organization), register_data())
    client.force_login(team.admin)
    as_outsider = client.post(clusters_url(owner.organization), register_data())

    assert as_member.status_code == 403
    assert as_outsider.status_code == 404
    assert Cluster.objects.count() == 1


def unverified_cluster(owner: Owner, port: int = 9) -> Cluster:
    """A cluster registered on a loopback port where nothing listens."""
    private, public = ssh_key_pair()
    return services.cluster_create(
        actor=membership(owner.admin, owner.organization),
        name="Loopback",
        ssh_host="127.0.0.1",
        ssh_port=port,
        ssh_user="computeshare",
        ssh_private_key=private,
        ssh_host_key=public,
        account_mode="managed",
    )


def test_verify_from_the_page_answers_the_polling_card(client, owner):
    cluster = unverified_cluster(owner)
    client.force_login(owner.admin)

    response = client.post(reverse("cluster-verify", args=[cluster.uuid]), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    verification = ClusterVerification.objects.get()
    assert (verification.cluster, verification.requested_by, verification.status) == (
        cluster,
        owner.admin,
        "running",
    )
    card = html(response).by_id(f"cluster-{cluster.uuid}")
    assert card.attrs["hx-get"] == reverse("cluster-verification", args=[cluster.uuid])
    assert card.attrs["hx-trigger"] == "every 1s"
    assert card.attrs["hx-swap"] == "outerHTML"
    progress = card.find(data_field="verification")
    assert progress.attrs["data-verification-status"] == "running"
    assert progress.text() == "Verifying: Waiting for a worker"
    assert "disabled" in card.find("button").attrs


def test_verify_without_javascript_goes_back_to_the_clusters_page(client, owner):
    cluster = unverified_cluster(owner)
    client.force_login(owner.admin)

    response = client.post(reverse("cluster-verify", args=[cluster.uuid]))

    assert response.status_code == 302
    assert response["Location"] == clusters_url(owner.organization)
    page = html(client.get(response["Location"]))
    card = page.by_id(f"cluster-{cluster.uuid}")
    assert card.attrs["hx-trigger"] == "every 1s"
    assert messages_of(page) == ["Verifying Loopback…"]


def test_a_member_cannot_verify_and_an_outsider_sees_no_verification(client, owner, team):
    cluster = unverified_cluster(owner)

    client.force_login(owner.member)
    as_member = client.post(reverse("cluster-verify", args=[cluster.uuid]))
    client.force_login(team.admin)
    as_outsider = client.post(reverse("cluster-verify", args=[cluster.uuid]))
    outsider_poll = client.get(reverse("cluster-verification", args=[cluster.uuid]))

    assert as_member.status_code == 403
    assert as_outsider.status_code == 404
    assert outsider_poll.status_code == 404
    assert not ClusterVerification.objects.exists()


def test_the_polled_card_ends_with_the_reason_a_cluster_is_unreachable(client, owner):
    cluster = unverified_cluster(owner)
    verification = services.cluster_verification_start(
        actor=membership(owner.admin, owner.organization), cluster=cluster
    )
    client.force_login(owner.member)
    url = reverse("cluster-verification", args=[cluster.uuid])
    running = client.get(url)

    services.cluster_verification_run(verification_id=verification.pk)
    done = client.get(url)

    assert running.status_code == 200
    assert "no-cache" in running["Cache-Control"]
    assert html(running).by_id(f"cluster-{cluster.uuid}").attrs["hx-trigger"] == "every 1s"
    card = html(done).by_id(f"cluster-{cluster.uuid}")
    assert "hx-trigger" not in card.attrs
    assert card.find(data_field="status").text() == "Unreachable"
    verification.refresh_from_db()
    assert verification.error_code == "cluster_unreachable"
    progress = card.find(data_field="verification")
    assert progress.attrs["data-verification-status"] == "failed"
    # One reason for every failure to connect, whatever it was (here: connection refused).
    assert verification.detail == f"The cluster could not be verified: {UNREACHABLE_REASON}"
    assert progress.text() == f"Unreachable: {verification.detail}"
    assert (
        card.find(data_field="status-detail").text()
        == Cluster.objects.get(pk=cluster.pk).status_detail
    )


@pytest.mark.slurm
def test_the_polled_card_shows_a_host_key_mismatch_with_both_fingerprints(
    client, owner, testcluster
):
    _, wrong_host_key = ssh_key_pair()
    cluster = services.cluster_create(
        actor=membership(owner.admin, owner.organization),
        name="Impostor",
        ssh_host=testcluster.host,
        ssh_port=testcluster.port,
        ssh_user=testcluster.user,
        ssh_private_key=testcluster.private_key,
        ssh_host_key=wrong_host_key,
        account_mode="managed",
    )
    verification = services.cluster_verification_start(
        actor=membership(owner.admin, owner.organization), cluster=cluster
    )
    services.cluster_verification_run(verification_id=verification.pk)
    client.force_login(owner.admin)

    card = html(client.get(reverse("cluster-verification", args=[cluster.uuid]))).by_id(
        f"cluster-{cluster.uuid}"
    )

    assert card.find(data_field="status").text() == "Host key mismatch"
    progress = card.find(data_field="verification").text()
    assert progress.startswith("Host key mismatch: The host offered a ssh-ed25519 key SHA256:")
    assert progress.endswith(f"the pinned key is {cluster.host_key_fingerprint}.")
    assert "hx-trigger" not in card.attrs
    assert not Partition.objects.filter(cluster=cluster).exists()


# --- An owner's offers -------------------------------------------------------------------------


def offers_url(organization: Organization) -> str:
    return reverse("organization-offers", args=[organization.uuid])


def local(moment: datetime.datetime) -> str:
    """A time as a `datetime-local` input sends it, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M")


@pytest.fixture
def times() -> dict[str, datetime.datetime]:
    now = timezone.now().astimezone(UTC).replace(second=0, microsecond=0)
    return {
        "closes": now + datetime.timedelta(hours=1),
        "start": now + datetime.timedelta(hours=2),
        "end": now + datetime.timedelta(days=30, hours=2),
    }


def offer_data(owner: Owner, times: dict[str, datetime.datetime], **changes: str) -> dict:
    data = {
        "cluster": str(owner.cluster.uuid),
        "partition": "debug",
        "resource": "cpu",
        "quantity": "500",
        "window_start": local(times["start"]),
        "window_end": local(times["end"]),
        "reserve_price": "1.25",
        "buy_now_price": "3",
        "auction_closes_at": local(times["closes"]),
        "max_per_buyer": "",
    }
    data.update(changes)
    return data


def test_an_admin_lists_an_offer_with_times_read_as_utc(client, owner, times):
    client.force_login(owner.admin)

    response = client.post(offers_url(owner.organization), offer_data(owner, times))

    assert response.status_code == 302
    assert response["Location"] == offers_url(owner.organization)
    offer = Offer.objects.get()
    assert (offer.cluster, offer.partition, offer.resource, offer.quantity) == (
        owner.cluster,
        owner.partition,
        "cpu",
        500,
    )
    assert (offer.window_start, offer.window_end, offer.auction_closes_at) == (
        times["start"],
        times["end"],
        times["closes"],
    )
    assert (offer.reserve_price, offer.buy_now_price, offer.max_per_buyer) == (
        Decimal("1.25"),
        Decimal("3"),
        None,
    )
    assert offer.created_by == owner.admin
    page = html(client.get(response["Location"]))
    assert messages_of(page) == [
        f"Listed 500 core-hours on hpc1/debug; the auction closes "
        f"{times['closes']:%Y-%m-%d %H:%M} UTC."
    ]
    row = body_rows(page, "organization-offers")[0]
    assert row.attrs["data-offer"] == str(offer.uuid)
    texts = cell_texts(row)
    assert texts[:3] == ["hpc1/debug", "Core-hours Preemptible", "0 / 500"]
    assert texts[4:6] == ["1.25", "3.00"]
    assert texts[7:10] == ["0 / 0", "Open", "—"]
    assert row.find("form").attrs["action"] == reverse("offer-cancel", args=[offer.uuid])


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"auction_closes_at": "end"},
            "auction_closes_at",
            "Must be before the window ends.",
        ),
        ({"buy_now_price": "1"}, "buy_now_price", "Must be at least the reserve price."),
        (
            {"quantity": "200000"},
            "quantity",
            "The partition has at most 184320 cpu units in this window.",
        ),
        (
            {"partition": "gpu"},
            "partition",
            "The cluster has no partition of this name that is up.",
        ),
        ({"reserve_price": "0"}, "reserve_price", "Must be more than zero."),
        ({"window_end": "start"}, "window_end", "Must be after the window starts."),
        (
            {"resource": "tpu"},
            "resource",
            "Select a valid choice. tpu is not one of the available choices.",
        ),
        ({"max_per_buyer": "501"}, "max_per_buyer", "Must not be more than the quantity."),
        ({"window_start": "tomorrow"}, "window_start", "Enter a valid date/time."),
    ],
)
def test_a_refused_offer_is_shown_beside_the_field_and_nothing_is_listed(
    client, owner, times, changes, field, message
):
    client.force_login(owner.admin)
    changes = {
        name: local(times[value]) if value in times else value for name, value in changes.items()
    }

    response = client.post(offers_url(owner.organization), offer_data(owner, times, **changes))

    assert response.status_code == 400
    invalid, errors = field_block(html(response), field)
    assert errors == [message]
    assert "is-invalid" in invalid.classes
    assert not Offer.objects.exists()


def test_a_partition_of_another_cluster_is_refused_by_the_service(client, owner, times):
    second = ClusterFactory(organization=owner.organization, name="hpc-b")
    PartitionFactory(cluster=second, name="long")
    client.force_login(owner.admin)

    response = client.post(
        offers_url(owner.organization), offer_data(owner, times, partition="long")
    )

    assert response.status_code == 400
    _, errors = field_block(html(response), "partition")
    assert errors == ["The cluster has no partition of this name that is up."]
    assert not Offer.objects.exists()


def test_an_offer_on_a_cluster_that_is_not_online_is_a_409_beside_the_cluster(client, owner, times):
    down = ClusterFactory(organization=owner.organization, name="down", status="unreachable")
    PartitionFactory(cluster=down, name="debug")
    client.force_login(owner.admin)

    response = client.post(
        offers_url(owner.organization), offer_data(owner, times, cluster=str(down.uuid))
    )

    assert response.status_code == 409
    page = html(response)
    _, errors = field_block(page, "cluster")
    assert errors == ["The cluster is not verified and online."]
    # Only online clusters are offered in the select.
    assert [option.text() for option in page.by_id("id_cluster").find_all("option")] == ["hpc1"]
    assert not Offer.objects.exists()


def test_members_see_the_offers_and_results_without_forms(client, buyer, owner, offer):
    services.bid_place(
        actor=membership(buyer.admin, buyer.organization), offer=offer, quantity=30, price="2"
    )
    services.auction_clear(offer_id=offer.pk, now=offer.auction_closes_at)
    fresh = OfferFactory(partition=owner.partition)
    client.force_login(owner.member)

    page = html(client.get(offers_url(owner.organization)))

    rows = {row.attrs["data-offer"]: row for row in body_rows(page, "organization-offers")}
    cleared_row = cell_texts(rows[str(offer.uuid)])
    assert cleared_row[2] == "30 / 100"
    assert cleared_row[7:10] == ["1 / 30", "Cleared", "30 units at 1.00"]
    assert cell_texts(rows[str(fresh.uuid)])[8] == "Open"
    assert rows[str(fresh.uuid)].find("form") is None
    assert page.by_id("offer-create") is None


def test_the_create_form_asks_for_an_online_cluster_first(client, team):
    client.force_login(team.admin)

    page = html(client.get(offers_url(team.organization)))

    assert page.by_id("offer-create") is None
    assert page.by_id("no-online-cluster") is not None


def test_a_member_cannot_list_and_an_outsider_does_not_see_the_organization(
    client, owner, team, times
):
    client.force_login(owner.member)
    as_member = client.post(offers_url(owner.organization), offer_data(owner, times))
    client.force_login(team.admin)
    as_outsider = client.post(offers_url(owner.organization), offer_data(owner, times))

    assert as_member.status_code == 403
    assert as_outsider.status_code == 404
    assert not Offer.objects.exists()


def test_cancelling_from_the_organization_offers_page_comes_back_to_it(client, owner, offer):
    client.force_login(owner.admin)
    url = offers_url(owner.organization)

    response = client.post(offer_url(offer, "offer-cancel"), {"next": url})

    assert response.status_code == 302
    assert response["Location"] == url
    offer.refresh_from_db()
    assert offer.status == Offer.Status.CANCELLED


# --- Found along the way -----------------------------------------------------------------------


def test_an_organization_id_that_is_not_a_uuid_is_not_found(team):
    with pytest.raises(NotFound):
        organization_selectors.membership_get_for_user(team.admin, "not-a-uuid")


def test_a_verification_whose_worker_vanished_stops_the_polling(client, owner):
    # Given a verification left `running` ten minutes ago (its worker died)
    cluster = unverified_cluster(owner)
    verification = services.cluster_verification_start(
        actor=membership(owner.admin, owner.organization), cluster=cluster
    )
    ClusterVerification.objects.filter(pk=verification.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=10)
    )
    client.force_login(owner.admin)

    # When the card is fetched
    card = html(client.get(reverse("cluster-verification", args=[cluster.uuid]))).by_id(
        f"cluster-{cluster.uuid}"
    )

    # Then it says so, stops polling and offers Verify again, which starts a new run
    assert "hx-trigger" not in card.attrs
    progress = card.find(data_field="verification")
    assert progress.attrs["data-verification-status"] == "failed"
    assert "No worker finished this verification; verify again." in progress.text()
    assert "disabled" not in card.find("button").attrs
    again = services.cluster_verification_start(
        actor=membership(owner.admin, owner.organization), cluster=cluster
    )
    assert again.pk != verification.pk


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("2.500000", "2.50"),
        ("0.020000", "0.02"),
        ("0.026000", "0.026"),
        ("0.012500", "0.0125"),
        ("12.000000", "12.00"),
    ],
)
def test_unit_prices_show_cents_or_every_significant_digit(stored, shown):
    from marketplace.templatetags.market import price

    assert price(Decimal(stored)) == shown


# --- The pool of tenant accounts ------------------------------------------------------------


def test_the_registration_form_prefills_the_pool_settings(client, owner):
    client.force_login(owner.admin)

    page = html(client.get(clusters_url(owner.organization)))

    group, _ = field_block(page, "tenant_group")
    sftp, _ = field_block(page, "sftp_server")
    assert group.attrs["value"] == "computeshare-tenants"
    assert sftp.attrs["value"] == "/usr/lib/openssh/sftp-server"
    assert group.parent.find(css_class="form-text").text() == (
        "The Unix group of tenant accounts that scripts/cluster-setup made: each team works as "
        "one of them."
    )
    assert sftp.parent.find(css_class="form-text").text() == (
        # (The page's text joins the parts of a sentence around <code> with spaces.)
        "The program as on the Subsystem sftp line of the login node's sshd_config ."
    )


def test_an_admin_registers_a_cluster_with_its_pool_settings(client, owner):
    client.force_login(owner.admin)

    response = client.post(
        clusters_url(owner.organization),
        register_data(tenant_group="hpc-tenants", sftp_server="/usr/libexec/openssh/sftp-server"),
    )
    defaults = client.post(
        clusters_url(owner.organization),
        register_data(name="Defaults", tenant_group="", sftp_server=""),
    )

    assert (response.status_code, defaults.status_code) == (302, 302)
    cluster = Cluster.objects.get(name="Tiny HPC")
    assert (cluster.tenant_group, cluster.sftp_server) == (
        "hpc-tenants",
        "/usr/libexec/openssh/sftp-server",
    )
    assert Cluster.objects.filter(
        name="Defaults",
        tenant_group="computeshare-tenants",
        sftp_server="/usr/lib/openssh/sftp-server",
    ).exists()
    card = html(client.get(clusters_url(owner.organization))).by_id(f"cluster-{cluster.uuid}")
    assert card.find(data_field="tenant-group").text() == "hpc-tenants"
    assert card.find(data_field="sftp-server").text() == "/usr/libexec/openssh/sftp-server"
    assert card.find(data_field="tenant-summary").text() == (
        "Each team works as one account of its own: this cluster serves up to 0 teams at once; "
        "0 accounts are free now."
    )
    assert [cell_texts(row) for row in card.find(data_field="tenant-accounts").find_all("tr")][
        1:
    ] == [
        [
            "No tenant accounts read yet: verifying the cluster reads the members of the group "
            "hpc-tenants ."
        ]
    ]


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"tenant_group": "Bad Group"}, "tenant_group"), ({"sftp_server": "sftp"}, "sftp_server")],
)
def test_a_refused_pool_setting_is_shown_beside_its_field(client, owner, changes, field):
    client.force_login(owner.admin)

    response = client.post(clusters_url(owner.organization), register_data(**changes))

    assert response.status_code == 400
    widget, errors = field_block(html(response), field)
    assert len(errors) == 1 and "is-invalid" in widget.classes
    assert Cluster.objects.count() == 1


STEPS = [
    {"key": "connect", "title": "Connect to 127.0.0.1:9 as computeshare", "status": "passed",
     "detail": ""},
    {"key": "pool", "title": "Tenant accounts of the group computeshare-tenants",
     "status": "passed", "detail": "2 accounts: cs-tenant-01, cs-tenant-02"},
    {"key": "gpus", "title": "Accounting records GPUs", "status": "warning",
     "detail": "gres/gpu is not in AccountingStorageTRES."},
    {"key": "sudo", "title": "sudo to each tenant without a password, and to nobody else",
     "status": "failed", "detail": "computeshare cannot act as cs-tenant-02 (password asked)."},
]  # fmt: skip


def step_rows(card: Node) -> list[tuple[str, str, str, str]]:
    return [
        (
            item.attrs["data-step"],
            item.attrs["data-status"],
            item.find(role="img").attrs["aria-label"],
            item.text(),
        )
        for item in card.find(data_field="verification-steps").find_all("li")
    ]


def test_the_card_shows_each_check_of_a_failed_verification_with_its_outcome(client, owner):
    cluster = unverified_cluster(owner)
    ClusterVerification.objects.create(
        cluster=cluster,
        status=ClusterVerification.Status.FAILED,
        steps=STEPS,
        error_code="cluster_misconfigured",
        detail="The cluster answered, but a check failed. sudo: cannot act as cs-tenant-02.",
        finished_at=timezone.now(),
    )
    Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.MISCONFIGURED)
    client.force_login(owner.member)

    card = html(client.get(reverse("cluster-verification", args=[cluster.uuid]))).by_id(
        f"cluster-{cluster.uuid}"
    )

    status = card.find(data_field="status")
    assert (status.text(), "text-bg-warning" in status.classes) == ("Misconfigured", True)
    assert card.find(data_field="verification").text() == (
        "Misconfigured: The cluster answered, but a check failed. sudo: cannot act as cs-tenant-02."
    )
    assert step_rows(card) == [
        ("connect", "passed", "Passed", "Connect to 127.0.0.1:9 as computeshare"),
        (
            "pool",
            "passed",
            "Passed",
            "Tenant accounts of the group computeshare-tenants 2 accounts: cs-tenant-01, "
            "cs-tenant-02",
        ),
        (
            "gpus",
            "warning",
            "Warning",
            "Accounting records GPUs gres/gpu is not in AccountingStorageTRES.",
        ),
        (
            "sudo",
            "failed",
            "Failed",
            "sudo to each tenant without a password, and to nobody else computeshare cannot "
            "act as cs-tenant-02 (password asked).",
        ),
    ]
    assert "hx-trigger" not in card.attrs


def test_the_polled_card_shows_the_checks_as_they_run(client, owner):
    cluster = unverified_cluster(owner)
    verification = services.cluster_verification_start(
        actor=membership(owner.admin, owner.organization), cluster=cluster
    )
    running = [*STEPS[:2], {"key": "sudo", "title": "sudo to each tenant", "status": "running",
                            "detail": ""}]  # fmt: skip
    ClusterVerification.objects.filter(pk=verification.pk).update(
        steps=running, step="sudo to each tenant"
    )
    client.force_login(owner.admin)

    card = html(client.get(reverse("cluster-verification", args=[cluster.uuid]))).by_id(
        f"cluster-{cluster.uuid}"
    )

    assert card.attrs["hx-trigger"] == "every 1s"
    assert card.find(data_field="verification").text() == "Verifying: sudo to each tenant"
    assert [row[:3] for row in step_rows(card)] == [
        ("connect", "passed", "Passed"),
        ("pool", "passed", "Passed"),
        ("sudo", "running", "Running"),
    ]
    # A run whose worker vanished shows the step it stopped at as stopped, not running.
    ClusterVerification.objects.filter(pk=verification.pk).update(
        created_at=timezone.now() - datetime.timedelta(minutes=10)
    )
    stale = html(client.get(reverse("cluster-verification", args=[cluster.uuid]))).by_id(
        f"cluster-{cluster.uuid}"
    )
    assert step_rows(stale)[-1][:3] == ("sudo", "stopped", "Stopped")
    assert "hx-trigger" not in stale.attrs


@dataclass
class Pool:
    cluster: Cluster
    buyer: OrganizationWithPeople
    quarantined: TenantAccount
    lease: TenantLease


REASON = "Left after the scrub: 1 process (sleep 600)."


@pytest.fixture
def pool(owner: Owner, buyer: OrganizationWithPeople) -> Pool:
    """The owner's `hpc1` with three tenant accounts: cs-tenant-01 leased to the buyer (which
    bought an allocation), cs-tenant-02 quarantined after the scrub of Rival Lab's lease
    failed, cs-tenant-03 available."""
    TenantAccount.objects.filter(cluster=owner.cluster, username__gt="cs-tenant-03").delete()
    allocation_bought(buyer.organization, partition=owner.partition, quantity=5)
    quarantined = TenantAccount.objects.get(cluster=owner.cluster, username="cs-tenant-02")
    lease = TenantLease.objects.create(
        account=quarantined,
        cluster=owner.cluster,
        organization=funded_organization("0", name="Rival Lab"),
        status=TenantLease.Status.FAILED,
        scrub_detail=REASON,
    )
    TenantAccount.objects.filter(pk=quarantined.pk).update(
        status=TenantAccount.Status.QUARANTINED, status_detail=REASON
    )
    quarantined.refresh_from_db()
    return Pool(owner.cluster, buyer, quarantined, lease)


def tenant_rows(card: Node) -> list[list[str]]:
    return [cell_texts(row) for row in card.find(data_field="tenant-accounts").find_all("tr")[1:]]


def test_the_owners_see_the_tenant_accounts_and_the_quarantined_ones_plainly(client, owner, pool):
    client.force_login(owner.member)
    as_member = html(client.get(clusters_url(owner.organization)))
    client.force_login(owner.admin)
    as_admin = html(client.get(clusters_url(owner.organization)))

    card = as_member.by_id(f"cluster-{owner.cluster.uuid}")
    assert card.find(data_field="tenant-summary").text() == (
        "Each team works as one account of its own: this cluster serves up to 3 teams at once; "
        "1 account is free now."
    )
    assert card.find(data_field="quarantined").text() == (
        "1 account quarantined: cs-tenant-02 . A scrub left something of a team behind, so no "
        "other team gets it until you have looked and an admin of Owner Lab has asked for "
        "another scrub. The reasons are below."
    )
    assert tenant_rows(card) == [
        ["cs-tenant-01", "Leased", "Quantum Lab", "never"],
        ["cs-tenant-02", f"Quarantined {REASON}", "Rival Lab", "never"],
        ["cs-tenant-03", "Available", "—", "never"],
    ]
    row = card.find(data_account="cs-tenant-02")
    assert "table-warning" in row.classes
    assert row.find(data_field="account-reason").text() == REASON
    # Only admins are offered the scrub, and only of the quarantined account.
    assert card.find(data_field="tenant-accounts").find("form") is None
    admin_card = as_admin.by_id(f"cluster-{owner.cluster.uuid}")
    forms = admin_card.find(data_field="tenant-accounts").find_all("form")
    url = reverse("tenant-account-scrub", args=[owner.cluster.uuid, "cs-tenant-02"])
    assert [(form.attrs["action"], form.attrs["hx-post"]) for form in forms] == [(url, url)]
    assert forms[0].find("input", name="csrfmiddlewaretoken") is not None
    assert forms[0].find("button").text() == "Scrub again"
    assert "asked for another scrub" in admin_card.find(data_field="quarantined").text()


def test_scrub_again_from_the_page_answers_the_card_that_follows_the_scrub(
    client, owner, pool, django_capture_on_commit_callbacks
):
    client.force_login(owner.admin)
    url = reverse("tenant-account-scrub", args=[owner.cluster.uuid, "cs-tenant-02"])

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(url, HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert len(callbacks) == 1  # the scrub task
    pool.lease.refresh_from_db()
    assert pool.lease.status == TenantLease.Status.ENDING
    card = html(response).by_id(f"cluster-{owner.cluster.uuid}")
    assert card.find(data_field="tenant-notice").text() == (
        "cs-tenant-02 is being scrubbed again; it returns to the pool if nothing is left, and "
        "stays quarantined with the reason otherwise."
    )
    row = card.find(data_account="cs-tenant-02")
    assert row.find(data_field="account-scrubbing").text() == "Being scrubbed again"
    assert row.find("form") is None
    # The card follows the scrub until it has ended.
    assert card.attrs["hx-get"] == reverse("cluster-verification", args=[owner.cluster.uuid])
    assert card.attrs["hx-trigger"] == "every 3s"


def test_scrub_again_without_javascript_goes_back_to_the_clusters_page(client, owner, pool):
    TenantLease.objects.filter(pk=pool.lease.pk).delete()  # quarantined by hand: no lease
    client.force_login(owner.admin)

    response = client.post(
        reverse("tenant-account-scrub", args=[owner.cluster.uuid, "cs-tenant-02"])
    )

    assert response.status_code == 302
    assert response["Location"] == clusters_url(owner.organization)
    page = html(client.get(response["Location"]))
    assert messages_of(page) == ["cs-tenant-02 is back in the pool: no team's lease was on it."]
    card = page.by_id(f"cluster-{owner.cluster.uuid}")
    assert card.find(data_field="quarantined") is None
    assert tenant_rows(card)[1] == ["cs-tenant-02", "Available", "—", "never", ""]


def test_scrubbing_an_account_that_is_not_quarantined_says_so(client, owner, pool):
    client.force_login(owner.admin)

    response = client.post(
        reverse("tenant-account-scrub", args=[owner.cluster.uuid, "cs-tenant-01"]),
        HTTP_HX_REQUEST="true",
    )

    assert response.status_code == 200
    card = html(response).by_id(f"cluster-{owner.cluster.uuid}")
    assert card.find(data_field="tenant-notice").text() == (
        "cs-tenant-01: Only a quarantined tenant account can be scrubbed and returned to the pool."
    )
    assert "alert-danger" in card.find(data_field="tenant-notice").classes
    assert TenantAccount.objects.get(username="cs-tenant-01", cluster=owner.cluster).status == (
        "leased"
    )


def test_only_an_admin_of_the_owners_scrubs_and_others_do_not_see_the_pool(client, owner, pool):
    url = reverse("tenant-account-scrub", args=[owner.cluster.uuid, "cs-tenant-02"])

    client.force_login(owner.member)
    as_member = client.post(url)
    client.force_login(pool.buyer.admin)
    as_buyer = client.post(url)
    unknown = client.post(
        reverse("tenant-account-scrub", args=[owner.cluster.uuid, "cs-tenant-99"])
    )
    client.logout()
    anonymous = client.post(url)

    assert (as_member.status_code, as_buyer.status_code, unknown.status_code) == (403, 404, 404)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    pool.lease.refresh_from_db()
    assert pool.lease.status == TenantLease.Status.FAILED
    assert TenantAccount.objects.get(pk=pool.quarantined.pk).status == "quarantined"


def test_the_offer_page_warns_a_team_when_no_account_is_free_for_it(client, owner, pool, offer):
    # The last free account goes to another team.
    allocation_bought(funded_organization("0"), partition=owner.partition, quantity=5)
    latecomer = MembershipFactory(
        organization=funded_organization("1000", name="Late Lab"), role=Membership.Role.ADMIN
    )
    client.force_login(latecomer.user)

    page = html(client.get(offer_url(offer)))

    assert page.by_id("offer-tenants").text() == (
        "This cluster serves up to 3 teams at once; 0 accounts are free now."
    )
    assert page.by_id("tenants-exhausted").text() == (
        "Every tenant account of hpc1 is leased to another team, and none of your "
        "organizations holds one there: each team works as an account of its own, so buying "
        "now or winning this auction would be refused until one frees."
    )
    # The forms stay: an account may free before the order.
    assert page.by_id("buy-form") is not None
    # A team that holds an account there is not warned: it keeps its account.
    client.force_login(pool.buyer.admin)
    assert html(client.get(offer_url(offer))).by_id("tenants-exhausted") is None


def test_a_purchase_refused_for_want_of_an_account_says_so_on_top_of_the_form(
    client, owner, pool, offer
):
    allocation_bought(funded_organization("0"), partition=owner.partition, quantity=5)
    latecomer = MembershipFactory(
        organization=funded_organization("1000", name="Late Lab"), role=Membership.Role.ADMIN
    )
    client.force_login(latecomer.user)
    before = money_rows()

    response = client.post(
        offer_url(offer, "offer-buy"),
        {"buy-organization": str(latecomer.organization.uuid), "buy-quantity": "10"},
    )

    assert response.status_code == 409
    form = html(response).by_id("buy-form")
    assert form.find(css_class="alert-danger").text() == (
        "Every tenant account of this cluster is leased to another team: the cluster serves at "
        "most as many teams at once as its owner gave it accounts for. This cluster serves up "
        "to 3 teams at once and 0 accounts are free now: try again when one frees."
    )
    assert money_rows() == before
    assert not Allocation.objects.filter(organization=latecomer.organization).exists()


def test_an_offer_on_the_local_backend_says_nothing_of_tenant_accounts(client, buyer):
    cluster = ClusterFactory(name="demo", backend=Cluster.Backend.LOCAL, tenant_group="")
    offer = OfferFactory(partition=PartitionFactory(cluster=cluster, name="local"))
    client.force_login(buyer.admin)

    page = html(client.get(offer_url(offer)))

    assert page.by_id("offer-tenants") is None
    assert page.by_id("tenants-exhausted") is None


def test_the_cluster_card_says_which_kinds_it_sells_and_why_not(client, owner):
    """Issue 27: what the last verification found each kind of capacity needs."""
    reason = "PreemptType is preempt/none: set PreemptType=preempt/qos in slurm.conf."
    Cluster.objects.filter(pk=owner.cluster.pk).update(
        sells_preemptible=False, preemptible_refusal=reason
    )
    client.force_login(owner.member)

    card = html(client.get(clusters_url(owner.organization))).by_id(f"cluster-{owner.cluster.uuid}")

    kinds = card.find(data_field="capacity-kinds")
    assert kinds.find(data_kind="preemptible").text() == f"Not preemptible capacity: {reason}"
    assert kinds.find(data_kind="reserved").text() == (
        "Reserved blocks: the platform makes a Slurm reservation for each."
    )


def test_a_cluster_on_the_local_backend_says_so_instead_of_an_empty_ssh_address(client):
    """Issue 30: the demo's cluster showed "SSH @:22" and "Pinned host key —"."""
    organization = OrganizationFactory(name="Demo Owners")
    member = MembershipFactory(organization=organization, role=Membership.Role.MEMBER).user
    cluster = ClusterFactory(
        organization=organization,
        name="demo",
        backend=Cluster.Backend.LOCAL,
        tenant_group="",
        ssh_host="",
        ssh_user="",
        host_key_fingerprint="",
    )
    client.force_login(member)

    card = html(client.get(clusters_url(organization))).by_id(f"cluster-{cluster.uuid}")

    terms = [term.text() for term in card.find("dl").find_all("dt")]
    assert "SSH" not in terms and "Pinned host key" not in terms
    assert terms[0] == "Runs on"
    assert card.find(data_field="backend").text() == (
        "The local backend, on this machine: its jobs run as processes beside this site "
        "(the demo's cluster), not over SSH, so there is no login node nor host key to show."
    )
    assert "@:" not in card.text()


def test_a_cluster_reached_over_ssh_still_shows_its_address_and_pinned_key(client, owner):
    fingerprint = "SHA256:4H7Q0bZ2xkqV9m1Xo5s3YwW8r6Tn0pL1cJd2Ee3Ff4g"
    Cluster.objects.filter(pk=owner.cluster.pk).update(host_key_fingerprint=fingerprint)
    client.force_login(owner.member)

    card = html(client.get(clusters_url(owner.organization))).by_id(f"cluster-{owner.cluster.uuid}")

    terms = [term.text() for term in card.find("dl").find_all("dt")]
    assert terms[:2] == ["SSH", "Pinned host key"]
    assert card.find(data_field="backend") is None
    assert card.find(data_field="fingerprint").text() == fingerprint
