"""Slurm accounts that the platform manages for the organizations that buy time on a cluster.

Each buying organization gets one account per cluster (`account_name_for`) and a QOS of the same
name with `Flags=NoDecay`: the account's association has that QOS as its only QOS and its default,
so every job of every user in the account draws on it, and the time bought becomes the QOS's
`GrpTRESMins` (usage on a NoDecay QOS never decays, whatever the site's PriorityDecayHalfLife).
Nobody but the team's leased tenant is ever in the account: `tenant_join` moves the tenant in for
a lease (and makes the account its default, so that a job submitted from inside a job is charged
there too), `tenant_leave` moves it back to the idle account, which runs nothing. The platform's
service user has no association with team accounts at all; it only runs sacctmgr.

Managing a QOS (adding one, changing its limit or flags) takes AdminLevel=Administrator:
slurmdbd refuses both to an Operator, which is enough for accounts and associations only.

Every operation reads before it writes and says whether it changed anything, so a task can run
it again after a failure without side effects (sacctmgr records a `modify` in its transaction
log even when it changes nothing).

The commands themselves, the parsers of what sacctmgr prints and the way its "nothing to do"
answers are told from failures are in `hpc.slurm.sacctmgr`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from hpc.errors import BridgeError, UnexpectedOutput
from hpc.slurm.sacctmgr import (
    CLEARED,
    CPU_TRES,
    DEFAULT_ACCOUNT_FIELDS,
    GPU_TRES,
    USER_ASSOCIATION_FIELDS,
    AccountMissing,
    Association,
    SlurmUser,
    associations_read,
    deleted,
    grp_tres_mins_values,
    parse_default_accounts,
    parse_users_with_associations,
    qos_get,
    require_modified,
    require_slurm_name,
    sacctmgr_add,
    sacctmgr_failure,
    sacctmgr_modify,
    sacctmgr_text,
)
from hpc.ssh import SSHConnection
from hpc.types import PLATFORM_PREFIX

ACCOUNT_PREFIX = PLATFORM_PREFIX
# The only flag a team's QOS carries: its usage never decays, so its GrpTRESMins is a budget.
QOS_FLAGS = frozenset({"NoDecay"})

# The accounts `account_name_for` makes, and only those: the ones a tenant may be moved out of.
_TEAM_ACCOUNT = re.compile(re.escape(ACCOUNT_PREFIX) + r"[0-9a-f]{16}")


class TenantInAnotherAccount(BridgeError):
    """The tenant still has an association with another team's account (its last lease did not
    leave it): joining would let two teams share the account's Unix user."""


@dataclass(frozen=True)
class AccountLimit:
    account: str
    cpu_minutes: int | None
    """GrpTRESMins cpu=... of the account's QOS; None when not set."""
    gpu_minutes: int | None
    """GrpTRESMins gres/gpu=... of the account's QOS; None when not set."""


def account_name_for(organization_id: str) -> str:
    """The Slurm account of an organization: `cs-` and the first 16 hex digits of its UUID.

    Deterministic, so that the account can be found again from the organization alone; short and
    lowercase, because sacctmgr lowercases names and prints them in fixed-width columns. 64 bits
    of the UUID keep collisions out of reach. Raises ValueError for anything but a UUID. The
    account's QOS has the same name."""
    try:
        parsed = uuid.UUID(organization_id)
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"not an organization UUID: {organization_id!r}") from error
    return ACCOUNT_PREFIX + parsed.hex[:16]


def is_team_account(name: str) -> bool:
    """Whether `name` is an account `account_name_for` makes (a team's, managed here)."""
    return _TEAM_ACCOUNT.fullmatch(name) is not None


# --- A team's account and its QOS ----------------------------------------------------------------


def account_ensure(
    connection: SSHConnection,
    *,
    cluster_name: str,
    account: str,
    description: str,
    organization: str,
    timeout: float = 30.0,
) -> bool:
    """Makes sure the QOS `account` exists with `Flags=NoDecay` alone, and the account exists on
    the cluster with that QOS as its only QOS and its default QOS (sacctmgr hands the change on
    to the users' associations in the account). An association-level GrpTRESMins on the account
    (where older versions kept the limit) is cleared: the limit is the QOS's alone.

    Adds no user association. Returns True when it changed anything, False when all was in
    place. An existing account keeps its description and organization. `description` and
    `organization` are free text: see `sacctmgr_text`. `timeout` is the deadline of each
    command. Raises `AdminLevelTooLow` when the service user may not manage QOS."""
    for kind, name in (("cluster", cluster_name), ("account", account)):
        require_slurm_name(kind, name)
    qos = qos_get(connection, account, timeout)
    changed = False
    if qos is None:
        arguments = ["sacctmgr", "-i", "add", "qos", account, f"flags={_flags_text(QOS_FLAGS)}"]
        changed |= sacctmgr_add(connection, arguments, timeout)
    elif qos.flags != QOS_FLAGS:
        settings = [f"flags={_flags_text(QOS_FLAGS)}"]
        result = sacctmgr_modify(connection, "qos", [f"name={account}"], settings, timeout)
        require_modified(result, account)
        changed = True
    own = _account_row(
        associations_read(connection, cluster_name, account=account, timeout=timeout)
    )
    if own is None:
        arguments = ["sacctmgr", "-i", "add", "account", account, f"cluster={cluster_name}"]
        # An empty text is left out: sacctmgr then defaults to the account name.
        for key, text in (("description", description), ("organization", organization)):
            if cleaned := sacctmgr_text(text):
                arguments.append(f"{key}={cleaned}")
        arguments += [f"qos={account}", f"defaultqos={account}"]
        return sacctmgr_add(connection, arguments, timeout) or changed
    settings = []
    if own.qos != (account,) or own.default_qos != account:
        settings += [f"qos={account}", f"defaultqos={account}"]
    if own.grp_tres_mins:
        cleared = _grp_tres_mins_cleared(own.grp_tres_mins)
        settings.append(f"GrpTRESMins={cleared}")
    if settings:
        where = [f"name={account}", f"cluster={cluster_name}"]
        result = sacctmgr_modify(connection, "account", where, settings, timeout)
        require_modified(result, account, cluster_name=cluster_name)
        changed = True
    return changed


def account_limit_get(
    connection: SSHConnection, *, cluster_name: str, account: str, timeout: float = 30.0
) -> AccountLimit | None:
    """The GrpTRESMins of the account's QOS, or None when the QOS does not exist. (The QOS is
    the same on every cluster of the Slurm database; `cluster_name` is checked, not used.)"""
    require_slurm_name("cluster", cluster_name)
    require_slurm_name("account", account)
    qos = qos_get(connection, account, timeout)
    if qos is None:
        return None
    return AccountLimit(account=account, cpu_minutes=qos.cpu_minutes, gpu_minutes=qos.gpu_minutes)


def account_limit_set(
    connection: SSHConnection,
    *,
    cluster_name: str,
    account: str,
    cpu_minutes: int | None,
    gpu_minutes: int | None,
    timeout: float = 30.0,
) -> bool:
    """Sets the GrpTRESMins of the account's QOS to `cpu_minutes` CPU minutes and `gpu_minutes`
    GPU minutes; None removes that part of the limit.

    Reads the limit first and sends only the parts that differ, so that an identical call
    changes nothing and returns False. That also means a cluster that does not track GPUs is
    only asked about `gres/gpu` when a GPU limit is given, and then raises `TresNotTracked`.
    Raises `AccountMissing` when the QOS does not exist. `timeout` is the deadline of each
    command."""
    for value in (cpu_minutes, gpu_minutes):
        if value is not None and value < 0:
            raise ValueError(f"a limit is a number of minutes, not {value}")
    current = account_limit_get(
        connection, cluster_name=cluster_name, account=account, timeout=timeout
    )
    if current is None:
        raise AccountMissing(f"the QOS of account {account} does not exist")
    changes = [
        f"{tres}={CLEARED if wanted is None else wanted}"
        for tres, wanted, present in (
            (CPU_TRES, cpu_minutes, current.cpu_minutes),
            (GPU_TRES, gpu_minutes, current.gpu_minutes),
        )
        if wanted != present
    ]
    if not changes:
        return False
    settings = [f"GrpTRESMins={','.join(changes)}"]
    result = sacctmgr_modify(connection, "qos", [f"name={account}"], settings, timeout)
    require_modified(result, account, cluster_name=cluster_name)
    return True


def account_max_jobs_get(
    connection: SSHConnection, *, cluster_name: str, account: str, timeout: float = 30.0
) -> int | None:
    """The MaxJobs of the account's own association (None when unlimited): verification checks
    that the idle account runs nothing (0). Raises `AccountMissing` when the account has no
    association on the cluster."""
    require_slurm_name("cluster", cluster_name)
    require_slurm_name("account", account)
    own = _account_row(
        associations_read(connection, cluster_name, account=account, timeout=timeout)
    )
    if own is None:
        raise AccountMissing(f"account {account} does not exist on cluster {cluster_name}")
    return own.max_jobs


# --- Tenants in and out of a team's account --------------------------------------------------


def tenant_join(
    connection: SSHConnection,
    *,
    cluster_name: str,
    user: str,
    account: str,
    timeout: float = 30.0,
) -> bool:
    """Moves the tenant `user` into the team's `account` for a lease: an association (user,
    account) whose QOS is the account's own, and the account as the user's default on the
    cluster, so that a job submitted without `--account` (from inside a job, say) is charged
    there. Any other association (the idle account's) is kept.

    Returns True when it changed anything. Raises `AccountMissing` when the account does not
    exist or does not carry its QOS yet (`account_ensure` first), and `TenantInAnotherAccount`
    when the user is still in another team's account."""
    for kind, name in (("cluster", cluster_name), ("user", user), ("account", account)):
        require_slurm_name(kind, name)
    tenant = slurm_user_get(connection, cluster_name=cluster_name, user=user, timeout=timeout)
    others = sorted(
        {
            row.account
            for row in tenant.associations
            if row.account != account and is_team_account(row.account)
        }
    )
    if others:
        raise TenantInAnotherAccount(
            f"{user} still has an association with {', '.join(others)} on {cluster_name}: "
            f"the account of another team must be left before {user} joins {account}"
        )
    mine = [row for row in tenant.associations if row.account == account and not row.partition]
    changed = _tenant_association_ensure(connection, cluster_name, user, account, mine, timeout)
    if tenant.default_account != account:
        _default_account_set(connection, cluster_name, user, account, timeout)
        changed = True
    return changed


def _tenant_association_ensure(
    connection: SSHConnection,
    cluster_name: str,
    user: str,
    account: str,
    mine: list[Association],
    timeout: float,
) -> bool:
    """The tenant's association with the team's account, with the account's QOS: added when
    `mine` (its associations with the account) has none, put back when set by hand."""
    changed = False
    if not mine or mine[0].qos != (account,) or mine[0].default_qos != account:
        own = _account_row(
            associations_read(connection, cluster_name, account=account, timeout=timeout)
        )
        if own is None:
            raise AccountMissing(f"account {account} does not exist on cluster {cluster_name}")
        if own.qos != (account,) or own.default_qos != account:
            raise AccountMissing(
                f"account {account} on cluster {cluster_name} does not carry its QOS {account} "
                f"(it has {','.join(own.qos) or 'none'}): it must be ensured before a tenant "
                "joins"
            )
        if not mine:
            arguments = [
                "sacctmgr",
                "-i",
                "add",
                "user",
                user,
                f"account={account}",
                f"cluster={cluster_name}",
            ]
            changed |= sacctmgr_add(connection, arguments, timeout)
        else:
            # Set on the user's association by hand: put back the account's, or the tenant's
            # jobs could escape the team's limit.
            where = [f"name={user}", f"account={account}", f"cluster={cluster_name}"]
            settings = [f"qos={account}", f"defaultqos={account}"]
            result = sacctmgr_modify(connection, "user", where, settings, timeout)
            require_modified(result, account, cluster_name=cluster_name)
            changed = True
    return changed


def tenant_leave(
    connection: SSHConnection,
    *,
    cluster_name: str,
    user: str,
    account: str,
    idle_account: str,
    timeout: float = 30.0,
) -> bool:
    """Moves the tenant `user` out of the team's `account` at the end of a lease (after its
    jobs are gone): `idle_account` becomes its default (its association there is added back if
    it went missing), then its associations with `account` are deleted. A default that points to
    another team's account is left alone: that is another lease's, not this one's.

    Returns True when it changed anything. Raises `AccountMissing` when the idle account does
    not exist, and `AssociationInUse` (a `RemoteCommandFailed`) when sacctmgr refuses to delete
    the association because jobs of it are still pending or running; the default has moved to
    the idle account by then."""
    for kind, name in (
        ("cluster", cluster_name),
        ("user", user),
        ("account", account),
        ("account", idle_account),
    ):
        require_slurm_name(kind, name)
    if idle_account == account:
        raise ValueError(f"the idle account cannot be the team's account {account}")
    tenant = slurm_user_get(connection, cluster_name=cluster_name, user=user, timeout=timeout)
    changed = False
    if not any(row.account == idle_account and not row.partition for row in tenant.associations):
        idle = associations_read(connection, cluster_name, account=idle_account, timeout=timeout)
        if _account_row(idle) is None:
            raise AccountMissing(
                f"idle account {idle_account} does not exist on cluster {cluster_name}"
            )
        arguments = [
            "sacctmgr",
            "-i",
            "add",
            "user",
            user,
            f"account={idle_account}",
            f"cluster={cluster_name}",
        ]
        changed |= sacctmgr_add(connection, arguments, timeout)
    default = tenant.default_account
    if default != idle_account and (default == account or not is_team_account(default)):
        _default_account_set(connection, cluster_name, user, idle_account, timeout)
        changed = True
    if any(row.account == account for row in tenant.associations):
        changed |= _association_delete(connection, cluster_name, user, account, timeout)
    return changed


def associations_get(
    connection: SSHConnection, *, cluster_name: str, account: str, timeout: float = 30.0
) -> list[Association]:
    """Every association of `account` on the cluster, in one command: the account's own (`user`
    empty) and each of its users'. (Verification reads a fixed pool's QOS from them.)"""
    require_slurm_name("cluster", cluster_name)
    require_slurm_name("account", account)
    return associations_read(connection, cluster_name, account=account, timeout=timeout)


def association_delete(
    connection: SSHConnection,
    *,
    cluster_name: str,
    user: str,
    account: str,
    timeout: float = 30.0,
) -> bool:
    """Deletes the user's associations with the account on the cluster (with every partition)
    when it has any. Returns whether it deleted one. Raises `AssociationInUse` while jobs of the
    association are pending or running."""
    for kind, name in (("cluster", cluster_name), ("user", user), ("account", account)):
        require_slurm_name(kind, name)
    if not associations_read(connection, cluster_name, account=account, user=user, timeout=timeout):
        return False
    return _association_delete(connection, cluster_name, user, account, timeout)


def default_accounts_get(
    connection: SSHConnection,
    *,
    users: Sequence[str],
    cluster_name: str | None = None,
    timeout: float = 30.0,
) -> dict[str, str]:
    """The default account of each user (on `cluster_name` when given: sacctmgr keeps one per
    cluster). Users unknown to Slurm, or without a default there, are left out."""
    for user in users:
        require_slurm_name("user", user)
    if not users:
        return {}
    conditions = [f"name={','.join(sorted(set(users)))}"]
    if cluster_name is not None:
        require_slurm_name("cluster", cluster_name)
        conditions.append(f"cluster={cluster_name}")
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "user",
            "where",
            *conditions,
            f"format={','.join(DEFAULT_ACCOUNT_FIELDS)}",
        ],
        timeout=timeout,
    )
    return parse_default_accounts(result.stdout)


def slurm_user_get(
    connection: SSHConnection, *, cluster_name: str, user: str, timeout: float = 30.0
) -> SlurmUser:
    """The user's default account and associations on the cluster, in one command (verification
    uses it too: an idle tenant is in the idle account only)."""
    users = slurm_users_get(connection, cluster_name=cluster_name, users=[user], timeout=timeout)
    return users.get(user, SlurmUser(user, "", ()))


def slurm_users_get(
    connection: SSHConnection,
    *,
    cluster_name: str,
    users: Sequence[str],
    timeout: float = 30.0,
) -> dict[str, SlurmUser]:
    """The default account and associations on the cluster of each of `users` that Slurm knows
    there, in one command."""
    require_slurm_name("cluster", cluster_name)
    for user in users:
        require_slurm_name("user", user)
    if not users:
        return {}
    result = connection.run(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "user",
            "where",
            f"name={','.join(sorted(set(users)))}",
            f"cluster={cluster_name}",
            "withassoc",
            f"format={','.join(USER_ASSOCIATION_FIELDS)}",
        ],
        timeout=timeout,
    )
    found = parse_users_with_associations(result.stdout)
    if set(found) - set(users) or any(
        row.cluster != cluster_name for each in found.values() for row in each.associations
    ):
        raise UnexpectedOutput(f"sacctmgr listed other users or clusters when asked for {users}")
    return found


# --- The service user ------------------------------------------------------------------------

# The levels that may see every user's jobs and usage, and change accounts and associations.
ACCOUNT_ADMIN_LEVELS = ("operator", "administrator")
# The levels that may add a QOS and change its limits, which managed mode does for every team:
# slurmdbd refuses both to an Operator (as_mysql_qos.c asks for SLURMDB_ADMIN_SUPER_USER).
QOS_ADMIN_LEVELS = ("administrator",)


def admin_level_get(connection: SSHConnection, *, user: str, timeout: float = 30.0) -> str:
    """The Slurm admin level of `user` (`none`, `operator` or `administrator`, lowercased);
    managing the teams' QOS (managed mode) needs one of `QOS_ADMIN_LEVELS`. An unknown user is
    `none`."""
    require_slurm_name("user", user)
    result = connection.run(
        ["sacctmgr", "--noheader", "--parsable2", "show", "user", user, "format=AdminLevel"],
        timeout=timeout,
    )
    levels = {line.strip().lower() for line in result.stdout.splitlines() if line.strip()}
    if len(levels) > 1:
        raise UnexpectedOutput(f"sacctmgr listed several admin levels for {user}: {levels}")
    return levels.pop() if levels else "none"


# --- Helpers ---------------------------------------------------------------------------------


def _grp_tres_mins_cleared(text: str) -> str:
    """The GrpTRESMins setting that removes every TRES of `text` (`cpu=-1,mem=-1`)."""
    return ",".join(f"{name}={CLEARED}" for name in grp_tres_mins_values(text))


def _flags_text(flags: frozenset[str]) -> str:
    return ",".join(sorted(flags))


def _account_row(rows: list[Association]) -> Association | None:
    """The account's own association: the row without a user (and so without a partition)."""
    own = [row for row in rows if not row.user and not row.partition]
    if len(own) > 1:
        raise UnexpectedOutput(f"sacctmgr listed {len(own)} associations of the account itself")
    return own[0] if own else None


def _default_account_set(
    connection: SSHConnection, cluster_name: str, user: str, account: str, timeout: float
) -> None:
    where = [f"name={user}", f"cluster={cluster_name}"]
    result = sacctmgr_modify(connection, "user", where, [f"defaultaccount={account}"], timeout)
    # sacctmgr explains a refusal (no association with the account) on stdout, exit 1.
    if result.exit_status != 0:
        raise sacctmgr_failure(result)


def _association_delete(
    connection: SSHConnection, cluster_name: str, user: str, account: str, timeout: float
) -> bool:
    result = connection.run(
        [
            "sacctmgr",
            "-i",
            "delete",
            "user",
            "where",
            f"name={user}",
            f"account={account}",
            f"cluster={cluster_name}",
        ],
        timeout=timeout,
        check=False,
    )
    return deleted(result, user=user, account=account)
