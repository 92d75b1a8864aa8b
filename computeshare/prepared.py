"""Reads of a fixed shape whose SQL Django compiles once per process, not on every call.

Compiling a queryset is pure Python, and for the reads on the busiest write path (a job's
submission reads its allocation with three related rows and the member, then locks it again
with its tenant lease) it cost more CPU than PostgreSQL spent answering: about 2.8 ms a call
for the allocation's read alone, a fifth of a `POST /jobs/`. A `PreparedRead` builds its
queryset once, from sample values, keeps the compiler, and on each call runs the same SQL with
the call's values in the sample values' places; the rows become model instances (with their
`select_related` rows and annotations) as Django's own iterable makes them, through the same
converters. So what it returns is what the queryset would return, and the queryset stays the
one place the read is written.

Only the values named as parameters change between calls; anything else the builder puts in
the query (a status, a constant) is fixed at the first call. The samples are drawn at random (a
uuid, a large negative number), so that no constant of the query equals one; `_positions`
refuses a sample it cannot find among the compiled values, and two parameters sharing one."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Field, Model, QuerySet
from django.db.models.query import get_related_populators
from django.db.models.sql.compiler import SQLCompiler

M = TypeVar("M", bound=Model)
if TYPE_CHECKING:
    ModelField = Field[Any, Any]


class _Compiled:
    """One database's SQL, compiler and row layout for a prepared read."""

    def __init__(
        self, queryset: QuerySet[Any], samples: dict[str, Any], fields: dict[str, ModelField]
    ):
        compiler: SQLCompiler = queryset.query.get_compiler(using=queryset.db)
        self.sql, params = compiler.as_sql()
        self.params = list(params)
        self.compiler = compiler
        self.positions = _positions(self.params, samples, fields, compiler.connection)
        klass_info = compiler.klass_info
        select = compiler.select
        assert klass_info is not None, "a prepared read selects model rows"
        start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
        self.model = klass_info["model"]
        self.init_list = [column[0].target.attname for column in select[start:end]]
        self.model_slice = slice(start, end)
        # The stubs follow a later Django, whose populators take a fetch mode too.
        self.populators = get_related_populators(klass_info, select, queryset.db)  # type: ignore[call-arg]
        self.annotations = dict(compiler.annotation_col_map or {})


def _positions(
    params: list[Any], samples: dict[str, Any], fields: dict[str, ModelField], connection: Any
) -> dict[str, list[int]]:
    """Where each parameter's sample value landed among the compiled SQL's values."""
    positions: dict[str, list[int]] = {}
    for name, sample in samples.items():
        prepared = fields[name].get_db_prep_value(sample, connection, prepared=False)
        places = [index for index, value in enumerate(params) if value == prepared]
        if not places:
            raise ValueError(f"the sample value of {name!r} is not in the query")
        positions[name] = places
    taken = [index for places in positions.values() for index in places]
    if len(taken) != len(set(taken)):
        raise ValueError("two parameters' sample values are the same")
    return positions


class PreparedRead(Generic[M]):
    """`build(**values)` is the queryset; `parameters` name each value's model field (which
    converts and prepares it as a filter on that field would) and `samples` a value of each to
    compile with. Calling it with the values returns the rows as a list of instances."""

    def __init__(
        self,
        build: Callable[..., QuerySet[M]],
        *,
        parameters: dict[str, ModelField],
        samples: dict[str, Any] | None = None,
    ) -> None:
        self.build = build
        self.fields = parameters
        self.samples = samples or {name: _sample(field) for name, field in parameters.items()}
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def _for(self, alias: str) -> _Compiled:
        compiled = self._compiled.get(alias)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.get(alias)
                if compiled is None:
                    queryset = self.build(**self.samples).using(alias)
                    compiled = _Compiled(queryset, self.samples, self.fields)
                    self._compiled[alias] = compiled
        return compiled

    def __call__(self, using: str = DEFAULT_DB_ALIAS, **values: Any) -> list[M]:
        """The rows, for these values. A value its field cannot take (a malformed uuid) raises
        `ValidationError`, as the field's `to_python` does."""
        compiled = self._for(using)
        connection = connections[using]
        params = list(compiled.params)
        for name, places in compiled.positions.items():
            field = self.fields[name]
            value = field.get_db_prep_value(field.to_python(values[name]), connection)
            for index in places:
                params[index] = value
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            fetched = cursor.fetchall()
        return [
            _instance(compiled, row, using) for row in compiled.compiler.results_iter([fetched])
        ]


def _instance(compiled: _Compiled, row: Any, using: str) -> Any:
    """One row as Django's `ModelIterable` makes it: the model, its related rows, its
    annotations."""
    instance = compiled.model.from_db(using, compiled.init_list, row[compiled.model_slice])
    for populator in compiled.populators:
        populator.populate(row, instance)
    for name, position in compiled.annotations.items():
        setattr(instance, name, row[position])
    return instance


def _sample(field: ModelField) -> Any:
    """A value of the field's kind that no real query compares with: a random uuid, or a
    negative number no key takes."""
    if field.get_internal_type() == "UUIDField":
        return uuid.uuid4()
    return -(uuid.uuid4().int % 10**9) - 1
