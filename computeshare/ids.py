"""Ids as people type them: the first characters of a public `uuid`, as the pages show them
(the first 8), matched on the server by the lists' `id_prefix` query parameter.

A prefix is a range of the uuid's order, from the prefix padded with zeros to the prefix padded
with f's, so that the lookup walks the unique index on `uuid` on PostgreSQL (whose uuid order
is the bytes', the hex digits' order) and on SQLite (which stores the 32 hex digits as text);
`uuid::text LIKE 'abcd%'` would read every row."""

import re
import uuid
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

HEX_DIGITS = 32
MINIMUM_PREFIX = 4
# The uuid as written, 8-4-4-4-12: a prefix is its start (dashes where it has them), or its
# start with no dash at all. Case does not matter.
_WRITTEN = "x" * 8 + "-" + "x" * 4 + "-" + "x" * 4 + "-" + "x" * 4 + "-" + "x" * 12
_HEX = re.compile(r"[0-9a-f]*", re.IGNORECASE)


def is_id_prefix(text: str) -> bool:
    """Whether `text` can start an id: hex digits, and dashes only where the id has them."""
    if "-" not in text:
        return bool(_HEX.fullmatch(text)) and len(text) <= HEX_DIGITS
    if len(text) > len(_WRITTEN):
        return False
    return all(
        (character == "-") if slot == "-" else bool(_HEX.fullmatch(character))
        for character, slot in zip(text, _WRITTEN, strict=False)
    )


def uuid_prefix_range(prefix: str) -> tuple[uuid.UUID, uuid.UUID]:
    """The first and the last uuid that start with `prefix` (hex digits, dashes ignored)."""
    digits = prefix.replace("-", "").lower()
    return (
        uuid.UUID(digits.ljust(HEX_DIGITS, "0")),
        uuid.UUID(digits.ljust(HEX_DIGITS, "f")),
    )


def id_prefix_q(prefix: str, field: str = "uuid") -> Q:
    """Rows whose `field` (a UUIDField) starts with `prefix`, as an index range."""
    first, last = uuid_prefix_range(prefix)
    return Q(**{f"{field}__gte": first, f"{field}__lte": last})


PREFIX_MESSAGE = (
    f"The start of an id: {MINIMUM_PREFIX} to {HEX_DIGITS} hex digits, such as the 8 the "
    "pages show."
)


def id_prefix_validate(text: str) -> None:
    """Django's kind of validator (for a filter's form field): `ValidationError` unless `text`
    is the start of an id of at least `MINIMUM_PREFIX` digits."""
    digits = text.replace("-", "")
    if not is_id_prefix(text) or not MINIMUM_PREFIX <= len(digits) <= HEX_DIGITS:
        raise ValidationError(PREFIX_MESSAGE, code="invalid")


class IdPrefixField(serializers.CharField):
    """`id_prefix`: at least `MINIMUM_PREFIX` hex digits of an id, as written (dashes where
    the id has them, or none), up to the whole id; lowercased."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", 36)
        kwargs.setdefault("validators", [id_prefix_validate])
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        return str(super().to_internal_value(data)).lower()


ID_PREFIX_PARAMETER = OpenApiParameter(
    "id_prefix",
    str,
    OpenApiParameter.QUERY,
    required=False,
    description=(
        f"Only the rows whose id starts with this: {MINIMUM_PREFIX} to {HEX_DIGITS} hex digits, "
        "with or without the id's dashes, such as the 8 the pages show. Clients resolve a short "
        "id with it: one row is the id, several are ambiguous."
    ),
)
