"""Inventory parsers on recorded output: `testcluster_*` from Slurm 22.05 on the test cluster,
`gpucluster_*` hand-made for a multi-partition GPU cluster on Slurm 23.11."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpc.errors import UnexpectedOutput
from hpc.slurm.inventory import (
    SINFO_NODES_COMMAND,
    PartitionInfo,
    gpu_types_in_gres,
    gpus_in_gres,
    parse_cluster_config,
    parse_duration_minutes,
    parse_sinfo_nodes,
)

RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_the_test_cluster_has_one_default_partition_without_time_limit():
    partitions = parse_sinfo_nodes(recorded("testcluster_sinfo_nodes.txt"))

    assert partitions == (
        PartitionInfo(
            name="debug",
            nodes=1,
            cpus=2,
            gpus=0,
            max_time_minutes=None,
            is_up=True,
            is_default=True,
            cpus_per_node=2,
            memory_per_node_mb=21504,
            gpus_per_node=0,
            gpu_types=(),
            features=(),
            nodes_differ=False,
        ),
    )


def test_a_gpu_cluster_sums_distinct_nodes_per_partition_sorted_by_name():
    partitions = parse_sinfo_nodes(recorded("gpucluster_sinfo_nodes.txt"))

    assert partitions == (
        # c003 is listed twice and counts once; c004 has more memory and one more feature.
        PartitionInfo(
            "cpu",
            4,
            256,
            0,
            2 * 24 * 60,
            is_up=True,
            is_default=True,
            cpus_per_node=64,
            memory_per_node_mb=257000,
            gpus_per_node=0,
            gpu_types=(),
            features=("avx512", "bigmem", "ib"),
            nodes_differ=True,
        ),
        # c001 and g002 count here as well as in their other partitions.
        PartitionInfo(
            "debug",
            2,
            96,
            2,
            30,
            is_up=True,
            is_default=False,
            cpus_per_node=32,
            memory_per_node_mb=191000,
            gpus_per_node=0,
            gpu_types=(),
            features=("avx512", "ib"),
            nodes_differ=True,
        ),
        # 4 + 2 + (2 + 2) + 8 GPUs; shards and MPS are not GPUs, an untyped GRES adds no type.
        PartitionInfo(
            "gpu",
            4,
            320,
            18,
            None,
            is_up=True,
            is_default=False,
            cpus_per_node=32,
            memory_per_node_mb=191000,
            gpus_per_node=2,
            gpu_types=("a100", "h100", "v100"),
            features=("ib", "nvlink"),
            nodes_differ=True,
        ),
        # Two identical nodes.
        PartitionInfo(
            "long",
            2,
            128,
            0,
            7 * 24 * 60,
            is_up=False,
            is_default=False,
            cpus_per_node=64,
            memory_per_node_mb=257000,
            gpus_per_node=0,
            gpu_types=(),
            features=("avx512", "ib"),
            nodes_differ=False,
        ),
    )


def test_no_visible_partition_is_an_empty_inventory():
    assert parse_sinfo_nodes("") == ()


def test_a_partition_without_nodes_is_listed_with_zero_nodes():
    partitions = parse_sinfo_nodes("empty|empty|n/a|0|(null)|1:00:00|inact|0|(null)\n")

    assert partitions == (PartitionInfo("empty", 0, 0, 0, 60, is_up=False, is_default=False),)


def test_the_command_asks_for_an_explicit_delimited_node_oriented_format():
    assert SINFO_NODES_COMMAND == (
        "sinfo",
        "--noheader",
        "--Node",
        "--format",
        "%R|%P|%N|%c|%G|%l|%a|%m|%f",
    )


@pytest.mark.parametrize(
    "text",
    [
        # %P does not match %R
        "cpu|gpu*|c001|64|(null)|infinite|up|1000|(null)\n",
        # a header line
        "PARTITION|PARTITION|NODELIST|CPUS|GRES|TIMELIMIT|AVAIL|MEMORY|AVAIL_FEATURES\n",
        # the default %P format of sinfo, not ours
        "debug*       up   infinite      1   idle vm\n",
        # too few fields (the format before memory and features)
        "cpu|cpu*|c001|64|(null)|infinite|up\n",
        # CPUs as sinfo prints them for a group of nodes
        "cpu|cpu*|c001|64+|(null)|infinite|up|1000|(null)\n",
        # memory as sinfo prints it for a group of nodes
        "cpu|cpu*|c001|64|(null)|infinite|up|1000+|(null)\n",
        # a feature list that is not one
        "cpu|cpu*|c001|64|(null)|infinite|up|1000|avx512,,ib\n",
        "cpu|cpu*|c001|64|(null)|infinite|up|1000|a b\n",
        # a time limit that is not one
        "cpu|cpu*|c001|64|(null)|soon|up|1000|(null)\n",
        # one node with two sizes
        "cpu|cpu*|c001|64|(null)|infinite|up|1000|(null)\n"
        "cpu|cpu*|c001|32|(null)|infinite|up|1000|(null)\n",
        # one node with two memory sizes
        "cpu|cpu*|c001|64|(null)|infinite|up|1000|(null)\n"
        "cpu|cpu*|c001|64|(null)|infinite|up|2000|(null)\n",
        # one partition with two time limits
        "cpu|cpu*|c001|64|(null)|infinite|up|1000|(null)\n"
        "cpu|cpu*|c002|64|(null)|30:00|up|1000|(null)\n",
        # one partition both default and not
        "cpu|cpu*|c001|64|(null)|infinite|up|1000|(null)\n"
        "cpu|cpu|c002|64|(null)|infinite|up|1000|(null)\n",
    ],
)
def test_sinfo_output_that_is_not_ours_raises(text):
    with pytest.raises(UnexpectedOutput):
        parse_sinfo_nodes(text)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("(null)", 0),
        ("", 0),
        ("gpu:2", 2),
        ("gpu", 1),
        ("gpu:a100:4(S:0-1)", 4),
        ("gpu:a100:2(S:0),gpu:v100:2(S:1)", 4),
        ("gpu:h100:8(S:0,2),mps:800(S:0,2)", 8),
        ("shard:8,gpu:tesla:1", 1),
        ("mps:100", 0),
        ("gpu:3090:2", 2),  # a type name of digits
    ],
)
def test_gpus_in_gres(gres, gpus):
    assert gpus_in_gres(gres) == gpus


@pytest.mark.parametrize(
    ("gres", "types"),
    [
        ("(null)", set()),
        ("gpu:2", set()),
        ("gpu", set()),
        ("gpu:a100:4(S:0-1)", {"a100"}),
        ("gpu:a100:2(S:0),gpu:v100:2(S:1),shard:8(S:0-1)", {"a100", "v100"}),
        ("mps:100,gpu:3090:2", {"3090"}),
    ],
)
def test_gpu_types_in_gres(gres, types):
    assert gpu_types_in_gres(gres) == types


@pytest.mark.parametrize(
    "gres",
    [
        "gpu:a100",
        "gpu:a100:4(S:0-1",
        "gpu:a100:4)",
        "gpu:2,,gpu:2",
        "gpu:-1",
        "gpu:2K",
        "gpu:a:b:2",
    ],
)
def test_unreadable_gres_raises(gres):
    with pytest.raises(UnexpectedOutput):
        gpus_in_gres(gres)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("infinite", None),
        ("UNLIMITED", None),
        ("INFINITE", None),
        ("30", 30),
        ("30:00", 30),
        ("30:01", 31),
        ("0:59", 1),
        ("0:00", 0),
        ("1:00:00", 60),
        ("12:30:00", 750),
        ("1:00:01", 61),
        ("2-00:00:00", 2880),
        ("1-12", 36 * 60),
        ("1-12:30", 36 * 60 + 30),
        ("7-00:00:01", 7 * 24 * 60 + 1),
        ("0-00:00:00", 0),
    ],
)
def test_slurm_durations_in_minutes_rounding_seconds_up(text, minutes):
    assert parse_duration_minutes(text) == minutes


@pytest.mark.parametrize(
    "text",
    [
        "",
        "soon",
        "n/a",
        "1:2:3:4",
        "1-2:3:4:5",
        "-1",
        "1-",
        "-",
        "1--2",
        "1-2-3",
        "1:",
        ":30",
        "1.5",
    ],
)
def test_a_duration_that_is_not_slurms_raises(text):
    with pytest.raises(UnexpectedOutput):
        parse_duration_minutes(text)


def layouts_of(seconds: int) -> list[str]:
    """Every Slurm time layout that writes `seconds` exactly, zero-padded or not."""
    minutes_total, second = divmod(seconds, 60)
    hours_total, minute = divmod(minutes_total, 60)
    days, hour = divmod(hours_total, 24)
    texts = [
        f"{minutes_total}:{second:02}",
        f"{hours_total}:{minute:02}:{second:02}",
        f"{days}-{hour:02}:{minute:02}:{second:02}",
        f"{days}-{hour}:{minute}:{second}",
    ]
    if second == 0:
        texts += [f"{minutes_total}", f"{days}-{hour:02}:{minute:02}"]
        if minute == 0:
            texts.append(f"{days}-{hour}")
    return texts


@given(
    seconds=st.integers(min_value=0, max_value=10**9) | st.integers(0, 3).map(lambda d: d * 86400)
)
def test_every_slurm_layout_of_a_duration_reads_back_rounded_up(seconds):
    for text in layouts_of(seconds):
        assert parse_duration_minutes(text) == -(-seconds // 60), text


def test_cluster_name_and_version_of_the_test_cluster():
    assert parse_cluster_config(recorded("testcluster_scontrol_show_config.txt")) == (
        "computeshare-test",
        "22.05.8",
    )


def test_cluster_name_and_version_of_a_cluster_with_more_sections():
    assert parse_cluster_config(recorded("gpucluster_scontrol_show_config.txt")) == (
        "hpc-gpu",
        "23.11.4",
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "SLURM_VERSION           = 22.05.8\n",
        "ClusterName             = computeshare-test\n",
        "ClusterName             = (null)\nSLURM_VERSION           = 22.05.8\n",
        "ClusterName = a\nClusterName = b\nSLURM_VERSION = 22.05.8\n",
        "slurm_load_ctl_conf error: Unable to contact slurm controller\n",
    ],
)
def test_a_config_without_exactly_one_name_and_version_raises(text):
    with pytest.raises(UnexpectedOutput):
        parse_cluster_config(text)
