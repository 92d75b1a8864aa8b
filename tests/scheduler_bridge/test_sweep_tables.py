"""A sweep's table as people bring it: typed as CSV, copied from a spreadsheet (tab-separated),
saved as CSV where the comma is the decimal mark (semicolons), with quoted values. Only a table
that cannot be one task per row is refused, with a message saying what to change."""

import pytest

from scheduler_bridge import errors
from scheduler_bridge.services.sweep_tables import Table, sweep_table_parse, table_delimiter

EXPECTED = Table(columns=("x", "label"), rows=(("1", "a"), ("2", "b c")))


@pytest.mark.parametrize(
    "text",
    [
        "x,label\n1,a\n2,b c\n",
        "x\tlabel\n1\ta\n2\tb c\n",  # a spreadsheet's range, as the clipboard carries it
        "x\tlabel\r\n1\ta\r\n2\tb c\r\n",  # ... from a spreadsheet on Windows
        "x;label\n1;a\n2;b c\n",
        "\ufeffx;label\r\n1;a\r\n\r\n2;b c\r\n",  # saved by a spreadsheet, a blank line inside
        "x\tlabel\t\t\n1\ta\t\t\n2\tb c\t\t\n",  # a copy wider than the table
        "x,label\n1,a,\n2,b c\n",  # a separator left at the end of a line
    ],
)
def test_comma_tab_and_semicolon_tables_read_alike(text):
    assert sweep_table_parse(text, max_rows=10) == EXPECTED


def test_quoted_values_keep_their_separators_quotes_and_line_breaks():
    tab_separated = 'x\tlabel\n1\t"a\tb"\n2\t"say ""hi"""\n3\t"two\nlines"\n'
    comma_separated = 'x,label\n1,"a,b"\n2,"say ""hi"""\n3,"two\nlines"\n'

    expected = Table(
        columns=("x", "label"), rows=(("1", "a\tb"), ("2", 'say "hi"'), ("3", "two\nlines"))
    )
    assert sweep_table_parse(tab_separated, max_rows=10) == expected
    assert sweep_table_parse(comma_separated, max_rows=10).rows == (
        ("1", "a,b"),
        ("2", 'say "hi"'),
        ("3", "two\nlines"),
    )


def test_the_separator_is_the_headers_so_values_may_hold_the_others():
    """Column names hold no separator: the header tells. A tab-separated table of decimal
    commas, and a CSV of values with semicolons, are read as they were written."""
    decimal_commas = "rate\tmomentum\n0,001\t0,9\n0,01\t0,95\n"
    semicolon_values = "x,command\n1,a;b;c\n"

    assert table_delimiter(decimal_commas) == "\t"
    assert sweep_table_parse(decimal_commas, max_rows=10).rows == (
        ("0,001", "0,9"),
        ("0,01", "0,95"),
    )
    assert table_delimiter(semicolon_values) == ","
    assert sweep_table_parse(semicolon_values, max_rows=10).rows == (("1", "a;b;c"),)
    # One column: no separator to find, read as CSV.
    assert table_delimiter("\n\nx\n1\n") == ","
    assert sweep_table_parse("x\n1\n2\n", max_rows=10).rows == (("1",), ("2",))


def test_a_ragged_table_is_refused_with_its_line_and_what_to_do():
    with pytest.raises(errors.SweepRowRagged) as refused:
        sweep_table_parse("x\ty\n1\t2\n3\n", max_rows=10)

    assert refused.value.extra == {"line": 3, "expected": 2, "found": 1}
    assert str(refused.value.detail) == (
        "Line 3 has 1 value; the header names 2 columns. Give that line one value per column "
        "(an empty value is two separators side by side), or put a value that holds a "
        "separator between double quotes."
    )
    with pytest.raises(errors.SweepRowRagged) as too_many:
        sweep_table_parse("x\n1,2,3\n", max_rows=10)
    assert str(too_many.value.detail).startswith("Line 2 has 3 values; the header names 1 column.")


def test_a_quote_left_open_is_refused_with_how_to_quote():
    with pytest.raises(errors.SweepRowRagged) as refused:
        sweep_table_parse('x,label\n1,"a,b\n', max_rows=10)

    assert refused.value.extra == {"line": 2}
    assert str(refused.value.detail).endswith(
        "A value that holds a separator, a quote or a line break goes between double quotes, "
        'its own quotes doubled ("").'
    )


def test_a_header_that_is_not_names_is_refused_with_the_shape_of_a_table():
    """A header with a space in a name (a separator the table does not use) is genuinely bad:
    the message names the column and says what a table looks like."""
    with pytest.raises(errors.SweepHeaderInvalid) as refused:
        sweep_table_parse("learning rate,epochs\n0.1,3\n", max_rows=10)

    assert refused.value.extra == {
        "columns": {
            "learning rate": "`learning rate` is not a valid name: letters, digits and _, "
            "not starting with a digit."
        }
    }
    assert str(refused.value.detail).endswith(
        "The first line names the columns; each line after it is one task, with one value per "
        "column, separated by commas, tabs (as a spreadsheet copies them) or semicolons."
    )
