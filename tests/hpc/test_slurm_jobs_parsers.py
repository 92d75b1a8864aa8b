"""The acting job commands' (sbatch, scancel) builders and parsers, on output recorded from Slurm
22.05 on the test cluster (`testcluster_*`, recorded through these very command builders) and on
hand-made edge cases. squeue and sacct are tested in `test_slurm_accounting_parsers`."""

import shlex
from pathlib import Path

import pytest

from hpc.errors import UnexpectedOutput
from hpc.slurm.accounting import valid_job_ids
from hpc.slurm.jobs import (
    Submission,
    SubmissionOutcome,
    is_transient_message,
    only_ended_jobs_refused,
    parse_submission_output,
    refusal_reason,
    sbatch_arguments,
    scancel_arguments,
    spec_problem,
    submission_script,
)
from hpc.types import JobSpec

RECORDED = Path(__file__).parent / "recorded"
RECORDED_TOKEN = "@@computeshare-recorded@@"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def spec(**changes) -> JobSpec:
    values = {
        "name": "cs-0d4f6d1e-5b7e-4c53-9a43-1f0c2a5e8b11",
        "script": "#!/bin/sh\necho hi\n",
        "directory": "computeshare/jobs/0d4f6d1e",
        "partition": "debug",
        "time_limit_minutes": 30,
    }
    return JobSpec(**{**values, **changes})


# --- sbatch ---------------------------------------------------------------------------------


def test_every_resource_is_an_sbatch_option_and_the_paths_are_the_platforms():
    arguments = sbatch_arguments(
        spec(account="cs-lab", nodes=2, ntasks=4, cpus_per_task=3, gpus=1, array="0-9%2"),
        "/home/computeshare/computeshare/jobs/0d4f6d1e",
    )

    directory = "/home/computeshare/computeshare/jobs/0d4f6d1e"
    assert arguments == [
        "sbatch",
        "--parsable",
        "--ignore-pbs",
        "--job-name=cs-0d4f6d1e-5b7e-4c53-9a43-1f0c2a5e8b11",
        "--partition=debug",
        "--time=30",
        "--nodes=2",
        "--ntasks=4",
        "--cpus-per-task=3",
        "--gpus=1",
        "--account=cs-lab",
        "--array=0-9%2",
        f"--chdir={directory}",
        f"--output={directory}/stdout-%a.txt",
        f"--error={directory}/stderr-%a.txt",
        "--export=ALL",
        f"--export-file={directory}/job.export",
        f"{directory}/job.sh",
    ]


def test_a_plain_job_has_no_gpu_account_or_array_option():
    arguments = sbatch_arguments(spec(), "/home/u/d")

    assert not [a for a in arguments if a.startswith(("--gpus", "--account", "--array"))]
    assert "--output=/home/u/d/stdout.txt" in arguments
    assert "--error=/home/u/d/stderr.txt" in arguments


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"name": "cs-a,b"}, "comma"),
        ({"name": 'cs-"a"'}, "double quote"),
        ({"name": "cs-a\nb"}, "control character"),
        ({"name": ""}, "empty"),
        ({"directory": "/abs/path"}, "not a plain relative path"),
        ({"directory": "jobs/../../etc"}, "not a plain relative path"),
        ({"directory": "jobs//x"}, "not a plain relative path"),
        ({"directory": "jobs/%j"}, "not a plain relative path"),
        ({"array": "0-9;id"}, "array expression"),
        ({"time_limit_minutes": 0}, "positive"),
        ({"gpus": -1}, "positive"),
        ({"environment": {"1BAD": "x"}}, "is not a valid name"),
        ({"environment": {"A=B": "x"}}, "is not a valid name"),
        ({"environment": {"SBATCH_PARTITION": "other"}}, "is the scheduler's"),
        ({"environment": {"SLURM_CONF": "/tmp/x"}}, "is the scheduler's"),
        ({"environment": {"A": "nul\0"}}, "NUL"),
    ],
)
def test_a_spec_the_bridge_cannot_submit_safely_is_refused(changes, problem):
    assert problem in spec_problem(spec(**changes))


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"name": "cs-it's $(touch x) `id`; ü|pipe"},
        {"array": "1,3,5-7"},
        {"array": "0-999:2%20"},
        {"environment": {"PATH": "/opt/bin", "_x1": "a\nb"}},
    ],
)
def test_specs_with_hostile_but_harmless_text_are_accepted(changes):
    assert spec_problem(spec(**changes)) is None


def test_the_submission_script_quotes_every_argument_and_every_file_it_writes():
    hostile = spec(name="cs-$(touch /tmp/x);`id`'\"")
    arguments = sbatch_arguments(hostile, "/home/u/jobs/a b")
    job_script = "#!/bin/bash\necho '$(id)' \"$HOME\"\n"
    value = "x'y\"$(id)`id`;\nline ü"

    script = submission_script(
        [Submission("/home/u/jobs/a b", arguments, job_script, {"A": value, "EMPTY": ""})],
        "@@token@@",
    )

    assert shlex.quote("--job-name=cs-$(touch /tmp/x);`id`'\"") in script
    assert "'--chdir=/home/u/jobs/a b'" in script
    assert f"printf '%s' {shlex.quote(job_script)} >'/home/u/jobs/a b/job.sh'" in script
    # The variables, each a NUL-ended record, after the login node's four.
    assert (
        "printf '%s\\0' "
        + shlex.join([f"A={value}", "EMPTY="])
        + "; } >'/home/u/jobs/a b/job.export'"
    ) in script
    assert "mkdir -p -m 0700 -- '/home/u/jobs/a b'" in script
    assert "rm -f -- '/home/u/jobs/a b/job.export'" in script


def test_recorded_submission_output_gives_each_sbatch_its_own_outcome():
    outcomes = parse_submission_output(recorded("testcluster_submission.txt"), RECORDED_TOKEN, 6)

    assert [(outcome.exit_status, outcome.stdout) for outcome in outcomes[:5]] == [
        (0, "18\n"),
        (0, "19\n"),
        (0, "20\n"),
        (0, "21\n"),
        (0, "22\n"),
    ]
    assert outcomes[5] == SubmissionOutcome(
        exit_status=1,
        stdout="",
        stderr="sbatch: error: Batch job submission failed: "
        "Invalid account or account/partition combination specified\n",
    )
    assert refusal_reason(outcomes[5]) == (
        "sbatch: error: Batch job submission failed: "
        "Invalid account or account/partition combination specified"
    )
    assert not is_transient_message(refusal_reason(outcomes[5]))


def test_a_stream_without_final_newline_is_kept_exactly():
    output = "\nT stdout 0\n17\nT stderr 0\nwarn\nT exit 0 0\n"

    [outcome] = parse_submission_output(output, "T", 1)

    assert outcome == SubmissionOutcome(0, "17", "warn")


def test_outcomes_printed_lane_by_lane_come_back_in_the_batchs_order():
    # Two lanes: jobs 0 and 2 in the first, 1 in the second, printed one lane after the other.
    output = (
        "\nT stdout 0\n17\n\nT stderr 0\n\nT exit 0 0\n"
        "\nT stdout 2\n\nT stderr 2\nrefused\n\nT exit 2 1\n"
        "\nT stdout 1\n18\n\nT stderr 1\n\nT exit 1 0\n"
    )

    outcomes = parse_submission_output(output, "T", 3)

    assert outcomes == [
        SubmissionOutcome(0, "17\n", ""),
        SubmissionOutcome(0, "18\n", ""),
        SubmissionOutcome(1, "", "refused\n"),
    ]


def test_the_script_runs_its_jobs_in_lanes_taking_turns():
    submissions = [
        Submission(f"/home/u/jobs/{index}", ["sbatch", f"--job-name=j{index}"], "#!/bin/sh\n", {})
        for index in range(5)
    ]

    one_lane = submission_script(submissions, "@@token@@")
    two_lanes = submission_script(submissions, "@@token@@", lanes=2)

    assert "wait" not in one_lane.split("\n") and "lane" not in one_lane
    assert [line for line in two_lanes.split("\n") if line.startswith("outcome ")] == [
        f'outcome {index} "$status"' for index in (0, 2, 4, 1, 3)
    ]
    assert two_lanes.count(') >"$scratch/lane') == 2
    assert 'cat "$scratch/lane0" "$scratch/lane1"' in two_lanes
    # More lanes than jobs: one lane a job.
    assert submission_script(submissions[:1], "@@token@@", lanes=4) == submission_script(
        submissions[:1], "@@token@@"
    )


@pytest.mark.parametrize(
    "output",
    [
        "",  # nothing ran
        "\nT stdout 0\n17\n\nT stderr 0\n\n",  # cut before the exit status
        "\nT stdout 1\n17\n\nT stderr 1\n\nT exit 1 0\n",  # the wrong spec
        "\nT stdout 0\n17\n\nT stderr 0\n\nT exit 0 zero\n",
        "\nT stdout 0\n\nT stderr 0\n\nT exit 0 0\n" * 2,  # one job twice
        "\nT stdout 0\n\nT stdout 1\n\nT stderr 1\n\nT exit 1 0\n",  # cut, another begun
    ],
)
def test_an_incomplete_submission_output_is_unexpected(output):
    with pytest.raises(UnexpectedOutput):
        parse_submission_output(output, "T", 1)


@pytest.mark.parametrize(
    ("message", "transient"),
    [
        ("sbatch: error: Batch job submission failed: Unable to contact slurm controller", True),
        ("sbatch: error: Batch job submission failed: Socket timed out on send/recv", True),
        ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", True),
        ("sbatch: error: Batch job submission failed: Resource temporarily unavailable", True),
        ("sbatch: error: Batch job submission failed: Zero Bytes were transmitted", True),
        ("sbatch: error: invalid partition specified: nope", False),
        ("sbatch: error: Batch job submission failed: Invalid account or account/partition", False),
        ("sbatch: error: Batch job submission failed: Requested time limit is invalid", False),
    ],
)
def test_sbatch_refusals_that_may_pass_later_are_transient(message, transient):
    assert is_transient_message(message) is transient


# --- scancel --------------------------------------------------------------------------------


def test_scancel_takes_only_job_ids_once_each():
    assert scancel_arguments(["12", "13_4", "12"]) == ["scancel", "12", "13_4"]
    with pytest.raises(ValueError, match="not a Slurm job id"):
        valid_job_ids(["12", "-u computeshare"])


@pytest.mark.parametrize(
    ("stderr", "harmless"),
    [
        ("scancel: error: Kill job error on job id 12: Invalid job id specified\n", True),
        (
            "scancel: error: Kill job error on job id 12: Invalid job id specified\n"
            "scancel: error: Kill job error on job id 13: "
            "Job/step already completing or completed\n",
            True,
        ),
        ("scancel: error: Kill job error on job id 12: Access/permission denied\n", False),
        ("scancel: error: Unable to contact slurm controller\n", False),
        ("", False),
    ],
)
def test_scancel_errors_about_ended_jobs_are_success(stderr, harmless):
    assert only_ended_jobs_refused(stderr) is harmless
