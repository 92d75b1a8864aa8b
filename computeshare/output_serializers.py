"""`OutputSerializer`: a DRF serializer that only writes answers, and copies its fields cheaply.

DRF gives every serializer instance a deep copy of its declared fields, and a field's deep copy
builds it again from its arguments, so that an instance may change its fields without touching
the class's. An answer's serializer never changes them, and on a job's answer (about forty
fields, with nested serializers for its usage, efficiency and history) those copies were a fifth
of a `POST /jobs/`'s CPU. A plain field here is copied shallowly and bound to the new instance
like any other (binding sets attributes on the copy: name, parent, source); nested serializers,
which hold their own fields, are still copied deeply."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from rest_framework import serializers
from rest_framework.fields import Field

if TYPE_CHECKING:
    AnyField = Field[Any, Any, Any, Any]


def _field_copy(field: AnyField) -> AnyField:
    if isinstance(field, serializers.BaseSerializer):
        return copy.deepcopy(field)
    return copy.copy(field)


# For answers only: its fields are never changed per instance (see the module). No docstring:
# drf-spectacular would describe every serializer without one of its own by it.
class OutputSerializer(serializers.Serializer):  # type: ignore[type-arg]
    def get_fields(self) -> dict[str, AnyField]:
        declared: dict[str, AnyField] = self._declared_fields
        return {name: _field_copy(field) for name, field in declared.items()}
