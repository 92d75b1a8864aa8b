"""An organization is created below billing, without opening its wallet: every read of a new
organization's money answers zero without writing, and its first top-up and first hold open the
accounts themselves (`_lock` -> `accounts_open`)."""

from decimal import Decimal

import pytest

from billing import selectors, services
from billing.errors import InsufficientFunds
from billing.models import Account, Hold, ReferenceKind, Transaction
from organizations import services as organization_services
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ZERO = Decimal("0")


def new_organization(name: str = "Fresh Lab"):
    return organization_services.organization_create(creator=UserFactory(), name=name).organization


def test_creating_an_organization_opens_no_account():
    organization = new_organization()

    assert Account.objects.filter(organization=organization).count() == 0


def test_every_read_of_a_new_wallet_answers_zero_and_writes_nothing():
    organization = new_organization()

    wallet = selectors.wallet_get(organization)
    budget = selectors.budget_status(organization)
    entries = list(selectors.ledger_entry_list(organization))

    assert (wallet.available, wallet.held, wallet.earnings) == (ZERO, ZERO, ZERO)
    assert budget.monthly_limit is None
    assert budget.spent_this_month == ZERO
    assert budget.committed == ZERO
    assert budget.remaining is None
    assert entries == []
    assert list(selectors.budget_alert_list_open(organization)) == []
    assert Account.objects.filter(organization=organization).count() == 0


def test_the_first_top_up_opens_the_wallet_and_credits_it():
    organization = new_organization()

    services.wallet_credit(
        organization=organization, amount="25.50", idempotency_reference="pi_first_top_up"
    )

    wallet = selectors.wallet_get(organization)
    assert (wallet.available, wallet.held) == (Decimal("25.50"), ZERO)
    assert set(
        Account.objects.filter(organization=organization).values_list("kind", flat=True)
    ) == {Account.Kind.AVAILABLE, Account.Kind.DEBT}


def test_the_first_hold_after_the_first_top_up_moves_money_to_held():
    organization = new_organization()
    services.wallet_credit(organization=organization, amount="30", idempotency_reference="pi_30")

    hold = services.hold_place(
        organization=organization, amount="12.25", reference_kind=ReferenceKind.BID
    )

    wallet = selectors.wallet_get(organization)
    assert hold.amount == Decimal("12.25")
    assert (wallet.available, wallet.held) == (Decimal("17.75"), Decimal("12.25"))
    assert selectors.budget_status(organization).committed == Decimal("12.25")


def test_a_first_hold_without_money_is_refused_and_writes_nothing():
    organization = new_organization()

    with pytest.raises(InsufficientFunds):
        services.hold_place(organization=organization, amount="1", reference_kind=ReferenceKind.BID)

    assert Hold.objects.filter(organization=organization).count() == 0
    assert Transaction.objects.filter(organization=organization).count() == 0
    wallet = selectors.wallet_get(organization)
    assert (wallet.available, wallet.held) == (ZERO, ZERO)
