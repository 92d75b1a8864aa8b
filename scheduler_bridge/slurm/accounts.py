"""Slurm accounts that the platform manages for the organizations that buy time on a cluster.

Each buying organization gets one account per cluster (`account_name_for`), the platform's
service user gets an association with it so that jobs run with `--account=<account>`, and the
time bought becomes a GrpTRESMins limit on the account's association. Every operation reads
before it writes and says whether it changed anything, so a task can run it again after a
failure without side effects.

sacctmgr reports "there was nothing to do" with a message and an exit status that is also used
for real errors (1 on Slurm 22.05), so the commands that may find nothing to do are run
unchecked and their status message is recognised explicitly; anything else non-zero still
raises `RemoteCommandFailed`."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from scheduler_bridge.slurm.errors import BridgeError, RemoteCommandFailed, UnexpectedOutput
from scheduler_bridge.slurm.parsers import parse_parsable2
from scheduler_bridge.slurm.ssh import CommandResult, SSHConnection

ACCOUNT_PREFIX = "cs-"
ASSOCIATION_FIELDS = ("Cluster", "Account", "User", "Partition", "GrpTRESMins")

# Account, cluster and user names go into `where name=...` conditions, where a comma would make
# a list and a space or `=` another condition; sacctmgr also lowercases names, so an upper-case
# name would not read back as written.
_SLURM_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]*")
_DIGITS = re.compile(r"[0-9]+")
_NOTHING_NEW_ADDED = "Nothing new added."
_NOTHING_MODIFIED = "Nothing modified"
_GPU_TRES_UNKNOWN = "no TRES known by type gres/gpu"
_CPU_TRES = "cpu"
_GPU_TRES = "gres/gpu"
_CLEARED = -1  # what sacctmgr takes to remove one TRES from a limit


class AccountMissing(BridgeError):
    """The account has no association on the cluster, so it has no limit to read or set."""


class TresNotTracked(BridgeError):
    """The cluster's accounting does not know the `gres/gpu` TRES, so no GPU limit can be set
    until slurm.conf lists it in AccountingStorageTRES."""


@dataclass(frozen=True)
class AccountLimit:
    account: str
    cpu_minutes: int | None
    """GrpTRESMins cpu=...; None when not set."""
    gpu_minutes: int | None
    """GrpTRESMins gres/gpu=...; None when not set."""


def account_name_for(organization_id: str) -> str:
    """The Slurm account of an organization: `cs-` and the first 16 hex digits of its UUID.

    Deterministic, so that the account can be found again from the organization alone; short and
    lowercase, because sacctmgr lowercases names and prints them in fixed-width columns. 64 bits
    of the UUID keep collisions out of reach. Raises ValueError for anything but a UUID."""
    try:
        parsed = uuid.UUID(organization_id)
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"not an organization UUID: {organization_id!r}") from error
    return ACCOUNT_PREFIX + parsed.hex[:16]


def account_ensure(
    connection: SSHConnection,
    *,
    cluster_name: str,
    account: str,
    user: str,
    description: str,
    organization: str,
    timeout: float = 30.0,
) -> bool:
    """Makes sure `account` exists on the cluster and `user` (the platform's service user) has
    an association with it, so that the user's jobs may run with `--account=<account>`.

    Returns True when it added the account or the association, False when both existed. An
    existing account keeps its description and organization. `description` and `organization`
    are free text: see `sacctmgr_text`. `timeout` is the deadline of each command."""
    for kind, name in (("cluster", cluster_name), ("account", account), ("user", user)):
        _require_slurm_name(kind, name)
    rows = _associations(connection, cluster_name, account, timeout)
    changed = False
    if _account_row(rows) is None:
        arguments = ["sacctmgr", "-i", "add", "account", account, f"cluster={cluster_name}"]
        # An empty text is left out: sacctmgr then defaults to the account name.
        for key, text in (("description", description), ("organization", organization)):
            if cleaned := sacctmgr_text(text):
                arguments.append(f"{key}={cleaned}")
        changed |= _add(connection, arguments, timeout)
    if not any(row["User"] == user and not row["Partition"] for row in rows):
        arguments = [
            "sacctmgr",
            "-i",
            "add",
            "user",
            user,
            f"account={account}",
            f"cluster={cluster_name}",
        ]
        changed |= _add(connection, arguments, timeout)
    return changed


def account_limit_get(
    connection: SSHConnection, *, cluster_name: str, account: str, timeout: float = 30.0
) -> AccountLimit | None:
    """The GrpTRESMins of the account's own association (the row without a user), or None when
    the account has no association on the cluster."""
    _require_slurm_name("cluster", cluster_name)
    _require_slurm_name("account", account)
    row = _account_row(_associations(connection, cluster_name, account, timeout))
    if row is None:
        return None
    cpu_minutes, gpu_minutes = parse_grp_tres_mins(row["GrpTRESMins"])
    return AccountLimit(account=account, cpu_minutes=cpu_minutes, gpu_minutes=gpu_minutes)


def account_limit_set(
    connection: SSHConnection,
    *,
    cluster_name: str,
    account: str,
    cpu_minutes: int | None,
    gpu_minutes: int | None,
    timeout: float = 30.0,
) -> bool:
    """Sets the GrpTRESMins of the account's association to `cpu_minutes` CPU minutes and
    `gpu_minutes` GPU minutes; None removes that part of the limit.

    Reads the limit first and sends only the parts that differ, so that an identical call
    changes nothing and returns False. That also means a cluster that does not track GPUs is
    only asked about `gres/gpu` when a GPU limit is given, and then raises `TresNotTracked`.
    Raises `AccountMissing` when the account has no association on the cluster. `timeout` is the
    deadline of each command."""
    for value in (cpu_minutes, gpu_minutes):
        if value is not None and value < 0:
            raise ValueError(f"a limit is a number of minutes, not {value}")
    current = account_limit_get(
        connection, cluster_name=cluster_name, account=account, timeout=timeout
    )
    if current is None:
        raise AccountMissing(f"account {account} does not exist on cluster {cluster_name}")
    changes = [
        f"{tres}={_CLEARED if wanted is None else wanted}"
        for tres, wanted, present in (
            (_CPU_TRES, cpu_minutes, current.cpu_minutes),
            (_GPU_TRES, gpu_minutes, current.gpu_minutes),
        )
        if wanted != present
    ]
    if not changes:
        return False
    result = connection.run(
        [
            "sacctmgr",
            "-i",
            "modify",
            "account",
            "where",
            f"name={account}",
            f"cluster={cluster_name}",
            "set",
            f"GrpTRESMins={','.join(changes)}",
        ],
        timeout=timeout,
        check=False,
    )
    _require_modified(result, cluster_name=cluster_name, account=account)
    return True


ACCOUNT_ADMIN_LEVELS = ("operator", "administrator")


def admin_level_get(connection: SSHConnection, *, user: str, timeout: float = 30.0) -> str:
    """The Slurm admin level of `user` (`none`, `operator` or `administrator`, lowercased);
    managing accounts needs operator or more. An unknown user is `none`."""
    _require_slurm_name("user", user)
    result = connection.run(
        ["sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=AdminLevel"],
        timeout=timeout,
    )
    levels = {line.strip().lower() for line in result.stdout.splitlines() if line.strip()}
    if len(levels) > 1:
        raise UnexpectedOutput(f"sacctmgr listed several admin levels for {user}: {levels}")
    return levels.pop() if levels else "none"


def parse_grp_tres_mins(text: str) -> tuple[int | None, int | None]:
    """(CPU minutes, GPU minutes) from a GrpTRESMins value such as `cpu=6000,gres/gpu=120`; a
    TRES that is not listed is None. Other TRES (memory, typed GPUs like `gres/gpu:a100`, ...)
    are not ours to manage and are ignored."""
    values: dict[str, int] = {}
    for item in text.strip().split(",") if text.strip() else []:
        name, equals, number = item.partition("=")
        if not equals or not name or not _DIGITS.fullmatch(number):
            raise UnexpectedOutput(f"unreadable GrpTRESMins {text!r}")
        if name in values:
            raise UnexpectedOutput(f"GrpTRESMins lists {name} twice: {text!r}")
        values[name] = int(number)
    return values.get(_CPU_TRES), values.get(_GPU_TRES)


def sacctmgr_text(text: str) -> str:
    """Free text made safe for a sacctmgr description or organization: letters, digits, spaces
    and `-_.` only, with runs of white space made one space.

    The text reaches sacctmgr as one argument, so the remote shell never sees it; what remains
    is sacctmgr's own handling: it turns quotes into backticks and stores `|` as it is, which
    would break every `--parsable2` listing of accounts, and a site's own tooling may split on
    commas or `=`. (sacctmgr also lowercases both fields itself.)"""
    kept = "".join(
        character if character.isalnum() or character in "-_." else " " for character in text
    )
    return " ".join(kept.split())


def _associations(
    connection: SSHConnection, cluster_name: str, account: str, timeout: float
) -> list[dict[str, str]]:
    """The associations of `account` on the cluster: the account's own and its users'."""
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "where",
            f"cluster={cluster_name}",
            f"account={account}",
            f"format={','.join(ASSOCIATION_FIELDS)}",
        ],
        timeout=timeout,
    )
    rows = parse_parsable2(result.stdout, list(ASSOCIATION_FIELDS))
    for row in rows:
        if (row["Cluster"], row["Account"]) != (cluster_name, account):
            raise UnexpectedOutput(
                f"sacctmgr listed {row['Account']} on {row['Cluster']} "
                f"when asked for {account} on {cluster_name}"
            )
    return rows


def _account_row(rows: list[dict[str, str]]) -> dict[str, str] | None:
    """The account's own association: the row without a user (and so without a partition)."""
    own = [row for row in rows if not row["User"] and not row["Partition"]]
    if len(own) > 1:
        raise UnexpectedOutput(f"sacctmgr listed {len(own)} associations of the account itself")
    return own[0] if own else None


def _add(connection: SSHConnection, arguments: list[str], timeout: float) -> bool:
    """Runs a `sacctmgr -i add ...`: True when it added something, False when sacctmgr found it
    there already (someone added it between our read and this write)."""
    return _added(connection.run(arguments, timeout=timeout, check=False))


def _added(result: CommandResult) -> bool:
    """Whether a `sacctmgr add` added something; raises when it failed.

    "Nothing new added." alone (exit 1 on Slurm 22.05, 0 on some older versions) means it was
    all there. sacctmgr prints the same line when it refuses the request, for example a user
    association with an account that does not exist, but then explains why on stderr: that is a
    failure."""
    nothing_new = _NOTHING_NEW_ADDED in result.stdout and not result.stderr.strip()
    if nothing_new and result.exit_status in (0, 1):
        return False
    if result.exit_status == 0:
        return True
    raise _failed(result)


def _require_modified(result: CommandResult, *, cluster_name: str, account: str) -> None:
    """Raises unless a `sacctmgr modify account` modified the account. sacctmgr says "Nothing
    modified" (exit 1) when no association matched, and refuses a TRES that accounting does
    not track with an error on stderr whose last line is a misleading usage hint."""
    if result.exit_status == 0:
        return
    if _GPU_TRES_UNKNOWN in result.stderr:
        raise TresNotTracked(
            f"cluster {cluster_name} does not track {_GPU_TRES}: its slurm.conf needs "
            f"AccountingStorageTRES={_GPU_TRES}"
        )
    if _NOTHING_MODIFIED in result.stdout and not result.stderr.strip():
        raise AccountMissing(f"account {account} disappeared from cluster {cluster_name}")
    raise _failed(result)


def _failed(result: CommandResult) -> RemoteCommandFailed:
    return RemoteCommandFailed(result.command, result.exit_status, result.stdout, result.stderr)


def _require_slurm_name(kind: str, name: str) -> None:
    if not _SLURM_NAME.fullmatch(name):
        raise ValueError(f"not a Slurm {kind} name (lowercase letters, digits, -_.): {name!r}")
