"""Ids as the pages show them (issue 30): each list the command-line client resolves a short id
from takes `id_prefix`, the start of an id, matched as a range of the unique index on `uuid`,
scoped as the list is, and refused with 400 when it is not the start of an id."""

import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from computeshare.ids import id_prefix_validate, is_id_prefix, uuid_prefix_range
from marketplace.models import Allocation, Bid, Cluster, Offer
from organizations.models import Membership
from scheduler_bridge.models import Job, JobState
from tests.conftest import client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.marketplace.test_market_api import place_bid

pytestmark = pytest.mark.django_db

API = "/api/v1"
# Two ids that share their first 8 characters, and one that does not.
TWIN_A = uuid.UUID("abcd1234-0000-4000-8000-000000000001")
TWIN_B = uuid.UUID("abcd1234-ffff-4000-8000-000000000002")
LONER = uuid.UUID("1decda79-2d50-402d-a43a-48c9cf1c773d")


def renamed(model: type, pk: int, new: uuid.UUID) -> None:
    model.objects.filter(pk=pk).update(uuid=new)  # type: ignore[attr-defined]


def ids_of(answer) -> list[str]:
    assert answer.status_code == 200, answer.content
    return sorted(row["id"] for row in answer.json()["results"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1decda79", True),
        ("1DECDA79", True),
        ("1decda79-2d50", True),
        ("1decda792d50", True),
        ("1decda79-2d50-402d-a43a-48c9cf1c773d", True),
        ("1decda792d50402da43a48c9cf1c773d", True),
        ("1dec-da79", False),  # a dash where the id has none
        ("1decda79--", False),
        ("1decda7g", False),
        ("1decda792d50402da43a48c9cf1c773d0", False),  # longer than an id
    ],
)
def test_what_starts_an_id(text, expected):
    assert is_id_prefix(text) is expected


def test_a_prefix_is_the_range_of_the_ids_it_starts():
    assert uuid_prefix_range("1decda79-2D") == (
        uuid.UUID("1decda79-2d00-0000-0000-000000000000"),
        uuid.UUID("1decda79-2dff-ffff-ffff-ffffffffffff"),
    )


@pytest.mark.parametrize("text", ["abc", "", "1dec-", "not-hex!"])
def test_fewer_than_four_digits_or_not_hex_is_refused(text):
    with pytest.raises(Exception, match="The start of an id"):
        id_prefix_validate(text)


def test_the_offers_list_finds_offers_by_the_start_of_their_id_without_a_token():
    # Given three offers, two of whose ids start alike,
    twin_a, twin_b, loner = OfferFactory(), OfferFactory(), OfferFactory()
    renamed(Offer, twin_a.pk, TWIN_A)
    renamed(Offer, twin_b.pk, TWIN_B)
    renamed(Offer, loner.pk, LONER)
    anonymous = APIClient()

    # when a visitor asks for each start,
    both = anonymous.get(f"{API}/offers/", {"id_prefix": "abcd1234"})
    one = anonymous.get(f"{API}/offers/", {"id_prefix": "1DECDA79"})
    narrowed = anonymous.get(f"{API}/offers/", {"id_prefix": "abcd1234-ffff"})
    none = anonymous.get(f"{API}/offers/", {"id_prefix": "00000000"})
    bad = anonymous.get(f"{API}/offers/", {"id_prefix": "xyz"})

    # then each answer holds exactly the offers whose id starts so.
    assert ids_of(both) == [str(TWIN_A), str(TWIN_B)]
    assert ids_of(one) == [str(LONER)]
    assert ids_of(narrowed) == [str(TWIN_B)]
    assert ids_of(none) == []
    assert bad.status_code == 400
    assert bad.json()["code"] == "invalid"
    assert "id_prefix" in bad.json()["extra"]["fields"]


def test_offers_and_the_price_history_are_read_without_a_token_as_with_one(team):
    offer = OfferFactory()
    signed_in = client_for(team.member)
    anonymous = APIClient()

    for path in ("/offers/", f"/offers/{offer.uuid}/", "/offers/price-history/"):
        answer = anonymous.get(f"{API}{path}")
        assert answer.status_code == 200, (path, answer.content)
        assert answer.json() == signed_in.get(f"{API}{path}").json(), path
    # Writing still needs a token.
    refused = anonymous.post(f"{API}/offers/{offer.uuid}/buy/", {}, format="json")
    assert refused.status_code == 401
    assert refused.json()["code"] == "not_authenticated"


def test_bids_allocations_and_clusters_by_the_start_of_their_id_only_the_callers(team):
    # Given the team's two allocations and two bids whose ids start alike, and an outsider's
    # allocation whose id starts so too,
    first = allocation_bought(team.organization, quantity=2, price="1.00")
    second = allocation_bought(team.organization, quantity=2, price="1.00")
    outsider = funded_organization("100")
    theirs = allocation_bought(outsider, quantity=2, price="1.00")
    renamed(Allocation, first.pk, TWIN_A)
    renamed(Allocation, second.pk, TWIN_B)
    renamed(Allocation, theirs.pk, uuid.UUID("abcd1234-7777-4000-8000-000000000003"))
    billing_team = funded_organization("100")
    admin = MembershipFactory(organization=billing_team, role=Membership.Role.ADMIN).user
    offer = OfferFactory(reserve_price=Decimal("1.00"))
    bids = [place_bid(billing_team, offer, 1, "1.00"), place_bid(billing_team, offer, 2, "1.00")]
    renamed(Bid, bids[0].pk, TWIN_A)
    renamed(Bid, bids[1].pk, LONER)
    cluster = ClusterFactory()
    PartitionFactory(cluster=cluster)
    renamed(Cluster, cluster.pk, LONER)
    member = client_for(team.member)

    # when each asks for the start of the ids,
    allocations = member.get(f"{API}/allocations/", {"id_prefix": "abcd1234"})
    bid_twins = client_for(admin).get(f"{API}/bids/", {"id_prefix": "abcd1234"})
    bid_none = member.get(f"{API}/bids/", {"id_prefix": "1decda79"})
    clusters = member.get(f"{API}/clusters/", {"id_prefix": "1decda79"})

    # then they find their own, never another organization's.
    assert ids_of(allocations) == [str(TWIN_A), str(TWIN_B)]
    assert ids_of(bid_twins) == [str(TWIN_A)]
    assert ids_of(bid_none) == []
    assert ids_of(clusters) == [str(LONER)]


def test_jobs_by_the_start_of_their_id_read_the_index_not_every_row(team):
    allocation = allocation_bought(team.organization, quantity=10, price="1.00")
    jobs = [
        Job.objects.create(
            allocation=allocation,
            organization=team.organization,
            cluster=allocation.cluster,
            name=f"job-{index}",
            script="#!/bin/bash\ntrue\n",
            time_limit_minutes=1,
            partition_name=allocation.partition.name,
            reserved_units=Decimal(0),
            state=JobState.QUEUED,
            submitted_by=team.member,
        )
        for index in range(3)
    ]
    renamed(Job, jobs[0].pk, TWIN_A)
    renamed(Job, jobs[1].pk, LONER)
    member = client_for(team.member)

    with CaptureQueriesContext(connection) as queries:
        answer = member.get(f"{API}/jobs/", {"id_prefix": "1decda79"})

    assert ids_of(answer) == [str(LONER)]
    listing = [query["sql"] for query in queries if 'FROM "scheduler_bridge_job"' in query["sql"]]
    assert listing, [query["sql"] for query in queries]
    # A range of the uuid, which the unique index answers, rather than a cast to text.
    assert all('"scheduler_bridge_job"."uuid" >=' in sql for sql in listing), listing
    assert all("::text" not in sql for sql in listing), listing
    assert member.get(f"{API}/jobs/", {"id_prefix": "12"}).status_code == 400
