"""The job commands' builders and parsers, on output recorded from Slurm 22.05 on the test cluster
(`testcluster_*`, recorded through these very command builders) and on hand-made edge cases."""

import shlex
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from scheduler_bridge.backends.types import (
    CANCELLED,
    COMPLETED,
    COMPLETING,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    PENDING,
    PREEMPTED,
    RUNNING,
    TIMEOUT,
    UNDETERMINED,
    JobSpec,
    QueueEntry,
    RunRecord,
)
from scheduler_bridge.slurm.accounting import (
    api_state,
    parse_alloc_tres,
    parse_cpu_time,
    parse_exit_code,
    parse_sacct_by_name,
    parse_sacct_runs,
    parse_squeue,
    parse_squeue_by_name,
    run_state,
    sacct_window_arguments,
    valid_job_ids,
)
from scheduler_bridge.slurm.errors import UnexpectedOutput
from scheduler_bridge.slurm.jobs import (
    SubmissionOutcome,
    environment_file_content,
    is_transient_message,
    only_ended_jobs_refused,
    parse_submission_output,
    refusal_reason,
    sbatch_arguments,
    scancel_arguments,
    spec_problem,
    submission_script,
)

RECORDED = Path(__file__).parent / "recorded"
RECORDED_TOKEN = "@@computeshare-recorded@@"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def at(hour: int, minute: int, second: int) -> datetime:
    return datetime(2026, 11, 26, hour, minute, second, tzinfo=UTC)


def spec(**changes) -> JobSpec:
    values = {
        "name": "cs-0d4f6d1e-5b7e-4c53-9a43-1f0c2a5e8b11",
        "script": "#!/bin/sh\necho hi\n",
        "directory": "computeshare/jobs/0d4f6d1e",
        "partition": "debug",
        "time_limit_minutes": 30,
    }
    return JobSpec(**{**values, **changes})


# --- States ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slurm_state", "expected"),
    [
        ("PENDING", PENDING),
        ("CONFIGURING", PENDING),
        ("REQUEUED", PENDING),
        ("REQUEUE_HOLD", PENDING),
        ("REQUEUE_FED", PENDING),
        ("RESV_DEL_HOLD", PENDING),
        ("SUSPENDED", PENDING),
        ("STOPPED", PENDING),
        ("RUNNING", RUNNING),
        ("RESIZING", RUNNING),
        ("COMPLETING", COMPLETING),
        ("SIGNALING", COMPLETING),
        ("STAGE_OUT", COMPLETING),
        ("COMPLETED", COMPLETED),
        ("FAILED", FAILED),
        ("SPECIAL_EXIT", FAILED),
        ("CANCELLED", CANCELLED),
        ("CANCELLED by 1001", CANCELLED),
        ("CANCELLED by 0", CANCELLED),
        ("REVOKED", CANCELLED),
        ("TIMEOUT", TIMEOUT),
        ("DEADLINE", TIMEOUT),
        ("OUT_OF_MEMORY", OUT_OF_MEMORY),
        ("NODE_FAIL", NODE_FAIL),
        ("BOOT_FAIL", NODE_FAIL),
        ("PREEMPTED", PREEMPTED),
        ("RUNNING+", RUNNING),
        ("LAUNCH_FAILED_SOMEDAY", UNDETERMINED),
        ("", UNDETERMINED),
        ("completed", UNDETERMINED),
    ],
)
def test_every_slurm_state_maps_and_an_unknown_one_is_undetermined(slurm_state, expected):
    assert api_state(slurm_state) == expected


def test_a_requeued_run_in_accounting_is_preempted_not_pending():
    assert run_state("REQUEUED") == PREEMPTED
    assert run_state("CANCELLED by 1001") == CANCELLED
    assert run_state("SOMETHING_NEW") == UNDETERMINED


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


def test_the_environment_file_holds_any_value_but_nul():
    content = environment_file_content({"A": "x'y\"$(id)`id`;\nline ü", "EMPTY": ""})

    assert content == "A=x'y\"$(id)`id`;\nline ü\0EMPTY=\0".encode()


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


def test_the_submission_script_quotes_every_argument():
    hostile = spec(name="cs-$(touch /tmp/x);`id`'\"")
    arguments = sbatch_arguments(hostile, "/home/u/jobs/a b")

    script = submission_script([("/home/u/jobs/a b", arguments)], "@@token@@")

    assert shlex.quote("--job-name=cs-$(touch /tmp/x);`id`'\"") in script
    assert "'--chdir=/home/u/jobs/a b'" in script
    assert (
        "[ ! -s '/home/u/jobs/a b/job.environment' ] || cat '/home/u/jobs/a b/job.environment'; };"
        " } >'/home/u/jobs/a b/job.export'" in script
    )


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


@pytest.mark.parametrize(
    "output",
    [
        "",  # nothing ran
        "\nT stdout 0\n17\n\nT stderr 0\n\n",  # cut before the exit status
        "\nT stdout 1\n17\n\nT stderr 1\n\nT exit 1 0\n",  # the wrong spec
        "\nT stdout 0\n17\n\nT stderr 0\n\nT exit 0 zero\n",
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


# --- squeue ---------------------------------------------------------------------------------


def test_recorded_squeue_lists_array_tasks_running_and_pending_jobs():
    entries = parse_squeue(recorded("testcluster_squeue.txt"))

    name = "cs-recorded-{}-34f51559".format
    assert entries[0] == QueueEntry(
        "19_1", "19", 1, name("array"), PENDING, "PENDING", "Resources", None
    )
    assert entries[4] == QueueEntry(
        "22", "22", None, name("requeued"), PENDING, "PENDING", "Priority"
    )
    assert entries[6] == QueueEntry("18", "18", None, name("running"), RUNNING, "RUNNING", "")
    assert entries[7] == QueueEntry("19_0", "19", 0, name("array"), RUNNING, "RUNNING", "")
    assert [entry.job_id for entry in entries] == [
        "19_1",
        "19_2",
        "19_3",
        "19_4",
        "22",
        "20",
        "18",
        "19_0",
    ]


def test_an_unsplit_pending_array_range_is_one_entry_with_its_tasks():
    text = "3_[2-5%2]|3|2-5%2|PENDING|Resources|cs-sweep\n3_1|3|1|RUNNING|None|cs-sweep\n"

    entries = parse_squeue(text)

    assert entries == [
        QueueEntry("3_[2-5%2]", "3", None, "cs-sweep", PENDING, "PENDING", "Resources", "2-5"),
        QueueEntry("3_1", "3", 1, "cs-sweep", RUNNING, "RUNNING", ""),
    ]


def test_a_job_name_with_the_delimiter_stays_whole_and_an_unknown_state_is_undetermined():
    [entry] = parse_squeue("4|4|N/A|NEW_STATE|None|cs-rec weird|na;me $(x) `y` ü\n")

    assert entry.name == "cs-rec weird|na;me $(x) `y` ü"
    assert (entry.state, entry.scheduler_state) == (UNDETERMINED, "NEW_STATE")


def test_squeue_output_of_another_format_is_unexpected():
    with pytest.raises(UnexpectedOutput):
        parse_squeue("4 BROKEN\n")


def test_recorded_names_give_the_array_id_once():
    assert parse_squeue_by_name(recorded("testcluster_squeue_by_name.txt")) == {
        "cs-recorded-array-34f51559": "19",
        "cs-recorded-requeued-34f51559": "22",
        "cs-recorded-fails-34f51559": "20",
        "cs-recorded-running-34f51559": "18",
    }
    assert parse_sacct_by_name(recorded("testcluster_sacct_by_name.txt")) == {
        "cs-recorded-running-34f51559": "18",
        "cs-recorded-fails-34f51559": "20",
        "cs-recorded-cancelled-34f51559": "21",
        "cs-recorded-requeued-34f51559": "22",
        "cs-recorded-array-34f51559": "19",
    }


def test_a_name_submitted_twice_gives_the_newest_job():
    assert parse_sacct_by_name("99|cs-a\n101|cs-a\n100|cs-a\n") == {"cs-a": "101"}


# --- sacct ----------------------------------------------------------------------------------


def test_recorded_ended_runs_with_usage_and_array_tasks():
    records = parse_sacct_runs(recorded("testcluster_sacct_runs_ended.txt"))

    assert records[0] == RunRecord(
        job_id="18",
        raw_job_id="18",
        array_job_id="18",
        array_task_id=None,
        name="cs-recorded-running-34f51559",
        state=COMPLETED,
        scheduler_state="COMPLETED",
        exit_code=0,
        submit_time=at(1, 4, 50),
        start_time=at(1, 4, 51),
        end_time=at(1, 5, 3),
        elapsed_seconds=12,
        allocated_cpus=1,
        allocated_gpus=0,
        cpu_seconds=0.0,
        time_limit_minutes=1,
        reason="",
    )
    failed, cancelled = records[1], records[2]
    assert (failed.state, failed.exit_code, failed.elapsed_seconds) == (FAILED, 3, 0)
    # Cancelled before it got an allocation: ended, nothing allocated.
    assert (cancelled.state, cancelled.scheduler_state) == (CANCELLED, "CANCELLED by 1001")
    assert cancelled.allocated_cpus == 0
    tasks = records[4:]
    assert [(t.job_id, t.raw_job_id, t.array_job_id, t.array_task_id) for t in tasks] == [
        ("19_0", "23", "19", 0),
        ("19_1", "24", "19", 1),
        ("19_2", "25", "19", 2),
        ("19_3", "26", "19", 3),
        # The last task keeps the array's own id as its raw id.
        ("19_4", "19", "19", 4),
    ]
    assert all(t.state == COMPLETED and t.elapsed_seconds == 3 for t in tasks)


def test_recorded_requeued_job_has_a_preempted_run_and_a_pending_one():
    first, second = parse_sacct_runs(recorded("testcluster_sacct_runs_requeued.txt"))

    assert (first.raw_job_id, first.state, first.scheduler_state) == ("27", PREEMPTED, "REQUEUED")
    assert first.is_ended
    assert first.allocated_cpus == 1
    assert (second.raw_job_id, second.state, second.reason) == ("27", PENDING, "BeginTime")
    assert second.start_time is None and second.end_time is None
    assert second.exit_code is None
    assert not second.is_ended
    # Each run has its own key (raw id, submit time).
    assert first.submit_time == at(1, 5, 18) and second.submit_time == at(1, 5, 19)


def test_recorded_accounting_lag_is_undetermined_not_an_end():
    """Right after submission slurmdbd may not have the job's own record yet: sacct shows the
    job named "allocation" without a time limit, running jobs as PENDING, and no array tasks."""
    records = parse_sacct_runs(recorded("testcluster_sacct_runs_while_running.txt"))

    assert [(r.job_id, r.state, r.scheduler_state, r.name) for r in records] == [
        ("18", UNDETERMINED, "PENDING", "allocation"),
        ("21", UNDETERMINED, "CANCELLED by 1001", "allocation"),
    ]
    assert not any(record.is_ended for record in records)


def test_recorded_incomplete_record_of_an_ended_job_is_not_settled():
    """The same lag after the end: COMPLETED already, but not the job's record yet."""
    [record] = parse_sacct_runs(recorded("testcluster_sacct_runs_incomplete.txt"))

    assert (record.state, record.scheduler_state, record.name) == (
        UNDETERMINED,
        "COMPLETED",
        "allocation",
    )
    assert (record.exit_code, record.time_limit_minutes) == (None, None)
    assert not record.is_ended


def test_a_pending_array_placeholder_is_no_run():
    text = (
        "5_[2-9]|5|PENDING|0:0|2026-11-26T01:00:05|Unknown|Unknown|0||00:00:00|1|None|cs-a\n"
        "5_0|6|RUNNING|0:0|2026-11-26T01:00:05|2026-11-26T01:00:06|Unknown|3|"
        "billing=2,cpu=2,gres/gpu=1,gres/gpu:a100=1,mem=1G,node=1|00:01.500|60|None|cs-a\n"
    )

    [running] = parse_sacct_runs(text)

    assert (running.job_id, running.state, running.end_time) == ("5_0", RUNNING, None)
    assert (running.allocated_cpus, running.allocated_gpus, running.cpu_seconds) == (2, 1, 1.5)
    assert running.exit_code is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00:00", 0.0),
        ("00:01.234", 1.234),
        ("59:59", 3599.0),
        ("01:02:03", 3723.0),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
        ("10-00:00:00.5", 864000.5),
    ],
)
def test_total_cpu_time_with_days_hours_and_fractions(text, seconds):
    assert parse_cpu_time(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "code"), [("0:0", 0), ("2:0", 2), ("0:9", 137), ("0:15", 143)])
def test_exit_codes_and_signals(text, code):
    assert parse_exit_code(text) == code


def test_gpus_count_typed_entries_only_without_the_untyped_total():
    assert parse_alloc_tres("billing=1,cpu=1,node=1").gpus == 0
    assert parse_alloc_tres("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1").gpus == 3
    assert parse_alloc_tres("cpu=8,gres/gpu=3,gres/gpu:a100=2,gres/gpu:v100=1").gpus == 3
    with pytest.raises(UnexpectedOutput):
        parse_alloc_tres("cpu")


def test_a_timed_out_run_with_days_and_unknown_times():
    text = (
        "7|7|TIMEOUT|0:15|2026-11-20T00:00:00|2026-11-20T00:00:01|2026-11-22T00:00:01|172800|"
        "billing=4,cpu=4,node=1|3-01:00:00|2880|TimeLimit|cs-long\n"
        "8|8|CANCELLED by 0|0:0|2026-11-20T00:00:00|None|2026-11-20T00:10:00|0||00:00:00|"
        "UNLIMITED|None|cs-never\n"
    )

    timed_out, never = parse_sacct_runs(text)

    assert (timed_out.state, timed_out.exit_code, timed_out.reason) == (TIMEOUT, 143, "TimeLimit")
    assert timed_out.cpu_seconds == 3 * 86400 + 3600
    assert timed_out.time_limit_minutes == 2880
    assert (never.state, never.start_time, never.time_limit_minutes) == (CANCELLED, None, None)


def test_sacct_output_of_another_format_is_unexpected():
    with pytest.raises(UnexpectedOutput):
        parse_sacct_runs("18|18|COMPLETED|0:0|yesterday|x|y|1||00:00:00|1|None|cs-a\n")


def test_the_window_is_sent_in_utc():
    arguments = sacct_window_arguments(
        "computeshare",
        datetime(2026, 11, 26, 2, 0, tzinfo=timezone(timedelta(hours=1))),
        datetime(2026, 11, 27, 1, 0, tzinfo=UTC),
    )

    assert "--starttime=2026-11-26T01:00:00" in arguments
    assert "--endtime=2026-11-27T01:00:00" in arguments
    assert "--user=computeshare" in arguments


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


def test_runs_with_steps_take_their_cpu_time_from_the_steps():
    records = parse_sacct_runs(recorded("testcluster_sacct_runs_with_steps.txt"), with_steps=True)

    assert [(r.job_id, r.state, r.elapsed_seconds, r.cpu_seconds) for r in records] == [
        ("204", "cancelled", 0, 0.0),  # cancelled while it waited: no step, never ran
        ("207", "cancelled", 7, 0.002),
        ("210", "completed", 2, 2.008),
    ]


def test_a_run_whose_batch_step_is_not_recorded_yet_is_undetermined_not_ended():
    # slurmdbd can have the job's end a moment before its batch step (seen on the test
    # cluster: COMPLETED with a TotalCPU of 0 until the step arrived)
    text = "".join(
        line
        for line in recorded("testcluster_sacct_runs_with_steps.txt").splitlines(keepends=True)
        if not line.startswith("210.batch")
    )

    states = {r.job_id: r.state for r in parse_sacct_runs(text, with_steps=True)}

    assert states == {"204": "cancelled", "207": "cancelled", "210": "undetermined"}
