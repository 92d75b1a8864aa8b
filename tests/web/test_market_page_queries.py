"""Query counts of the market's pages whose rows once cost a query each: the offer page read a
wallet per organization the user can buy for, and an owner's clusters page a verification and
a pool of tenant accounts per cluster. The same number of queries for one row and for ten."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing import services as billing
from computeshare.models import User
from marketplace.models import ClusterVerification, TenantAccount
from organizations.models import Membership, Organization
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    PartitionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def queries_of(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


def administered_team(user: User, name: str) -> Organization:
    organization = OrganizationFactory(name=name)
    billing.wallet_open(organization)
    billing.wallet_adjust(organization=organization, amount="100", memo="Funds", actor=None)
    MembershipFactory(organization=organization, user=user, role=Membership.Role.ADMIN)
    return organization


def test_the_offer_page_reads_the_buyers_wallets_together(client):
    offer = OfferFactory(buy_now_price=Decimal("3.00"))
    user = UserFactory()
    administered_team(user, "Team 0")
    client.force_login(user)
    url = reverse("offer-detail", args=[offer.uuid])
    one = queries_of(client, url)

    for index in range(1, 10):
        administered_team(user, f"Team {index}")
    ten = queries_of(client, url)

    response = client.get(url)
    assert len(response.context["wallets"]) == 10
    assert {wallet["available"] for wallet in response.context["wallets"].values()} == {
        "100.000000"
    }
    assert ten == one


def owned_cluster(organization: Organization, index: int) -> None:
    cluster = ClusterFactory(organization=organization, name=f"hpc{index}")
    PartitionFactory(cluster=cluster, name="debug")
    ClusterVerification.objects.create(cluster=cluster, status=ClusterVerification.Status.FAILED)
    ClusterVerification.objects.create(cluster=cluster, status=ClusterVerification.Status.SUCCEEDED)
    TenantAccount.objects.create(cluster=cluster, username="tenant01", home="/home/tenant01")


def test_the_clusters_page_reads_the_verifications_and_pools_together(client):
    organization = OrganizationFactory(name="Owner Lab")
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    owned_cluster(organization, 0)
    client.force_login(admin)
    url = reverse("organization-clusters", args=[organization.uuid])
    one = queries_of(client, url)

    for index in range(1, 10):
        owned_cluster(organization, index)
    ten = queries_of(client, url)

    cards = client.get(url).context["clusters"]
    assert len(cards) == 10
    assert {card["verification"].status for card in cards} == {"succeeded"}
    assert [len(card["tenant_accounts"]) for card in cards] == [
        TenantAccount.objects.filter(cluster=card["cluster"]).count() for card in cards
    ]
    assert all(
        "tenant01" in {account.username for account in card["tenant_accounts"]} for card in cards
    )
    assert ten == one
