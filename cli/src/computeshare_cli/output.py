"""How answers are shown: Rich tables for people, the API's own JSON for scripts (`--json`).
Tables and progress go to the terminal; errors and progress go to stderr, so that stdout holds
only what a script would read."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from computeshare_cli import figures
from computeshare_cli.errors import CliError, error_text

# Piped output is not cut to 80 columns: a script or a pager gets whole ids.
stdout = Console(soft_wrap=False, width=None if sys.stdout.isatty() else 240)
stderr = Console(stderr=True, width=None if sys.stderr.isatty() else 240)
ISO_TIME = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)?")


def json_print(data: Any) -> None:
    """The data as JSON on stdout, nothing else (no colour, no wrapping)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


# How a column's value is written, from the value and its whole row (an amount takes the row's
# currency); a column without one is written by `cell`.
Figure = Callable[[Any, dict[str, Any]], str]
Column = tuple[str, str] | tuple[str, str, Figure]


def money(value: Any, row: dict[str, Any]) -> str:
    """An amount to the cent with the row's currency (computeshare_cli/figures.py)."""
    return figures.amount_text(value, row.get("currency")) if value is not None else "-"


def price(value: Any, row: dict[str, Any]) -> str:
    """A price per core-hour (GPU-hour) with the row's currency."""
    return figures.price_text(value, row.get("currency")) if value is not None else "-"


def quantity(value: Any, row: dict[str, Any]) -> str:
    """Core-hours (GPU-hours) of an allocation to the hundredth, like an amount."""
    return figures.amount_text(value) if value is not None else "-"


def percent(value: Any, row: dict[str, Any]) -> str:
    return figures.percent_text(value)


def offer_price(key: str) -> Figure:
    """An offer's price per hour, its total and (reserved blocks) per day."""
    return lambda value, row: figures.offer_prices(row, key)


def column_text(row: dict[str, Any], column: Column) -> str:
    value = value_at(row, column[1])
    return column[2](value, row) if len(column) == 3 else cell(value)


def table_print(
    rows: Iterable[dict[str, Any]],
    columns: Sequence[Column],
    *,
    title: str | None = None,
    empty: str = "Nothing to show.",
) -> None:
    """`columns` are (heading, key) pairs, or (heading, key, figure) to write the value with
    `figure`; a key may be dotted (`wallet.available`)."""
    table = Table(title=title, header_style="bold")
    for heading, key, *_ in columns:
        table.add_column(heading, overflow="fold", no_wrap=key in ("id", "job"))
    count = 0
    for row in rows:
        table.add_row(*(column_text(row, column) for column in columns))
        count += 1
    if count:
        stdout.print(table)
    else:
        stderr.print(empty)


def fields_print(data: dict[str, Any], keys: Sequence[Column], title: str) -> None:
    """One object as a two-column table of its fields."""
    stdout.print(title, style="bold", highlight=False)
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for column in keys:
        table.add_row(column[0], column_text(data, column))
    stdout.print(table)


def rows_print(
    rows: list[dict[str, Any]], columns: Sequence[Column], *, as_json: bool, empty: str
) -> None:
    """A listing: the API's JSON for scripts (`--json`), else a table."""
    if as_json:
        json_print(rows)
        return
    table_print(rows, columns, empty=empty)


def object_print(
    data: dict[str, Any], keys: Sequence[Column], *, as_json: bool, title: str
) -> None:
    """One object: the API's JSON for scripts (`--json`), else the table of its fields."""
    if as_json:
        json_print(data)
        return
    fields_print(data, keys, title)


def value_at(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(cell(item) for item in value)
    if isinstance(value, str) and (match := ISO_TIME.fullmatch(value)):
        zone = match[5] or ""
        return f"{match[1]} {match[2]}" + ("" if zone in ("Z", "+00:00") else zone)
    return str(value)


def error_print(error: CliError, *, as_json: bool) -> None:
    if as_json:
        sys.stderr.write(json.dumps({"error": error.as_json()}) + "\n")
        return
    stderr.print(
        f"[bold red]Error:[/bold red] {escape(error_text(error))}", highlight=False, soft_wrap=True
    )


def size_text(size: int | None) -> str:
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
