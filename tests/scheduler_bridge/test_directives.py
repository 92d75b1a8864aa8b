"""The platform's reading of `#SBATCH` lines (hpc.slurm.directives, scheduler_bridge
.job_directives and .job_requests): pure functions, held to the corpus whose every case
test_directives_sbatch.py checks against sbatch itself on the test cluster."""

from __future__ import annotations

import pytest

from hpc.slurm import directives, filenames
from hpc.slurm.directives import DirectiveRefused
from hpc.slurm.jobs import sbatch_arguments, spec_problem
from hpc.types import JobOptions, JobSpec
from scheduler_bridge import job_directives
from scheduler_bridge.job_directives import PartitionFacts
from scheduler_bridge.job_requests import JobRequest, JobSize, job_request_resolve, job_units
from tests.scheduler_bridge.directive_corpus import CORPUS, Case, reader_refusal, reader_view

PARTITION = PartitionFacts(name="debug", features=("avx2", "ib"))


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_the_reader_reads_each_script_of_the_corpus_as_sbatch_does(case: Case) -> None:
    refusal = reader_refusal(case.script)
    if case.refusal is None:
        assert refusal is None, refusal.reason if refusal else ""
        assert reader_view(directives.read_directives(case.script)) == case.options
        return
    assert refusal is not None
    kind, line, words = case.refusal
    assert (refusal.kind, refusal.line) == (kind, line)
    assert words in refusal.reason


def test_every_sbatch_option_is_honoured_overridden_or_refused_and_only_one_of_them() -> None:
    keys = {option.key for option in directives.OPTIONS}
    honoured = job_directives.HONOURED
    overridden = set(job_directives.OVERRIDDEN)
    refused = set(job_directives.REFUSED)
    # `partition` and `nice` are honoured or overridden by their value.
    assert honoured & refused == set()
    assert overridden & refused == set()
    assert honoured & overridden == {"partition"}
    assert keys == honoured | overridden | refused
    assert len(directives.OPTIONS) == 106  # sbatch 22.05.8's table (tasks-per-node an alias)


@pytest.mark.parametrize(
    ("value", "minutes"),
    [
        ("10", 10),
        ("3:00", 3),
        ("3:01", 4),
        ("1:30:00", 90),
        ("2-0", 2880),
        ("2-", 2880),
        ("0-02:00:00", 120),
        ("1-2:30", 1590),
        ("1-0:0:1", 1441),
        ("UNLIMITED", None),
        ("infinite", None),
        ("-1", None),
        ("0", None),
    ],
)
def test_every_time_format_sbatch_takes(value: str, minutes: int | None) -> None:
    assert directives.time_minutes(value) == minutes


@pytest.mark.parametrize("value", ["", "1:", ":5", "1:2:3:4", "1-2-3", "5m", "1.5", "-5", "a"])
def test_times_sbatch_refuses(value: str) -> None:
    with pytest.raises(DirectiveRefused, match="Invalid --time specification"):
        directives.time_minutes(value)


@pytest.mark.parametrize(
    ("value", "mib"),
    [("100", 100), ("100M", 100), ("1G", 1024), ("2GB", 2048), ("1t", 1048576), ("1K", 1)],
)
def test_memory_units(value: str, mib: int) -> None:
    assert directives.megabytes(value) == mib


@pytest.mark.parametrize("value", ["1.5G", "-1", "1GiB", "G", "10X"])
def test_memory_sizes_sbatch_refuses(value: str) -> None:
    with pytest.raises(DirectiveRefused, match="Invalid --mem specification"):
        directives.megabytes(value)


def test_a_signal_as_sbatch_reads_it() -> None:
    assert directives.signal("B:USR1@90") == directives.Signal(10, 90, batch_only=True)
    assert directives.signal("SIGTERM").text == "TERM@60"
    assert directives.signal("R:10@").seconds == 0
    with pytest.raises(DirectiveRefused, match="Invalid --signal specification"):
        directives.signal("USR3")


def test_a_dependency_is_read_into_its_conditions() -> None:
    read = directives.dependency("afterok:12:13_4,after:14+5")
    assert read.conditions == (
        directives.DependencyCondition("afterok", (("12", None), ("13_4", None))),
        directives.DependencyCondition("after", (("14", 5),)),
    )
    assert directives.dependency_text(read) == "afterok:12:13_4,after:14+5"
    with pytest.raises(DirectiveRefused, match="cannot be mixed"):
        directives.dependency("afterok:1,afterany:2?afterok:3")


def test_the_directive_lines_become_comments_that_say_what_became_of_them() -> None:
    script = "#!/bin/bash\n#SBATCH --time=5\n#SLURM -A x\n\n# note\necho hi\n#SBATCH -c 9\n"
    neutral = directives.neutralised(script, {2: "honoured --time"})
    assert neutral.split("\n") == [
        "#!/bin/bash",
        "# [computeshare: honoured --time] SBATCH --time=5",
        "# [computeshare: read by the platform] SLURM -A x",
        "",
        "# note",
        "echo hi",
        "#SBATCH -c 9",  # after the first command: sbatch does not read it
        "",
    ]
    assert directives.read_directives(neutral).directives == ()


# --- The platform's rule on top ------------------------------------------------------------------


def _resolved(script: str, **fields: object) -> object:
    return job_request_resolve(JobRequest(script=script, **fields), PARTITION)  # type: ignore[arg-type]


def test_the_request_gives_only_the_script_and_the_script_gives_the_sizes() -> None:
    plan = job_request_resolve(
        JobRequest(script="#!/bin/bash\n#SBATCH -t 5 -c 2 --array=1,6-7,12 -J sim\n"), PARTITION
    )
    assert plan.name == "sim"
    assert plan.size == JobSize(time_limit_minutes=5, cpus_per_task=2, ntasks=1, nodes=1)
    assert plan.array == "1,6-7,12"
    sources = {each.field: each.source for each in plan.report.effective}
    assert sources == {
        "time_limit_minutes": "script",
        "nodes": "default",
        "cpus_per_task": "script",
        "ntasks": "default",
        "gpus": "default",
        "memory": "default",
        "name": "script",
        "array": "script",
    }


def test_a_request_field_wins_over_the_scripts_directive_and_says_so() -> None:
    plan = job_request_resolve(
        JobRequest(script="#!/bin/bash\n#SBATCH --time=60 -c 4\n", time_limit_minutes=5),
        PARTITION,
    )
    assert (plan.size.time_limit_minutes, plan.size.cpus_per_task) == (5, 4)
    effective = {each.field: (each.value, each.source, each.line) for each in plan.report.effective}
    assert effective["time_limit_minutes"] == ("5", "request", None)
    assert effective["cpus_per_task"] == ("4", "script", 2)
    (replaced,) = plan.report.overridden
    assert (replaced.option, replaced.value, replaced.line) == ("--time", "60", 2)
    assert "request's `time_limit_minutes` replaces it" in replaced.why
    assert [each.option for each in plan.report.honoured] == ["-c"]


def test_options_that_reach_outside_what_was_bought_are_overridden_with_why() -> None:
    script = (
        "#!/bin/bash\n#SBATCH -t 5 --account=physics -p gpu-big --mail-user=a@b.c\n"
        "#SBATCH --mail-type=END --export=ALL -w node7 --nice=-5 --partition=debug,other\n"
    )
    plan = job_request_resolve(JobRequest(script=script), PARTITION)
    overridden = {each.option: each.why for each in plan.report.overridden}
    assert set(overridden) == {
        "--account",
        "-p",
        "--mail-user",
        "--mail-type",
        "--export",
        "-w",
        "--nice",
    }
    assert "team's own Slurm account" in overridden["--account"]
    assert "tells the team itself" in overridden["--mail-user"]
    assert "raises the job above other jobs" in overridden["--nice"]
    # The later --partition names the allocation's (among others): honoured, and it replaced
    # the earlier -p, as sbatch keeps an option's last value.
    assert (
        overridden["-p"]
        == "--partition on line 3 replaces it: sbatch keeps an option's last value."
    )
    assert [each.option for each in plan.report.honoured] == ["-t", "--partition"]
    assert plan.options.nice is None
    only_other = job_request_resolve(
        JobRequest(script="#!/bin/bash\n#SBATCH -t 5 -p gpu-big\n"), PARTITION
    )
    (other,) = only_other.report.overridden
    assert other.why.endswith("the team bought time on another partition of this cluster.")


def test_sbatch_derives_tasks_from_nodes_and_tasks_per_node() -> None:
    two_nodes = _resolved("#!/bin/bash\n#SBATCH -t 5 -N 2\n")
    assert (two_nodes.size.nodes, two_nodes.size.ntasks) == (2, 2)  # type: ignore[attr-defined]
    per_node = _resolved("#!/bin/bash\n#SBATCH -t 5 -N 2 --ntasks-per-node=3\n")
    assert per_node.size.ntasks == 6  # type: ignore[attr-defined]
    assert per_node.options.ntasks_per_node == 3  # type: ignore[attr-defined]


def test_gpus_per_node_or_per_task_are_counted_for_the_whole_job() -> None:
    per_node = _resolved("#!/bin/bash\n#SBATCH -t 5 -N 2 -n 2 --gres=gpu:a100:2\n")
    assert per_node.size.gpus == 4  # type: ignore[attr-defined]
    assert per_node.options.gpus_per_node == 2  # type: ignore[attr-defined]
    assert per_node.options.gpu_type == "a100"  # type: ignore[attr-defined]
    per_task = _resolved("#!/bin/bash\n#SBATCH -t 5 -n 3 --gpus-per-task=1\n")
    assert per_task.size.gpus == 3  # type: ignore[attr-defined]
    with pytest.raises(DirectiveRefused, match="more than one way"):
        _resolved("#!/bin/bash\n#SBATCH -t 5 --gpus=1 --gres=gpu:1\n")
    with pytest.raises(DirectiveRefused, match="GPUs only"):
        _resolved("#!/bin/bash\n#SBATCH -t 5 --gres=mps:50\n")


def test_a_constraint_is_checked_against_the_partitions_features() -> None:
    assert _resolved("#!/bin/bash\n#SBATCH -t 5 -C 'avx2&ib'\n").options.constraint == "avx2&ib"  # type: ignore[attr-defined]
    with pytest.raises(DirectiveRefused, match="has no node with avx512"):
        _resolved("#!/bin/bash\n#SBATCH -t 5 --constraint=avx512\n")


def test_a_script_without_a_time_limit_anywhere_is_a_field_error() -> None:
    from computeshare.errors import ValidationFailed

    with pytest.raises(ValidationFailed) as refused:
        _resolved("#!/bin/bash\necho hi\n")
    assert "time_limit_minutes" in refused.value.extra["fields"]
    with pytest.raises(DirectiveRefused, match="no time limit"):
        _resolved("#!/bin/bash\n#SBATCH --time=UNLIMITED\n")


def test_paths_are_kept_in_the_jobs_folder() -> None:
    plan = _resolved(
        "#!/bin/bash\n#SBATCH -t 5 -o /home/alice/logs/%x_%j.out -e ../err.txt -i in/data.csv\n"
    )
    options = plan.options  # type: ignore[attr-defined]
    assert (options.output, options.error, options.input) == ("%x_%j.out", "err.txt", "in/data.csv")
    notes = {each.option: each.note for each in plan.report.honoured}  # type: ignore[attr-defined]
    assert notes["-o"] == "kept in the job's folder as %x_%j.out"
    for refused in ("-o job.sh", "-o 'a b.txt'", "-o logs/%j/out", "-o out%q"):
        with pytest.raises(DirectiveRefused):
            _resolved(f"#!/bin/bash\n#SBATCH -t 5 {refused}\n")


def test_filename_patterns_are_filled_as_slurm_fills_a_batch_steps() -> None:
    values = filenames.batch_values(job_id=57, array_job_id=50, array_task_id=6, node="vm")
    assert filenames.name_with("%x-%A_%a.out", {"x": "sim", **values}) == "sim-50_6.out"
    assert filenames.name_with("%5j.%N.%s.%t%%", values) == "00057.vm.batch.0%"
    plain = filenames.batch_values(job_id=57, node="vm")
    assert filenames.name_with("%A_%a", plain) == "57_4294967294"
    # Filled in two steps: the platform's first, Slurm's after.
    partly = filenames.name_with("%x-%j-%%.out", {"x": "a_b"})
    assert partly == "a_b-%j-%%.out"
    assert filenames.name_with(partly, plain) == "a_b-57-%.out"


def test_what_reaches_sbatch_is_the_platforms_options_and_a_script_without_directives() -> None:
    spec = JobSpec(
        name="cs-x",
        script="#!/bin/bash\n# [computeshare: honoured -t] SBATCH -t 5\necho hi\n",
        directory="computeshare-jobs/x",
        partition="debug",
        time_limit_minutes=5,
        cpus_per_task=2,
        array="1,6-7,12",
        requeue=False,
        options=JobOptions(output="sim-%A_%a.out", signal="B:USR1@60", exclusive=True),
    )
    assert spec_problem(spec) is None
    arguments = sbatch_arguments(spec, "/home/t/computeshare-jobs/x")
    assert "--no-requeue" in arguments
    assert "--signal=B:USR1@60" in arguments
    assert "--exclusive" in arguments
    assert "--output=/home/t/computeshare-jobs/x/sim-%A_%a.out" in arguments
    # stderr goes where the script sent stdout, as sbatch sends it without --error.
    assert not any(argument.startswith("--error=") for argument in arguments)
    with_directive = JobSpec(**{**spec.__dict__, "script": "#!/bin/bash\n#SBATCH -t 9\n"})
    assert spec_problem(with_directive) == (
        "the script still carries #SBATCH lines: the platform writes every option"
    )


def test_an_exclusive_job_reserves_its_nodes_whole() -> None:
    size = JobSize(time_limit_minutes=60, cpus_per_task=2, nodes=2, exclusive=True, node_cpus=16)
    assert job_units(resource="cpu", size=size, task_count=1) == 32
    assert (
        job_units(
            resource="cpu", size=JobSize(time_limit_minutes=60, cpus_per_task=2), task_count=1
        )
        == 2
    )


def test_a_scripts_output_is_appended_to_only_as_a_regular_file_of_its_folder(tmp_path) -> None:
    """--open-mode=append on the demo's cluster: the supervisor appends to the file the job's
    earlier task wrote, never through a link the job left in its place."""
    import os

    from hpc import job_folder

    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "out.log").write_text("task 0\n")
    (tmp_path / "elsewhere.txt").write_text("not the job's\n")
    os.symlink(tmp_path / "elsewhere.txt", tmp_path / "job" / "linked.log")
    folder = job_folder.open_folder(tmp_path, "job")
    try:
        descriptor = job_folder.open_for_appending(folder, "out.log")
        os.write(descriptor, b"task 1\n")
        os.close(descriptor)
        os.close(job_folder.open_for_appending(folder, "new.log"))
        with pytest.raises(job_folder.JobFileRefused, match="links are not followed"):
            job_folder.open_for_appending(folder, "linked.log")
    finally:
        os.close(folder)
    assert (tmp_path / "job" / "out.log").read_text() == "task 0\ntask 1\n"
    assert (tmp_path / "job" / "new.log").read_text() == ""
    assert (tmp_path / "elsewhere.txt").read_text() == "not the job's\n"


def test_a_name_with_a_wildcard_is_read_from_the_newest_regular_file_it_matches(tmp_path) -> None:
    import os

    from hpc import job_folder

    job = tmp_path / "job"
    job.mkdir()
    (job / "run-57.vm.out").write_text("old\n")
    os.utime(job / "run-57.vm.out", (1, 1))
    (job / "run-57.other.out").write_text("new\n")
    os.symlink(tmp_path, job / "run-57.zz.out")

    assert job_folder.read_tail(tmp_path, "job", "run-57.*.out", 100) == b"new\n"
    assert job_folder.read_tail(tmp_path, "job", "run-99.*.out", 100) == b""
