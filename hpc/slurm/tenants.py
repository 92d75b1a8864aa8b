"""The owner's pool of tenant accounts on a cluster, as the service user sees and handles them.

Every team's work runs as one of these unprivileged Unix accounts, leased to that team alone,
through `sudo -n -u TENANT` (the owner's sudoers rule allows the service user to act as the
members of the tenant group and as nobody else). This module reads the pool (`pool_read`),
checks what the bridge relies on (`pool_probe`, `sftp_probe`, `submission_probe`), and scrubs
an account at the end of a lease (`tenant_scrub`) so that the next team finds nothing of the
last one. Each check is one remote command whatever the number of tenants. The compute nodes
are reached through Slurm (`hpc.slurm.node_checks`)."""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from hpc.errors import RemoteCommandFailed, UnexpectedOutput
from hpc.slurm.jobs import reader_arguments, reader_source
from hpc.slurm.node_checks import NodeScrub
from hpc.ssh import SSHConnection, tenant_name

# The group name as `getent` takes it: nothing a shell or getent could read otherwise.
_GROUP_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
# Users the service user must NOT be able to act as, whatever the pool: root, a system account
# every Linux has, and itself (sudo would make a rule matching it a way around the pool).
_FORBIDDEN_TARGETS = ("root", "nobody")


@dataclass(frozen=True)
class PoolAccount:
    user: str
    home: str


def pool_read(
    connection: SSHConnection, group: str, *, timeout: float = 30.0
) -> tuple[PoolAccount, ...]:
    """The members of the tenant group with their homes (from the login node's user database,
    so that LDAP or SSSD pools are read the same way as local ones), sorted by name. Raises
    `RemoteCommandFailed` when the group does not exist."""
    if not group or not set(group) <= _GROUP_CHARACTERS or group.startswith("-"):
        raise ValueError(f"not a group name: {group!r}")
    script = (
        f"entry=$(getent group {shlex.quote(group)}) || exit 3\n"
        "members=${entry##*:}\n"
        '[ -n "$members" ] || exit 0\n'
        'getent passwd $(printf "%s" "$members" | tr "," " ") | cut -d: -f1,6\n'
    )
    result = connection.run(script, timeout=timeout, check=False)
    if result.exit_status == 3:
        raise RemoteCommandFailed(
            result.command, result.exit_status, result.stdout, f"no group {group} on the cluster"
        )
    if result.exit_status != 0:
        raise RemoteCommandFailed(result.command, result.exit_status, result.stdout, result.stderr)
    accounts = []
    for line in result.stdout.splitlines():
        user, separator, home = line.partition(":")
        if not separator or not home.startswith("/"):
            raise UnexpectedOutput(f"getent printed {line!r} for a member of {group}")
        accounts.append(PoolAccount(tenant_name(user), home))
    return tuple(sorted(accounts, key=lambda account: account.user))


@dataclass(frozen=True)
class TenantProbe:
    """What one tenant account looked like from inside, through sudo."""

    user: str
    reached: bool  # sudo -n -u USER worked
    problem: str = ""  # sudo's words when it did not
    home: str = ""
    home_mode: str = ""  # octal, as stat prints it
    home_owner: str = ""
    reads_service_home: bool = False
    reads_other_homes: tuple[str, ...] = ()
    may_sudo: bool = False

    @property
    def home_is_private(self) -> bool:
        return self.home_owner == self.user and self.home_mode in ("700", "500")


@dataclass(frozen=True)
class PoolProbe:
    tenants: tuple[TenantProbe, ...]
    # Users outside the pool that the service user could act as: each one is a hole.
    other_targets_allowed: tuple[str, ...]
    service_home_mode: str
    service_user: str

    @property
    def unreachable(self) -> list[TenantProbe]:
        return [tenant for tenant in self.tenants if not tenant.reached]


_PROBE_AS_TENANT = r"""
cd || { echo "nohome"; exit 0; }
printf 'home %s %s %s\n' "$HOME" "$(stat -c %a .)" "$(stat -c %U .)"
if [ -r "$1" ] || [ -x "$1" ]; then echo "service-home open"; else echo "service-home closed"; fi
shift
for other in "$@"; do
  [ "$other" = "$HOME" ] && continue
  if [ -r "$other" ] || [ -x "$other" ]; then echo "other-home open $other"; fi
done
if sudo -n true >/dev/null 2>&1; then echo "sudo allowed"; else echo "sudo refused"; fi
"""


def pool_probe(
    connection: SSHConnection, accounts: Sequence[PoolAccount], *, timeout: float = 60.0
) -> PoolProbe:
    """Acts as every tenant through sudo (one remote command): each must be reachable without a
    password, own a home that only it can read, be unable to read the service user's home or
    another tenant's, and be unable to sudo; the service user must be unable to act as root,
    `nobody` or itself."""
    token = f"@@probe-{uuid.uuid4().hex}@@"
    homes = " ".join(shlex.quote(account.home) for account in accounts)
    lines = [
        "service_home=$HOME",
        f"probe={shlex.quote(_PROBE_AS_TENANT)}",
        "printf '%s service-home %s\\n' " + shlex.quote(token) + ' "$(stat -c %a "$HOME")"',
    ]
    for account in accounts:
        user = shlex.quote(tenant_name(account.user))
        lines += [
            f'out=$(sudo -n -u {user} -- /bin/sh -c "$probe" probe "$service_home" {homes}'
            " 2>&1 </dev/null)",
            "status=$?",
            f"printf '%s tenant %s %s\\n' {shlex.quote(token)} {user} \"$status\"",
            "printf '%s\\n' \"$out\"",
        ]
    for target in (*_FORBIDDEN_TARGETS, connection.settings.user):
        quoted = shlex.quote(target)
        lines.append(
            f"if sudo -n -u {quoted} true >/dev/null 2>&1 </dev/null; then "
            f"printf '%s other %s allowed\\n' {shlex.quote(token)} {quoted}; fi"
        )
    result = connection.run("\n".join(lines) + "\n", timeout=timeout)
    return parse_pool_probe(result.stdout, token, connection.settings.user)


def parse_pool_probe(text: str, token: str, service_user: str) -> PoolProbe:
    """The `PoolProbe` of `pool_probe`'s output: marker lines carrying `token` start each
    tenant's section; the lines in between are what the probe printed as that tenant (or
    sudo's refusal)."""
    service_home_mode = ""
    others: list[str] = []
    sections: list[tuple[str, int, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(token + " "):
            words = line[len(token) + 1 :].split()
            if words[:1] == ["service-home"] and len(words) == 2:
                service_home_mode = words[1]
            elif words[:1] == ["tenant"] and len(words) == 3 and words[2].isdigit():
                sections.append((words[1], int(words[2]), []))
            elif words[:1] == ["other"] and len(words) == 3:
                others.append(words[1])
            else:
                raise UnexpectedOutput(f"unreadable probe marker: {line!r}")
        elif sections:
            sections[-1][2].append(line)
    return PoolProbe(
        tenants=tuple(_tenant_probe(user, status, body) for user, status, body in sections),
        other_targets_allowed=tuple(others),
        service_home_mode=service_home_mode,
        service_user=service_user,
    )


def _tenant_probe(user: str, status: int, body: list[str]) -> TenantProbe:
    homes = [line.split(" ", 3) for line in body if line.startswith("home ")]
    if status != 0 or not homes or len(homes[0]) != 4:
        problem = "; ".join(line.strip() for line in body if line.strip())[-300:]
        return TenantProbe(user=user, reached=False, problem=problem or f"exit status {status}")
    _, home, mode, owner = homes[0]
    return TenantProbe(
        user=user,
        reached=True,
        home=home,
        home_mode=mode,
        home_owner=owner,
        reads_service_home="service-home open" in body,
        reads_other_homes=tuple(
            line.removeprefix("other-home open ") for line in body if line.startswith("other-home")
        ),
        may_sudo="sudo allowed" in body,
    )


def sftp_probe(connection: SSHConnection, user: str, *, timeout: float = 30.0) -> None:
    """Writes a file in the tenant's home over an SFTP session started as the tenant (what
    input files go through), reads it back with the job-folder reader as the tenant (what
    every job's output and results go through: `python3` on the login node) and removes it.
    Raises what the session raises (`TenantUnavailable` when the server program does not
    start as the tenant), `RemoteCommandFailed` when the reader cannot run."""
    name = f".computeshare-probe-{uuid.uuid4().hex}"
    content = b"computeshare sftp probe\n"
    with connection.sftp(timeout, as_user=user) as sftp:
        with sftp.open(name, "wb") as handle:
            handle.chmod(0o600)
            handle.write(content)
        try:
            # Read back by the job-folder reader, as jobs' output and results are read.
            with connection.stream(
                reader_arguments(".", "", ["tail", name.encode().hex(), str(len(content))]),
                stdin=reader_source(),
                timeout=timeout,
                as_user=user,
            ) as output:
                read = output.read(len(content) + 1)
        finally:
            sftp.remove(name)
    if read != content:
        raise UnexpectedOutput(f"the SFTP probe read back {read!r}")


def submission_probe(
    connection: SSHConnection,
    user: str,
    *,
    partition: str,
    account: str | None,
    timeout: float = 30.0,
) -> str:
    """`sbatch --test-only` as the tenant, on the partition and Slurm account its jobs will use:
    Slurm's own answer to "would this user's job be accepted?", without submitting anything.
    Returns what sbatch said; raises `RemoteCommandFailed` when it refuses."""
    arguments = [
        "sbatch",
        "--test-only",
        f"--partition={partition}",
        "--time=1",
        "--ntasks=1",
        "--output=/dev/null",
        "--wrap=true",
    ]
    if account:
        arguments.insert(2, f"--account={account}")
    result = connection.run(arguments, timeout=timeout, as_user=user)
    return (result.stderr or result.stdout).strip()


# --- Scrubbing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScrubReport:
    """What a scrub found and what was left of a tenant, counted as the tenant itself: on the
    login node, and on the compute nodes where its jobs ran (`nodes`; a node that is the login
    node itself is scrubbed with it, and named in `login_nodes`)."""

    user: str
    jobs_left: int
    processes_left: int
    files_left: int
    temporary_files_left: int
    home_mode: str
    messages: tuple[str, ...] = field(default_factory=tuple)
    processes_found: int = 0
    temporary_files_found: int = 0
    login_nodes: tuple[str, ...] = ()
    nodes: tuple[NodeScrub, ...] = ()

    @property
    def is_clean(self) -> bool:
        return (
            self.jobs_left == 0
            and self.processes_left == 0
            and self.files_left == 0
            and self.temporary_files_left == 0
            and self.home_mode == "700"
            and all(node.is_clean for node in self.nodes)
        )

    def describe(self) -> str:
        parts = []
        if self.jobs_left:
            parts.append(f"{self.jobs_left} jobs still in the queue")
        if self.processes_left:
            parts.append(f"{self.processes_left} processes still running")
        if self.files_left:
            parts.append(f"{self.files_left} files left in the home")
        if self.temporary_files_left:
            parts.append(f"{self.temporary_files_left} files left in /tmp, /var/tmp or /dev/shm")
        if self.home_mode != "700":
            parts.append(f"the home's mode is {self.home_mode or 'unknown'}, not 700")
        parts += [node.describe() for node in self.nodes if not node.is_clean]
        if not parts:
            return "clean"
        # What the scrub said of them (the processes left, files it could not remove).
        return "; ".join([*parts, *self.messages])

    def summary(self) -> str:
        """What a clean scrub removed, node by node."""
        login = "the login node"
        if self.login_nodes:
            login += f" (Slurm's {', '.join(self.login_nodes)})"
        parts = [
            f"{login}: {self.processes_found} processes and {self.temporary_files_found} "
            "temporary files removed",
            *(node.describe() for node in self.nodes),
        ]
        return "Scrubbed " + "; ".join(parts) + "."


# Run as the tenant. Cancels every job of the tenant and waits until the queue has none (a
# cancelled job stays `COMPLETING` until its processes are gone), ends its processes on the
# login node (`kill -1` signals every process the caller may, the caller excepted), clears
# crontab and at jobs where the site allows them, removes every file of the home and the
# tenant's files in the shared temporary directories, then counts what is left.
_SCRUB_AS_TENANT = r"""
wait_seconds=$1
queue() { squeue --noheader --user="$USER" --format=%i 2>/dev/null; }
cancel_and_wait() {
  scancel --user="$USER" >/dev/null 2>&1
  waited=0
  while [ -n "$(queue)" ] && [ "$waited" -lt "$wait_seconds" ]; do
    sleep 1; waited=$((waited + 1)); scancel --user="$USER" >/dev/null 2>&1
  done
}
cancel_and_wait
session=$(ps -o sid= -p $$ | tr -d ' ')
# What is left once the jobs are gone: processes that left their job, and temporary files.
printf 'found-processes %s\n' "$(ps -u "$USER" -o sid=,stat= | \
  awk -v session="$session" '$1 != session && $2 !~ /^Z/' | grep -c .)"
printf 'found-temporary %s\n' "$(find /tmp /var/tmp /dev/shm -xdev -mindepth 1 -user "$USER" \
  2>/dev/null | grep -c .)"
kill -KILL -1 2>/dev/null
sleep 0.2
kill -KILL -1 2>/dev/null
cancel_and_wait
command -v crontab >/dev/null 2>&1 && crontab -r >/dev/null 2>&1
command -v atq >/dev/null 2>&1 && atq 2>/dev/null | cut -f1 | xargs -r atrm >/dev/null 2>&1
cd / || exit 70
chmod -R u+rwX "$HOME" 2>/dev/null
find "$HOME" -mindepth 1 -delete 2>&1 | head -n 5
chmod 700 "$HOME"
for directory in /tmp /var/tmp /dev/shm; do
  [ -d "$directory" ] || continue
  find "$directory" -xdev -mindepth 1 -user "$USER" -depth -exec rm -rf {} + 2>/dev/null
done
printf 'jobs %s\n' "$(queue | wc -l)"
# A zombie (state Z) is already dead, waiting for a parent that may never reap it (an init
# that does not reap orphans): it holds nothing of the tenant's.
left=$(ps -u "$USER" -o sid=,pid=,stat=,args= | awk -v session="$session" \
  '$1 != session && $3 !~ /^Z/')
printf 'processes %s\n' "$(printf '%s' "$left" | grep -c .)"
[ -z "$left" ] || printf '%s\n' "$left" | head -n 3 | sed 's/^ */left process: /'
printf 'files %s\n' "$(find "$HOME" -mindepth 1 2>/dev/null | wc -l)"
temporary=0
for directory in /tmp /var/tmp /dev/shm; do
  [ -d "$directory" ] || continue
  found=$(find "$directory" -xdev -mindepth 1 -user "$USER" 2>/dev/null | wc -l)
  temporary=$((temporary + found))
done
printf 'temporary %s\n' "$temporary"
printf 'mode %s\n' "$(stat -c %a "$HOME")"
"""


def tenant_scrub(
    connection: SSHConnection, user: str, *, wait_seconds: int = 60, timeout: float = 180.0
) -> ScrubReport:
    """Scrubs a tenant account (one remote command, as the tenant) and reports what is left:
    the next team on this account must find nothing of the last one. The caller checks
    `is_clean`."""
    command = ["/bin/sh", "-c", _SCRUB_AS_TENANT, "scrub", str(int(wait_seconds))]
    result = connection.run(command, timeout=timeout, as_user=user)
    return parse_scrub_report(result.stdout, user)


_SCRUB_COUNTS = (
    "jobs",
    "processes",
    "files",
    "temporary",
    "mode",
    "found-processes",
    "found-temporary",
)


def parse_scrub_report(text: str, user: str) -> ScrubReport:
    counts: dict[str, str] = {}
    messages = []
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in _SCRUB_COUNTS and value:
            counts[key] = value.strip()
        elif line.strip():
            messages.append(line.strip())
    numbers = ("jobs", "processes", "files", "temporary")
    if any(key not in counts for key in (*numbers, "mode")) or not all(
        counts[key].isdigit() for key in numbers
    ):
        raise UnexpectedOutput(f"the scrub of {user} printed {text!r}")
    return ScrubReport(
        user=user,
        jobs_left=int(counts["jobs"]),
        processes_left=int(counts["processes"]),
        files_left=int(counts["files"]),
        temporary_files_left=int(counts["temporary"]),
        home_mode=counts["mode"],
        messages=tuple(messages[:5]),
        processes_found=_count(counts.get("found-processes", "0")),
        temporary_files_found=_count(counts.get("found-temporary", "0")),
    )


def _count(text: str) -> int:
    return int(text) if text.isdigit() else 0
