"""`make compose-check` credits the buyer's wallet through the admin's adjustment form. It runs
on its own, not on every change, so a change to that form once broke it unseen (issue 33). Here
the check's own function drives a live server exactly as it drives the compose stack: the
admin's login, the form's page, its organization choice and its POST."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest

from billing import selectors
from tests.factories import PASSWORD, OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

COMPOSE_CHECK = Path(__file__).resolve().parents[2] / "scripts" / "compose-check"


@pytest.fixture
def compose_check(live_server, settings) -> ModuleType:
    """The check's script as a module, pointed at the live server, which is told (as the
    stack's proxy tells gunicorn) that the request came over TLS."""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    loader = importlib.machinery.SourceFileLoader("compose_check", str(COMPOSE_CHECK))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    port = live_server.url.rsplit(":", 1)[1]
    module.BASE = f"http://127.0.0.1:{port}"
    module.PUBLIC = f"https://127.0.0.1:{port}"
    return module


def test_the_checks_operator_credits_a_wallet_through_the_admin_form(compose_check):
    UserFactory(username="operator", is_staff=True, is_superuser=True)
    OrganizationFactory(name="Buyer team 0a1b2c")
    buyer = OrganizationFactory(name="Buyer team 0a1b2c and friends")

    compose_check.admin_credit("operator", PASSWORD, "Buyer team 0a1b2c and friends", "100.00")

    assert selectors.wallet_get(buyer).available == Decimal("100")


def test_the_check_says_why_when_the_form_refuses(compose_check):
    UserFactory(username="operator", is_staff=True, is_superuser=True)
    OrganizationFactory(name="Buyer team 3d4e5f")

    with pytest.raises(compose_check.CheckFailed, match="refused the credit"):
        compose_check.admin_credit("operator", PASSWORD, "Buyer team 3d4e5f", "not money")
