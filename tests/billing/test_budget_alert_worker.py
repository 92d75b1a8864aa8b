"""A budget alert reaches the admins through a real Celery worker on Redis, once a month."""

from decimal import Decimal

import pytest

from billing import services
from billing.models import BudgetAlert, ReferenceKind
from tests.conftest import wait_for
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def test_crossing_a_threshold_mails_the_admins_once(celery_worker):
    organization = OrganizationFactory(name="Photon Lab")
    for name in ("ada", "grace"):
        MembershipFactory(
            organization=organization,
            role="admin",
            user=UserFactory(username=name, email=f"{name}@example.org"),
        )
    MembershipFactory(organization=organization, role="member", user=UserFactory(email="m@x.org"))
    services.wallet_credit(
        organization=organization, amount=Decimal(500), idempotency_reference="c"
    )
    services.budget_set(
        organization=organization, monthly_limit=Decimal("200.00"), alert_thresholds=[50, 80]
    )
    before = set(celery_worker.mail_directory.glob("*.log"))

    services.hold_place(
        organization=organization, amount=Decimal(110), reference_kind=ReferenceKind.BID
    )
    services.hold_place(
        organization=organization, amount=Decimal(5), reference_kind=ReferenceKind.BID
    )

    mails = wait_for(
        lambda: sorted(set(celery_worker.mail_directory.glob("*.log")) - before), timeout=30
    )
    text = "".join(mail.read_text() for mail in mails)
    assert text.count("Subject: Photon Lab has reached 50% of its budget for") == 1
    assert "ada@example.org" in text and "grace@example.org" in text
    assert "m@x.org" not in text
    assert "committed and spent 110.00 USD this month" in text
    alert = BudgetAlert.objects.get()
    assert (alert.threshold, alert.notified_at is not None) == (50, True)
