"""The reference half of docs/api.md, written from what the server itself publishes: every
endpoint and shape from the OpenAPI schema (drf-spectacular, as `/api/v1/schema/` serves it) and
every error code from the error classes (`computeshare.errors.ApplicationError` and its
subclasses in each app). `manage.py api_reference` writes it into docs/api.md below the
hand-written conventions; a test fails when the file and the code disagree.

Only what a client needs, in a fixed order, so that a change to the API shows as a change to this
file in review: endpoints grouped by their tag, in the schema's order; then every shape, by name;
then every error code, by status and code."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from django.apps import apps
from rest_framework import exceptions as drf_exceptions

from computeshare.api import DRF_ERROR_CODES
from computeshare.errors import ApplicationError

NOT_AUTHENTICATED = (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)

MARKER = (
    "<!-- Below: written by `manage.py api_reference` from the schema and the error classes. -->"
)
METHODS = ("get", "post", "put", "patch", "delete")
SCHEMA_PREFIX = "#/components/schemas/"


def schema_generate() -> dict[str, Any]:
    """The OpenAPI schema as `/api/v1/schema/` serves it."""
    from drf_spectacular.generators import SchemaGenerator

    generator = SchemaGenerator()  # type: ignore[no-untyped-call]
    schema: dict[str, Any] = generator.get_schema(  # type: ignore[no-untyped-call]
        request=None, public=True
    )
    return schema


def reference_render(schema: Mapping[str, Any]) -> str:
    """The generated part of docs/api.md, from the marker to the end."""
    lines = [MARKER, "", "## Endpoints", ""]
    lines += _endpoints(schema["paths"])
    lines += ["## Shapes", ""]
    lines += _shapes(schema["components"]["schemas"])
    lines += ["## Error codes", ""]
    lines += _error_codes(error_classes())
    return "\n".join(lines).rstrip() + "\n"


def document_update(document: str, schema: Mapping[str, Any]) -> str:
    """`document` with everything from the marker on written again (added when it has none)."""
    head = document.split(MARKER, 1)[0].rstrip()
    return f"{head}\n\n{reference_render(schema)}"


# --- Endpoints ---------------------------------------------------------------------------------


def _endpoints(paths: Mapping[str, Any]) -> list[str]:
    by_tag: dict[str, list[tuple[str, str, Mapping[str, Any]]]] = {}
    for path, operations in paths.items():
        for method in METHODS:
            if operation := operations.get(method):
                tag = (operation.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method, path, operation))
    lines: list[str] = []
    for tag, operations in by_tag.items():
        lines += [f"### {tag}", ""]
        for method, path, operation in operations:
            lines += _operation(method, path, operation)
    return lines


def _operation(method: str, path: str, operation: Mapping[str, Any]) -> list[str]:
    lines = [f"#### `{method.upper()} {path}`", ""]
    if description := operation.get("description", "").strip():
        lines += [_one_paragraph(description), ""]
    access = "anyone" if {} in operation.get("security", [{}]) else "signed in"
    lines.append(f"- Access: {access}.")
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "path":
            continue
        required = ", required" if parameter.get("required") else ""
        text = f"- {parameter['in'].capitalize()} `{parameter['name']}` "
        text += f"({_type(parameter.get('schema', {}))}{required})"
        if note := parameter.get("description", "").strip():
            text += f": {_one_paragraph(note)}"
        lines.append(text if text.endswith(".") else f"{text}.")
    if body := operation.get("requestBody"):
        kinds = ", ".join(
            f"{_type(content['schema'])} as `{media}`"
            for media, content in body.get("content", {}).items()
            if "schema" in content
        )
        lines.append(f"- Body: {kinds}.")
    answers = []
    for status, response in sorted(operation.get("responses", {}).items()):
        shape = next(
            (
                _type(content["schema"])
                for content in response.get("content", {}).values()
                if "schema" in content
            ),
            "",
        )
        answers.append(f"{status} {shape}".strip() if shape != "[Error](#error)" else status)
    lines += [f"- Answers: {', '.join(answers)}.", ""]
    return lines


# --- Shapes ------------------------------------------------------------------------------------


def _shapes(schemas: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for name in sorted(schemas):
        shape = schemas[name]
        lines += [f"### {name}", ""]
        if description := shape.get("description", "").strip():
            lines += [_one_paragraph(_without_enum_list(description)), ""]
        if "enum" in shape:
            values = ", ".join(f"`{value}`" for value in shape["enum"] if value not in ("", None))
            lines += [f"One of {values}.", ""]
            continue
        properties = shape.get("properties", {})
        if not properties:
            lines += [f"{_type(shape)}.", ""]
            continue
        required = set(shape.get("required", ()))
        lines += ["| field | type | notes |", "|---|---|---|"]
        for field, spec in properties.items():
            lines.append(f"| `{field}` | {_type(spec)} | {_notes(spec, field in required)} |")
        lines.append("")
    return lines


def _notes(spec: Mapping[str, Any], required: bool) -> str:
    notes = []
    if required:
        notes.append("required")
    if spec.get("readOnly"):
        notes.append("read-only")
    if spec.get("writeOnly"):
        notes.append("write-only")
    for key, word in (("minimum", "at least"), ("maximum", "at most")):
        if key in spec:
            notes.append(f"{word} {spec[key]}")
    if "maxLength" in spec:
        notes.append(f"at most {spec['maxLength']} characters")
    if "pattern" in spec:
        notes.append(f"matches `{spec['pattern']}`")
    text = "; ".join(notes)
    if description := _without_enum_list(spec.get("description", "")).strip():
        text = f"{text}. {_one_paragraph(description)}" if text else _one_paragraph(description)
    return _cell(text)


# --- Error codes -------------------------------------------------------------------------------


def error_classes() -> list[type[ApplicationError]]:
    """Every error class of the platform's apps (their `errors` modules imported first)."""
    for config in apps.get_app_configs():
        try:
            importlib.import_module(f"{config.name}.errors")
        except ModuleNotFoundError as missing:
            if missing.name != f"{config.name}.errors":
                raise
    return list(_subclasses(ApplicationError))


def _subclasses(base: type[ApplicationError]) -> Iterator[type[ApplicationError]]:
    for subclass in base.__subclasses__():
        yield subclass
        yield from _subclasses(subclass)


def _error_codes(classes: Iterable[type[ApplicationError]]) -> list[str]:
    """One row per code: its status and the sentence that comes with it by default. A code that
    several classes share (a subclass that only narrows the sentence) is one row. The errors DRF
    raises itself (a body that is not JSON, no credentials...) and the 500 are among them."""
    rows: dict[tuple[int, str], str] = {(500, "server_error"): "The server failed to answer."}
    framework = [
        # DRF answers 401, never 403, for missing or failed credentials (`exception_handler`).
        (401 if issubclass(error, NOT_AUTHENTICATED) else error.status_code, code, error)
        for error, code in DRF_ERROR_CODES.items()
    ]
    platform = [(error.status_code, error.code, error) for error in classes]
    for status, code, error in [*framework, *platform]:
        detail = _one_paragraph(str(getattr(error, "default_detail", "") or ""))
        if (status, code) not in rows or (detail and not rows[status, code]):
            rows[status, code] = detail
    lines = ["| status | code | meaning |", "|---|---|---|"]
    for (status, code), detail in sorted(rows.items()):
        lines.append(f"| {status} | `{code}` | {_cell(detail)} |")
    return [*lines, ""]


# --- Text --------------------------------------------------------------------------------------


def _type(spec: Mapping[str, Any]) -> str:
    if ref := spec.get("$ref"):
        name = ref.removeprefix(SCHEMA_PREFIX)
        return f"[{name}](#{name.lower()})"
    if "allOf" in spec and len(spec["allOf"]) == 1:
        return _nullable(_type(spec["allOf"][0]), spec)
    if "oneOf" in spec or "anyOf" in spec:
        choices = spec.get("oneOf") or spec.get("anyOf") or []
        return _nullable(" or ".join(_type(choice) for choice in choices), spec)
    kind = spec.get("type", "any")
    if kind == "array":
        return _nullable(f"list of {_type(spec.get('items', {}))}", spec)
    if kind == "object" and "additionalProperties" in spec:
        values = spec["additionalProperties"]
        inner = _type(values) if isinstance(values, dict) else "any"
        return _nullable(f"object of {inner}", spec)
    if fmt := spec.get("format"):
        kind = f"{kind} ({fmt})"
    return _nullable(kind, spec)


def _nullable(text: str, spec: Mapping[str, Any]) -> str:
    return f"{text} or null" if spec.get("nullable") else text


_ENUM_LIST = re.compile(r"\n\n(\* `[^`]*` - [^\n]*\n?)+\s*$")


def _without_enum_list(text: str) -> str:
    """A description without the `* value - label` list drf-spectacular appends to a choice
    field's (the shape of the enum lists the values)."""
    return _ENUM_LIST.sub("", text)


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    """`text` safe in a Markdown table's cell."""
    return text.replace("|", "\\|")
