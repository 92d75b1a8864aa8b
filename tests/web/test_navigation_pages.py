"""The site's navigation and the pages every visitor can reach from its header and footer,
through Django's test client: "Organizations" opens the list of the user's organizations, a
"Money" item carries the wallet's balance (one query, the organization the page is about), the
footer's Status link is a page saying what /healthz says, the favicon is never a 404, and the
API docs sit in the site's own page with a way back."""

from decimal import Decimal

import pytest
from django.contrib.staticfiles import finders
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


def test_the_footers_status_link_is_a_page_saying_what_healthz_says(client):
    home = client.get("/")
    response = client.get(reverse("status"))

    footer = html(home).find("footer")
    assert [link.attrs["href"] for link in footer.find_all("a")] == [
        reverse("api-docs"),
        reverse("status"),
    ]
    assert response.status_code == 200
    assert "no-cache" in response["Cache-Control"]
    page = html(response)
    assert page.by_id("status-summary").text() == ("ComputeShare is working: every part answered.")
    parts = {
        row.attrs["data-part"]: row.find(data_field="state").text()
        for row in page.by_id("status-parts").find_all("li")
    }
    assert parts == {"database": "Working", "broker": "Working"}
    # Monitors keep their JSON.
    assert client.get(reverse("healthz")).json() == {"database": "ok", "broker": "ok"}


def test_the_status_page_says_which_part_does_not_answer_with_healthzs_status(client, settings):
    # A real connection attempt to a loopback port where nothing listens.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"

    response = client.get(reverse("status"))

    assert response.status_code == 503
    page = html(response)
    assert page.by_id("status-summary").text().startswith("Part of ComputeShare is not answering")
    broker = page.by_id("status-parts").find(data_part="broker")
    assert broker.find(data_field="state").text() == "Not answering"
    assert broker.text().startswith("Task queue")


def test_the_favicon_is_at_the_address_browsers_ask_for(client):
    response = client.get("/favicon.ico")
    page = html(client.get("/"))

    assert response.status_code == 301
    assert response["Location"] == "/static/favicon.ico"
    icon = finders.find("favicon.ico")
    assert icon is not None
    with open(icon, "rb") as file:
        assert file.read(4) == b"\x00\x00\x01\x00"  # an ICO file's header
    icons = [link.attrs["href"] for link in page.find_all("link") if link.attrs["rel"] == "icon"]
    assert icons == ["/static/favicon.ico", "/static/favicon.svg"]


@pytest.mark.parametrize("signed_in", [False, True])
def test_the_api_docs_are_in_the_sites_page_with_a_way_back(client, user, signed_in):
    if signed_in:
        client.force_login(user)

    response = client.get(reverse("api-docs"))

    assert response.status_code == 200
    page = html(response)
    assert page.by_id("main-nav") is not None
    assert page.find("footer") is not None
    assert page.by_id("api-docs-back").attrs["href"] == reverse("home")
    assert page.by_id("swagger-ui") is not None
    scripts = [script.attrs.get("src") for script in page.find_all("script")]
    assert "/static/vendor/swagger-ui/swagger-ui-bundle.js" in scripts
    assert page.find("title").text() == "API docs · ComputeShare"
    tokens = page.by_id("api-docs-intro").find("a")
    assert tokens.attrs["href"] == reverse("api-tokens" if signed_in else "login")
