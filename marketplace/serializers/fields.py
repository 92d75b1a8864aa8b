"""Units and times as the market's endpoints write them, and the fields that read and
write units (docs/api.md: units and money are decimal strings)."""

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from computeshare.numbers import decimal_string_message, is_decimal_text


def units_text(value: Decimal | int | None) -> str | None:
    """Units as a plain decimal string without trailing zeros: `"40"`, `"12.5"`."""
    if value is None:
        return None
    text = f"{value:f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def money_text(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:.6f}"


def time_text(value: datetime | None) -> str | None:
    """As DRF writes times (ISO 8601, UTC as `Z`), without its per-call time zone lookup: the
    offers list writes five per offer."""
    if value is None:
        return None
    # The database's times are UTC already: no conversion to make.
    text = (value if value.tzinfo is UTC else value.astimezone(UTC)).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


@extend_schema_field({"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$", "example": "40"})
class Units(serializers.Field):
    """Read-only units as a decimal string (`"40"`, `"0.25"`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["read_only"] = True
        super().__init__(**kwargs)

    def to_representation(self, value: Any) -> str | None:
        return units_text(value)


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "pattern": "^[0-9]+$"},
        ],
        "description": "A whole number of units, as a number or a decimal string.",
    }
)
class WholeUnits(serializers.Field):
    """A whole number of units, given as a JSON number or a decimal string; the service checks
    the range."""

    default_error_messages = {
        "invalid": "A whole number of units.",
        "not_a_string": decimal_string_message("quantity", "10"),
    }

    def to_internal_value(self, data: Any) -> Decimal:
        if isinstance(data, float):
            # A JSON number with a point or an exponent (2.0, 1e309): docs/api.md asks for strings.
            self.fail("not_a_string")
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("invalid")
        if isinstance(data, str) and not is_decimal_text(data.strip()):
            self.fail("invalid")
        try:
            number = Decimal(str(data).strip())
        except ArithmeticError:
            self.fail("invalid")
        if not number.is_finite() or number != number.to_integral_value():
            self.fail("invalid")
        return number

    def to_representation(self, value: Any) -> str | None:
        return units_text(value)
