"""Ids as people type them: a whole id, or its start as the pages show it (the first 8
characters). A start is resolved by the list the object belongs to, with the API's `id_prefix`
filter: one indexed query on the server, whose first rows are enough to name the candidates
when the start is not unique. A whole id costs no request."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from computeshare_cli.client import ApiClient
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.output import cell

MINIMUM_PREFIX = 4
CANDIDATES_SHOWN = 10
# The id as written, 8-4-4-4-12: a start of it keeps its dashes where it has them, or has none.
_WRITTEN = "x" * 8 + "-" + "x" * 4 + "-" + "x" * 4 + "-" + "x" * 4 + "-" + "x" * 12
_HEX = re.compile(r"[0-9a-fA-F]")


@dataclass(frozen=True)
class Kind:
    name: str  # as the messages say it: "job", "offer"
    path: str  # the list that `id_prefix` narrows
    describe: Callable[[dict[str, Any]], str]  # what tells one candidate from another


def _joined(row: dict[str, Any], *keys: str) -> str:
    return "  ".join(cell(row.get(key)) for key in keys)


KINDS = {
    kind.name: kind
    for kind in (
        Kind("offer", "/offers/", lambda row: _joined(row, "cluster_name", "partition", "status")),
        Kind(
            "allocation",
            "/allocations/",
            lambda row: _joined(row, "cluster_name", "partition", "status", "window_end"),
        ),
        Kind("bid", "/bids/", lambda row: _joined(row, "offer", "status")),
        Kind("job", "/jobs/", lambda row: _joined(row, "name", "state", "created_at")),
        Kind("cluster", "/clusters/", lambda row: _joined(row, "name", "status")),
    )
}


def is_whole_id(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text.replace("-", "")) == 32


def is_id_start(text: str) -> bool:
    """Whether `text` can be the start of an id: hex digits, dashes only where ids have them,
    and at least `MINIMUM_PREFIX` digits."""
    digits = text.replace("-", "")
    if not MINIMUM_PREFIX <= len(digits) <= 32 or not all(_HEX.fullmatch(d) for d in digits):
        return False
    if "-" not in text:
        return True
    return len(text) <= len(_WRITTEN) and all(
        (character == "-") == (slot == "-") for character, slot in zip(text, _WRITTEN, strict=False)
    )


def id_resolve(client: ApiClient, kind_name: str, given: str) -> str:
    """The whole id of the `kind_name` object the caller means by `given`: `given` itself when
    it is a whole id, else the one object of that kind the caller can see whose id starts with
    it. None is a not-found (exit 4); several are named, for the caller to type more of the id
    (exit 2)."""
    given = given.strip()
    kind = KINDS[kind_name]
    if is_whole_id(given):
        return str(uuid.UUID(given))
    if not is_id_start(given):
        raise CliError(
            f"{given!r} is not a {kind.name} id: give the whole id or its start "
            f"(at least {MINIMUM_PREFIX} characters, such as the 8 the pages show).",
            code="invalid_id",
            exit_code=ExitCode.USAGE,
        )
    page = client.get(kind.path, {"id_prefix": given, "page_size": CANDIDATES_SHOWN})
    rows: list[dict[str, Any]] = page.get("results", [])
    if len(rows) == 1:
        return str(rows[0]["id"])
    if not rows:
        raise CliError(
            f"No {kind.name} that you can see has an id that starts with {given}.",
            code="not_found",
            exit_code=ExitCode.NOT_FOUND,
        )
    count = int(page.get("count") or len(rows))
    lines = [f"  {row['id']}  {kind.describe(row)}".rstrip() for row in rows]
    if count > len(rows):
        lines.append(f"  … and {count - len(rows)} more")
    raise CliError(
        f"{count} {kind.name}s have an id that starts with {given}; give more of the id:\n"
        + "\n".join(lines),
        code="ambiguous_id",
        exit_code=ExitCode.USAGE,
    )
