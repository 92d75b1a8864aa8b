"""The idle-time parser on recorded output: `testcluster_sinfo_idle.txt` from Slurm 22.05 on the
test cluster (its one node half busy), `gpucluster_sinfo_idle.txt` hand-made in the same format
for a multi-partition GPU cluster (nodes idle, mixed, allocated, drained, not responding,
powered down, a node listed twice, a partition without nodes)."""

from pathlib import Path

import pytest

from hpc.errors import UnexpectedOutput
from hpc.slurm.inventory import SINFO_IDLE_COMMAND, PartitionIdle, parse_sinfo_idle

RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_the_command_asks_for_one_delimited_line_per_partition_and_node():
    assert SINFO_IDLE_COMMAND == (
        "sinfo",
        "--noheader",
        "--Node",
        "--format",
        "%R|%N|%C|%G|%b|%t",
    )


def test_the_test_cluster_s_node_half_busy():
    assert parse_sinfo_idle(recorded("testcluster_sinfo_idle.txt")) == (
        PartitionIdle(name="debug", cpus=2, idle_cpus=1, gpus=0, idle_gpus=0),
    )


def test_a_gpu_cluster_counts_only_what_a_new_job_could_start_on():
    assert parse_sinfo_idle(recorded("gpucluster_sinfo_idle.txt")) == (
        # c001 allocated, c002 48 idle, c003 64 idle (listed twice), c004 drained, c005 not
        # responding: 112 of 320.
        PartitionIdle(name="cpu", cpus=320, idle_cpus=112, gpus=0, idle_gpus=0),
        PartitionIdle(name="debug", cpus=32, idle_cpus=32, gpus=2, idle_gpus=2),
        PartitionIdle(name="empty", cpus=0, idle_cpus=0, gpus=0, idle_gpus=0),
        # g001 uses one of its four GPUs; g003 is powered down, to be woken on demand.
        PartitionIdle(name="gpu", cpus=256, idle_cpus=224, gpus=8, idle_gpus=7),
        PartitionIdle(name="long", cpus=128, idle_cpus=48, gpus=0, idle_gpus=0),
    )


@pytest.mark.parametrize(
    "line",
    [
        "debug|vm|1/1/2|(null)|(null)|mix",  # three CPU states
        "debug|vm|1/1/0/3|(null)|(null)|mix",  # states that do not add up
        "debug|vm|1/x/0/2|(null)|(null)|mix",
        "debug*|vm|1/1/0/2|(null)|(null)|mix",  # a flagged name where %R has none
        "debug|vm|1/1/0/2|gpu:(|(null)|mix",
        "debug|vm|1/1/0/2|(null)|mix",  # a field missing
    ],
)
def test_output_that_is_not_what_was_asked_for_raises(line):
    with pytest.raises(UnexpectedOutput):
        parse_sinfo_idle(line + "\n")


def test_a_node_listed_twice_differently_raises():
    with pytest.raises(UnexpectedOutput):
        parse_sinfo_idle(
            "debug|vm|1/1/0/2|(null)|(null)|mix\ndebug|vm|2/0/0/2|(null)|(null)|alloc\n"
        )
