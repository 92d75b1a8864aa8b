"""Notification mails go out after the commit through a real Celery worker on Redis, once per
notification however often the task runs, and never to a user who turned mail of the kind off."""

from decimal import Decimal

import pytest

from billing.models import TopUp
from notifications.models import Notification, NotificationPreference
from notifications.tasks import notification_emails_due_task, notification_emails_send_task
from organizations.models import Membership
from tests.billing.test_webhook import deliver, payment_event
from tests.conftest import wait_for
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def mails_to(directory, address: str, before: set) -> list[str]:
    texts = [path.read_text() for path in sorted(set(directory.glob("*.log")) - before)]
    return [text for text in texts if f"To: {address}" in text]


def test_a_top_up_is_mailed_once_to_each_admin_who_wants_it(celery_worker, client):
    from billing import services as billing

    organization = OrganizationFactory(name="Nimbus")
    tom = MembershipFactory(
        organization=organization,
        role=Membership.Role.ADMIN,
        user=UserFactory(username="tom", email="tom@example.org"),
    ).user
    quiet = MembershipFactory(
        organization=organization,
        role=Membership.Role.ADMIN,
        user=UserFactory(username="quentin", email="quentin@example.org"),
    ).user
    NotificationPreference.objects.create(user=quiet, kind="top_up_succeeded", by_email=False)
    billing.wallet_open(organization)
    top_up = TopUp.objects.create(
        organization=organization,
        created_by=tom,
        amount=Decimal("40.00"),
        currency="USD",
        payment_intent="pi_mail_once",
        client_secret="secret",
    )
    before = set(celery_worker.mail_directory.glob("*.log"))

    # Stripe delivers the success twice; the view commits each.
    deliver(client, payment_event(top_up))
    deliver(client, payment_event(top_up))
    notice = Notification.objects.get(user=tom)
    wait_for(
        lambda: Notification.objects.filter(pk=notice.pk, email_state="sent").exists(), timeout=30
    )
    # A retried task, a duplicated message and the sweep: none mails it again.
    tasks = [
        notification_emails_send_task.delay([notice.pk]),
        notification_emails_send_task.delay([notice.pk]),
        notification_emails_due_task.delay(),
    ]
    wait_for(
        lambda: all(f"[{task.id}] succeeded" in celery_worker.log() for task in tasks), timeout=30
    )

    mails = mails_to(celery_worker.mail_directory, "tom@example.org", before)
    assert len(mails) == 1
    assert "Subject: Top-up of 40.00 USD succeeded" in mails[0]
    assert f"/organizations/{organization.uuid}/money/" in mails[0]
    assert "/notifications/preferences/" in mails[0]
    assert mails_to(celery_worker.mail_directory, "quentin@example.org", before) == []
    # Quentin still sees it under the bell.
    assert Notification.objects.get(user=quiet).is_shown is True
    assert Notification.objects.get(user=quiet).email_state == "none"
