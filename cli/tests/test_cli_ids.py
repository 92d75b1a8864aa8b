"""Ids as people type them: whole, or the start the pages show, resolved through the list's
`id_prefix` with one request; several candidates are named, none is a not-found."""

from typing import Any

import pytest
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.ids import id_resolve, is_id_start, is_whole_id

WHOLE = "1decda79-2d50-402d-a43a-48c9cf1c773d"


class FakeClient:
    """Answers each GET with `pages`' next answer and records what was asked."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.pages = list(pages)
        self.asked: list[tuple[str, dict[str, Any] | None]] = []

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        self.asked.append((path, params))
        return self.pages.pop(0)


@pytest.mark.parametrize(
    ("text", "whole", "start"),
    [
        (WHOLE, True, True),
        (WHOLE.replace("-", ""), True, True),
        (WHOLE.upper(), True, True),
        ("1decda79", False, True),
        ("1decda79-2d", False, True),
        ("1dec", False, True),
        ("1de", False, False),  # fewer than 4 digits
        ("1dec-da79", False, False),  # a dash where ids have none
        ("hello", False, False),
        ("", False, False),
    ],
)
def test_what_is_an_id_and_what_starts_one(text: str, whole: bool, start: bool) -> None:
    assert (is_whole_id(text), is_id_start(text)) == (whole, start)


def test_a_whole_id_costs_no_request() -> None:
    client = FakeClient()
    assert id_resolve(client, "job", WHOLE.upper()) == WHOLE  # type: ignore[arg-type]
    assert client.asked == []


def test_a_unique_start_is_the_whole_id_in_one_request() -> None:
    client = FakeClient({"count": 1, "results": [{"id": WHOLE, "name": "x"}]})
    assert id_resolve(client, "allocation", "1decda79") == WHOLE  # type: ignore[arg-type]
    assert client.asked == [("/allocations/", {"id_prefix": "1decda79", "page_size": 10})]


def test_a_shared_start_names_the_candidates() -> None:
    rows = [
        {"id": "abcd1234-0000-4000-8000-000000000001", "name": "first", "state": "queued"},
        {"id": "abcd1234-ffff-4000-8000-000000000002", "name": "second", "state": "running"},
    ]
    client = FakeClient({"count": 12, "results": rows})
    with pytest.raises(CliError) as raised:
        id_resolve(client, "job", "abcd1234")  # type: ignore[arg-type]
    error = raised.value
    assert (error.code, error.exit_code) == ("ambiguous_id", ExitCode.USAGE)
    assert error.detail.splitlines() == [
        "12 jobs have an id that starts with abcd1234; give more of the id:",
        "  abcd1234-0000-4000-8000-000000000001  first  queued  -",
        "  abcd1234-ffff-4000-8000-000000000002  second  running  -",
        "  … and 10 more",
    ]


def test_a_start_of_nothing_is_not_found_and_a_word_is_no_id() -> None:
    with pytest.raises(CliError) as none:
        id_resolve(FakeClient({"count": 0, "results": []}), "offer", "00000000")  # type: ignore[arg-type]
    assert (none.value.code, none.value.exit_code) == ("not_found", ExitCode.NOT_FOUND)
    with pytest.raises(CliError) as word:
        id_resolve(FakeClient(), "offer", "cheap")  # type: ignore[arg-type]
    assert (word.value.code, word.value.exit_code) == ("invalid_id", ExitCode.USAGE)
