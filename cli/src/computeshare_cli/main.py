"""The `computeshare` command: log in, the market (offers, buy, bid, allocations), money
(budget, wallet, usage) and jobs (in the `jobs` package). Every command speaks the public REST
API only."""

from __future__ import annotations

import socket
import sys
from typing import Any

import click
from click.shell_completion import get_completion_class

from computeshare_cli import __version__
from computeshare_cli.client import ApiClient, new_idempotency_key
from computeshare_cli.config import (
    TOKEN_ENV,
    URL_ENV,
    ConfigError,
    config_load,
    config_path,
    config_save,
)
from computeshare_cli.context import State, org_option, pass_state
from computeshare_cli.errors import CliError, ExitCode
from computeshare_cli.jobs import jobs
from computeshare_cli.output import (
    Column,
    error_print,
    json_print,
    money,
    object_print,
    offer_price,
    price,
    quantity,
    rows_print,
    stderr,
    table_print,
)
from computeshare_cli.parsing import ArgumentError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar=URL_ENV, help=f"The server (default: stored at login; {URL_ENV}).")
@click.option("--token", envvar=TOKEN_ENV, help=f"An API token ({TOKEN_ENV}); overrides login.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON, for scripts.")
@click.option(
    "--timeout", type=float, default=30.0, show_default=True, help="Seconds a request may take."
)
@click.version_option(__version__, prog_name="computeshare")
@click.pass_context
def cli(
    context: click.Context, url: str | None, token: str | None, as_json: bool, timeout: float
) -> None:
    """ComputeShare from a terminal: offers, allocations, jobs and their files.

    Start with `computeshare login` (the offers need none). Wherever a command takes an id, its
    start will do, such as the 8 characters the pages show, when only one of what you can see
    starts so. Shell completion: `computeshare completion bash`."""
    try:
        config = config_load()
    except ConfigError as error:
        raise CliError(str(error), code="config_unreadable") from error
    state = State(
        config=config,
        url=(url or config.url).rstrip("/"),
        token=token or config.token,
        as_json=as_json,
        timeout=timeout,
    )
    context.obj = state
    context.call_on_close(lambda: state._client.close() if state._client else None)


# --- log in ----------------------------------------------------------------------------------


@cli.command()
@click.option("--url", "login_url", help="The server's address, e.g. https://computeshare.example.")
@click.option("--username")
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
@click.option("--token", "given_token", help="Store this API token instead of logging in.")
@org_option
@pass_state
def login(
    state: State,
    login_url: str | None,
    username: str | None,
    password_stdin: bool,
    given_token: str | None,
    organization: str | None,
) -> None:
    """Log in and store a token in your config folder (mode 0600)."""
    url = (login_url or click.prompt("Server", default=state.url)).rstrip("/")
    config = state.config
    if given_token:
        token, token_id = given_token, None
        me = ApiClient(url, token, timeout=state.timeout).get("/me/")
    else:
        username = username or click.prompt("Username")
        if password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = click.prompt("Password", hide_input=True)
        name = f"computeshare CLI on {socket.gethostname()}"[:60]
        with ApiClient(url, timeout=state.timeout) as anonymous:
            answer = anonymous.post(
                "/auth/token/", {"username": username, "password": password, "name": name}
            )
        token, token_id = answer["token"], answer.get("id")
        with ApiClient(url, token, timeout=state.timeout) as client:
            me = client.get("/me/")
    config.url, config.token, config.token_id = url, token, token_id
    config.username = me["username"]
    organizations = me["organizations"]
    if organization:
        matches = [o for o in organizations if organization in (o["id"], o["name"])]
        if not matches:
            raise CliError(
                f"You are not a member of an organization {organization!r}.",
                code="not_found",
                exit_code=ExitCode.NOT_FOUND,
            )
        config.organization = matches[0]["id"]
    elif len(organizations) == 1:
        config.organization = organizations[0]["id"]
    path = config_save(config)
    if state.as_json:
        json_print({"url": url, "username": me["username"], "config": str(path)})
        return
    stderr.print(f"Logged in to {url} as {me['username']}; token stored in {path}.")
    for org in organizations:
        marker = " (default)" if org["id"] == config.organization else ""
        stderr.print(f"  {org['name']}  {org['role']}  {org['id']}{marker}")


@cli.command()
@pass_state
def logout(state: State) -> None:
    """Revoke the stored token (when this client made it) and forget it."""
    config = state.config
    if config.token and config.token_id:
        try:
            ApiClient(config.url, config.token, timeout=state.timeout).delete(
                f"/auth/tokens/{config.token_id}/"
            )
        except CliError as error:
            if error.exit_code not in (ExitCode.AUTH, ExitCode.NOT_FOUND):
                raise
    config.token = config.token_id = None
    config_save(config)
    stderr.print(f"Logged out; {config_path()} no longer holds a token.")


@cli.command()
@pass_state
def whoami(state: State) -> None:
    """Who the token belongs to, and their organizations."""
    me = state.client().get("/me/")
    if state.as_json:
        json_print(me)
        return
    stderr.print(f"{me['username']} on {state.url}")
    table_print(me["organizations"], [("organization", "name"), ("role", "role"), ("id", "id")])


# --- the market ------------------------------------------------------------------------------

OFFER_COLUMNS: list[Column] = [
    ("id", "id"),
    ("cluster", "cluster_name"),
    ("partition", "partition"),
    ("resource", "resource"),
    ("kind", "capacity"),
    ("remaining", "remaining"),
    ("unit", "quantity_unit"),
    ("reserve", "reserve_price", offer_price("reserve_price")),
    ("buy now", "buy_now_price", offer_price("buy_now_price")),
    ("window start", "window_start"),
    ("window end", "window_end"),
    ("closes", "auction_closes_at"),
    ("bids", "bid_count"),
    ("status", "status"),
]


@cli.group()
def offers() -> None:
    """Browse the market's offers (no log-in needed, as on the site)."""


@offers.command("list")
@click.option("--resource", type=click.Choice(["cpu", "gpu"]))
@click.option(
    "--capacity",
    type=click.Choice(["preemptible", "reserved"]),
    help="Preemptible hours, or reserved blocks of whole cores (GPUs) for the whole window.",
)
@click.option("--cluster", help="A cluster id (its start, when logged in).")
@click.option("--partition")
@click.option("--status", type=click.Choice(["open", "cleared", "cancelled"]))
@click.option("--min-quantity")
@click.option("--max-price", help="Highest reserve price per core-hour (GPU-hour).")
@click.option("--window-starts-before", help="ISO 8601.")
@click.option("--window-ends-after", help="ISO 8601.")
@click.option(
    "--ordering",
    type=click.Choice(["reserve_price", "-reserve_price", "window_start", "auction_closes_at"]),
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@pass_state
def offers_list(state: State, /, limit: int, **filters: str | None) -> None:
    """Offers, filtered as the API filters them. No log-in needed."""
    if filters.get("cluster"):
        filters["cluster"] = state.resolve("cluster", str(filters["cluster"]))
    rows = list(state.client(login_required=False).paginate("/offers/", filters, limit=limit))
    rows_print(rows, OFFER_COLUMNS, as_json=state.as_json, empty="No offer matches.")


@offers.command("show")
@click.argument("offer_id")
@pass_state
def offers_show(state: State, offer_id: str) -> None:
    """One offer, with its demand. OFFER_ID: the whole id or its start (the 8 characters the
    pages show). No log-in needed."""
    offer = state.detail("offer", offer_id, login_required=False)
    object_print(
        offer,
        [
            *OFFER_COLUMNS,
            ("quantity", "quantity"),
            ("core-hours per unit", "unit_hours"),
            ("preemption grace (s)", "preemption_grace_seconds"),
            ("units bid", "units_bid"),
            ("max per buyer", "max_per_buyer"),
            ("clearing price", "clearing_price", price),
            ("currency", "currency"),
        ],
        as_json=state.as_json,
        title=f"Offer {offer['id']}",
    )


PRICE_HISTORY_COLUMNS: list[Column] = [
    ("closed", "auction_closed_at"),
    ("offer", "offer"),
    ("partition", "partition"),
    ("resource", "resource"),
    ("kind", "capacity"),
    ("clearing price", "clearing_price", price),
    ("sold", "quantity_sold"),
    ("offered", "quantity"),
]


@offers.command("price-history")
@click.option("--cluster", help="A cluster id (its start, when logged in).")
@click.option("--partition")
@click.option("--resource", type=click.Choice(["cpu", "gpu"]))
@click.option(
    "--capacity",
    type=click.Choice(["preemptible", "reserved"]),
    default="preemptible",
    show_default=True,
    help="One kind at a time: their prices are not mixed.",
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@pass_state
def offers_price_history(state: State, /, limit: int, **filters: str | None) -> None:
    """Cleared auctions, oldest first: the price every winner paid per core-hour (GPU-hour).
    No log-in needed."""
    if filters.get("cluster"):
        filters["cluster"] = state.resolve("cluster", str(filters["cluster"]))
    client = state.client(login_required=False)
    rows = list(client.paginate("/offers/price-history/", filters, limit=limit))
    rows_print(
        rows, PRICE_HISTORY_COLUMNS, as_json=state.as_json, empty="No auction has cleared here yet."
    )


ALLOCATION_COLUMNS: list[Column] = [
    ("id", "id"),
    ("cluster", "cluster_name"),
    ("partition", "partition"),
    ("resource", "resource"),
    ("kind", "capacity"),
    ("block", "block"),
    ("reservation", "reservation"),
    ("quantity", "quantity"),
    ("used", "used", quantity),
    ("reserved", "reserved", quantity),
    ("remaining", "remaining", quantity),
    ("unit price", "unit_price", price),
    ("window start", "window_start"),
    ("window end", "window_end"),
    ("status", "status"),
]


@cli.command()
@click.argument("offer_id")
@click.option(
    "--quantity",
    required=True,
    help="Units to buy at the buy-now price: core-hours (GPU-hours), or for a reserved offer "
    "whole cores (GPUs).",
)
@org_option
@pass_state
def buy(state: State, offer_id: str, quantity: str, organization: str | None) -> None:
    """Buy units of an offer now; answers the allocation."""
    client = state.client()
    offer_id = state.resolve("offer", offer_id)
    allocation = client.post(
        f"/offers/{offer_id}/buy/",
        {"organization": state.organization_id(organization), "quantity": quantity},
        idempotency_key=new_idempotency_key(),
    )
    object_print(allocation, ALLOCATION_COLUMNS, as_json=state.as_json, title="Allocation bought")


BID_COLUMNS: list[Column] = [
    ("id", "id"),
    ("offer", "offer"),
    ("quantity", "quantity"),
    ("price", "price", price),
    ("held", "held", money),
    ("status", "status"),
    ("won", "quantity_won"),
    ("price paid", "price_paid", price),
]


@cli.command()
@click.argument("offer_id")
@click.option("--quantity", required=True)
@click.option(
    "--price", required=True, help="Per core-hour (GPU-hour), at least the reserve price."
)
@click.option("--min-quantity", help="The least you accept at clearing.")
@org_option
@pass_state
def bid(
    state: State,
    offer_id: str,
    quantity: str,
    price: str,
    min_quantity: str | None,
    organization: str | None,
) -> None:
    """Place a sealed bid; price x quantity is held on the wallet until clearing."""
    body: dict[str, Any] = {
        "organization": state.organization_id(organization),
        "quantity": quantity,
        "price": price,
    }
    if min_quantity is not None:
        body["min_quantity"] = min_quantity
    offer_id = state.resolve("offer", offer_id)
    answer = state.client().post(
        f"/offers/{offer_id}/bids/", body, idempotency_key=new_idempotency_key()
    )
    object_print(answer, BID_COLUMNS, as_json=state.as_json, title="Bid placed")


@cli.group()
def bids() -> None:
    """Your organizations' bids."""


@bids.command("list")
@click.option("--offer", help="An offer id, or its start.")
@click.option("--status", type=click.Choice(["open", "won", "partially_won", "lost", "withdrawn"]))
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@pass_state
def bids_list(state: State, offer: str | None, status: str | None, limit: int) -> None:
    if offer:
        offer = state.resolve("offer", offer)
    rows = list(state.client().paginate("/bids/", {"offer": offer, "status": status}, limit=limit))
    rows_print(rows, BID_COLUMNS, as_json=state.as_json, empty="No bid.")


@bids.command("withdraw")
@click.argument("bid_id")
@pass_state
def bids_withdraw(state: State, bid_id: str) -> None:
    """Withdraw an open bid; its hold is released."""
    bid_id = state.resolve("bid", bid_id)
    state.client().delete(f"/bids/{bid_id}/")
    if state.as_json:
        json_print({"id": bid_id, "status": "withdrawn"})
        return
    stderr.print(f"Bid {bid_id} withdrawn.")


@cli.group()
def allocations() -> None:
    """What your organizations bought or won."""


@allocations.command("list")
@click.option("--status", type=click.Choice(["upcoming", "active", "closed"]))
@org_option
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@pass_state
def allocations_list(
    state: State, status: str | None, organization: str | None, limit: int
) -> None:
    org = state.organization_id(organization) if organization else None
    rows = list(
        state.client().paginate(
            "/allocations/", {"status": status, "organization": org}, limit=limit
        )
    )
    rows_print(rows, ALLOCATION_COLUMNS, as_json=state.as_json, empty="No allocation.")


@allocations.command("show")
@click.argument("allocation_id")
@pass_state
def allocations_show(state: State, allocation_id: str) -> None:
    allocation = state.detail("allocation", allocation_id)
    object_print(
        allocation,
        [*ALLOCATION_COLUMNS, ("held", "held", money)],
        as_json=state.as_json,
        title=f"Allocation {allocation['id']}",
    )


# --- money -----------------------------------------------------------------------------------

BUDGET_FIELDS: list[Column] = [
    ("monthly limit", "monthly_limit", money),
    ("spent this month", "spent_this_month", money),
    ("committed", "committed", money),
    ("remaining", "remaining", money),
    ("alert thresholds (%)", "alert_thresholds"),
]
WALLET_FIELDS: list[Column] = [("available", "available", money), ("held", "held", money)]


@cli.command()
@org_option
@pass_state
def budget(state: State, organization: str | None) -> None:
    """The organization's monthly budget and what is spent of it."""
    _organization_part_print(state, organization, "budget", BUDGET_FIELDS)


@cli.command()
@org_option
@pass_state
def wallet(state: State, organization: str | None) -> None:
    """The organization's wallet: available and held."""
    _organization_part_print(state, organization, "wallet", WALLET_FIELDS)


def _organization_part_print(
    state: State, organization: str | None, part: str, fields: list[Column]
) -> None:
    """One part of the organization's detail (its budget, its wallet), titled with its name."""
    detail = state.client().get(f"/organizations/{state.organization_id(organization)}/")
    title = f"{part.capitalize()} of {detail['name']}"
    object_print(detail[part], fields, as_json=state.as_json, title=title)


@cli.command()
@org_option
@click.option("--from", "since", help="ISO 8601.")
@click.option("--to", "until", help="ISO 8601.")
@click.option("--csv", "as_csv", is_flag=True, help="Every row as CSV, as the server writes it.")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True)
@pass_state
def usage(
    state: State,
    organization: str | None,
    since: str | None,
    until: str | None,
    as_csv: bool,
    limit: int,
) -> None:
    """Usage per job: units, cost and times."""
    org = state.organization_id(organization)
    query = {"from": since, "to": until}
    client = state.client()
    if as_csv:
        with client.stream(f"/organizations/{org}/usage/", {**query, "format": "csv"}) as answer:
            for chunk in answer.iter_bytes():
                sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        return
    rows = list(client.paginate(f"/organizations/{org}/usage/", query, limit=limit))
    rows_print(
        rows,
        [
            ("job", "job"),
            ("name", "name"),
            ("cluster", "cluster"),
            ("partition", "partition"),
            ("state", "state"),
            ("units", "units"),
            ("cost", "cost", money),
            ("started", "started_at"),
            ("ended", "ended_at"),
        ],
        as_json=state.as_json,
        empty="No usage in that range.",
    )


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: `eval "$(computeshare completion bash)"` in
    ~/.bashrc (zsh: in ~/.zshrc; fish: `computeshare completion fish | source`)."""
    completion_class = get_completion_class(shell)
    assert completion_class is not None
    script = completion_class(cli, {}, "computeshare", "_COMPUTESHARE_COMPLETE").source()
    click.echo(script)


cli.add_command(jobs)


def main(arguments: list[str] | None = None) -> None:
    """Runs the command and ends with its exit status: 0, or the class of what went wrong
    (errors.ExitCode), with the API's detail and code on stderr."""
    as_json = "--json" in (arguments if arguments is not None else sys.argv[1:])
    try:
        cli.main(args=arguments, prog_name="computeshare", standalone_mode=False)
    except CliError as error:
        error_print(error, as_json=as_json)
        sys.exit(int(error.exit_code))
    except ArgumentError as error:
        error_print(CliError(str(error), exit_code=ExitCode.USAGE), as_json=as_json)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.Abort:
        stderr.print("Interrupted.")
        sys.exit(int(ExitCode.INTERRUPTED))
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except KeyboardInterrupt:
        stderr.print("Interrupted.")
        sys.exit(int(ExitCode.INTERRUPTED))
    except OSError as error:
        error_print(CliError(str(error)), as_json=as_json)
        sys.exit(int(ExitCode.ERROR))
    sys.exit(0)
