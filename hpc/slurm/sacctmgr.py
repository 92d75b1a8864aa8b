"""Slurm's accounting database through sacctmgr: reading associations, users and QOS
(`--parsable2`, with the parsers of what it prints), and the writes the platform makes, whose
outcome sacctmgr reports in words as much as in exit statuses.

sacctmgr reports "there was nothing to do" with a message and an exit status that is also used
for real errors (1 on Slurm 22.05), so the commands that may find nothing to do are run
unchecked and their status message is recognised explicitly (`added`, `deleted`,
`require_modified`); anything else non-zero still raises `RemoteCommandFailed`. Names go into
`where` conditions only when `require_slurm_name` accepts them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from hpc.errors import BridgeError, RemoteCommandFailed, UnexpectedOutput
from hpc.slurm.parsers import parse_parsable2
from hpc.ssh import CommandResult, SSHConnection

ASSOCIATION_FIELDS = (
    "Cluster",
    "Account",
    "User",
    "Partition",
    "QOS",
    "DefaultQOS",
    "GrpTRESMins",
    "MaxJobs",
)
# `show user withassoc`: one row per association, with the user's default account on each.
USER_ASSOCIATION_FIELDS = (
    "User",
    "DefaultAccount",
    "Cluster",
    "Account",
    "Partition",
    "QOS",
    "DefaultQOS",
    "GrpTRESMins",
    "MaxJobs",
)
QOS_FIELDS = ("Name", "GrpTRESMins", "Flags")
DEFAULT_ACCOUNT_FIELDS = ("User", "DefaultAccount")

# Account, cluster and user names go into `where name=...` conditions, where a comma would make
# a list and a space or `=` another condition; sacctmgr also lowercases names, so an upper-case
# name would not read back as written.
_SLURM_NAME = re.compile(r"[a-z0-9_][a-z0-9_.-]*")
_DIGITS = re.compile(r"[0-9]+")
_NOTHING_NEW_ADDED = "Nothing new added."
_NOTHING_MODIFIED = "Nothing modified"
_NOTHING_DELETED = "Nothing deleted"
_JOBS_ACTIVE = "Job(s) active"
_ACCESS_DENIED = "Access/permission denied"
_GPU_TRES_UNKNOWN = "no TRES known by type gres/gpu"
_ACTIVE_JOB_ID = re.compile(r"JobID = ([0-9_+\[\]-]+)")
CPU_TRES = "cpu"
GPU_TRES = "gres/gpu"
CLEARED = -1  # what sacctmgr takes to remove one TRES from a limit


class AccountMissing(BridgeError):
    """The account (or its QOS) does not exist on the cluster, so it has no limit to read or set
    and no tenant can join it."""


class TresNotTracked(BridgeError):
    """The cluster's accounting does not know the `gres/gpu` TRES, so no GPU limit can be set
    until slurm.conf lists it in AccountingStorageTRES."""


class AssociationInUse(RemoteCommandFailed):
    """sacctmgr refused to delete an association because jobs of it are still pending or
    running; the tenant's jobs must be cancelled (and gone from the queue) first."""

    def __init__(self, result: CommandResult, *, user: str, account: str) -> None:
        super().__init__(result.command, result.exit_status, result.stdout, result.stderr)
        self.job_ids = tuple(_ACTIVE_JOB_ID.findall(result.stderr))
        listed = ", ".join(self.job_ids) or "unknown"
        self.args = (
            f"sacctmgr refused to remove {user} from account {account}: jobs still active "
            f"({listed})",
        )


class AdminLevelTooLow(RemoteCommandFailed):
    """slurmdbd refused a change to the service user: managing the teams' QOS needs
    AdminLevel=Administrator (an Operator may change accounts and associations, not QOS)."""

    def __init__(self, result: CommandResult) -> None:
        super().__init__(result.command, result.exit_status, result.stdout, result.stderr)
        self.args = (
            f"sacctmgr refused ({_ACCESS_DENIED}): managing QOS needs the service user at "
            f"AdminLevel=Administrator: {result.command}",
        )


@dataclass(frozen=True)
class Association:
    """One row of `sacctmgr show assoc`: the account's own (`user` empty) or a user's."""

    cluster: str
    account: str
    user: str
    partition: str
    qos: tuple[str, ...]
    """The QOS the association's jobs may use, sorted (as sacctmgr prints them)."""
    default_qos: str
    grp_tres_mins: str
    """The association's own GrpTRESMins, as sacctmgr prints it (empty when none)."""
    max_jobs: int | None


@dataclass(frozen=True)
class Qos:
    name: str
    cpu_minutes: int | None
    gpu_minutes: int | None
    flags: frozenset[str]


@dataclass(frozen=True)
class SlurmUser:
    name: str
    default_account: str
    """On the cluster asked; empty when none (a user unknown to Slurm there)."""
    associations: tuple[Association, ...]
    """On the cluster asked, with every account."""


# --- Parsers ---------------------------------------------------------------------------------


def parse_grp_tres_mins(text: str) -> tuple[int | None, int | None]:
    """(CPU minutes, GPU minutes) from a GrpTRESMins value such as `cpu=6000,gres/gpu=120`; a
    TRES that is not listed is None. Other TRES (memory, typed GPUs like `gres/gpu:a100`, ...)
    are not ours to manage and are ignored."""
    values = grp_tres_mins_values(text)
    return values.get(CPU_TRES), values.get(GPU_TRES)


def parse_associations(text: str) -> list[Association]:
    """Associations from `sacctmgr show assoc --parsable2 --noheader` with `ASSOCIATION_FIELDS`."""
    return [_association_of(row) for row in parse_parsable2(text, list(ASSOCIATION_FIELDS))]


def _association_of(row: dict[str, str]) -> Association:
    max_jobs = row["MaxJobs"]
    if max_jobs and not _DIGITS.fullmatch(max_jobs):
        raise UnexpectedOutput(f"unreadable MaxJobs {max_jobs!r}")
    grp_tres_mins_values(row["GrpTRESMins"])  # readable, or raises
    return Association(
        cluster=row["Cluster"],
        account=row["Account"],
        user=row["User"],
        partition=row["Partition"],
        qos=tuple(sorted(name for name in row["QOS"].split(",") if name)),
        default_qos=row["DefaultQOS"],
        grp_tres_mins=row["GrpTRESMins"],
        max_jobs=int(max_jobs) if max_jobs else None,
    )


def parse_users_with_associations(text: str) -> dict[str, SlurmUser]:
    """Users from `sacctmgr show user withassoc --parsable2 --noheader` with
    `USER_ASSOCIATION_FIELDS`: one row per association, each with the user's default account."""
    defaults: dict[str, str] = {}
    rows: dict[str, list[Association]] = {}
    for row in parse_parsable2(text, list(USER_ASSOCIATION_FIELDS)):
        user = row["User"]
        if defaults.setdefault(user, row["DefaultAccount"]) != row["DefaultAccount"]:
            raise UnexpectedOutput(f"sacctmgr listed two default accounts for {user}")
        rows.setdefault(user, [])
        if row["Account"]:
            rows[user].append(_association_of(row))
    return {
        user: SlurmUser(user, defaults[user], tuple(associations))
        for user, associations in rows.items()
    }


def parse_qos(text: str) -> list[Qos]:
    """QOS from `sacctmgr show qos --parsable2 --noheader` with `QOS_FIELDS`."""
    records = []
    for row in parse_parsable2(text, list(QOS_FIELDS)):
        cpu_minutes, gpu_minutes = parse_grp_tres_mins(row["GrpTRESMins"])
        flags = frozenset(flag for flag in row["Flags"].split(",") if flag)
        records.append(Qos(row["Name"], cpu_minutes, gpu_minutes, flags))
    return records


def parse_default_accounts(text: str) -> dict[str, str]:
    """{user: default account} from `sacctmgr show user --parsable2 --noheader` with
    `DEFAULT_ACCOUNT_FIELDS`; users without a default (none on the cluster asked) are left
    out."""
    defaults: dict[str, str] = {}
    for row in parse_parsable2(text, list(DEFAULT_ACCOUNT_FIELDS)):
        user, account = row["User"], row["DefaultAccount"]
        if user in defaults and defaults[user] != account:
            raise UnexpectedOutput(f"sacctmgr listed two default accounts for {user}")
        if account:
            defaults[user] = account
    return defaults


def grp_tres_mins_values(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for item in text.strip().split(",") if text.strip() else []:
        name, equals, number = item.partition("=")
        if not equals or not name or not _DIGITS.fullmatch(number):
            raise UnexpectedOutput(f"unreadable GrpTRESMins {text!r}")
        if name in values:
            raise UnexpectedOutput(f"GrpTRESMins lists {name} twice: {text!r}")
        values[name] = int(number)
    return values


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


# --- Commands ---------------------------------------------------------------------------------


def sacctmgr_show(
    connection: SSHConnection,
    entity: str,
    conditions: Sequence[str],
    fields: Sequence[str],
    timeout: float,
) -> str:
    """The rows of `sacctmgr --noheader --parsable2 show ENTITY [where CONDITIONS]
    format=FIELDS`, as it printed them."""
    where = ["where", *conditions] if conditions else []
    arguments = ["sacctmgr", "--noheader", "--parsable2", "show", entity, *where]
    return connection.run([*arguments, f"format={','.join(fields)}"], timeout=timeout).stdout


def qos_get(connection: SSHConnection, name: str, timeout: float) -> Qos | None:
    records = parse_qos(sacctmgr_show(connection, "qos", [f"name={name}"], QOS_FIELDS, timeout))
    if any(record.name != name for record in records) or len(records) > 1:
        raise UnexpectedOutput(f"sacctmgr listed {[r.name for r in records]} for QOS {name}")
    return records[0] if records else None


def associations_read(
    connection: SSHConnection,
    cluster_name: str,
    *,
    account: str | None = None,
    user: str | None = None,
    timeout: float,
) -> list[Association]:
    """The associations on the cluster of `account` (the account's own and its users') or of
    `user` (with every account)."""
    conditions = [f"cluster={cluster_name}"]
    if account is not None:
        conditions.append(f"account={account}")
    if user is not None:
        conditions.append(f"user={user}")
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "where",
            *conditions,
            f"format={','.join(ASSOCIATION_FIELDS)}",
        ],
        timeout=timeout,
    )
    rows = parse_associations(result.stdout)
    for row in rows:
        if (
            row.cluster != cluster_name
            or (account is not None and row.account != account)
            or (user is not None and row.user != user)
        ):
            raise UnexpectedOutput(
                f"sacctmgr listed ({row.cluster}, {row.account}, {row.user}) when asked for "
                f"{' '.join(conditions)}"
            )
    return rows


def sacctmgr_modify(
    connection: SSHConnection,
    entity: str,
    where: Sequence[str],
    settings: Sequence[str],
    timeout: float,
) -> CommandResult:
    """Runs `sacctmgr -i modify <entity> where ... set ...` and returns its result unchecked:
    the caller tells "nothing modified" from a failure (`_require_modified`)."""
    arguments = ["sacctmgr", "-i", "modify", entity, "where", *where, "set", *settings]
    return connection.run(arguments, timeout=timeout, check=False)


def sacctmgr_add(connection: SSHConnection, arguments: list[str], timeout: float) -> bool:
    """Runs a `sacctmgr -i add ...`: True when it added something, False when sacctmgr found it
    there already (someone added it between our read and this write)."""
    return added(connection.run(arguments, timeout=timeout, check=False))


def added(result: CommandResult) -> bool:
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
    raise sacctmgr_failure(result)


def deleted(result: CommandResult, *, user: str, account: str) -> bool:
    """Whether a `sacctmgr delete user` deleted an association; "Nothing deleted" (exit 1)
    alone means it was gone already. Raises `AssociationInUse` when jobs hold it."""
    if result.exit_status == 0:
        return True
    if _NOTHING_DELETED in result.stdout and not result.stderr.strip():
        return False
    if _JOBS_ACTIVE in result.stderr:
        raise AssociationInUse(result, user=user, account=account)
    raise sacctmgr_failure(result)


def require_modified(result: CommandResult, account: str, *, cluster_name: str = "") -> None:
    """Raises unless a `sacctmgr modify` of the account, its QOS or a user in it modified
    something. sacctmgr says "Nothing modified" (exit 1) when nothing matched, and refuses a
    TRES that accounting does not track with an error on stderr."""
    if result.exit_status == 0:
        return
    if _GPU_TRES_UNKNOWN in result.stderr:
        raise TresNotTracked(
            f"cluster {cluster_name or '(this Slurm database)'} does not track {GPU_TRES}: its "
            f"slurm.conf needs AccountingStorageTRES={GPU_TRES}"
        )
    if _NOTHING_MODIFIED in result.stdout and not result.stderr.strip():
        where = f" from cluster {cluster_name}" if cluster_name else ""
        raise AccountMissing(f"account {account} or its QOS disappeared{where}")
    raise sacctmgr_failure(result)


def sacctmgr_failure(result: CommandResult) -> RemoteCommandFailed:
    """The error of a failed sacctmgr command: `AdminLevelTooLow` when slurmdbd refused it to
    the service user's admin level."""
    if _ACCESS_DENIED in result.stderr:
        return AdminLevelTooLow(result)
    return RemoteCommandFailed(result.command, result.exit_status, result.stdout, result.stderr)


def require_slurm_name(kind: str, name: str) -> None:
    """Raises ValueError unless `name` can go into a sacctmgr condition as it is."""
    if not _SLURM_NAME.fullmatch(name):
        raise ValueError(f"not a Slurm {kind} name (lowercase letters, digits, -_.): {name!r}")
