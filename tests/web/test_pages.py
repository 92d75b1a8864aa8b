"""The identity and organization pages through Django's test client (the browser test walks
the same path in Chromium)."""

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import services
from billing.models import ReferenceKind
from computeshare.models import User
from organizations.models import Invitation, Membership, Organization
from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db


def test_home_page_for_visitors_and_redirect_for_users(client, user):
    visitor = client.get("/")
    client.force_login(user)
    signed_in = client.get("/")

    assert visitor.status_code == 200
    assert b"Run on someone else" in visitor.content
    assert signed_in.status_code == 302
    assert signed_in["Location"] == reverse("dashboard")


def test_sign_up_logs_the_new_user_in(client):
    response = client.post(
        reverse("signup"),
        {
            "username": "ada",
            "email": "ada@example.org",
            "password1": "a-long-passphrase-42",
            "password2": "a-long-passphrase-42",
        },
    )

    assert response.status_code == 302
    assert User.objects.get(username="ada").email == "ada@example.org"
    assert client.get(reverse("dashboard")).context["user"].username == "ada"


def test_sign_up_errors_are_shown_beside_the_fields(client):
    response = client.post(
        reverse("signup"),
        {"username": "ada", "email": "not-an-email", "password1": "x", "password2": "y"},
    )

    assert response.status_code == 200
    content = response.content.decode()
    assert "is-invalid" in content
    assert "Enter a valid email address." in content
    assert not User.objects.filter(username="ada").exists()


def test_pages_need_a_login(client, team):
    for url in (
        reverse("dashboard"),
        reverse("api-tokens"),
        reverse("organization-detail", args=[team.organization.uuid]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


def test_login_and_logout(client, user):
    response = client.post(reverse("login"), {"username": user.username, "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard")

    logout = client.post(reverse("logout"))
    assert logout.status_code == 302
    assert client.get(reverse("dashboard")).status_code == 302


def test_wrong_login_shows_an_error(client, user):
    response = client.post(reverse("login"), {"username": user.username, "password": "wrong"})

    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_organization_page_lists_members_and_roles(client, team):
    client.force_login(team.member)

    response = client.get(reverse("organization-detail", args=[team.organization.uuid]))

    content = response.content.decode()
    assert response.status_code == 200
    assert team.admin.username in content
    assert team.member.username in content
    assert "Only an admin of Quantum Lab can add members." in content


def test_organization_page_shows_the_wallet_and_an_open_budget_alert(client, team):
    services.wallet_credit(
        organization=team.organization, amount=Decimal("90"), idempotency_reference="t"
    )
    services.budget_set(
        organization=team.organization, monthly_limit=Decimal("100"), alert_thresholds=[80]
    )
    services.hold_place(
        organization=team.organization, amount=Decimal("85"), reference_kind=ReferenceKind.BID
    )
    client.force_login(team.member)

    content = client.get(reverse("organization-detail", args=[team.organization.uuid])).content

    assert b"Money: 5.00 USD available" in content
    assert b"Quantum Lab has reached 80% of its budget for" in content


def test_an_outsider_gets_404_on_the_organization_page(client, team):
    client.force_login(team.outsider)

    response = client.get(reverse("organization-detail", args=[team.organization.uuid]))

    assert response.status_code == 404


def test_admin_invites_a_member_from_the_page(client, team):
    UserFactory(username="grace")
    client.force_login(team.admin)

    response = client.post(
        reverse("organization-detail", args=[team.organization.uuid]),
        {"username": "grace", "role": "admin"},
        follow=True,
    )

    assert response.status_code == 200
    assert b"grace is invited as Admin. They join once they accept." in response.content
    assert not Membership.objects.filter(user__username="grace").exists()
    assert Invitation.objects.get(invitee__username="grace").role == "admin"


def test_member_form_errors_are_beside_the_fields(client, team):
    client.force_login(team.admin)
    before = Invitation.objects.count()

    response = client.post(
        reverse("organization-detail", args=[team.organization.uuid]),
        {"username": "grace", "role": "owner"},
    )

    assert response.status_code == 400
    assert b"Select a valid choice. owner is not one of the available choices." in (
        response.content
    )
    assert Invitation.objects.count() == before


def test_a_member_cannot_add_members_from_the_page(client, team):
    UserFactory(username="grace")
    client.force_login(team.member)

    response = client.post(
        reverse("organization-detail", args=[team.organization.uuid]),
        {"username": "grace", "role": "member"},
    )

    assert response.status_code == 403
    assert b"Only an admin of this organization can invite members." in response.content
    assert not Invitation.objects.exists()


def test_create_organization_from_the_page(client, user):
    client.force_login(user)

    response = client.post(reverse("organization-create"), {"name": "Fusion Lab"})

    organization = Organization.objects.get(name="Fusion Lab")
    assert response.status_code == 302
    assert response["Location"] == reverse("organization-detail", args=[organization.uuid])


def test_the_tokens_page_is_in_the_menu_and_at_the_old_address(client, user):
    client.force_login(user)

    dashboard = client.get(reverse("dashboard"))
    old_address = client.get("/account/token/")

    assert f'href="{reverse("api-tokens")}">API tokens</a>' in dashboard.content.decode()
    assert old_address.status_code == 302
    assert old_address["Location"] == reverse("api-tokens")


def test_static_libraries_are_served_locally(client):
    response = client.get("/")

    content = response.content.decode()
    assert "/static/vendor/bootstrap/css/bootstrap.min.css" in content
    assert "/static/vendor/htmx/htmx.min.js" in content
    # Every script, stylesheet and image the page loads is the site's own: no CDN, no other
    # host. (The page's text is not searched for "cdn": a random CSRF token can spell it.)
    loaded = re.findall(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="([^"]*)"', content)
    assert loaded
    assert [url for url in loaded if not url.startswith("/") or url.startswith("//")] == []


def test_api_schema_and_docs(client, user):
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    client.force_login(user)
    docs = client.get("/api/v1/docs/")

    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in (
        "/api/v1/auth/token/",
        "/api/v1/me/",
        "/api/v1/organizations/",
        "/api/v1/organizations/{organization_id}/",
        "/api/v1/organizations/{organization_id}/members/",
    ):
        assert path in paths
    assert docs.status_code == 200
