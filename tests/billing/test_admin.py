"""Staff read money in the admin and correct it only by posting a balanced adjustment."""

from decimal import Decimal

import pytest
from django.test import Client

from billing import selectors, services
from billing.models import Account, Entry, Transaction
from tests.factories import OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Client) -> Client:
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_staff_post_an_adjustment_as_a_new_balanced_transaction(staff_client: Client):
    organization = OrganizationFactory()
    services.wallet_credit(
        organization=organization, amount=Decimal("10"), idempotency_reference="t"
    )

    answer = staff_client.post(
        "/admin/billing/transaction/adjustment/",
        {"organization": organization.pk, "amount": "-2.5", "memo": "Refund of a failed run"},
    )

    adjustment = Transaction.objects.get(kind="adjustment")
    assert answer.status_code == 302
    assert answer["Location"] == f"/admin/billing/transaction/{adjustment.pk}/change/"
    assert sorted(adjustment.entries.values_list("kind", "amount")) == [
        ("adjustment", Decimal("-2.500000")),
        ("adjustment", Decimal("2.500000")),
    ]
    assert adjustment.memo == "Refund of a failed run"
    assert selectors.wallet_get(organization).available == Decimal("7.5")
    assert selectors.ledger_verify() == []


def test_an_adjustment_taking_more_than_is_available_is_refused(staff_client: Client):
    organization = OrganizationFactory()
    before = Entry.objects.count()

    answer = staff_client.post(
        "/admin/billing/transaction/adjustment/",
        {"organization": organization.pk, "amount": "-1", "memo": "Too much"},
    )

    assert answer.status_code == 200
    assert b"does not cover this" in answer.content
    assert Entry.objects.count() == before


def test_a_new_organization_with_no_money_movement_yet_can_be_credited(staff_client: Client):
    organization = OrganizationFactory()  # its accounts open on the first movement
    assert not Account.objects.filter(organization=organization).exists()

    answer = staff_client.post(
        "/admin/billing/transaction/adjustment/",
        {"organization": organization.pk, "amount": "4", "memo": "Welcome credit"},
    )

    assert answer.status_code == 302
    assert selectors.wallet_get(organization).available == Decimal("4")
    assert selectors.ledger_verify() == []


def test_money_pages_are_read_only_in_the_admin(staff_client: Client):
    organization = OrganizationFactory()
    services.wallet_credit(
        organization=organization, amount=Decimal("3"), idempotency_reference="t"
    )
    posted = Transaction.objects.get()

    pages = [
        "/admin/billing/account/",
        "/admin/billing/transaction/",
        f"/admin/billing/transaction/{posted.pk}/change/",
        "/admin/billing/hold/",
        "/admin/billing/topup/",
        "/admin/billing/stripeevent/",
    ]

    assert [staff_client.get(page).status_code for page in pages] == [200] * len(pages)
    assert staff_client.get("/admin/billing/transaction/add/").status_code == 403
    assert staff_client.post(f"/admin/billing/transaction/{posted.pk}/delete/").status_code == 403
    assert b"Post an adjustment" in staff_client.get("/admin/billing/transaction/").content
