"""What every command shares: the server, the token, the output mode, and the organization it
acts for."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import click

from computeshare_cli.client import ApiClient
from computeshare_cli.config import TOKEN_ENV, Config
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.ids import KINDS, id_resolve, is_id_start, is_whole_id

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

    def client(self, *, login_required: bool = True) -> ApiClient:
        """The API client, with the token when there is one. Without `login_required` (what
        the API serves to visitors: the offers, the price history) it goes without one."""
        if login_required and not self.token:
            raise CliError(
                f"Not logged in: run `computeshare login`, or set {TOKEN_ENV}.",
                code="not_logged_in",
                exit_code=ExitCode.AUTH,
            )
        if self._client is None:
            self._client = ApiClient(self.url, self.token, timeout=self.timeout)
        return self._client

    def resolve(self, kind: str, given: str, *, login_required: bool = True) -> str:
        """The whole id of the `kind` object meant by `given`, a whole id or its start (looked
        up only then, so that a whole id needs no log-in where the command needs none)."""
        if is_whole_id(given.strip()):
            return str(uuid.UUID(given.strip()))
        return id_resolve(self.client(login_required=login_required), kind, given)

    def detail(self, kind: str, given: str, *, login_required: bool = True) -> dict[str, Any]:
        """The `kind` object meant by `given` (a whole id or its start), as its own endpoint
        shows it."""
        whole = self.resolve(kind, given, login_required=login_required)
        answer: dict[str, Any] = self.client(login_required=login_required).get(
            f"{KINDS[kind].path}{whole}/"
        )
        return answer

    def organization_id(self, given: str | None) -> str:
        """The organization a command acts for: `--org` (an id, its start, or a name), else the
        stored default, else the caller's only organization. The start of an id is matched
        here, among the caller's organizations that /me/ lists anyway."""
        wanted = given or self.config.organization
        organizations = self.client().get("/me/")["organizations"]
        if wanted:
            for organization in organizations:
                if wanted in (organization["id"], organization["name"]):
                    return str(organization["id"])
            if is_id_start(wanted):
                digits = wanted.replace("-", "").lower()
                starting = [
                    o for o in organizations if str(o["id"]).replace("-", "").startswith(digits)
                ]
                if len(starting) == 1:
                    return str(starting[0]["id"])
                if starting:
                    names = ", ".join(f"{o['name']} ({o['id']})" for o in starting)
                    raise CliError(
                        f"Several of your organizations have an id that starts with {wanted}: "
                        f"{names}; give more of the id.",
                        code="ambiguous_id",
                        exit_code=ExitCode.USAGE,
                    )
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
