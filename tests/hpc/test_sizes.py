"""A job's one size type and its limits (`hpc.sizes`)."""

from hpc import sizes
from hpc.sizes import JobSize


def test_the_limits_are_the_ones_the_api_states():
    bounds = {name: (limit.minimum, limit.maximum) for name, limit in sizes.LIMITS.items()}
    assert bounds == {
        "time_limit_minutes": (1, 525600),
        "cpus_per_task": (1, 100000),
        "ntasks": (1, 100000),
        "nodes": (1, 10000),
        "gpus": (0, 10000),
        "mem_per_cpu": (1, 1048576),
    }
    assert (sizes.ARRAY_THROTTLE.minimum, sizes.ARRAY_THROTTLE.maximum) == (1, 100000)


def test_a_size_within_its_limits_has_no_problem():
    size = JobSize(time_limit_minutes=60, cpus_per_task=4, ntasks=2, gpus=0, mem_per_cpu=2048)
    assert size.problems() == {}
    assert size.problem() is None


def test_a_size_below_its_minimum_is_refused_in_the_apis_words():
    size = JobSize(time_limit_minutes=0, cpus_per_task=0, ntasks=1, nodes=0, gpus=-1, mem_per_cpu=0)
    assert size.problems() == {
        "time_limit_minutes": ["Must be at least 1."],
        "cpus_per_task": ["Must be at least 1."],
        "nodes": ["Must be at least 1."],
        "gpus": ["Must not be negative."],
        "mem_per_cpu": ["From 1 to 1048576 MiB per CPU."],
    }


def test_memory_per_cpu_is_held_to_its_whole_range_and_the_counts_to_their_minimum():
    # A script's counts above the API's maxima are refused by the partition's figures, which
    # say more; memory per CPU has no such figure everywhere.
    assert JobSize(time_limit_minutes=1, cpus_per_task=200000).problems() == {}
    assert JobSize(time_limit_minutes=1, mem_per_cpu=1048577).problems() == {
        "mem_per_cpu": ["From 1 to 1048576 MiB per CPU."]
    }


def test_the_columns_are_the_sizes_the_row_and_the_spec_keep():
    size = JobSize(time_limit_minutes=5, cpus_per_task=2, ntasks=3, nodes=1, gpus=1, exclusive=True)
    assert size.columns() == {
        "time_limit_minutes": 5,
        "cpus_per_task": 2,
        "ntasks": 3,
        "nodes": 1,
        "gpus": 1,
        "mem_per_cpu": None,
    }
    assert list(size.columns()) == list(sizes.LIMITS)
