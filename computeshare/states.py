"""Checked status changes, one row or many.

Every model with a status names the moves it allows in `TRANSITIONS` (status -> the statuses it
may become): the table of its `status` field or, on a model without one, of its `state` field.
A second state field has a table of its own, named after it: a job's `results_state` moves by
`Job.RESULTS_STATE_TRANSITIONS`. A service changes a status only through `status_move` (a row
in memory) or `status_move_all` (a queryset, as one UPDATE), so no status is ever written that
its table does not allow, and a reader finds each model's life in one place
(`tests/test_architecture.py`, `test_statuses_change_only_through_the_state_rule`).

A refused move is a bug in the calling service, not bad input: a service checks what the user
asked for first (and raises its own 409 with a stable code); this is the net under that check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import models
from django.utils import timezone


class TransitionRefused(Exception):
    """A status change that the model's `TRANSITIONS` does not allow."""


Table = dict[str, set[str]]


def transitions_of(model: type[Any], field: str = "status") -> Table:
    """The table of `field`: the model's `<FIELD>_TRANSITIONS` when it names one, else its
    `TRANSITIONS` when `field` is its main status (`status`, or `state` on a model without a
    `status`). A field with neither has no table, and moving it is a bug (`TypeError`)."""
    table = getattr(model, f"{field.upper()}_TRANSITIONS", None)
    if table is None and field == _main_field(model):
        table = getattr(model, "TRANSITIONS", None)
    if not isinstance(table, dict):
        raise TypeError(f"{model.__name__}.{field} has no table of transitions")
    return table


def _main_field(model: type[Any]) -> str:
    names = {field.name for field in model._meta.concrete_fields}
    return "status" if "status" in names or "state" not in names else "state"


def tables_of(model: type[Any]) -> dict[str, Table]:
    """Every state field of the model that has a table, with its table."""
    tables = {}
    for field in model._meta.concrete_fields:
        try:
            tables[field.name] = transitions_of(model, field.name)
        except TypeError:
            continue
    return tables


def sources_of(model: type[Any], target: str, *, field: str = "status") -> set[str]:
    """The statuses from which `target` may be reached."""
    return {source for source, targets in transitions_of(model, field).items() if target in targets}


def can_move(row: Any, target: str, *, field: str = "status") -> bool:
    """Whether the table lets the row's status become `target` (staying put is no move): for a
    service that answers a refused move as an outcome of its own, such as a Stripe event that
    arrives after a newer one."""
    return target in transitions_of(type(row), field).get(getattr(row, field), set())


def status_move(row: Any, target: str, *, field: str = "status") -> bool:
    """Sets `row.<field>` to `target` in memory (the caller saves), if the field's table allows
    the move from the row's status. Staying in the same status is allowed and returns False; a
    move returns True."""
    current: str = getattr(row, field)
    if current != target and not can_move(row, target, field=field):
        raise TransitionRefused(
            f"{type(row).__name__} {row.pk}: {field} cannot go from '{current}' to '{target}'"
        )
    setattr(row, field, target)
    return current != target


def status_save_all(rows: Sequence[Any], fields: Sequence[str]) -> None:
    """Writes rows whose state `status_move` changed in memory (each move checked as it was
    made), with the other `fields` named, in one `bulk_update`."""
    if rows:
        type(rows[0]).objects.bulk_update(rows, list(fields))


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
    allowed = sources_of(model, target, field=field)
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
