"""The capacity calendar through the API: the calendar's hours, a listing or an extension
refused with `partition_capacity_exceeded` and the hours that clash (nothing written), and
the endpoints in the OpenAPI schema. Who may call them is in the authorization matrix."""

from datetime import timedelta

import pytest

from marketplace.models import Offer
from organizations.models import Membership
from tests.conftest import client_for
from tests.factories import ClusterFactory, MembershipFactory, PartitionFactory
from tests.marketplace.test_market_api import API, iso, snapshot, whole_hour

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


@pytest.fixture
def owner() -> Membership:
    cluster = ClusterFactory(name="hopper")
    PartitionFactory(cluster=cluster, name="batch", cpus=16, gpus=2)
    return MembershipFactory(organization=cluster.organization, role=Membership.Role.ADMIN)


def listing(owner: Membership, start, hours: int, quantity: int) -> dict:
    return {
        "cluster": str(owner.organization.clusters.get().uuid),
        "partition": "batch",
        "resource": "cpu",
        "quantity": quantity,
        "window_start": iso(start),
        "window_end": iso(start + hours * HOUR),
        "reserve_price": "1.00",
        "auction_closes_at": iso(start - HOUR),
    }


def test_the_calendar_shows_what_is_sold_and_free_in_each_hour(owner):
    start = whole_hour(days=2)
    client = client_for(owner.user)
    assert (
        client.post(f"{API}/offers/", listing(owner, start, 3, 30), format="json").status_code
        == 201
    )
    cluster = owner.organization.clusters.get()

    answer = client.get(
        f"{API}/clusters/{cluster.uuid}/partitions/batch/calendar/",
        {"start": iso(start - HOUR), "hours": 5},
    )

    assert answer.status_code == 200, answer.content
    assert answer.json() == {
        "cluster": str(cluster.uuid),
        "partition": "batch",
        "resource": "cpu",
        "capacity_per_hour": 16,
        "hours": [
            {"start": iso(start - HOUR), "sold": "0.00", "free": "16.00"},
            {"start": iso(start), "sold": "10.00", "free": "6.00"},
            {"start": iso(start + HOUR), "sold": "10.00", "free": "6.00"},
            {"start": iso(start + 2 * HOUR), "sold": "10.00", "free": "6.00"},
            {"start": iso(start + 3 * HOUR), "sold": "0.00", "free": "16.00"},
        ],
    }
    gpus = client.get(
        f"{API}/clusters/{cluster.uuid}/partitions/batch/calendar/",
        {"start": iso(start), "hours": 1, "resource": "gpu"},
    ).json()
    assert (gpus["capacity_per_hour"], gpus["hours"]) == (
        2,
        [{"start": iso(start), "sold": "0.00", "free": "2.00"}],
    )


def test_a_partition_name_with_a_nul_is_404_not_a_server_error(owner):
    client_for(owner.user).post(
        f"{API}/offers/", listing(owner, whole_hour(days=2), 3, 30), format="json"
    )
    cluster = owner.organization.clusters.get()

    answer = client_for(owner.user).get(f"{API}/clusters/{cluster.uuid}/partitions/b%00/calendar/")

    assert (answer.status_code, answer.json()["code"]) == (404, "not_found")


def test_a_listing_that_would_oversell_an_hour_is_refused_with_the_hours(owner):
    start = whole_hour(days=2)
    client = client_for(owner.user)
    client.post(f"{API}/offers/", listing(owner, start, 3, 30), format="json")
    before = snapshot()

    answer = client.post(f"{API}/offers/", listing(owner, start + 2 * HOUR, 2, 20), format="json")

    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert body["code"] == "partition_capacity_exceeded"
    assert body["extra"] == {
        "partition": "batch",
        "resource": "cpu",
        "capacity_per_hour": 16,
        "hour_count": 1,
        "hours": [
            {
                "start": (start + 2 * HOUR).isoformat(),
                "sold": "10.00",
                "asked": "10.00",
                "capacity": 16,
            }
        ],
    }
    assert snapshot() == before


def test_an_offer_is_extended_into_free_hours_and_refused_past_them(owner):
    start = whole_hour(days=2)
    client = client_for(owner.user)
    offer_id = client.post(f"{API}/offers/", listing(owner, start, 3, 30), format="json").json()[
        "id"
    ]
    client.post(f"{API}/offers/", listing(owner, start + 3 * HOUR, 1, 16), format="json")

    grown = client.post(f"{API}/offers/{offer_id}/extend/", {"quantity": 48}, format="json")
    before = snapshot()
    refused = client.post(
        f"{API}/offers/{offer_id}/extend/", {"window_end": iso(start + 4 * HOUR)}, format="json"
    )
    shrunk = client.post(f"{API}/offers/{offer_id}/extend/", {"quantity": "47"}, format="json")

    assert grown.status_code == 200, grown.content
    assert (grown.json()["quantity"], grown.json()["window_end"]) == ("48", iso(start + 3 * HOUR))
    assert refused.status_code == 409
    assert refused.json()["code"] == "partition_capacity_exceeded"
    assert refused.json()["extra"]["hours"][0]["start"] == (start + 3 * HOUR).isoformat()
    assert shrunk.status_code == 400
    assert shrunk.json()["extra"]["fields"] == {"quantity": ["At least 48: an offer only grows."]}
    assert snapshot() == before


def test_an_extension_after_the_auction_closed_is_refused(owner):
    start = whole_hour(days=2)
    client = client_for(owner.user)
    offer_id = client.post(f"{API}/offers/", listing(owner, start, 3, 30), format="json").json()[
        "id"
    ]
    Offer.objects.filter(uuid=offer_id).update(status=Offer.Status.CANCELLED)

    answer = client.post(f"{API}/offers/{offer_id}/extend/", {"quantity": 31}, format="json")

    assert (answer.status_code, answer.json()["code"]) == (409, "offer_not_extendable")


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({"hours": 0}, 400, "invalid"),
        ({"hours": 841}, 400, "invalid"),
        ({"resource": "ram"}, 400, "invalid"),
        ({"start": "yesterday"}, 400, "invalid"),
    ],
)
def test_bad_calendar_queries_are_refused(owner, query, status, code):
    cluster = owner.organization.clusters.get()

    answer = client_for(owner.user).get(
        f"{API}/clusters/{cluster.uuid}/partitions/batch/calendar/", query
    )

    assert (answer.status_code, answer.json()["code"]) == (status, code)


def test_an_unknown_partition_has_no_calendar(owner):
    cluster = owner.organization.clusters.get()

    answer = client_for(owner.user).get(
        f"{API}/clusters/{cluster.uuid}/partitions/nosuch/calendar/"
    )

    assert (answer.status_code, answer.json()["code"]) == (404, "not_found")


def test_the_schema_describes_the_calendar_and_the_extension(client):
    schema = client.get(f"{API}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    calendar = schema["paths"]["/api/v1/clusters/{cluster_id}/partitions/{partition}/calendar/"]
    extend = schema["paths"]["/api/v1/offers/{offer_id}/extend/"]
    assert calendar["get"]["operationId"] == "clusters_partitions_calendar"
    assert extend["post"]["operationId"] == "offers_extend"
    assert (
        "partition_capacity_exceeded" in schema["paths"]["/api/v1/offers/"]["post"]["description"]
    )
