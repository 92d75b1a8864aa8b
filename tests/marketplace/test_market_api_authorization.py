"""Who may call which market endpoint (docs/api.md: clusters, offers, bids, allocations),
as one table: each role against each endpoint, and a refusal changes nothing.

The rules the table encodes: offers and the price history are readable by anyone, without a
token (their pages are public); clusters are readable by anyone signed in; creating a
cluster needs admin of the organization in the body; changing or verifying a cluster and
creating or cancelling its offers need admin of the cluster's organization (others see the
cluster, so they get 403); buying and bidding need admin of the organization in the body (its
members get 403, anyone not in it 400 on `organization`); bids and allocations are visible only
to the members of the organization that holds them (404 for everyone else); withdrawing a bid
needs admin of its organization."""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from billing import services as billing
from computeshare.models import User
from marketplace import services
from marketplace.models import Allocation, Bid, Cluster, ClusterVerification, Offer
from organizations.models import Membership, Organization
from tests.conftest import client_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    funded_organization,
)
from tests.marketplace.test_market_api import (
    API,
    OWNER_CLUSTER_FIELDS,
    iso,
    new_key_pair,
    snapshot,
    whole_hour,
)

pytestmark = pytest.mark.django_db

ROLES = ("owner_admin", "owner_member", "team_admin", "team_member", "outsider", "anonymous")

# The owner sells the cluster's capacity; the team has a bid on `{offer}` and an allocation
# bought from it; `{spare}` is an offer nobody bid on; the outsider is the admin of an unrelated
# organization. Bodies name the owner (cluster) or the team (buy, bid) as `organization`.
# fmt: off
MATRIX: dict[str, tuple[int, int, int, int, int, int]] = {
    #                                     owner   owner   team    team    out-    anony-
    #                                     admin   member  admin   member  sider   mous
    "GET /clusters/":                    (200,    200,    200,    200,    200,    401),
    "POST /clusters/":                   (201,    403,    400,    400,    400,    401),
    "GET /clusters/{cluster}/":          (200,    200,    200,    200,    200,    401),
    "PATCH /clusters/{cluster}/":        (200,    403,    403,    403,    403,    401),
    "POST /clusters/{cluster}/verify/":  (202,    403,    403,    403,    403,    401),
    "GET /offers/":                      (200,    200,    200,    200,    200,    200),
    "POST /offers/":                     (201,    403,    403,    403,    403,    401),
    "GET /offers/{offer}/":              (200,    200,    200,    200,    200,    200),
    "POST /offers/{offer}/buy/":         (400,    400,    201,    403,    400,    401),
    "POST /offers/{offer}/bids/":        (400,    400,    201,    403,    400,    401),
    "POST /offers/{spare}/cancel/":      (200,    403,    403,    403,    403,    401),
    "POST /offers/{spare}/extend/":      (200,    403,    403,    403,    403,    401),
    "GET /clusters/{cluster}/partitions/debug/calendar/":
                                         (200,    200,    200,    200,    200,    401),
    "GET /clusters/{cluster}/partitions/debug/idle/":
                                         (200,    200,    403,    403,    403,    401),
    "GET /clusters/{cluster}/track-record/":
                                         (200,    200,    200,    200,    200,    401),
    "GET /offers/price-history/":        (200,    200,    200,    200,    200,    200),
    "GET /bids/":                        (200,    200,    200,    200,    200,    401),
    "GET /bids/{bid}/":                  (404,    404,    200,    200,    404,    401),
    "DELETE /bids/{bid}/":               (404,    404,    204,    403,    404,    401),
    "GET /allocations/":                 (200,    200,    200,    200,    200,    401),
    "GET /allocations/{allocation}/":    (404,    404,    200,    200,    404,    401),
}

# What each role finds in the lists and the cluster: the team's bid and allocation are listed to
# the team's members only; the cluster's connection fields are shown to the owner's only.
VISIBLE: dict[str, tuple[bool, bool, bool, bool, bool]] = {
    #                                     owner   owner   team    team    out-
    #                                     admin   member  admin   member  sider
    "GET /bids/":                        (False,  False,  True,   True,   False),
    "GET /allocations/":                 (False,  False,  True,   True,   False),
    "GET /clusters/{cluster}/":          (True,   True,   False,  False,  False),
}
# fmt: on

CODES = {400: "invalid", 401: "not_authenticated", 403: "permission_denied", 404: "not_found"}


@dataclass
class World:
    people: dict[str, User | None]
    owner: Organization
    team: Organization
    cluster: Cluster
    offer: Offer
    spare: Offer
    bid: Bid
    allocation: Allocation

    def client(self, role: str) -> APIClient:
        user = self.people[role]
        return APIClient() if user is None else client_for(user)

    def path(self, endpoint: str) -> tuple[str, str]:
        method, template = endpoint.split(" ")
        path = template.format(
            cluster=self.cluster.uuid,
            offer=self.offer.uuid,
            spare=self.spare.uuid,
            bid=self.bid.uuid,
            allocation=self.allocation.uuid,
        )
        return method.lower(), f"{API}{path}"

    def body(self, endpoint: str) -> dict[str, Any]:
        if endpoint == "POST /clusters/":
            client_key, host_key = new_key_pair(), new_key_pair()
            return {
                "organization": str(self.owner.uuid),
                "name": "Frontier",
                "ssh_host": "login.frontier.example.org",
                "ssh_user": "svc_share",
                "ssh_private_key": client_key.private,
                "ssh_host_key": host_key.public,
            }
        if endpoint == "POST /offers/":
            closes = whole_hour(days=1)
            return {
                "cluster": str(self.cluster.uuid),
                "partition": "debug",
                "resource": "cpu",
                "quantity": 50,
                "window_start": iso(closes + timedelta(days=1)),
                "window_end": iso(closes + timedelta(days=5)),
                "reserve_price": "0.50",
                "auction_closes_at": iso(closes),
            }
        if endpoint == "PATCH /clusters/{cluster}/":
            return {"ssh_port": 2200}
        if endpoint.endswith("/extend/"):
            return {"quantity": 150}
        if endpoint.endswith("/buy/"):
            return {"organization": str(self.team.uuid), "quantity": 5}
        if endpoint.endswith("/bids/"):
            return {"organization": str(self.team.uuid), "quantity": 5, "price": "2"}
        return {}


@pytest.fixture
def world(db: None) -> World:
    owner = OrganizationFactory(name="Hopper Lab")
    billing.wallet_open(owner)
    owner_admin = MembershipFactory(organization=owner, role=Membership.Role.ADMIN).user
    owner_member = MembershipFactory(organization=owner, role=Membership.Role.MEMBER).user
    cluster = ClusterFactory(organization=owner, name="hopper")
    partition = PartitionFactory(cluster=cluster, name="debug")
    team = funded_organization("1000", name="Quantum Lab")
    team_admin = MembershipFactory(organization=team, role=Membership.Role.ADMIN)
    team_member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    outsider = MembershipFactory(
        organization=funded_organization("1000", name="Unrelated Lab"), role=Membership.Role.ADMIN
    ).user
    offer = OfferFactory(partition=partition, buy_now_price=Decimal("3.00"))
    spare = OfferFactory(partition=partition)
    bid = services.bid_place(actor=team_admin, offer=offer, quantity=10, price="2")
    allocation = services.offer_buy(actor=team_admin, offer=offer, quantity=5)
    # One cleared offer, so that the price history has a row to show.
    cleared = OfferFactory(partition=partition)
    Offer.objects.filter(pk=cleared.pk).update(auction_closes_at=whole_hour(days=-1))
    services.auction_clear(offer_id=cleared.pk)
    people = {
        "owner_admin": owner_admin,
        "owner_member": owner_member,
        "team_admin": team_admin.user,
        "team_member": team_member,
        "outsider": outsider,
        "anonymous": None,
    }
    return World(people, owner, team, cluster, offer, spare, bid, allocation)


def matrix_cases() -> list[Any]:
    cases = []
    for endpoint, statuses in MATRIX.items():
        for role, status in zip(ROLES, statuses, strict=True):
            cases.append(pytest.param(endpoint, role, status, id=f"{endpoint} {role}"))
    return cases


@pytest.mark.parametrize(("endpoint", "role", "expected"), matrix_cases())
def test_authorization_matrix(world: World, endpoint, role, expected):
    method, path = world.path(endpoint)
    before = snapshot()

    answer = getattr(world.client(role), method)(path, world.body(endpoint), format="json")

    assert answer.status_code == expected, answer.content
    if expected >= 400:
        body = answer.json()
        assert body["code"] == CODES[expected], body
        if expected == 400:
            assert list(body["extra"]["fields"]) == ["organization"], body
        assert snapshot() == before
    elif method == "get":
        assert snapshot() == before
    elif expected == 204:
        assert Bid.objects.get(pk=world.bid.pk).status == Bid.Status.WITHDRAWN
    elif expected == 202:
        # A verification is queued for a worker (none runs in this rolled-back test): the
        # market is as it was, with one verification running.
        assert snapshot() == before
        [queued] = ClusterVerification.objects.filter(cluster=world.cluster)
        assert answer.json()["verification"]["id"] == str(queued.uuid)
        assert (answer.json()["verification"]["status"], queued.status) == ("running", "running")
    else:
        assert snapshot() != before
        if expected == 201:
            assert answer.json()["id"]


@pytest.mark.parametrize("role", ROLES[:-1])
@pytest.mark.parametrize("endpoint", list(VISIBLE))
def test_what_each_role_sees(world: World, endpoint, role):
    method, path = world.path(endpoint)

    answer = getattr(world.client(role), method)(path)

    assert answer.status_code == 200
    visible = VISIBLE[endpoint][ROLES.index(role)]
    body = answer.json()
    if endpoint == "GET /bids/":
        assert [row["id"] for row in body["results"]] == ([str(world.bid.uuid)] if visible else [])
    elif endpoint == "GET /allocations/":
        expected = [str(world.allocation.uuid)] if visible else []
        assert [row["id"] for row in body["results"]] == expected
    else:
        assert set(body) & OWNER_CLUSTER_FIELDS == (OWNER_CLUSTER_FIELDS if visible else set())
