"""The site's navigation and the pages every visitor can reach from its header and footer,
through Django's test client: "Organizations" opens the list of the user's organizations, a
"Money" item carries the wallet's balance (one query, the organization the page is about)."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from billing import services as billing
from organizations.models import Membership
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.web.test_money_pages import html

pytestmark = pytest.mark.django_db


def funded(name: str, amount: str):
    organization = OrganizationFactory(name=name)
    billing.wallet_open(organization)
    billing.wallet_adjust(organization=organization, amount=Decimal(amount), memo="F", actor=None)
    return organization


def navigation_links(response) -> dict[str, str]:
    """The main menu's links: their text, to where they go."""
    menu = html(response).by_id("main-nav")
    return {link.text(): link.attrs["href"] for link in menu.find_all("a")}


def test_organizations_in_the_menu_opens_the_list_of_the_users_organizations(client, team):
    second = OrganizationFactory(name="Aurora Lab")
    MembershipFactory(organization=second, user=team.member, role=Membership.Role.ADMIN)
    OrganizationFactory(name="Not Theirs")
    client.force_login(team.member)

    dashboard = client.get(reverse("dashboard"))
    response = client.get(reverse("organization-list"))

    links = navigation_links(dashboard)
    assert links["Organizations"] == reverse("organization-list")
    assert links["Dashboard"] == reverse("dashboard")
    assert response.status_code == 200
    rows = html(response).by_id("organization-list").find_all("li")
    assert [(row.find("a").text(), row.find(data_field="role").text()) for row in rows] == [
        ("Aurora Lab", "Admin"),
        ("Quantum Lab", "Member"),
    ]
    assert [link.attrs["href"] for link in rows[1].find_all("a")] == [
        reverse("organization-detail", args=[team.organization.uuid]),
        reverse("organization-dashboard", args=[team.organization.uuid]),
        reverse("organization-money", args=[team.organization.uuid]),
    ]
    # The page's own menu item is the active one.
    active = html(response).by_id("main-nav").find(css_class="active")
    assert active.text() == "Organizations"


def test_the_organizations_list_of_someone_in_none_says_how_to_join(client, user):
    client.force_login(user)

    response = client.get(reverse("organization-list"))

    assert (
        html(response)
        .by_id("organization-list-empty")
        .text()
        .startswith("You are not in an organization yet.")
    )
    # Nobody's money to show: no Money item.
    assert "Money" not in " ".join(navigation_links(response))


def test_the_organizations_list_needs_a_login(client):
    response = client.get(reverse("organization-list"))

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_the_menus_money_item_shows_the_balance_of_the_organization_the_page_is_about(client):
    first = funded("Alpha Team", "120.5")
    second = funded("Beta Team", "7")
    user = UserFactory()
    for organization in (first, second):
        MembershipFactory(organization=organization, user=user)
    client.force_login(user)

    anywhere = html(client.get(reverse("offer-list")))
    on_second = html(client.get(reverse("organization-detail", args=[second.uuid])))
    chosen = html(client.get(reverse("dashboard"), {"organization": str(second.uuid)}))

    # The first by name, as the dashboard chooses, unless the page is about another.
    money = anywhere.by_id("nav-money")
    assert money.attrs["href"] == reverse("organization-money", args=[first.uuid])
    assert anywhere.by_id("nav-wallet").text() == "Alpha Team has 120.50 USD"
    assert anywhere.by_id("nav-wallet").attrs["title"] == "Available to Alpha Team"
    for page in (on_second, chosen):
        assert page.by_id("nav-money").attrs["href"] == reverse(
            "organization-money", args=[second.uuid]
        )
        assert page.by_id("nav-wallet").text() == "Beta Team has 7.00 USD"


def test_the_menu_shows_no_wallet_of_an_organization_the_user_is_not_in(client, team):
    elsewhere = funded("Elsewhere", "999")
    client.force_login(team.member)

    page = html(client.get(reverse("offer-list"), {"organization": str(elsewhere.uuid)}))

    assert page.by_id("nav-money").attrs["href"] == reverse(
        "organization-money", args=[team.organization.uuid]
    )
    assert "Elsewhere" not in page.by_id("nav-wallet").text()


def test_the_header_wallet_costs_one_query_and_none_for_visitors(client, team):
    client.force_login(team.member)

    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("invitations")).status_code == 200
    with CaptureQueriesContext(connection) as visitor_queries:
        client.logout()
        assert client.get(reverse("offer-list")).status_code == 200

    # The invitations page reads no money of its own: every read of an account is the header's.
    accounts = [query["sql"] for query in queries if '"billing_account"' in query["sql"]]
    assert len(accounts) == 1
    assert not [query for query in visitor_queries if '"billing_account"' in query["sql"]]
