"""A sweep's table of parameters and the array script that runs it: pure functions.

The table is CSV: a header of column names, then one row per task, its values separated by
commas, tabs (a range copied from a spreadsheet) or semicolons (CSV saved where the comma is the
decimal mark). Each column name becomes an environment variable of its task, so it is checked
as one (`environment_name_problem`, the rule of a job's variables); each value is a string.
The array's script is a bash wrapper that picks its row by `SLURM_ARRAY_TASK_ID`, exports the
row's values under the column names, gives them as arguments too (in column order), and runs
the team's own script in the row's own folder (`row-<n>`), so that tasks writing a file of the
same name do not overwrite each other's."""

from __future__ import annotations

import csv
import io
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.translation import ngettext

from hpc.types import environment_name_problem
from scheduler_bridge import errors

# A value is at most as long as one of a job's variables (MAX_ENVIRONMENT_VALUE_LENGTH).
MAX_VALUE_LENGTH = 4096
# Variables per task: the columns, as for a job's environment (MAX_ENVIRONMENT_VARIABLES).
MAX_COLUMNS = 100
# The table travels inside the array's script, which is at most MAX_SCRIPT_BYTES (256 KiB)
# with the team's script: the table takes at most this much of it.
MAX_TABLE_BYTES = 160 * 1024


# What a table's values may be separated by, the first the default.
DELIMITERS = (",", "\t", ";")
# Said with every refusal of the table's shape: what a table the form reads looks like.
TABLE_SHAPE = (
    "The first line names the columns; each line after it is one task, with one value per "
    "column, separated by commas, tabs (as a spreadsheet copies them) or semicolons."
)


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def table_delimiter(text: str) -> str:
    """The separator of a table, read from its header line: column names are variable names,
    which hold none of the `DELIMITERS`, so the header's own characters tell which it is (the
    one it holds most; a header of one column holds none, and is read as CSV). Not
    `csv.Sniffer`: it guesses from every line, where a value may hold another separator (a
    decimal comma in a tab-separated table) as often as the separator itself."""
    header = next((line for line in text.splitlines() if line.strip()), "")
    counts = {delimiter: header.count(delimiter) for delimiter in DELIMITERS}
    best = max(DELIMITERS, key=lambda delimiter: counts[delimiter])
    return best if counts[best] else DELIMITERS[0]


def sweep_table_parse(text: str, *, max_rows: int) -> Table:
    """Reads a table (a header, then rows; separated as `table_delimiter` finds); refuses with
    a stable code, and a message saying what to change, what cannot be one task per row: 400
    `sweep_table_empty`, `sweep_header_invalid` (extra `columns`, each with its reason),
    `sweep_row_ragged` (extra `line`, `expected`, `found`), `sweep_too_many_rows` (extra
    `limit`, `found`), `sweep_value_invalid` (extra `line`, `column`), `sweep_table_too_large`
    (extra `limit_bytes`). Blank lines are skipped, and so are the empty columns a
    spreadsheet's copy can end with (no name, no value)."""
    if "\x00" in text:
        raise errors.SweepValueInvalid("The table holds a NUL character.", extra={})
    if len(text.encode()) > MAX_TABLE_BYTES:
        raise errors.SweepTableTooLarge(extra={"limit_bytes": MAX_TABLE_BYTES})
    # A UTF-8 byte order mark, as spreadsheets write it, is not part of the first name.
    text = text.removeprefix("\ufeff")
    records = _trailing_empty_columns_dropped(_records(text))
    if not records:
        raise errors.SweepTableEmpty()
    _, header = records[0]
    columns = tuple(name.strip() for name in header)
    problems: dict[str, str] = {}
    for name in columns:
        problem = environment_name_problem(name) if name else "A column has no name."
        if problem is None and name in _BASH_READ_ONLY:
            problem = f"`{name}` is read-only in bash, which sets the task's variables."
        if problem is None and columns.count(name) > 1:
            problem = f"`{name}` names two columns."
        if problem is not None:
            problems.setdefault(name, problem)
    if problems:
        raise errors.SweepHeaderInvalid(
            f"{'; '.join(problems.values())} {TABLE_SHAPE}", extra={"columns": problems}
        )
    if len(columns) > MAX_COLUMNS:
        raise errors.SweepHeaderInvalid(
            f"At most {MAX_COLUMNS} columns.", extra={"columns": {}, "limit": MAX_COLUMNS}
        )
    rows = records[1:]
    if not rows:
        raise errors.SweepTableEmpty(
            "The table has a header but no row: a sweep runs one task per row."
        )
    if len(rows) > max_rows:
        raise errors.SweepTooManyRows(
            f"The table has {len(rows)} rows; a sweep runs at most {max_rows}.",
            extra={"limit": max_rows, "found": len(rows)},
        )
    for line, record in rows:
        if len(record) != len(columns):
            raise errors.SweepRowRagged(
                _ragged_text(line, found=len(record), expected=len(columns)),
                extra={"line": line, "expected": len(columns), "found": len(record)},
            )
        for column, value in zip(columns, record, strict=True):
            if len(value) > MAX_VALUE_LENGTH:
                raise errors.SweepValueInvalid(
                    f"Line {line}: the value of `{column}` is longer than {MAX_VALUE_LENGTH}.",
                    extra={"line": line, "column": column},
                )
    return Table(columns=columns, rows=tuple(tuple(record) for _, record in rows))


def _records(text: str) -> list[tuple[int, list[str]]]:
    """The table's non-blank records with the line each ends on; `sweep_row_ragged` for text
    the csv module cannot read (a quote left open)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=table_delimiter(text), strict=True)
    records: list[tuple[int, list[str]]] = []
    try:
        for record in reader:
            if record and any(cell.strip() for cell in record):
                records.append((reader.line_num, record))
    except csv.Error as error:
        raise errors.SweepRowRagged(
            f"Line {reader.line_num} cannot be read: {error}. A value that holds a separator, "
            'a quote or a line break goes between double quotes, its own quotes doubled ("").',
            extra={"line": reader.line_num},
        ) from error
    return records


def _trailing_empty_columns_dropped(
    records: list[tuple[int, list[str]]],
) -> list[tuple[int, list[str]]]:
    """The records without the empty cells at their ends past the last named column, and
    without the columns at the end that have no name and no value in any row: a spreadsheet's
    copy of a range wider than the table, or a separator left at the end of a line."""
    if not records:
        return records

    def is_blank(cells: list[str], column: int) -> bool:
        return len(cells) <= column or not cells[column].strip()

    width = len(records[0][1])
    while width > 1 and all(is_blank(cells, width - 1) for _, cells in records):
        width -= 1
    return [
        (
            line,
            cells[:width] if all(is_blank(cells, i) for i in range(width, len(cells))) else cells,
        )
        for line, cells in records
    ]


def _ragged_text(line: int, *, found: int, expected: int) -> str:
    has = ngettext("Line %(line)d has %(found)d value", "Line %(line)d has %(found)d values", found)
    names = ngettext(
        "the header names %(expected)d column", "the header names %(expected)d columns", expected
    )
    return (
        f"{has % {'line': line, 'found': found}}; {names % {'expected': expected}}. Give that "
        "line one value per column (an empty value is two separators side by side), or put a "
        "value that holds a separator between double quotes."
    )


def sweep_table_csv(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The table back as CSV text (what `sweep_table_parse` reads)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue()


ROW_FOLDER_PREFIX = "row-"
# Names bash holds read-only: a task's variables are set by bash, which would refuse them.
_BASH_READ_ONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID"})


def row_folder(row: int) -> str:
    """The folder of the job's directory in which the task of table row `row` runs."""
    return f"{ROW_FOLDER_PREFIX}{row}"


def sweep_array_script(
    *, team_script: str, columns: Sequence[str], rows: Sequence[tuple[int, Sequence[str]]]
) -> str:
    """The bash script of a sweep's array job. `rows` pairs each table row's index with its
    values; the array's task `i` runs `rows[i]`, so that a retry's array (of the failed rows
    only) is `0-(k-1)` whatever rows it holds. The team's script is carried in a quoted here
    document under a delimiter it does not contain, written to a private temporary file and
    run with the row's values as variables (assignments in front of the command: they reach
    the script's environment and never the wrapper's own variables) and as arguments; its exit
    status is the task's."""
    delimiter = f"CS_SWEEP_SCRIPT_{secrets.token_hex(8)}"
    while delimiter in team_script:
        delimiter = f"CS_SWEEP_SCRIPT_{secrets.token_hex(8)}"
    body = team_script if team_script.endswith("\n") else team_script + "\n"
    lines = [
        "#!/bin/bash",
        "# A ComputeShare sweep: array task N runs the team's script below with row N of its",
        "# table, as variables named after the columns and as arguments, in the row's folder.",
        'task="${SLURM_ARRAY_TASK_ID:?a sweep runs as an array}"',
        'case "$task" in',
    ]
    for task, (row, values) in enumerate(rows):
        assignments = "".join(
            f"{name}={shlex.quote(value)} " for name, value in zip(columns, values, strict=True)
        )
        arguments = "".join(f" {shlex.quote(value)}" for value in values)
        lines.append(f'  {task}) row={row}; run() {{ {assignments}"$script"{arguments}; }} ;;')
    lines += [
        '  *) echo "this sweep\'s array has no task $task" >&2; exit 2 ;;',
        "esac",
        f'mkdir -p "{ROW_FOLDER_PREFIX}$row" && cd "{ROW_FOLDER_PREFIX}$row" || exit 1',
        'script=$(mktemp "${TMPDIR:-/tmp}/computeshare-sweep.XXXXXX") || exit 1',
        "trap 'rm -f \"$script\"' EXIT",
        f"cat >\"$script\" <<'{delimiter}'",
        body + delimiter,
        'chmod 700 "$script"',
        "run",
    ]
    return "\n".join(lines) + "\n"


def last_line(text: str) -> str | None:
    """The last non-empty line of a task's stdout (its line end and a CR dropped), or None."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.rstrip("\r")
    return None


def array_expression(task_count: int, cap: int) -> str:
    """The `--array` of a sweep's job: every task, at most `cap` running at once."""
    return f"0-{task_count - 1}%{cap}"
