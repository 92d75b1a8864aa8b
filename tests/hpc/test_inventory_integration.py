"""The inventory of the real Slurm test cluster, read over SSH."""

import re

import pytest

from hpc.slurm.inventory import PartitionInfo, inventory_read
from hpc.ssh import SSHConnection

pytestmark = pytest.mark.slurm


@pytest.fixture
def connection(testcluster):
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


def slurmd_cpus(connection: SSHConnection) -> int:
    """The CPUs slurmd finds on the node (`slurmd -C`), which the test cluster's slurm.conf
    declares. slurmd lives in sbin, outside the service user's PATH."""
    printed = connection.run(
        ["sh", "-c", 'PATH="$PATH:/usr/sbin:/sbin" exec slurmd -C'], timeout=30
    ).stdout
    match = re.search(r"\bCPUs=([0-9]+)\b", printed)
    assert match, printed
    return int(match[1])


def node_real_memory_mb(connection: SSHConnection) -> int:
    """The node's RealMemory as the controller reports it with `scontrol show node`, a
    command the inventory does not use."""
    printed = connection.run(["scontrol", "show", "node", "--oneliner"], timeout=30).stdout
    match = re.search(r"\bRealMemory=([0-9]+)\b", printed)
    assert match, printed
    return int(match[1])


def test_the_inventory_of_the_test_cluster(connection, testcluster):
    version = connection.run(["sinfo", "--version"], timeout=30).stdout.split()[-1]

    cpus = slurmd_cpus(connection)
    memory = node_real_memory_mb(connection)

    inventory = inventory_read(connection)

    assert inventory.cluster_name == testcluster.cluster_name
    assert inventory.slurm_version == version
    assert inventory.partitions == (
        PartitionInfo(
            name=testcluster.partition,
            nodes=1,
            cpus=cpus,
            gpus=0,
            max_time_minutes=None,  # MaxTime=INFINITE
            is_up=True,
            is_default=True,
            cpus_per_node=cpus,
            memory_per_node_mb=memory,
            gpus_per_node=0,
            gpu_types=(),
            features=(),
            nodes_differ=False,
        ),
    )
