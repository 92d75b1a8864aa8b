"""Checked status changes, one row or many.

Every model with a status names the moves it allows in `TRANSITIONS` (status -> the statuses it
may become). A service changes a status only through `status_move` (a row in memory) or
`status_move_all` (a queryset, as one UPDATE), so no status is ever written that its table does
not allow, and a reader finds each model's life in one place.

A refused move is a bug in the calling service, not bad input: a service checks what the user
asked for first (and raises its own 409 with a stable code); this is the net under that check.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

from django.db import models
from django.utils import timezone


class TransitionRefused(Exception):
    """A status change that the model's `TRANSITIONS` does not allow."""


class HasTransitions(Protocol):
    TRANSITIONS: ClassVar[dict[str, set[str]]]


def sources_of(model: type[HasTransitions], target: str) -> set[str]:
    """The statuses from which `target` may be reached."""
    return {source for source, targets in model.TRANSITIONS.items() if target in targets}


def status_move(row: Any, target: str, *, field: str = "status") -> bool:
    """Sets `row.<field>` to `target` in memory (the caller saves), if its model allows the move
    from the row's status. Staying in the same status is allowed and returns False; a move
    returns True."""
    current = getattr(row, field)
    if current == target:
        return False
    if target not in type(row).TRANSITIONS.get(current, set()):
        raise TransitionRefused(
            f"{type(row).__name__} {row.pk}: {field} cannot go from '{current}' to '{target}'"
        )
    setattr(row, field, target)
    return True


def status_move_all(
    queryset: models.QuerySet[Any],
    target: str,
    *,
    from_statuses: Iterable[str] | None = None,
    field: str = "status",
    **also: Any,
) -> int:
    """Moves every row of `queryset` whose status allows it to `target`, in one UPDATE (with
    `also`'s columns, and `updated_at` when the model has one), and returns how many moved.

    Rows in any other status are left as they are: the filter is part of the UPDATE, so a row
    that another transaction moved first is not moved again (a compare-and-set). `from_statuses`
    narrows the sources; naming one the model does not allow is refused."""
    model = queryset.model
    allowed = sources_of(model, target)
    if from_statuses is None:
        sources = allowed
    else:
        sources = set(from_statuses)
        if not sources <= allowed:
            raise TransitionRefused(
                f"{model.__name__}: {field} cannot go from {sorted(map(str, sources - allowed))} "
                f"to '{target}'"
            )
    columns = {field: target, **also}
    if any(f.name == "updated_at" for f in model._meta.concrete_fields):
        columns.setdefault("updated_at", timezone.now())
    return int(queryset.filter(**{f"{field}__in": sources}).update(**columns))
