"""An invitation mails the invitee once, through a real Celery worker on Redis, after the
commit; a name nobody can accept it under, or a refused invitation, mails nobody."""

import pytest

from organizations.models import Membership
from tests.conftest import client_for, wait_for
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def settle(celery_worker) -> None:
    """Gives a wrongly enqueued task the time to run before concluding that none was."""
    from computeshare.celery import app

    assert app.control.ping(timeout=1.0)


def test_the_invitee_is_mailed_once_by_the_worker(celery_worker):
    organization = OrganizationFactory(name="Neutrino Lab")
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    UserFactory(username="newcomer", email="newcomer@example.org")
    # The worker and its mail folder serve the whole session: look only at what is new.
    before = set(celery_worker.mail_directory.glob("*.log"))
    client = client_for(admin)

    response = client.post(
        f"/api/v1/organizations/{organization.uuid}/members/",
        {"username": "newcomer", "role": "member"},
        format="json",
    )
    # Inviting the name again answers the same invitation and mails nobody.
    again = client.post(
        f"/api/v1/organizations/{organization.uuid}/members/",
        {"username": "newcomer", "role": "member"},
        format="json",
    )

    assert response.status_code == again.status_code == 201
    assert again.json()["id"] == response.json()["id"]
    messages = wait_for(
        lambda: sorted(set(celery_worker.mail_directory.glob("*.log")) - before), timeout=30
    )
    settle(celery_worker)
    messages = sorted(set(celery_worker.mail_directory.glob("*.log")) - before)
    assert len(messages) == 1
    mail = messages[0].read_text()
    assert mail.count("To: newcomer@example.org") == 1
    assert "Subject: You are invited to join Neutrino Lab on ComputeShare" in mail
    assert f"{admin.username} invited you to join Neutrino Lab on ComputeShare as member." in mail
    assert "/invitations/" in mail
    assert not Membership.objects.filter(user__username="newcomer").exists()


def test_an_unknown_name_and_a_refused_invitation_mail_nobody(celery_worker):
    organization = OrganizationFactory()
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    member = MembershipFactory(organization=organization).user
    UserFactory(username="hopeful")
    before = set(celery_worker.mail_directory.glob("*.log"))

    unknown = client_for(admin).post(
        f"/api/v1/organizations/{organization.uuid}/members/",
        {"username": "ghost", "role": "member"},
        format="json",
    )
    refused = client_for(member).post(
        f"/api/v1/organizations/{organization.uuid}/members/",
        {"username": "hopeful", "role": "admin"},
        format="json",
    )

    assert unknown.status_code == 201
    assert refused.status_code == 403
    settle(celery_worker)
    assert set(celery_worker.mail_directory.glob("*.log")) == before


def test_an_invitation_rolled_back_mails_nobody(celery_worker):
    """The task is enqueued after the commit: a transaction that rolls back sends nothing."""
    from django.db import transaction

    from organizations import services as organization_services

    organization = OrganizationFactory()
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN)
    UserFactory(username="almost", email="almost@example.org")
    before = set(celery_worker.mail_directory.glob("*.log"))

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        organization_services.invitation_create(actor=admin, username="almost", role="member")
        raise Abort

    settle(celery_worker)
    assert set(celery_worker.mail_directory.glob("*.log")) == before
