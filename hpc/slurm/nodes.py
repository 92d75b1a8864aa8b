"""A cluster's compute nodes as the platform reaches them: which nodes a partition has, on which
nodes a tenant's jobs ran, and one tiny job as a tenant on each of a set of nodes.

The platform holds one SSH connection, to the login node; Slurm is what reaches the compute
nodes (docs/adr/0023). Verification runs a job per node to see the tenant as the node sees it
(`hpc.slurm.node_checks.nodes_probe`), and a lease's scrub runs one on each node its jobs ran on
(`hpc.slurm.node_checks.nodes_scrub`). Both go through `node_jobs_run`: one remote command as
the tenant starts one `srun` per node, all at once, and prints each node's output as one block.

Between leases a managed cluster's tenant sits in the idle account, whose MaxJobs=0 is what
keeps it from running anything, and at the end of a lease its team's QOS has no time left: the
node jobs then run in the idle account, with the tenant's own association there allowed a few
jobs for as long as they take (`idle_jobs_allowed`), and set back to what it was after."""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from hpc.errors import UnexpectedOutput
from hpc.slurm.accounting import slurm_time
from hpc.slurm.sacctmgr import (
    require_slurm_name,
    sacctmgr_failure,
    sacctmgr_modify,
    sacctmgr_show,
)
from hpc.ssh import SSHConnection, tenant_name

# The names of the platform's own node jobs: metering leaves a scrub's out of the team's jobs
# (`scheduler_bridge.services.tenant_jobs`).
PROBE_JOB_NAME = "computeshare-node-probe"
SCRUB_JOB_NAME = "computeshare-node-scrub"
# Node states (sinfo's compact `%t`, its flag characters taken off) where a job may start.
_USABLE_STATES = frozenset({"idle", "mix", "mixed", "alloc", "allocated", "comp", "completing"})
# sinfo's flags after a state: `*` not responding, `~` powered off, `#` powering up, `!`
# powering down, `%` powering down, `$` maintenance, `@` reboot pending, `^` reboot issued,
# `-` planned.
_STATE_FLAGS = "*~#!%$@^-+"
# Not responding, or powered off, up or down: a job would wait for the node (or for its boot).
_UNREACHABLE_FLAGS = frozenset("*~#!%")
# At most this many srun at once from one command: enough for a rack, gentle on slurmctld.
_PARALLEL_JOBS = 32
# A node's output is cut to this many bytes, so that each block is written to the pipe at once
# (under PIPE_BUF) and blocks of nodes that end together never interleave.
_BLOCK_BYTES = 3000


@dataclass(frozen=True)
class NodeTarget:
    """A node and the partition a job there is submitted to."""

    node: str
    partition: str


@dataclass(frozen=True)
class PartitionNodes:
    """The nodes of some partitions: those a job can start on, and those it cannot (down,
    drained, not responding) with sinfo's state."""

    usable: tuple[NodeTarget, ...]
    unusable: tuple[tuple[str, str], ...]


def partition_nodes_read(
    connection: SSHConnection, partitions: Sequence[str], *, timeout: float = 30.0
) -> PartitionNodes:
    """Every node of `partitions` (one sinfo), each once, in the first of them that has it."""
    for partition in partitions:
        require_slurm_name("partition", partition)
    arguments = [
        "sinfo",
        "--noheader",
        "--Node",
        f"--partition={','.join(partitions)}",
        "--format=%N|%R|%t",
    ]
    text = connection.run(arguments, timeout=timeout).stdout
    return parse_partition_nodes(text, partitions)


def parse_partition_nodes(text: str, partitions: Sequence[str]) -> PartitionNodes:
    """`sinfo --Node --format=%N|%R|%t` as `PartitionNodes`, ordered by `partitions` then node."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.strip().split("|")
        if len(fields) != 3 or not all(fields):
            raise UnexpectedOutput(f"sinfo printed {line!r} for a node")
        rows.append(fields)
    order = {name: index for index, name in enumerate(partitions)}
    rows.sort(key=lambda row: (order.get(row[1], len(order)), row[0]))
    usable: dict[str, NodeTarget] = {}
    unusable: dict[str, str] = {}
    for node, partition, state in rows:
        if node in usable or node in unusable:
            continue
        if is_usable_state(state):
            usable[node] = NodeTarget(node, partition)
        else:
            unusable[node] = state
    return PartitionNodes(tuple(usable.values()), tuple(unusable.items()))


def is_usable_state(state: str) -> bool:
    """Whether a job may start on a node in sinfo's compact state `state`."""
    return not _UNREACHABLE_FLAGS & set(state) and state.rstrip(_STATE_FLAGS) in _USABLE_STATES


# --- Where a tenant's jobs ran -------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseNodes:
    """The nodes a tenant's jobs ran on since a time, and which node names are the login
    node's own (a node that is also the login node is reached there, not by a job)."""

    ran: tuple[NodeTarget, ...]
    login_names: frozenset[str]
    hostnames: dict[str, str]

    def is_login_node(self, node: str) -> bool:
        names = {node, self.hostnames.get(node, node)}
        return bool({name.split(".")[0] for name in names} & self.login_names)

    @property
    def beyond_login(self) -> tuple[NodeTarget, ...]:
        return tuple(target for target in self.ran if not self.is_login_node(target.node))


# Accounting, and the controller's own records of the jobs that ended in the last MinJobAge
# seconds (slurmctld tells slurmdbd of a job a moment after its start: a job that started just
# before the scrub may not be in accounting yet).
_LEASE_NODES = r"""
{
  sacct --noheader --parsable2 -X -D --user="$1" --starttime="$2" --format=Partition,NodeList
  squeue --noheader --states=all --user="$1" --format='%P|%N'
} | while IFS='|' read -r partition nodes; do
  case "$nodes" in ''|'None assigned'|'(null)') continue ;; esac
  scontrol show hostnames "$nodes" | awk -v partition="$partition" \
    '{ print "ran " $1 " " partition }'
done
printf 'login %s %s\n' "$(hostname -s)" "$(hostname)"
sinfo --noheader --Node --format='host %N %n'
"""


def lease_nodes_read(
    connection: SSHConnection, user: str, since: datetime, *, timeout: float = 60.0
) -> LeaseNodes:
    """The nodes where the jobs of `user` ran since `since` (sacct's node lists, every run of a
    requeued job included, expanded by `scontrol show hostnames`), read as the service user.
    The window opens a second early: Slurm's times are whole seconds, and sacct leaves out a
    job that ended in the second its window starts (one that ran in the lease's first second)."""
    start = slurm_time(since.replace(microsecond=0) - timedelta(seconds=1))
    command = ["/bin/sh", "-c", _LEASE_NODES, "lease-nodes", tenant_name(user), start]
    return parse_lease_nodes(connection.run(command, timeout=timeout).stdout)


def parse_lease_nodes(text: str) -> LeaseNodes:
    """The output of `lease_nodes_read`'s command: `ran NODE PARTITION`, `login SHORT FULL`,
    `host NODE HOSTNAME` lines."""
    ran: dict[str, NodeTarget] = {}
    login: set[str] = set()
    hostnames: dict[str, str] = {}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "ran" and len(words) in (2, 3):
            partition = words[2].split(",")[0] if len(words) == 3 else ""
            ran.setdefault(words[1], NodeTarget(words[1], partition))
        elif words[0] == "login" and len(words) >= 2:
            login.update(word.split(".")[0] for word in words[1:])
        elif words[0] == "host" and len(words) == 3:
            hostnames.setdefault(words[1], words[2])
        else:
            raise UnexpectedOutput(f"unreadable line where the lease's nodes were read: {line!r}")
    return LeaseNodes(tuple(ran.values()), frozenset(login), hostnames)


# --- One job per node, as the tenant ----------------------------------------------------------


@dataclass(frozen=True)
class NodeOutput:
    """What one node's job printed, and srun's exit status (non-zero: Slurm's words are in
    `lines`)."""

    node: str
    exit_status: int
    lines: tuple[str, ...]

    @property
    def problem(self) -> str:
        words = "; ".join(line.strip() for line in self.lines if line.strip())
        return words[-300:] or f"srun exited {self.exit_status}"


def node_jobs_command(
    targets: Sequence[NodeTarget],
    *,
    job_script: str,
    job_name: str,
    account: str | None,
    prelude: str,
    finale: str,
    token: str,
    wait_seconds: int,
) -> str:
    """The shell text run as the tenant: `prelude` (which may set `$job_args`, the job script's
    arguments), then one srun per target, `_PARALLEL_JOBS` at a time, each printing a
    `TOKEN node NODE` marker, the job's output and `TOKEN exit STATUS` as one write; then a
    `TOKEN end` marker and `finale`."""
    srun = [
        "srun",
        f"--job-name={job_name}",
        "--nodes=1",
        "--ntasks=1",
        "--time=1",
        f"--immediate={int(wait_seconds)}",
        "--chdir=/",
        "--quiet",
    ]
    if account:
        srun.append(f"--account={account}")
    lines = [
        f"token={shlex.quote(token)}",
        f"job_script={shlex.quote(job_script)}",
        "job_args=''",
        prelude,
        "on_node() {",
        f'  out=$( {{ {shlex.join(srun)} ${{2:+--partition="$2"}} --nodelist="$1" /bin/sh -c '
        f'"$job_script" node-job $job_args 2>&1 </dev/null; '
        f'echo "$token exit $?"; }} | tail -c {_BLOCK_BYTES})',
        '  /usr/bin/env printf "%s node %s\\n%s\\n" "$token" "$1" "$out"',
        "}",
    ]
    for index, target in enumerate(targets):
        if index and index % _PARALLEL_JOBS == 0:
            lines.append("wait")
        lines.append(f"on_node {shlex.quote(target.node)} {shlex.quote(target.partition)} &")
    lines += ["wait", 'printf "%s end\\n" "$token"', finale]
    return "\n".join(lines) + "\n"


def parse_node_outputs(text: str, token: str) -> tuple[list[str], list[NodeOutput], list[str]]:
    """The lines before the first node's marker (the prelude's), each node's output, and the
    lines after the end marker (the finale's)."""
    before: list[str] = []
    after: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    ended = False
    for line in text.splitlines():
        if line == f"{token} end":
            ended = True
        elif ended:
            after.append(line)
        elif line.startswith(token + " node "):
            sections.append((line[len(token) + 6 :].strip(), []))
        elif sections:
            sections[-1][1].append(line)
        else:
            before.append(line)
    if not ended:
        raise UnexpectedOutput("the node jobs' command ended before its end marker")
    return before, [_node_output(node, body, token) for node, body in sections], after


def _node_output(node: str, body: list[str], token: str) -> NodeOutput:
    status, kept = -1, []
    for line in body:
        if line.startswith(token + " exit "):
            value = line[len(token) + 6 :].strip()
            status = int(value) if value.isdigit() else -1
        else:
            kept.append(line)
    return NodeOutput(node, status, tuple(kept))


def new_token() -> str:
    return f"@@nodes-{uuid.uuid4().hex}@@"


# --- Jobs in the idle account ------------------------------------------------------------------


@contextmanager
def idle_jobs_allowed(
    connection: SSHConnection,
    *,
    cluster_name: str,
    user: str,
    account: str,
    jobs: int,
    timeout: float = 30.0,
) -> Iterator[None]:
    """For the block's length, the association of `user` with the idle `account` may run
    `jobs` jobs; then its MaxJobs is set back to what it was (0, as cluster-setup makes it, or
    unset: the account's). Needs an operator or an administrator, as managed mode has."""
    for kind, name in (("cluster", cluster_name), ("user", user), ("account", account)):
        require_slurm_name(kind, name)
    where = [f"name={user}", f"account={account}", f"cluster={cluster_name}"]
    rows = sacctmgr_show(
        connection,
        "association",
        [f"user={user}", f"account={account}", f"cluster={cluster_name}"],
        ["MaxJobs"],
        timeout,
    ).split()
    before = rows[0] if rows and rows[0].isdigit() else "-1"
    _max_jobs_set(connection, where, str(max(1, jobs)), timeout)
    try:
        yield
    finally:
        _max_jobs_set(connection, where, before, timeout)


def _max_jobs_set(connection: SSHConnection, where: list[str], value: str, timeout: float) -> None:
    result = sacctmgr_modify(connection, "user", where, [f"MaxJobs={value}"], timeout)
    words = (result.stdout + result.stderr).lower()
    if result.exit_status != 0 and "nothing modified" not in words:
        raise sacctmgr_failure(result)
