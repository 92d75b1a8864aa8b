"""What the site's header shows of the user's money."""

import dataclasses
import uuid
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import Case, OuterRef, Subquery, Value, When

from billing.models import Account
from computeshare.models import User
from organizations.models import Organization


@dataclasses.dataclass(frozen=True)
class NavigationWallet:
    """What the site's header shows a member: one organization's money available."""

    organization_uuid: uuid.UUID
    organization_name: str
    available: Decimal
    currency: str


def navigation_wallet_get(
    user: User, organization_uuid: uuid.UUID | str | None = None
) -> NavigationWallet | None:
    """The wallet of the organization the page is about when the user is a member of it,
    else of the user's first organization by name (the dashboard's own choice); None for a
    user in no organization. One query, whatever the number of organizations."""
    organizations = Organization.objects.filter(memberships__user=user)
    order: list[Any] = ["name", "id"]
    try:
        current = uuid.UUID(str(organization_uuid)) if organization_uuid else None
    except ValueError:
        current = None
    if current is not None:
        order.insert(0, Case(When(uuid=current, then=Value(0)), default=Value(1)))
    available = Account.objects.filter(
        organization=OuterRef("pk"), kind=Account.Kind.AVAILABLE
    ).values("balance")[:1]
    row = (
        organizations.annotate(available=Subquery(available))
        .order_by(*order)
        .values("uuid", "name", "available")
        .first()
    )
    if row is None:
        return None
    return NavigationWallet(
        organization_uuid=row["uuid"],
        organization_name=row["name"],
        available=row["available"] if row["available"] is not None else Decimal(0),
        currency=settings.PLATFORM_CURRENCY,
    )
