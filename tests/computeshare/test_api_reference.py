"""docs/api.md, the project's API contract, against the code: its generated half is what
`manage.py api_reference` writes from the schema and the error classes now, and it names every
path, shape and error code the server has."""

import re
from pathlib import Path

from django.core.management import call_command

from computeshare.api_reference import MARKER, document_update, error_classes, schema_generate

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_the_reference_in_docs_api_md_is_what_the_code_publishes_now():
    document = DOCUMENT.read_text()

    assert document_update(document, schema_generate()) == document, (
        "docs/api.md is stale: run `.venv/bin/python manage.py api_reference` and commit it"
    )


def test_every_path_shape_and_error_code_of_the_server_is_in_docs_api_md():
    document = DOCUMENT.read_text()
    schema = schema_generate()

    headings = set(re.findall(r"^#### `[A-Z]+ (\S+)`$", document, re.MULTILINE))
    assert headings == set(schema["paths"])
    shapes = set(re.findall(r"^### (\w+)$", document, re.MULTILINE))
    assert set(schema["components"]["schemas"]) <= shapes
    codes = set(re.findall(r"^\| \d{3} \| `(\w+)` \|", document, re.MULTILINE))
    assert {error.code for error in error_classes()} | {"not_authenticated"} <= codes


def test_the_conventions_stay_written_by_hand_above_the_marker():
    head = DOCUMENT.read_text().split(MARKER, 1)[0]

    for convention in ("### Errors", "### Lists", "### Authentication", "Idempotency-Key"):
        assert convention in head


def test_the_command_says_the_file_is_up_to_date(capsys):
    call_command("api_reference", "--check")

    assert capsys.readouterr().out == "api.md is up to date.\n"
