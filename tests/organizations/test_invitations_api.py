"""Invitations (issue 12, item 4): an admin invites, the invitee accepts or declines; the answer
never tells whether a name exists; members leave; the last admin stays."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from organizations.models import Invitation, Membership
from tests.conftest import client_for
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def invite(team, username: str, role: str = "member", actor=None):
    return client_for(actor or team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/members/",
        {"username": username, "role": role},
        format="json",
    )


def pending_list(team, actor=None):
    return client_for(actor or team.admin).get(
        f"/api/v1/organizations/{team.organization.uuid}/invitations/"
    )


def memberships(team) -> dict[str, str]:
    return dict(
        Membership.objects.filter(organization=team.organization).values_list(
            "user__username", "role"
        )
    )


# --- invite, accept, decline, cancel -------------------------------------------------------------


def test_invite_then_accept_makes_a_member_with_the_invited_role(team):
    grace = UserFactory(username="grace")
    invited = invite(team, "grace", role="admin")
    invitation_id = invited.json()["id"]

    mine = client_for(grace).get("/api/v1/invitations/")
    accepted = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/accept/")

    assert invited.status_code == 201
    assert mine.status_code == 200
    assert mine.json()["count"] == 1
    row = mine.json()["results"][0]
    assert row["id"] == invitation_id
    assert row["organization"] == {"id": str(team.organization.uuid), "name": "Quantum Lab"}
    assert row["role"] == "admin"
    assert row["invited_by"] == team.admin.username
    assert row["status"] == "pending"
    assert accepted.status_code == 200
    assert accepted.json()["status"] == "accepted"
    assert accepted.json()["answered_at"] is not None
    membership = Membership.objects.get(organization=team.organization, user=grace)
    assert membership.role == "admin"
    assert membership.added_by == team.admin
    assert client_for(grace).get("/api/v1/invitations/").json()["count"] == 0
    assert pending_list(team).json()["count"] == 0


def test_decline_closes_the_invitation_and_adds_nobody(team):
    grace = UserFactory(username="grace")
    invitation_id = invite(team, "grace").json()["id"]

    declined = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/decline/")

    assert declined.status_code == 200
    assert declined.json()["status"] == "declined"
    assert "grace" not in memberships(team)
    assert Invitation.objects.get(uuid=invitation_id).status == "declined"


@pytest.mark.parametrize("answer", ["accept", "decline"])
@pytest.mark.parametrize("first", ["accept", "decline"])
def test_answering_twice_is_409_and_changes_nothing(team, first, answer):
    grace = UserFactory(username="grace")
    invitation_id = invite(team, "grace").json()["id"]
    client_for(grace).post(f"/api/v1/invitations/{invitation_id}/{first}/")
    before = memberships(team)

    again = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/{answer}/")

    assert again.status_code == 409
    assert again.json()["code"] == "invitation_not_pending"
    assert set(again.json()) == {"detail", "code", "extra"}
    assert memberships(team) == before
    expected = "accepted" if first == "accept" else "declined"
    assert Invitation.objects.get(uuid=invitation_id).status == expected


def test_admin_lists_and_cancels_a_pending_invitation(team):
    grace = UserFactory(username="grace")
    invitation_id = invite(team, "grace").json()["id"]

    listed = pending_list(team)
    cancelled = client_for(team.admin).post(
        f"/api/v1/organizations/{team.organization.uuid}/invitations/{invitation_id}/cancel/"
    )
    accept = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/accept/")

    assert [row["id"] for row in listed.json()["results"]] == [invitation_id]
    assert listed.json()["results"][0]["username"] == "grace"
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert accept.status_code == 409
    assert accept.json()["code"] == "invitation_not_pending"
    assert "grace" not in memberships(team)
    assert pending_list(team).json()["count"] == 0


def test_a_member_cannot_list_or_cancel_invitations(team):
    UserFactory(username="grace")
    invitation_id = invite(team, "grace").json()["id"]

    listed = pending_list(team, actor=team.member)
    cancelled = client_for(team.member).post(
        f"/api/v1/organizations/{team.organization.uuid}/invitations/{invitation_id}/cancel/"
    )
    as_outsider = client_for(team.outsider).post(
        f"/api/v1/organizations/{team.organization.uuid}/invitations/{invitation_id}/cancel/"
    )

    assert listed.status_code == 403
    assert cancelled.status_code == 403
    assert cancelled.json()["code"] == "permission_denied"
    assert as_outsider.status_code == 404
    assert Invitation.objects.get(uuid=invitation_id).status == "pending"


def test_an_expired_invitation_is_409_and_can_be_sent_again(team):
    grace = UserFactory(username="grace")
    invitation_id = invite(team, "grace").json()["id"]
    Invitation.objects.filter(uuid=invitation_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    mine = client_for(grace).get("/api/v1/invitations/")
    accepted = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/accept/")
    again = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/decline/")
    listed = pending_list(team)
    reinvited = invite(team, "grace")

    assert mine.json()["count"] == 0
    assert accepted.status_code == 409
    assert accepted.json()["code"] == "invitation_expired"
    assert again.status_code == 409
    assert again.json()["code"] == "invitation_expired"
    assert Invitation.objects.get(uuid=invitation_id).status == "expired"
    assert "grace" not in memberships(team)
    assert listed.json()["count"] == 0
    assert reinvited.status_code == 201
    assert reinvited.json()["id"] != invitation_id


def test_the_expiry_is_the_configured_number_of_days(team, settings):
    settings.INVITATION_EXPIRY_DAYS = 3
    UserFactory(username="grace")
    started = timezone.now()

    response = invite(team, "grace")

    invitation = Invitation.objects.get(uuid=response.json()["id"])
    assert (
        started + timedelta(days=3) <= invitation.expires_at <= timezone.now() + timedelta(days=3)
    )


def test_someone_elses_invitation_is_404(team):
    UserFactory(username="grace")
    stranger = UserFactory(username="mallory")
    invitation_id = invite(team, "grace").json()["id"]

    for answer in ("accept", "decline"):
        response = client_for(stranger).post(f"/api/v1/invitations/{invitation_id}/{answer}/")
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"
    # Not even the admin who sent it can answer it.
    as_inviter = client_for(team.admin).post(f"/api/v1/invitations/{invitation_id}/accept/")

    assert as_inviter.status_code == 404
    assert client_for(stranger).get("/api/v1/invitations/").json()["count"] == 0
    assert Invitation.objects.get(uuid=invitation_id).status == "pending"
    assert "mallory" not in memberships(team)


def test_accepting_when_already_a_member_just_closes_the_invitation(team):
    grace = UserFactory(username="grace")
    invitation_id = invite(team, "grace", role="admin").json()["id"]
    MembershipFactory(organization=team.organization, user=grace, role="member")

    accepted = client_for(grace).post(f"/api/v1/invitations/{invitation_id}/accept/")

    assert accepted.status_code == 200
    assert accepted.json()["status"] == "accepted"
    assert memberships(team)["grace"] == "member"


# --- the answer does not tell whether a name exists ----------------------------------------------


def test_an_unknown_name_is_answered_like_a_real_one(team):
    UserFactory(username="grace")
    inactive = UserFactory(username="sleeper")
    inactive.is_active = False
    inactive.save()
    before = memberships(team)

    answers = {name: invite(team, name) for name in ("grace", "ghost", "sleeper")}
    listed = {row["username"]: row for row in pending_list(team).json()["results"]}

    for name, response in answers.items():
        assert response.status_code == 201, name
        body = response.json()
        assert set(body) == set(answers["grace"].json()), name
        assert body["status"] == "pending"
        assert body["role"] == "member"
        assert body["username"] == name
        assert body["invited_by"] == team.admin.username
        assert set(listed[name]) == set(body)
        assert listed[name]["id"] == body["id"]
        assert listed[name]["status"] == "pending"
    assert memberships(team) == before
    assert set(listed) == {"grace", "ghost", "sleeper"}
    cancels = [
        client_for(team.admin).post(
            f"/api/v1/organizations/{team.organization.uuid}/invitations/"
            f"{answers[name].json()['id']}/cancel/"
        )
        for name in ("grace", "ghost")
    ]
    assert [response.status_code for response in cancels] == [200, 200]
    assert set(cancels[0].json()) == set(cancels[1].json())


def test_only_a_real_user_can_accept_and_nobody_else_sees_the_others(team):
    inactive = UserFactory(username="sleeper")
    inactive.is_active = False
    inactive.save()
    invite(team, "sleeper")
    invite(team, "ghost")
    # Someone takes the name after the invitation: it was not theirs.
    ghost = UserFactory(username="ghost")

    assert client_for(ghost).get("/api/v1/invitations/").json()["count"] == 0
    assert Invitation.objects.filter(invitee__isnull=False).count() == 0


def test_inviting_a_name_twice_answers_the_same_invitation_known_or_not(team):
    UserFactory(username="grace")

    first = {name: invite(team, name).json() for name in ("grace", "ghost")}
    second = {name: invite(team, name, role="admin").json() for name in ("grace", "ghost")}

    for name in ("grace", "ghost"):
        assert second[name] == first[name]
        assert second[name]["role"] == "member"
    assert Invitation.objects.filter(organization=team.organization).count() == 2


def test_the_same_queries_run_for_a_known_and_an_unknown_name(
    team, django_assert_num_queries, django_capture_on_commit_callbacks
):
    UserFactory(username="grace")
    client = client_for(team.admin)
    path = f"/api/v1/organizations/{team.organization.uuid}/members/"
    client.get("/api/v1/me/")  # the token's first use writes nothing more afterwards
    counts = {}
    callbacks = {}

    for name in ("grace", "ghost"):
        with (
            CaptureQueriesContext(connection) as queries,
            django_capture_on_commit_callbacks() as registered,
        ):
            client.post(path, {"username": name, "role": "member"}, format="json")
        counts[name] = len(queries)
        callbacks[name] = len(registered)

    assert counts["grace"] == counts["ghost"]
    assert callbacks == {"grace": 1, "ghost": 1}


# --- leaving, removal and roles ------------------------------------------------------------------


def leave(team, user):
    return client_for(user).delete(f"/api/v1/organizations/{team.organization.uuid}/members/me/")


def member_path(team, user) -> str:
    membership = Membership.objects.get(organization=team.organization, user=user)
    return f"/api/v1/organizations/{team.organization.uuid}/members/{membership.uuid}/"


def test_a_member_leaves(team):
    response = leave(team, team.member)

    assert response.status_code == 204
    assert team.member.username not in memberships(team)
    organization = client_for(team.member).get(f"/api/v1/organizations/{team.organization.uuid}/")
    assert organization.status_code == 404


def test_the_last_admin_cannot_leave_be_removed_or_be_demoted(team):
    second = MembershipFactory(organization=team.organization, role="admin").user
    path = member_path(team, team.admin)
    # Two admins: one of them may go, as long as the other stays.
    assert client_for(second).patch(path, {"role": "member"}, format="json").status_code == 200
    assert client_for(second).patch(path, {"role": "admin"}, format="json").status_code == 200
    assert leave(team, second).status_code == 204
    before = memberships(team)

    left = leave(team, team.admin)
    removed = client_for(team.admin).delete(path)
    demoted = client_for(team.admin).patch(path, {"role": "member"}, format="json")

    for response in (left, removed, demoted):
        assert response.status_code == 409
        assert response.json()["code"] == "last_admin"
        assert set(response.json()) == {"detail", "code", "extra"}
    assert memberships(team) == before


def test_an_admin_removes_a_member_and_changes_roles(team):
    path = member_path(team, team.member)

    promoted = client_for(team.admin).patch(path, {"role": "admin"}, format="json")
    demoted = client_for(team.admin).patch(path, {"role": "member"}, format="json")
    removed = client_for(team.admin).delete(path)

    assert promoted.status_code == 200
    assert promoted.json()["role"] == "admin"
    assert demoted.json()["role"] == "member"
    assert removed.status_code == 204
    assert team.member.username not in memberships(team)


def test_who_may_remove_and_change_roles(team):
    other = MembershipFactory(organization=team.organization, role="member").user
    admin_path = member_path(team, team.admin)
    other_path = member_path(team, other)
    before = memberships(team)

    member_removes = client_for(team.member).delete(other_path)
    member_promotes_self = client_for(team.member).patch(
        member_path(team, team.member), {"role": "admin"}, format="json"
    )
    member_bad_body = client_for(team.member).patch(other_path, {"role": "owner"}, format="json")
    outsider_removes = client_for(team.outsider).delete(admin_path)
    outsider_leaves = leave(team, team.outsider)
    bad_role = client_for(team.admin).patch(other_path, {"role": "owner"}, format="json")
    unknown_member = client_for(team.admin).delete(
        f"/api/v1/organizations/{team.organization.uuid}/members/not-an-id/"
    )
    foreign_member = client_for(team.admin).delete(
        f"/api/v1/organizations/{team.organization.uuid}/members/"
        f"{Membership.objects.get(user=team.outsider).uuid}/"
    )

    assert member_removes.status_code == 403
    assert member_promotes_self.status_code == 403
    assert member_bad_body.status_code == 403
    assert outsider_removes.status_code == 404
    assert outsider_leaves.status_code == 404
    assert bad_role.status_code == 400
    assert bad_role.json()["code"] == "invalid"
    assert unknown_member.status_code == 404
    assert foreign_member.status_code == 404
    assert memberships(team) == before
    assert Membership.objects.filter(user=team.outsider).exists()


def test_invitation_lists_use_a_fixed_number_of_queries(team, django_assert_max_num_queries):
    grace = UserFactory(username="grace")
    for index in range(5):
        UserFactory(username=f"guest{index}")
        invite(team, f"guest{index}")
    for _ in range(5):
        admin = MembershipFactory(role="admin")
        client_for(admin.user).post(
            f"/api/v1/organizations/{admin.organization.uuid}/members/",
            {"username": "grace", "role": "member"},
            format="json",
        )
    admin_client = client_for(team.admin)
    grace_client = client_for(grace)
    admin_client.get("/api/v1/me/")
    grace_client.get("/api/v1/me/")

    with django_assert_max_num_queries(6):
        listed = admin_client.get(f"/api/v1/organizations/{team.organization.uuid}/invitations/")
    with django_assert_max_num_queries(5):
        mine = grace_client.get("/api/v1/invitations/")

    assert listed.json()["count"] == 5
    assert mine.json()["count"] == 5


# --- the schema and the operators' admin ---------------------------------------------------------


def test_the_new_endpoints_are_in_the_schema(client):
    paths = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()[
        "paths"
    ]

    operations = {
        (path, method): operation["operationId"]
        for path, methods in paths.items()
        for method, operation in methods.items()
        if "invitation" in path or "{member_id}" in path
    }
    assert operations == {
        ("/api/v1/invitations/", "get"): "invitations_list",
        ("/api/v1/invitations/{invitation_id}/accept/", "post"): "invitations_accept",
        ("/api/v1/invitations/{invitation_id}/decline/", "post"): "invitations_decline",
        (
            "/api/v1/organizations/{organization_id}/invitations/",
            "get",
        ): "organization_invitations_list",
        (
            "/api/v1/organizations/{organization_id}/invitations/{invitation_id}/cancel/",
            "post",
        ): "organization_invitations_cancel",
        (
            "/api/v1/organizations/{organization_id}/members/{member_id}/",
            "patch",
        ): "organization_members_update",
        (
            "/api/v1/organizations/{organization_id}/members/{member_id}/",
            "delete",
        ): "organization_members_destroy",
    }
    created = paths["/api/v1/organizations/{organization_id}/members/"]["post"]["responses"]
    assert created["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/Invitation")


def test_operators_read_invitations_in_the_admin(client, team):
    UserFactory(username="grace")
    invite(team, "grace")
    staff = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(staff)

    listed = client.get("/admin/organizations/invitation/")
    add = client.get("/admin/organizations/invitation/add/")

    assert listed.status_code == 200
    assert "grace" in listed.content.decode()
    assert add.status_code == 403


# --- who may call what ---------------------------------------------------------------------------

MATRIX = [
    # (method, path, {caller: expected status})
    ("get", "/api/v1/organizations/{org}/invitations/", {"admin": 200, "member": 403}),
    ("post", "/api/v1/organizations/{org}/invitations/{invitation}/cancel/", {"member": 403}),
    ("get", "/api/v1/invitations/", {"admin": 200, "member": 200, "invitee": 200}),
    ("post", "/api/v1/invitations/{invitation}/accept/", {"admin": 404, "member": 404}),
    ("post", "/api/v1/invitations/{invitation}/decline/", {"admin": 404, "member": 404}),
    ("patch", "/api/v1/organizations/{org}/members/{admin_member}/", {"member": 403}),
    ("delete", "/api/v1/organizations/{org}/members/{admin_member}/", {"member": 403}),
]


@pytest.mark.parametrize(("method", "path", "expected"), MATRIX)
def test_each_role_against_each_endpoint(team, method, path, expected):
    """Outsiders get 404 (or, on their own list, nothing), anonymous callers 401, and a
    refusal changes nothing."""
    UserFactory(username="grace")
    invitation_id = invite(team, "grace").json()["id"]
    grace = Invitation.objects.get(uuid=invitation_id).invitee
    admin_member = Membership.objects.get(organization=team.organization, user=team.admin)
    url = path.format(
        org=team.organization.uuid, invitation=invitation_id, admin_member=admin_member.uuid
    )
    callers = {"admin": team.admin, "member": team.member, "outsider": team.outsider}
    callers["invitee"] = grace
    expected = {"outsider": 200 if url == "/api/v1/invitations/" else 404, **expected}
    before = (memberships(team), Invitation.objects.get(uuid=invitation_id).status)

    for caller, status in expected.items():
        response = getattr(client_for(callers[caller]), method)(
            url, {"role": "member"}, format="json"
        )
        assert response.status_code == status, caller
        if status >= 400:
            assert set(response.json()) == {"detail", "code", "extra"}
    anonymous = getattr(APIClient(), method)(url, {"role": "member"}, format="json")

    assert anonymous.status_code == 401
    if method != "get":
        assert (memberships(team), Invitation.objects.get(uuid=invitation_id).status) == before


def test_a_member_who_left_can_be_invited_back(team):
    stale = invite(team, team.member.username).json()["id"]  # while a member: nobody can accept

    leave(team, team.member)
    again = invite(team, team.member.username)
    accepted = client_for(team.member).post(f"/api/v1/invitations/{again.json()['id']}/accept/")

    assert again.json()["id"] != stale
    assert Invitation.objects.get(uuid=stale).status == "cancelled"
    assert accepted.status_code == 200
    assert memberships(team)[team.member.username] == "member"
