"""What a tenant is on each compute node (verification's `nodes` step) and the scrub of the
nodes a lease's jobs ran on; both run one job per node through `hpc.slurm.nodes`.

A job runs under the numeric uid of whoever submitted it, so the node's side of "the same
tenant" is its user database: the tenant's name must have the login node's uid there. A home
is the same one when a file written in it on the login node is there on the node. And the
tenant must see no process of anyone else (`/proc` mounted with `hidepid`)."""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from hpc.errors import UnexpectedOutput
from hpc.slurm.nodes import (
    PROBE_JOB_NAME,
    SCRUB_JOB_NAME,
    NodeOutput,
    NodeTarget,
    new_token,
    node_jobs_command,
    parse_node_outputs,
)
from hpc.ssh import SSHConnection, tenant_name

# --- Verification: the tenant as each node sees it ---------------------------------------------

# On the node: the tenant's entry in the node's user database, whether the file the login node
# wrote in the home is there with its content, and how many processes of others it can see.
_PROBE_ON_NODE = r"""
entry=$(getent passwd "$3")
if [ -n "$entry" ]; then
  home=$(printf '%s' "$entry" | cut -d: -f6)
  printf 'account %s %s\n' "$(printf '%s' "$entry" | cut -d: -f3)" "$(readlink -f "$home")"
else
  echo 'account none'
fi
if [ "$(cat "$1" 2>/dev/null)" = "$2" ]; then echo 'shared yes'; else echo 'shared no'; fi
printf 'others %s\n' "$(ps -e -o uid= | awk -v me="$(id -u)" '$1 != me' | wc -l)"
"""


@dataclass(frozen=True)
class NodeIdentity:
    """The tenant as one node sees it; `reached` is False when Slurm did not run the job."""

    node: str
    reached: bool
    problem: str = ""
    uid: str = ""  # of the tenant's name in the node's user database; "" when it has none
    home: str = ""
    sees_shared_home: bool = False
    other_processes: int = 0


@dataclass(frozen=True)
class NodesProbe:
    user: str
    login_uid: str
    login_home: str
    nodes: tuple[NodeIdentity, ...]

    @property
    def unreached(self) -> list[NodeIdentity]:
        return [node for node in self.nodes if not node.reached]

    def problems(self) -> list[str]:
        """One sentence per node that is not as the login node, naming the node."""
        problems = []
        for node in self.nodes:
            if node.reached:
                problems += [f"{node.node}: {words}" for words in self._node_problems(node)]
        return problems

    def _node_problems(self, node: NodeIdentity) -> list[str]:
        problems = []
        if not node.uid:
            problems.append(f"there is no account {self.user}")
        elif node.uid != self.login_uid:
            problems.append(
                f"{self.user} has uid {node.uid} there, not {self.login_uid} as on the login node"
            )
        if not node.sees_shared_home:
            problems.append(
                f"{self.user}'s home there ({node.home or 'none'}) is not the login node's "
                f"{self.login_home}: a file written in it on the login node is not there"
            )
        if node.other_processes:
            problems.append(
                f"{self.user} sees {node.other_processes} processes of other users (mount /proc "
                "with hidepid=2 there)"
            )
        return problems


def nodes_probe(
    connection: SSHConnection,
    user: str,
    targets: Sequence[NodeTarget],
    *,
    account: str | None,
    wait_seconds: int = 10,
    timeout: float = 60.0,
) -> NodesProbe:
    """Runs, as the tenant `user`, one job on each of `targets` at once (one remote command)
    and reads the tenant as each node sees it. The login node's side is read in the same
    command; the file the nodes look for is written in the home first and removed after."""
    token = new_token()
    secret = uuid.uuid4().hex
    marker = f".computeshare-node-probe-{uuid.uuid4().hex}"
    prelude = (
        f'marker="$HOME"/{shlex.quote(marker)}\n'
        f"(umask 077 && printf '%s\\n' {shlex.quote(secret)} > \"$marker\")\n"
        'printf \'login %s %s\\n\' "$(id -u)" "$(readlink -f "$HOME")"\n'
        # The job's arguments: the file's path, what it holds, the tenant's name (no spaces:
        # a home path, hex digits, a Unix user name).
        f'job_args="$marker {secret} {tenant_name(user)}"'
    )
    command = node_jobs_command(
        targets,
        job_script=_PROBE_ON_NODE,
        job_name=PROBE_JOB_NAME,
        account=account,
        prelude=prelude,
        finale='rm -f "$marker"',
        token=token,
        wait_seconds=wait_seconds,
    )
    # The job's arguments: the marker's path (set by the prelude), the secret, the user.
    result = connection.run(command, timeout=timeout, as_user=user)
    return parse_nodes_probe(result.stdout, token, user)


def parse_nodes_probe(text: str, token: str, user: str) -> NodesProbe:
    before, outputs, _ = parse_node_outputs(text, token)
    login = [line.split(" ", 2) for line in before if line.startswith("login ")]
    if not login or len(login[0]) != 3:
        raise UnexpectedOutput(f"the node probe printed no login line: {before!r}")
    _, login_uid, login_home = login[0]
    return NodesProbe(
        user=user,
        login_uid=login_uid,
        login_home=login_home,
        nodes=tuple(_node_identity(output) for output in outputs),
    )


def _node_identity(output: NodeOutput) -> NodeIdentity:
    words = {line.split(" ", 1)[0]: line.split(" ", 1)[1:] for line in output.lines if line}
    if output.exit_status != 0 or not {"account", "shared", "others"} <= set(words):
        return NodeIdentity(output.node, reached=False, problem=output.problem)
    account = (words["account"] or [""])[0].split(" ", 1)
    others = (words["others"] or ["0"])[0].strip()
    return NodeIdentity(
        node=output.node,
        reached=True,
        uid="" if account[0] == "none" else account[0],
        home=account[1] if len(account) == 2 else "",
        sees_shared_home=words["shared"] == ["yes"],
        other_processes=int(others) if others.isdigit() else 0,
    )


# --- The scrub of a lease's nodes ---------------------------------------------------------------

# On the node, as the tenant: counts what it finds, kills every process of the tenant but the
# job's own (and, when the node is the login node itself, but the login side's session that
# started the job), removes the tenant's files in the shared temporary folders, counts again.
_SCRUB_ON_NODE = r"""
login_host=$1 login_session=$2
me=$(id -u)
session=$(ps -o sid= -p $$ | tr -d ' ')
same=0; [ "$(hostname)" = "$login_host" ] && same=1
processes() {
  ps -u "$me" -o pid=,sid=,stat= | awk -v session="$session" -v login="$login_session" \
    -v same="$same" '$2 != session && !(same == 1 && $2 == login) && $3 !~ /^Z/ { print $1 }'
}
temporary() {
  for directory in /tmp /var/tmp /dev/shm; do
    [ -d "$directory" ] && find "$directory" -xdev -mindepth 1 -user "$me" 2>/dev/null
  done
}
printf 'found %s %s\n' "$(processes | wc -l)" "$(temporary | wc -l)"
for round in 1 2 3 4 5; do
  pids=$(processes); [ -n "$pids" ] || break
  kill -KILL $pids 2>/dev/null; sleep 0.2
done
for directory in /tmp /var/tmp /dev/shm; do
  [ -d "$directory" ] || continue
  find "$directory" -xdev -mindepth 1 -user "$me" -depth -exec rm -rf {} + 2>/dev/null
done
printf 'left %s %s\n' "$(processes | wc -l)" "$(temporary | wc -l)"
"""
# On the login node after the nodes' jobs: anything a leftover submitted meanwhile is cancelled
# (and waited for, as the login node's scrub does), and the queue counted.
_SCRUB_FINALE = r"""
queue() { squeue --noheader --user="$USER" --format=%i 2>/dev/null; }
waited=0
while [ -n "$(queue)" ] && [ "$waited" -lt 30 ]; do
  scancel --user="$USER" >/dev/null 2>&1; sleep 1; waited=$((waited + 1))
done
printf 'jobs %s\n' "$(queue | wc -l)"
"""


@dataclass(frozen=True)
class NodeScrub:
    """What the scrub found and left on one node; `reached` False when Slurm did not run it."""

    node: str
    reached: bool
    problem: str = ""
    processes_found: int = 0
    temporary_files_found: int = 0
    processes_left: int = 0
    temporary_files_left: int = 0

    @property
    def is_clean(self) -> bool:
        return self.reached and not self.processes_left and not self.temporary_files_left

    def describe(self) -> str:
        if not self.reached:
            return f"node {self.node} could not be scrubbed ({self.problem})"
        if self.is_clean:
            return (
                f"node {self.node}: {self.processes_found} processes and "
                f"{self.temporary_files_found} temporary files removed"
            )
        return (
            f"node {self.node}: {self.processes_left} processes still running, "
            f"{self.temporary_files_left} files left in /tmp, /var/tmp or /dev/shm"
        )


@dataclass(frozen=True)
class NodesScrub:
    nodes: tuple[NodeScrub, ...]
    jobs_left: int


def nodes_scrub(
    connection: SSHConnection,
    user: str,
    targets: Sequence[NodeTarget],
    *,
    account: str | None,
    wait_seconds: int = 30,
    timeout: float = 120.0,
) -> NodesScrub:
    """Scrubs the tenant `user` on each of `targets` with one job there each, at once (one
    remote command as the tenant), then cancels what is left in its queue and counts it."""
    token = new_token()
    command = node_jobs_command(
        targets,
        job_script=_SCRUB_ON_NODE,
        job_name=SCRUB_JOB_NAME,
        account=account,
        prelude="job_args=\"$(hostname) $(ps -o sid= -p $$ | tr -d ' ')\"",
        finale=_SCRUB_FINALE,
        token=token,
        wait_seconds=wait_seconds,
    )
    result = connection.run(command, timeout=timeout, as_user=user)
    return parse_nodes_scrub(result.stdout, token)


def parse_nodes_scrub(text: str, token: str) -> NodesScrub:
    _, outputs, after = parse_node_outputs(text, token)
    jobs = [
        line.split()[1] for line in after if line.startswith("jobs ") and len(line.split()) == 2
    ]
    if not jobs or not jobs[0].isdigit():
        raise UnexpectedOutput(f"the scrub of the nodes did not count the queue: {after!r}")
    return NodesScrub(
        nodes=tuple(_node_scrub(output) for output in outputs), jobs_left=int(jobs[0])
    )


def _node_scrub(output: NodeOutput) -> NodeScrub:
    counts = {}
    for line in output.lines:
        words = line.split()
        if (
            len(words) == 3
            and words[0] in ("found", "left")
            and all(word.isdigit() for word in words[1:])
        ):
            counts[words[0]] = (int(words[1]), int(words[2]))
    if output.exit_status != 0 or set(counts) != {"found", "left"}:
        return NodeScrub(output.node, reached=False, problem=output.problem)
    return NodeScrub(
        node=output.node,
        reached=True,
        processes_found=counts["found"][0],
        temporary_files_found=counts["found"][1],
        processes_left=counts["left"][0],
        temporary_files_left=counts["left"][1],
    )
