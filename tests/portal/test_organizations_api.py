"""An organization through the API (portal.api, ADR 0026): created, listed and shown to its
members only, with its refusals. Every refusal also checks that nothing was written."""

import uuid

import pytest

from computeshare.models import ApiToken, IdempotencyRecord, User
from organizations.models import Invitation, Membership, Organization
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def snapshot() -> tuple[int, int, int, int, int, int]:
    return (
        User.objects.count(),
        Organization.objects.count(),
        Membership.objects.count(),
        Invitation.objects.count(),
        ApiToken.objects.count(),
        IdempotencyRecord.objects.count(),
    )


def test_create_organization_makes_the_caller_admin(user):
    response = client_for(user).post(
        "/api/v1/organizations/", {"name": "  Photon   Lab "}, format="json"
    )

    assert response.status_code == 201
    organization = Organization.objects.get()
    assert response.json()["id"] == str(organization.uuid)
    assert response.json()["name"] == "Photon Lab"
    assert response.json()["role"] == "admin"
    assert Membership.objects.get(organization=organization).user == user
    assert Membership.objects.get(organization=organization).role == "admin"


@pytest.mark.parametrize("name", ["", "   ", "x" * 121])
def test_create_organization_with_a_bad_name_is_invalid_and_writes_nothing(user, name):
    before = snapshot()

    response = client_for(user).post("/api/v1/organizations/", {"name": name}, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "name" in response.json()["extra"]["fields"]
    assert snapshot() == before


def test_organization_names_are_unique_whatever_their_case(team, user):
    before = snapshot()

    response = client_for(user).post(
        "/api/v1/organizations/", {"name": "QUANTUM lab"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["extra"]["fields"] == {
        "name": ["An organization with this name exists."]
    }
    assert snapshot() == before


def test_organization_list_shows_only_the_callers_and_is_paginated(team):
    response = client_for(team.admin).get("/api/v1/organizations/?page_size=1")

    assert response.status_code == 200
    assert response.json() == {
        "count": 1,
        "next": None,
        "previous": None,
        "results": [{"id": str(team.organization.uuid), "name": "Quantum Lab", "role": "admin"}],
    }


def test_organization_list_query_count_does_not_grow_with_organizations(
    user, django_assert_max_num_queries
):
    from tests.factories import MembershipFactory

    for _ in range(30):
        MembershipFactory(user=user)
    client = client_for(user)

    with django_assert_max_num_queries(4):
        response = client.get("/api/v1/organizations/?page_size=200")

    assert response.json()["count"] == 30


def test_organization_detail_for_a_member(team):
    response = client_for(team.member).get(f"/api/v1/organizations/{team.organization.uuid}/")

    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(team.organization.uuid)
    assert body["name"] == "Quantum Lab"
    assert body["role"] == "member"


def test_another_organizations_id_is_404(team):
    response = client_for(team.outsider).get(f"/api/v1/organizations/{team.organization.uuid}/")

    assert response.status_code == 404
    assert response.json() == {"detail": "No such organization.", "code": "not_found", "extra": {}}


def test_an_unknown_or_malformed_id_is_404_in_the_error_shape(team):
    client = client_for(team.admin)

    unknown = client.get(f"/api/v1/organizations/{uuid.uuid4()}/")
    malformed = client.get("/api/v1/organizations/not-a-uuid/")

    assert unknown.status_code == 404
    assert unknown.json()["code"] == "not_found"
    assert malformed.status_code == 404
    assert malformed.json()["code"] == "not_found"
