"""What the user reads and the exit status when the API refuses something."""

import json

import pytest
from computeshare_cli.errors import ExitCode, api_error, error_text, exit_code_for_status


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, ExitCode.USAGE),
        (413, ExitCode.USAGE),
        (401, ExitCode.AUTH),
        (403, ExitCode.AUTH),
        (404, ExitCode.NOT_FOUND),
        (409, ExitCode.CONFLICT),
        (402, ExitCode.MONEY),
        (429, ExitCode.UNAVAILABLE),
        (500, ExitCode.UNAVAILABLE),
        (502, ExitCode.UNAVAILABLE),
    ],
)
def test_each_class_of_failure_has_its_own_exit_status(status: int, expected: ExitCode) -> None:
    assert exit_code_for_status(status) == expected


def test_the_api_error_shows_detail_code_and_each_invalid_field() -> None:
    body = json.dumps(
        {
            "detail": "The input is not valid.",
            "code": "invalid",
            "extra": {"fields": {"array": ["The range `5-1` ends before it starts."]}},
        }
    ).encode()
    error = api_error(400, body)
    assert (error.code, error.status, error.exit_code) == ("invalid", 400, ExitCode.USAGE)
    assert error_text(error) == (
        "The input is not valid. [invalid, HTTP 400]\n"
        "  array: The range `5-1` ends before it starts."
    )


def test_extra_other_than_fields_is_shown_too() -> None:
    body = b'{"detail": "Over the limit.", "code": "input_files_too_large", '
    body += b'"extra": {"limit_bytes": 67108864, "name": "big.bin"}}'
    error = api_error(413, body)
    assert error_text(error).splitlines() == [
        "Over the limit. [input_files_too_large, HTTP 413]",
        "  limit_bytes: 67108864",
        "  name: big.bin",
    ]
    assert error.as_json() == {
        "detail": "Over the limit.",
        "code": "input_files_too_large",
        "status": 413,
        "extra": {"limit_bytes": 67108864, "name": "big.bin"},
    }


def test_an_answer_that_is_not_the_api_s_says_so_without_its_markup() -> None:
    error = api_error(404, b"<!DOCTYPE html><html><title>Page not found</title>")
    assert error.code is None
    assert error.exit_code == ExitCode.NOT_FOUND
    assert "<" not in error.detail
    assert error.detail.startswith("The server answered HTTP 404: not an answer of the")
    assert api_error(502, b"").detail == "The server answered HTTP 502."


def test_a_wrong_user_name_or_password_is_an_authentication_failure() -> None:
    body = b'{"detail": "Wrong user name or password.", "code": "invalid_credentials", "extra": {}}'
    error = api_error(400, body)
    assert (error.code, error.exit_code) == ("invalid_credentials", ExitCode.AUTH)
    # Any other 400 is still the caller's input.
    assert api_error(400, b'{"detail": "No.", "code": "invalid"}').exit_code == ExitCode.USAGE


def test_a_refused_connection_says_to_check_the_address_and_the_server() -> None:
    from computeshare_cli.client import ApiClient
    from computeshare_cli.errors import CliError

    client = ApiClient("http://127.0.0.1:9", retries=0, timeout=2)
    with client, pytest.raises(CliError) as raised:
        client.get("/offers/")
    error = raised.value
    assert error.exit_code == ExitCode.UNAVAILABLE
    assert str(error).startswith("The connection to http://127.0.0.1:9 failed: ")
    assert str(error).endswith(
        ". Check the address (--url, COMPUTESHARE_URL, or the one stored at login) and that "
        "the server is running. [network_error]"
    )
