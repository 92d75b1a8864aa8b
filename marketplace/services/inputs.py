"""What the market's writes share: who may act, reading the numbers and times people send, and
the offer's row lock that orders take."""

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone

from billing import services as billing
from computeshare.errors import FieldErrors, PermissionDenied, ValidationFailed
from marketplace.models import Offer
from organizations.models import Membership


def admin_required(actor: Membership, what: str) -> None:
    if not actor.is_admin:
        raise PermissionDenied(f"Only an admin of the organization can {what}.")


def whole_units(fields: FieldErrors, field: str, value: Any, *, minimum: int = 1) -> int | None:
    """`value` as a whole number of units from `minimum` on, or None with the field's error."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal | str):
        fields.add(field, "A whole number of units.")
        return None
    try:
        number = Decimal(str(value))
    except ArithmeticError:
        number = Decimal("NaN")
    if not number.is_finite() or number != number.to_integral_value():
        fields.add(field, "A whole number of units.")
    elif number < minimum:
        fields.add(field, f"At least {minimum}.")
    elif number > 2_000_000_000:
        fields.add(field, "At most 2,000,000,000.")
    else:
        return int(number)
    return None


def price_of(fields: FieldErrors, field: str, value: Any) -> Decimal | None:
    """`value` as a price per unit above zero, or None with the field's error."""
    try:
        price = billing.money(value, field=field)
    except ValidationFailed as error:
        for message in error.extra["fields"].get(field, []):
            fields.add(field, message)
        return None
    if price <= 0:
        fields.add(field, "Must be more than zero.")
        return None
    return price


def aware(fields: FieldErrors, field: str, value: Any) -> datetime | None:
    """`value` as an aware date and time, or None with the field's error."""
    if not isinstance(value, datetime) or timezone.is_naive(value):
        fields.add(field, "A date and time with a time zone.")
        return None
    return value


def given(value: Any) -> bool:
    return value not in (None, "")


def offer_lock(offer: Offer) -> Offer:
    """The offer, its row locked for an order, a cancellation or an extension."""
    # `of=("self",)`: the offer's row only, not its cluster's, so that orders on one offer never
    # wait on another offer of the same cluster.
    return (
        Offer.objects.select_for_update(of=("self",))
        .select_related("cluster", "partition")
        .get(pk=offer.pk)
    )
