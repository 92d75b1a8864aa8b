"""The pages of invitations: the invite form and pending invitations on the organization's page,
the invitee's Invitations page with its count in the navigation, leaving and the last admin."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from organizations import services as organization_services
from organizations.models import Invitation, Membership
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def invitation_for(team, username: str, role: str = "member") -> Invitation:
    admin = Membership.objects.get(organization=team.organization, user=team.admin)
    return organization_services.invitation_create(actor=admin, username=username, role=role)


def organization_page(team) -> str:
    return reverse("organization-detail", args=[team.organization.uuid])


def test_the_admin_sees_the_invite_form_and_pending_invitations(client, team):
    UserFactory(username="grace")
    invitation_for(team, "grace")
    invitation_for(team, "ghost", role="admin")
    client.force_login(team.admin)

    content = client.get(organization_page(team)).content.decode()

    assert 'id="member-invite"' in content
    assert "Send invitation" in content
    assert 'id="invitations"' in content
    assert "grace" in content
    assert "ghost" in content
    assert "Cancel the invitation of grace" in content
    assert "They join once they accept. Invitations expire after 14 days." in content


def test_a_member_sees_no_invitations_and_can_leave(client, team):
    invitation_for(team, "ghost")
    client.force_login(team.member)

    content = client.get(organization_page(team)).content.decode()

    assert 'id="member-invite"' not in content
    assert "ghost" not in content
    assert 'id="leave"' in content
    assert "Remove " not in content


def test_inviting_an_unknown_name_from_the_page_reads_like_a_real_one(client, team):
    UserFactory(username="grace")
    client.force_login(team.admin)

    real = client.post(
        organization_page(team), {"username": "grace", "role": "member"}, follow=True
    )
    unknown = client.post(
        organization_page(team), {"username": "ghost", "role": "member"}, follow=True
    )

    assert real.status_code == unknown.status_code == 200
    assert b"grace is invited as Member. They join once they accept." in real.content
    assert b"ghost is invited as Member. They join once they accept." in unknown.content
    assert b"No active user" not in unknown.content


def test_the_admin_cancels_an_invitation_from_the_page(client, team):
    invitation = invitation_for(team, "grace")
    client.force_login(team.admin)

    response = client.post(
        reverse("organization-invitation-cancel", args=[team.organization.uuid, invitation.uuid]),
        follow=True,
    )

    assert response.status_code == 200
    assert b"The invitation of grace is cancelled." in response.content
    invitation.refresh_from_db()
    assert invitation.status == "cancelled"


def test_a_member_cannot_cancel_an_invitation(client, team):
    invitation = invitation_for(team, "grace")
    client.force_login(team.member)

    response = client.post(
        reverse("organization-invitation-cancel", args=[team.organization.uuid, invitation.uuid])
    )

    assert response.status_code == 403
    invitation.refresh_from_db()
    assert invitation.status == "pending"


def test_the_invitee_sees_the_count_and_accepts(client, team):
    grace = UserFactory(username="grace")
    invitation = invitation_for(team, "grace", role="admin")
    client.force_login(grace)

    dashboard = client.get(reverse("dashboard")).content.decode()
    page = client.get(reverse("invitations")).content.decode()
    accepted = client.post(reverse("invitation-accept", args=[invitation.uuid]), follow=True)

    assert 'id="invitation-count">1<' in dashboard
    assert "Quantum Lab" in page
    assert team.admin.username in page
    assert "Accept the invitation to Quantum Lab" in page
    assert accepted.status_code == 200
    assert accepted.redirect_chain[-1][0] == organization_page(team)
    assert b"You joined Quantum Lab." in accepted.content
    assert b'id="invitation-count"' not in accepted.content
    assert Membership.objects.get(organization=team.organization, user=grace).role == "admin"


def test_the_invitee_declines(client, team):
    grace = UserFactory(username="grace")
    invitation = invitation_for(team, "grace")
    client.force_login(grace)

    response = client.post(reverse("invitation-decline", args=[invitation.uuid]), follow=True)

    assert b"You declined the invitation to Quantum Lab." in response.content
    assert b'id="no-invitations"' in response.content
    assert not Membership.objects.filter(user=grace).exists()


def test_an_expired_invitation_is_refused_on_the_page(client, team):
    grace = UserFactory(username="grace")
    invitation = invitation_for(team, "grace")
    Invitation.objects.filter(pk=invitation.pk).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    client.force_login(grace)

    response = client.post(reverse("invitation-accept", args=[invitation.uuid]), follow=True)

    assert b"This invitation has expired" in response.content
    assert not Membership.objects.filter(user=grace).exists()


def test_someone_elses_invitation_is_404_on_the_page(client, team):
    UserFactory(username="grace")
    invitation = invitation_for(team, "grace")
    client.force_login(UserFactory(username="mallory"))

    response = client.post(reverse("invitation-accept", args=[invitation.uuid]))

    assert response.status_code == 404
    invitation.refresh_from_db()
    assert invitation.status == "pending"


def test_a_member_leaves_from_the_page(client, team):
    client.force_login(team.member)

    response = client.post(
        reverse("organization-member-remove", args=[team.organization.uuid, "me"]), follow=True
    )

    assert response.redirect_chain[-1][0] == reverse("dashboard")
    assert b"You left Quantum Lab." in response.content
    assert not Membership.objects.filter(organization=team.organization, user=team.member).exists()


def test_the_last_admin_is_told_and_stays(client, team):
    client.force_login(team.admin)

    page = client.get(organization_page(team)).content.decode()
    response = client.post(
        reverse("organization-member-remove", args=[team.organization.uuid, "me"]), follow=True
    )

    assert "You are the only admin of Quantum Lab" in page
    assert response.redirect_chain[-1][0] == organization_page(team)
    assert b"An organization needs an admin" in response.content
    assert Membership.objects.get(organization=team.organization, user=team.admin).is_admin


def test_an_admin_promotes_and_removes_a_member_from_the_page(client, team):
    membership = Membership.objects.get(organization=team.organization, user=team.member)
    client.force_login(team.admin)

    promoted = client.post(
        reverse("organization-member-role", args=[team.organization.uuid, membership.uuid]),
        {"role": "admin"},
        follow=True,
    )
    removed = client.post(
        reverse("organization-member-remove", args=[team.organization.uuid, membership.uuid]),
        follow=True,
    )

    assert f"{team.member.username} is now admin.".encode() in promoted.content
    assert f"{team.member.username} is no longer a member.".encode() in removed.content
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_a_member_cannot_remove_another(client, team):
    other = MembershipFactory(organization=team.organization)
    client.force_login(team.member)

    response = client.post(
        reverse("organization-member-remove", args=[team.organization.uuid, other.uuid])
    )

    assert response.status_code == 403
    assert Membership.objects.filter(pk=other.pk).exists()
