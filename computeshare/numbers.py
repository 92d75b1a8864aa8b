"""Numbers as people send them: ASCII digits only, and money and quantities as decimal strings.

Python reads more than ASCII as digits: `str.isdigit()` is true of "²" (which `int()` then
refuses), and `int()`, `Decimal()` and the regular expression `\\d` take "٣" (Arabic-Indic three)
as 3. A parser of user input that asks one and converts with the other answers a 500, and one
that converts what `\\d` matched can pass such digits on to a command line. Every hand parser of
a number takes it through `whole_number`; the API's number fields are the ones below.

docs/api.md (Requests and answers): money and quantities are decimal strings (`"12.50"`),
never JSON numbers, which a client may have rounded through a binary float before it sent them.
`DecimalString` refuses a JSON number with a sentence that says what to send instead."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django import forms
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

_WHOLE_NUMBER = re.compile(r"[0-9]+", re.ASCII)
_SIGNED_WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
# The ledger's and the meter's smallest step: money and core-hours (or GPU-hours) have six places,
# so that a thousandth of a cent per core-second is still representable. The one home of the
# constant; every column, form field and rounding of money or units uses these.
MICRO_PLACES = 6
MICRO_UNIT = Decimal(1).scaleb(-MICRO_PLACES)
# Longer than any number a request may carry; `int()` of a very long text is slow, and refuses
# more than 4300 digits with a ValueError.
MAX_DIGITS = 40


def whole_number(text: str) -> int | None:
    """The whole number (0 or more) that `text` writes in ASCII digits, or None."""
    if len(text) > MAX_DIGITS or not _WHOLE_NUMBER.fullmatch(text):
        return None
    return int(text)


def is_decimal_text(text: str) -> bool:
    """Whether `text` is a decimal number in ASCII digits (`12`, `-0.5`, `60.000`), no exponent,
    no NaN or Infinity."""
    return len(text) <= MAX_DIGITS * 2 and _DECIMAL.fullmatch(text) is not None


def decimal_string_message(noun: str = "amount", example: str = "12.50") -> str:
    return f'Send this {noun} as a decimal string, such as "{example}".'


@extend_schema_field({"type": "string", "format": "decimal", "pattern": r"^-?[0-9]+(\.[0-9]+)?$"})
class DecimalString(serializers.DecimalField):
    """DRF's DecimalField that takes only a string of ASCII digits (with an optional sign and
    point): a JSON number (float, integer, 1e309) is refused with a sentence that says to send a
    decimal string; NaN and Infinity are refused as strings too. Its output is DRF's."""

    def __init__(self, *, noun: str = "amount", example: str = "12.50", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error_messages["not_a_string"] = decimal_string_message(noun, example)

    def to_internal_value(self, data: Any) -> Decimal:
        if not isinstance(data, str):
            self.fail("not_a_string")
        text = data.strip()
        if len(text) > self.MAX_STRING_LENGTH:
            self.fail("max_string_length")
        if not _DECIMAL.fullmatch(text):
            self.fail("invalid")
        return super().to_internal_value(text)


class WholeNumber(serializers.IntegerField):
    """DRF's IntegerField that takes a JSON integer or a string of ASCII digits (DRF's own takes
    "٣" as 3, and "3.0" and 3.0 as 3)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, str):
            text = data.strip()
            if len(text) > MAX_DIGITS or not _SIGNED_WHOLE_NUMBER.fullmatch(text):
                self.fail("invalid")
            data = text
        elif not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class WholeNumberFormField(forms.IntegerField):
    """Django's IntegerField of the pages, with ASCII digits only (Django's takes "٣" as 3)."""

    def to_python(self, value: Any) -> int | None:
        if isinstance(value, str) and value.strip():
            text = value.strip()
            if len(text) > MAX_DIGITS or not _SIGNED_WHOLE_NUMBER.fullmatch(text):
                raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)
