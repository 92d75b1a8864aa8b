"""Adding a member mails them through a real Celery worker on Redis, after the commit."""

import pytest

from marketplace.models import Membership
from tests.conftest import client_for, wait_for
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def test_the_added_member_is_mailed_by_the_worker(celery_worker):
    organization = OrganizationFactory(name="Neutrino Lab")
    admin = MembershipFactory(organization=organization, role=Membership.Role.ADMIN).user
    UserFactory(username="newcomer", email="newcomer@example.org")
    # The worker and its mail folder serve the whole session: look only at what is new.
    before = set(celery_worker.mail_directory.glob("*.log"))

    response = client_for(admin).post(
        f"/api/v1/organizations/{organization.uuid}/members/",
        {"username": "newcomer", "role": "member"},
        format="json",
    )

    assert response.status_code == 201
    messages = wait_for(
        lambda: sorted(set(celery_worker.mail_directory.glob("*.log")) - before), timeout=30
    )
    assert len(messages) == 1
    mail = messages[0].read_text()
    assert "To: newcomer@example.org" in mail
    assert "Subject: You were added to Neutrino Lab on ComputeShare" in mail
    assert f"{admin.username} added you to Neutrino Lab on ComputeShare as member." in mail


def test_a_refused_addition_enqueues_nothing(celery_worker):
    organization = OrganizationFactory()
    member = MembershipFactory(organization=organization).user
    UserFactory(username="hopeful")
    before = set(celery_worker.mail_directory.glob("*.log"))

    response = client_for(member).post(
        f"/api/v1/organizations/{organization.uuid}/members/",
        {"username": "hopeful", "role": "admin"},
        format="json",
    )

    assert response.status_code == 403
    # Give a wrongly enqueued task the time to run before concluding that none was.
    from computeshare.celery import app

    assert app.control.ping(timeout=1.0)
    assert set(celery_worker.mail_directory.glob("*.log")) == before
