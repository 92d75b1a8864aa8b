"""Verification's `nodes` step: the tenants are the same on every compute node it can reach.

A team's job runs on the compute nodes under its tenant's uid. Isolation there rests on what
the owner set up on each node (docs/owner-setup.md): the tenant's name with the login node's
uid, its home the shared one the login node wrote in, and `/proc` mounted with `hidepid` so
that it sees nobody else's processes. The step runs, as one tenant, one tiny job on each node
of the partitions that are up (`hpc.slurm.node_checks.nodes_probe`) and fails with each node's
name and what is wrong there. A node no job can start on now (down, drained, busy past the
wait, refused by Slurm) cannot be checked: the step warns and names it."""

from __future__ import annotations

from collections.abc import Sequence

from hpc.slurm.node_checks import NodesProbe, nodes_probe
from hpc.slurm.nodes import PartitionNodes, idle_jobs_allowed, partition_nodes_read
from hpc.ssh import SSHConnection
from marketplace.models import Cluster, TenantAccount

# How long a node's job may wait for a CPU there before the node counts as not reached.
NODE_WAIT_SECONDS = 10


class NodesCheckFailed(Exception):
    """A node is not as the login node: the reason names it."""


def nodes_check(
    connection: SSHConnection,
    cluster: Cluster,
    *,
    partitions: Sequence[str],
    tenants: Sequence[str],
    cluster_name: str,
    idle_account: str,
    timeout: float,
) -> tuple[bool, str]:
    """Runs the probe as the first of `tenants` that no team holds; returns whether every node
    was reached and the step's detail. Raises `NodesCheckFailed` with every node's problem."""
    free = _free_tenant(cluster, tenants)
    if free is None:
        return False, "Every tenant account is leased to a team: the nodes were not checked."
    nodes = partition_nodes_read(connection, partitions, timeout=timeout)
    probe = _probe(connection, cluster, free, nodes, cluster_name, idle_account, timeout)
    if probe is not None and probe.problems():
        raise NodesCheckFailed("; ".join(probe.problems()) + ".")
    return _detail(free, nodes, probe)


def _free_tenant(cluster: Cluster, tenants: Sequence[str]) -> str | None:
    """A tenant no team holds (none is recorded yet at the first verification): its probe is
    no team's job, and its idle association may run a job for a moment."""
    held = set(
        cluster.tenant_accounts.exclude(status=TenantAccount.Status.AVAILABLE).values_list(
            "username", flat=True
        )
    )
    return next((user for user in tenants if user not in held), None)


def _probe(
    connection: SSHConnection,
    cluster: Cluster,
    user: str,
    nodes: PartitionNodes,
    cluster_name: str,
    idle_account: str,
    timeout: float,
) -> NodesProbe | None:
    if not nodes.usable:
        return None
    wait, command_timeout = NODE_WAIT_SECONDS, timeout + NODE_WAIT_SECONDS
    if cluster.account_mode != Cluster.AccountMode.MANAGED:
        account = cluster.slurm_account or None
        return nodes_probe(
            connection,
            user,
            nodes.usable,
            account=account,
            wait_seconds=wait,
            timeout=command_timeout,
        )
    # Managed: an idle tenant's account runs nothing (MaxJobs=0) but for this moment.
    with idle_jobs_allowed(
        connection,
        cluster_name=cluster_name,
        user=user,
        account=idle_account,
        jobs=len(nodes.usable),
        timeout=timeout,
    ):
        return nodes_probe(
            connection,
            user,
            nodes.usable,
            account=idle_account,
            wait_seconds=wait,
            timeout=command_timeout,
        )


def _detail(user: str, nodes: PartitionNodes, probe: NodesProbe | None) -> tuple[bool, str]:
    checked = [node.node for node in probe.nodes if node.reached] if probe else []
    missed = [f"{node} ({state})" for node, state in nodes.unusable]
    if probe is not None:
        missed += [f"{node.node} ({node.problem})" for node in probe.unreached]
    parts = []
    if checked:
        parts.append(
            f"As {user} on {', '.join(checked)}: the login node's uid, the shared home, no "
            "other users' processes."
        )
    if missed:
        parts.append(f"Not checked, no job could start there: {'; '.join(missed)}.")
    if not checked and not missed:
        parts.append("The partitions have no nodes.")
    return not missed, " ".join(parts)
