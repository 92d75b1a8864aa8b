"""What every command shares: the server, the token, the output mode, and the organization it
acts for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from computeshare_cli.client import ApiClient
from computeshare_cli.config import TOKEN_ENV, Config
from computeshare_cli.errors import CliError, ExitCode

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class State:
    """What every command gets: where the server is, the token, and how to show answers."""

    config: Config
    url: str
    token: str | None
    as_json: bool
    timeout: float
    _client: ApiClient | None = field(default=None, repr=False)

    def client(self, *, authenticated: bool = True) -> ApiClient:
        if authenticated and not self.token:
            raise CliError(
                f"Not logged in: run `computeshare login`, or set {TOKEN_ENV}.",
                code="not_logged_in",
                exit_code=ExitCode.AUTH,
            )
        if self._client is None:
            self._client = ApiClient(
                self.url, self.token if authenticated else None, timeout=self.timeout
            )
        return self._client

    def organization_id(self, given: str | None) -> str:
        """The organization a command acts for: `--org` (an id or a name), else the stored
        default, else the caller's only organization."""
        wanted = given or self.config.organization
        organizations = self.client().get("/me/")["organizations"]
        if wanted:
            for organization in organizations:
                if wanted in (organization["id"], organization["name"]):
                    return str(organization["id"])
            raise CliError(
                f"You are not a member of an organization {wanted!r}.",
                code="not_found",
                exit_code=ExitCode.NOT_FOUND,
            )
        if len(organizations) == 1:
            return str(organizations[0]["id"])
        names = ", ".join(organization["name"] for organization in organizations) or "none"
        raise CliError(
            f"Say which organization with --org (yours: {names}).",
            code="organization_required",
            exit_code=ExitCode.USAGE,
        )


pass_state = click.make_pass_decorator(State)


def org_option(function: F) -> F:
    return click.option(
        "--org",
        "organization",
        envvar="COMPUTESHARE_ORG",
        help="Organization id or name (default: the one stored at login, or your only one).",
    )(function)
