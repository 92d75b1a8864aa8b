"""What the client says and which exit status it ends with when something goes wrong.

Every error the API answers has the shape `{"detail", "code", "extra"}`; the client shows the
detail and the code as they came and maps the HTTP status to a small set of exit statuses, one
per class of failure, so that a script can tell "fix your input" from "try again later"."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    OK = 0
    ERROR = 1  # anything not in a class below
    USAGE = 2  # bad arguments (click's own status for them) and 400/413/422 from the API
    AUTH = 3  # 401, 403, a wrong user name or password (400 invalid_credentials), or no token
    NOT_FOUND = 4  # 404
    CONFLICT = 5  # 409
    MONEY = 6  # 402: not enough money, budget or allocation
    UNAVAILABLE = 7  # 5xx, 429, time-outs, connection refused: worth trying again later
    JOB_FAILED = 8  # `--wait` saw the job end in a state other than completed
    INTERRUPTED = 130  # Ctrl-C


# Refusals the API answers with 400 that are about who the caller is, not about the input's
# shape: a script tells them from a typo in its arguments by the exit status.
AUTH_CODES = {"invalid_credentials"}


def exit_code_for_status(status: int, code: str | None = None) -> ExitCode:
    """The exit status for an HTTP error status (and the API's code, when it sent one)."""
    if code in AUTH_CODES or status in (401, 403):
        return ExitCode.AUTH
    if status == 404:
        return ExitCode.NOT_FOUND
    if status == 409:
        return ExitCode.CONFLICT
    if status == 402:
        return ExitCode.MONEY
    if status == 429 or status >= 500:
        return ExitCode.UNAVAILABLE
    if 400 <= status < 500:
        return ExitCode.USAGE
    return ExitCode.ERROR


@dataclass
class CliError(Exception):
    """An error to show the user and end on; `code` is the API's stable code, when it sent one."""

    detail: str
    exit_code: ExitCode = ExitCode.ERROR
    code: str | None = None
    status: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return error_text(self)

    def as_json(self) -> dict[str, Any]:
        return {
            "detail": self.detail,
            "code": self.code,
            "status": self.status,
            "extra": self.extra,
        }


def api_error(status: int, body: bytes) -> CliError:
    """The error an HTTP answer of `status` carries: the API's own detail, code and extra when
    the body is its JSON error, else the status and the start of whatever came (a proxy's HTML
    page, a text error)."""
    parsed: Any = None
    if body:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
    if isinstance(parsed, dict) and "detail" in parsed:
        extra = parsed.get("extra")
        code = str(parsed["code"]) if parsed.get("code") else None
        return CliError(
            detail=str(parsed["detail"]),
            code=code,
            status=status,
            extra=extra if isinstance(extra, dict) else {},
            exit_code=exit_code_for_status(status, code),
        )
    text = body[:300].decode("utf-8", errors="replace").strip()
    if text.startswith("<"):
        # A web page (a proxy's, or a server without this endpoint): its markup helps nobody.
        text = "not an answer of the ComputeShare API (is the address right, the server current?)"
    detail = f"The server answered HTTP {status}" + (f": {text}" if text else ".")
    return CliError(detail=detail, status=status, exit_code=exit_code_for_status(status))


def error_text(error: CliError) -> str:
    """One or more lines: the detail, the code and status in brackets, then each invalid field
    with its messages (400 `invalid` carries them in `extra.fields`) and any other extra."""
    head = error.detail
    tags = [part for part in (error.code, f"HTTP {error.status}" if error.status else None) if part]
    if tags:
        head += f" [{', '.join(tags)}]"
    lines = [head]
    extra = dict(error.extra)
    fields = extra.pop("fields", None)
    if isinstance(fields, dict):
        for name, messages in fields.items():
            if isinstance(messages, list):
                text = " ".join(str(message) for message in messages)
            else:
                text = str(messages)
            lines.append(f"  {name}: {text}")
    for name, value in extra.items():
        lines.append(f"  {name}: {value}")
    return "\n".join(lines)
