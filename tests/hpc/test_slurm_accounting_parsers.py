"""squeue and sacct: the command builders and parsers of `hpc.slurm.accounting`.

Recorded output (`recorded/squeue_*.txt`, `recorded/sacct_*.txt`) comes from the test cluster
(Slurm 22.05.8, one node with 2 CPUs, partition `debug`), printed by the commands these very
builders make, run as root with TZ=UTC. The jobs ran as the unprivileged users `exp1` and
`exp2`, submitted with `su -s /bin/sh exp1 -c 'cd /tmp/exp && sbatch ...'`; each test says
which jobs and how. Hand-made lines are marked as such, with where their shape comes from."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hpc.errors import UnexpectedOutput
from hpc.slurm.accounting import (
    SACCT_RUN_FIELDS,
    SACCT_RUN_FIELDS_WITHOUT_MAX_RSS,
    SQUEUE_FORMAT,
    api_state,
    parse_cpu_time,
    parse_exit_code,
    parse_sacct_by_name,
    parse_squeue,
    parse_squeue_by_name,
    parse_tres,
    run_state,
    sacct_by_name_arguments,
    sacct_runs_arguments,
    sacct_users_arguments,
    squeue_arguments,
    squeue_by_name_arguments,
)
from hpc.slurm.accounting import (
    parse_sacct_runs as parse_sacct_runs_of,
)
from hpc.types import (
    CANCELLED,
    COMPLETED,
    COMPLETING,
    FAILED,
    NODE_FAIL,
    OUT_OF_MEMORY,
    OWNER_CAUSED_STATES,
    PENDING,
    PREEMPTED,
    REQUEUED,
    RESIZED,
    RUN_ENDED_STATES,
    RUNNING,
    TIMEOUT,
    UNDETERMINED,
    QueueEntry,
    RunRecord,
)

RECORDED = Path(__file__).parent / "recorded"
SACCT_FORMAT = (
    "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,ElapsedRaw,AllocTRES,TotalCPU,TimelimitRaw,"
    "Reason,User,Partition,ReqTRES,MaxRSS,JobName"
)


def parse_sacct_runs(text: str, **options: Any) -> list[RunRecord]:
    """The module's sacct texts were recorded before MaxRSS was read: they are read with the
    format they were printed with."""
    return parse_sacct_runs_of(text, fields=SACCT_RUN_FIELDS_WITHOUT_MAX_RSS, **options)


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def at(hour: int, minute: int, second: int) -> datetime:
    return datetime(2026, 11, 26, hour, minute, second, tzinfo=UTC)


def rounded(record: RunRecord) -> RunRecord:
    """The record with its CPU time to the microsecond, so that sums of sacct's milliseconds
    compare exactly."""
    return replace(record, cpu_seconds=round(record.cpu_seconds, 6))


LATER = at(7, 0, 0)  # long after every recorded run ended


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
        ("SPECIAL_EXIT", PENDING),
        ("SUSPENDED", PENDING),
        ("STOPPED", PENDING),
        ("RUNNING", RUNNING),
        ("RESIZING", RUNNING),
        ("COMPLETING", COMPLETING),
        ("SIGNALING", COMPLETING),
        ("STAGE_OUT", COMPLETING),
        ("COMPLETED", COMPLETED),
        ("FAILED", FAILED),
        ("CANCELLED", CANCELLED),
        ("REVOKED", CANCELLED),
        ("TIMEOUT", TIMEOUT),
        ("DEADLINE", TIMEOUT),
        ("OUT_OF_MEMORY", OUT_OF_MEMORY),
        ("NODE_FAIL", NODE_FAIL),
        ("BOOT_FAIL", NODE_FAIL),
        ("PREEMPTED", PREEMPTED),
        ("RUNNING+", RUNNING),
        ("CANCELLED+", CANCELLED),
        # Flags that only `sacct -v` spells out, never a state squeue or sacct prints.
        ("LAUNCH_FAILED", UNDETERMINED),
        ("POWER_UP_NODE", UNDETERMINED),
        ("?", UNDETERMINED),
        ("", UNDETERMINED),
        ("completed", UNDETERMINED),
    ],
)
def test_every_queue_state_of_slurm_22_05_maps_and_an_unknown_one_is_undetermined(
    slurm_state, expected
):
    assert api_state(slurm_state) == expected


@pytest.mark.parametrize(
    ("slurm_state", "expected"),
    [
        ("REQUEUED", REQUEUED),
        ("RESIZING", RESIZED),
        ("SPECIAL_EXIT", FAILED),
        ("PREEMPTED", PREEMPTED),
        ("NODE_FAIL", NODE_FAIL),
        ("BOOT_FAIL", NODE_FAIL),
        ("CANCELLED by 1001", CANCELLED),
        ("CANCELLED by 0", CANCELLED),
        ("COMPLETED", COMPLETED),
        ("PENDING", PENDING),
        ("RUNNING", RUNNING),
        ("REQUEUE_HOLD", PENDING),
        ("SOMETHING_NEW", UNDETERMINED),
    ],
)
def test_a_run_in_accounting_reads_what_ended_it(slurm_state, expected):
    assert run_state(slurm_state) == expected


def test_a_requeued_or_resized_run_is_an_end_the_job_caused():
    """The job asked for these (`scontrol requeue` from its script, a resize): charged. A
    preemption or node failure records PREEMPTED or NODE_FAIL instead: the owner's."""
    assert {run_state("REQUEUED"), run_state("RESIZING")} <= RUN_ENDED_STATES
    assert not {run_state("REQUEUED"), run_state("RESIZING")} & OWNER_CAUSED_STATES
    assert {run_state("PREEMPTED"), run_state("NODE_FAIL"), run_state("BOOT_FAIL")} == (
        OWNER_CAUSED_STATES
    )


# --- squeue ---------------------------------------------------------------------------------


def test_squeue_asks_for_every_tenant_in_one_command():
    assert squeue_arguments(["exp1", "exp2", "exp1"]) == [
        "squeue",
        "--noheader",
        "--array",
        "--user=exp1,exp2",
        "--format=%i|%F|%K|%T|%r|%u|%P|%C|%S|%j",
    ]
    assert squeue_by_name_arguments(["cs_pool-01"], ["cs-a", "cs-b"]) == [
        "squeue",
        "--noheader",
        "--states=all",
        "--user=cs_pool-01",
        "--name=cs-a,cs-b",
        "--format=%i|%j",
    ]
    assert SQUEUE_FORMAT.endswith("|%j")


@pytest.mark.parametrize(
    "users",
    [[], [""], ["exp1,root"], ["-uroot"], ["Exp1"], ["exp1 exp2"], ["1exp"], ["exp1", "$(id)"]],
)
def test_only_unix_user_names_reach_a_command(users):
    for build in (
        lambda: squeue_arguments(users),
        lambda: squeue_by_name_arguments(users, ["cs-a"]),
        lambda: sacct_users_arguments(users, at(0, 0, 0), at(1, 0, 0)),
        lambda: sacct_by_name_arguments(users, ["cs-a"]),
    ):
        with pytest.raises(ValueError, match="user"):
            build()


def test_recorded_queue_of_two_tenants_with_a_het_job_an_array_and_a_requeued_job():
    """squeue_arguments(["exp1", "exp2"]) while exp1 had a heterogeneous job pending on
    Resources (`sbatch --job-name=acct-het --time=1 -n1 : -n1 --wrap="sleep 5"`, which never
    starts on one node), an array (`--array=0-3%1 --wrap="sleep 20"`) and a job waiting for its
    second run (it had run `scontrol requeue $SLURM_JOB_ID` itself, so BeginTime), and exp2 a
    job named "acct other|user". For pending jobs %S is a forecast, which is not kept."""
    entries = parse_squeue(recorded("squeue_het_requeued_pending.txt"))

    assert entries[0] == QueueEntry(
        job_id="142",
        array_job_id="142",
        array_task_id=None,
        name="acct other|user",
        state=PENDING,
        scheduler_state="PENDING",
        reason="Priority",
        pending_tasks=None,
        user="exp2",
        partition="debug",
        cpus=1,
        start_time=None,
        het_offset=None,
    )
    assert [(e.job_id, e.array_job_id, e.array_task_id, e.het_offset) for e in entries] == [
        ("142", "142", None, None),
        ("141_0", "141", 0, None),
        ("141_1", "141", 1, None),
        ("141_2", "141", 2, None),
        ("141_3", "141", 3, None),
        ("137", "137", None, None),
        # %F prints a component's own id (140), %i its leader's: the leader is the job.
        ("139+1", "139", None, 1),
        ("139+0", "139", None, 0),
    ]
    assert entries[5].reason == "BeginTime"
    assert entries[6] == QueueEntry(
        job_id="139+1",
        array_job_id="139",
        array_task_id=None,
        name="acct-het",
        state=PENDING,
        scheduler_state="PENDING",
        reason="Resources",
        user="exp1",
        partition="debug",
        cpus=1,
        het_offset=1,
    )
    assert all(entry.start_time is None for entry in entries)


def test_recorded_running_jobs_carry_the_start_of_their_run():
    """squeue_arguments(["exp1", "exp2"]) a few seconds later: task 0 of the array and exp2's
    job running, the other tasks held back by the array's throttle (`%1`, %S "N/A")."""
    entries = parse_squeue(recorded("squeue_array_running.txt"))

    running = [e for e in entries if e.state == RUNNING]
    assert running == [
        QueueEntry(
            job_id="141_0",
            array_job_id="141",
            array_task_id=0,
            name="acct-array",
            state=RUNNING,
            scheduler_state="RUNNING",
            reason="",
            user="exp1",
            partition="debug",
            cpus=1,
            start_time=at(6, 2, 31),
        ),
        QueueEntry(
            job_id="142",
            array_job_id="142",
            array_task_id=None,
            name="acct other|user",
            state=RUNNING,
            scheduler_state="RUNNING",
            reason="",
            user="exp2",
            partition="debug",
            cpus=1,
            start_time=at(6, 2, 31),
        ),
    ]
    assert [(e.job_id, e.reason, e.start_time) for e in entries if e.state == PENDING] == [
        ("137", "BeginTime", None),
        ("141_1", "JobArrayTaskLimit", None),
        ("141_2", "JobArrayTaskLimit", None),
        ("141_3", "JobArrayTaskLimit", None),
    ]


def test_recorded_special_exit_is_a_held_pending_job_not_a_failure():
    """squeue_arguments(["exp1"]) after root ran `scontrol requeuehold State=SpecialExit 148`
    on exp1's running job 148 (what an EpilogSlurmctld does on a chosen exit code)."""
    [entry] = parse_squeue(recorded("squeue_special_exit.txt"))

    assert (entry.job_id, entry.state, entry.scheduler_state) == ("148", PENDING, "SPECIAL_EXIT")
    assert entry.reason == "job requeued in held state"
    assert entry.start_time is None


def test_an_unsplit_pending_array_range_is_one_entry_with_its_tasks():
    # Hand-made: squeue prints a range like this without `--array` (see
    # squeue_by_name_het_array.txt); 22.05 splits it with `--array`.
    text = (
        "3_[2-5%2]|3|2-5%2|PENDING|Resources|exp1|debug|1|N/A|cs-sweep\n"
        "3_1|3|1|RUNNING|None|exp1|debug|2|2026-11-26T01:00:00|cs-sweep\n"
    )

    entries = parse_squeue(text)

    assert entries == [
        QueueEntry(
            "3_[2-5%2]",
            "3",
            None,
            "cs-sweep",
            PENDING,
            "PENDING",
            "Resources",
            "2-5",
            user="exp1",
            partition="debug",
            cpus=1,
        ),
        QueueEntry(
            "3_1",
            "3",
            1,
            "cs-sweep",
            RUNNING,
            "RUNNING",
            "",
            user="exp1",
            partition="debug",
            cpus=2,
            start_time=at(1, 0, 0),
        ),
    ]


def test_a_job_name_with_the_delimiter_stays_whole_and_an_unknown_state_is_undetermined():
    [entry] = parse_squeue(
        "4|4|N/A|NEW_STATE|None|exp1|debug|1|2026-11-26T01:00:00|cs-rec weird|na;me $(x) `y` ü\n"
    )

    assert entry.name == "cs-rec weird|na;me $(x) `y` ü"
    assert (entry.state, entry.scheduler_state, entry.start_time) == (
        UNDETERMINED,
        "NEW_STATE",
        None,
    )


@pytest.mark.parametrize(
    "text",
    [
        "4 BROKEN\n",
        "19_1|19|1|PENDING|Resources|cs-old-format\n",  # before user, partition, CPUs, start
        "4+x|4|N/A|PENDING|None|exp1|debug|1|N/A|cs-a\n",
        "4|4|N/A|PENDING|None|exp1|debug|one|N/A|cs-a\n",
        "4|4|N/A|RUNNING|None|exp1|debug|1|yesterday|cs-a\n",
    ],
)
def test_squeue_output_it_cannot_read_is_unexpected(text):
    with pytest.raises(UnexpectedOutput):
        parse_squeue(text)


def test_recorded_names_give_the_leader_id_of_arrays_and_het_jobs():
    """squeue_by_name_arguments(["exp1"], ["acct-het2", "acct-array2", "acct-run"]) and
    sacct_by_name_arguments with the same users and names, while het job 160 (components 160
    and 161) and array 162 (`--array=0-5%2`) pended and job 159 ran."""
    expected = {"acct-array2": "162", "acct-het2": "160", "acct-run": "159"}

    assert parse_squeue_by_name(recorded("squeue_by_name_het_array.txt")) == expected
    assert parse_sacct_by_name(recorded("sacct_by_name_het_array.txt")) == expected


def test_a_name_submitted_twice_gives_the_newest_job():
    assert parse_sacct_by_name("99|cs-a\n101|cs-a\n100_[1-3]|cs-a\n") == {"cs-a": "101"}
    assert parse_squeue_by_name("99+1|cs-a\n98|cs-a\n") == {"cs-a": "99"}


# --- sacct arguments ------------------------------------------------------------------------


def test_sacct_asks_for_every_run_of_the_tenants_in_the_window_in_utc():
    arguments = sacct_users_arguments(
        ["exp1", "exp2"],
        datetime(2026, 11, 26, 2, 0, tzinfo=timezone(timedelta(hours=1))),
        datetime(2026, 11, 27, 1, 0, tzinfo=UTC),
    )

    assert arguments == [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        "-D",
        "--user=exp1,exp2",
        "--starttime=2026-11-26T01:00:00",
        "--endtime=2026-11-27T01:00:00",
        f"--format={SACCT_FORMAT}",
    ]
    assert sacct_by_name_arguments(["exp1"], ["cs-a", "cs-b"]) == [
        "sacct",
        "--noheader",
        "--parsable2",
        "-X",
        "--user=exp1",
        "--name=cs-a,cs-b",
        "--starttime=now-7days",
        "--format=JobID,JobName",
    ]
    assert SACCT_RUN_FIELDS[-1] == "JobName"


def test_sacct_runs_are_asked_by_leader_ids_only():
    assert sacct_runs_arguments(["137", "162", "137"]) == [
        "sacct",
        "--noheader",
        "--parsable2",
        "-D",
        "--jobs=137,162",
        f"--format={SACCT_FORMAT}",
    ]
    for job_id in ("139+1", "137.batch", "1,2", "-u"):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            sacct_runs_arguments([job_id])


# --- sacct runs -----------------------------------------------------------------------------


def test_recorded_requeued_job_has_two_runs_each_with_its_own_steps():
    """sacct_runs_arguments(["137"]) for a job that requeued itself: `sbatch --time=2 -n1
    acct-requeue.sh`, a script that runs `srun -n1` (a shell loop burning CPU) and then, in its
    first run only, `scontrol requeue $SLURM_JOB_ID`. Both runs print the same step ids
    (137.batch, 137.0), each right after its own record."""
    first, second = parse_sacct_runs(
        recorded("sacct_requeued_with_steps.txt"), with_steps=True, now=LATER
    )

    assert rounded(first) == RunRecord(
        job_id="137",
        raw_job_id="137",
        array_job_id="137",
        array_task_id=None,
        name="acct-requeue",
        state=REQUEUED,
        scheduler_state="REQUEUED",
        exit_code=0,
        submit_time=at(6, 1, 59),
        start_time=at(6, 2, 0),
        end_time=at(6, 2, 1),
        elapsed_seconds=1,
        allocated_cpus=1,
        allocated_gpus=0,
        cpu_seconds=0.242,  # 0.014 (batch) + 0.228 (srun), this run's steps only
        time_limit_minutes=2,
        reason="",
        user="exp1",
        partition="debug",
        requested_cpus=1,
        requested_gpus=0,
        het_offset=None,
    )
    assert first.is_ended
    assert rounded(second) == replace(
        rounded(first),
        state=COMPLETED,
        scheduler_state="COMPLETED",
        submit_time=at(6, 2, 1),
        start_time=at(6, 4, 3),
        end_time=at(6, 4, 4),
        cpu_seconds=0.315,  # 0.011 + 0.304
        reason="BeginTime",
    )


def test_recorded_resized_job_charges_each_size_and_waits_for_no_batch_step_forever():
    """sacct_runs_arguments(["149", "150"]) for a job that grew from 1 to 2 CPUs (with
    `SchedulerParameters=permit_job_expansion`): /tmp/exp/grow.sh, submitted with `sbatch
    --job-name=acct-grow --time=2 -n1`, takes `salloc --no-shell --job-name=helper -n1
    --dependency=expand:$SLURM_JOB_ID` (150), gives it up with `scontrol update JobId=150
    NumNodes=0` and takes its CPU with `scontrol update JobId=149 NumNodes=ALL`. The first
    record keeps the batch step (ended RESIZING); the second has none."""
    text = recorded("sacct_resized_with_steps.txt")

    before, after, helper = parse_sacct_runs(text, with_steps=True, now=LATER)

    assert [
        (r.job_id, r.state, r.scheduler_state, r.start_time, r.end_time, r.elapsed_seconds)
        for r in (before, after, helper)
    ] == [
        ("149", RESIZED, "RESIZING", at(6, 4, 38), at(6, 4, 41), 3),
        ("149", COMPLETED, "COMPLETED", at(6, 4, 41), at(6, 4, 45), 4),
        ("150", RESIZED, "RESIZING", at(6, 4, 41), at(6, 4, 41), 0),
    ]
    # Each run at its own size; the request stays what was asked at submission.
    assert [(r.allocated_cpus, r.requested_cpus, r.exit_code) for r in (before, after)] == [
        (1, 1, 0),
        (2, 1, 0),
    ]
    assert (before.submit_time, after.submit_time) == (at(6, 4, 37), at(6, 4, 41))

    # The later record never gets a batch step: it is whole once its end is a minute old.
    states = [r.state for r in parse_sacct_runs(text, with_steps=True, now=at(6, 5, 44))]
    assert states == [RESIZED, UNDETERMINED, RESIZED]
    states = [r.state for r in parse_sacct_runs(text, with_steps=True, now=at(6, 5, 45))]
    assert states == [RESIZED, COMPLETED, RESIZED]


def test_recorded_salloc_allocation_without_batch_step_settles_after_the_grace():
    """sacct_runs_arguments(["138"]) for `salloc --no-shell -n1 --time=1
    --job-name=acct-salloc` as exp1, one `srun --jobid=138 -n1` step (a CPU loop) in it, then
    `scancel 138` as root."""
    text = recorded("sacct_salloc_with_steps.txt")

    [early] = parse_sacct_runs(text, with_steps=True, now=at(6, 2, 19) + timedelta(seconds=59))
    [settled] = parse_sacct_runs(text, with_steps=True, now=at(6, 2, 19) + timedelta(seconds=60))
    [shorter_grace] = parse_sacct_runs(
        text, with_steps=True, now=at(6, 2, 29), step_grace=timedelta(seconds=10)
    )

    assert (early.state, early.exit_code, early.is_ended) == (UNDETERMINED, None, False)
    assert (settled.state, settled.scheduler_state, settled.exit_code) == (
        CANCELLED,
        "CANCELLED by 0",
        0,
    )
    assert (settled.elapsed_seconds, settled.allocated_cpus, settled.cpu_seconds) == (5, 1, 0.074)
    assert shorter_grace.state == CANCELLED


def test_recorded_het_job_cancelled_while_pending_is_one_run_per_component():
    """sacct_runs_arguments(["139"]) for `sbatch --job-name=acct-het --time=1 -n1 : -n1
    --wrap="sleep 5"` cancelled by root while it pended: the leader's id gives both
    components, each with its own raw id."""
    records = parse_sacct_runs(
        recorded("sacct_het_cancelled_pending_with_steps.txt"), with_steps=True, now=at(6, 2, 31)
    )

    assert [(r.job_id, r.raw_job_id, r.array_job_id, r.het_offset) for r in records] == [
        ("139+0", "139", "139", 0),
        ("139+1", "140", "139", 1),
    ]
    assert records[1] == RunRecord(
        job_id="139+1",
        raw_job_id="140",
        array_job_id="139",
        array_task_id=None,
        name="acct-het",
        state=CANCELLED,
        scheduler_state="CANCELLED by 0",
        exit_code=0,
        submit_time=at(6, 2, 25),
        start_time=None,
        end_time=at(6, 2, 31),
        elapsed_seconds=0,
        allocated_cpus=0,
        allocated_gpus=0,
        cpu_seconds=0.0,
        time_limit_minutes=1,
        reason="",
        user="exp1",
        partition="debug",
        requested_cpus=1,
        requested_gpus=0,
        het_offset=1,
    )


def test_an_ended_het_job_reads_each_components_steps():
    """Hand-made: a het job cannot start on the one-node test cluster. The ids follow public
    sacct output of an ended het job (pytorch/torchx,
    torchx/schedulers/test/slurm_scheduler_test.py: `1853+0`, `1853+0.batch`, `1853+0.0`,
    `1853+1`, `1853+1.0`: only component 0 has the batch step) and Slurm 22.05's
    src/sacct/print.c and src/common/log.c (a step's JobIDRaw is its component's own id, a
    step across components ends in `+<component>`); the other values are made up."""
    text = (
        "1853+0|1853|COMPLETED|0:0|2026-11-26T01:00:00|2026-11-26T01:00:05|2026-11-26T01:00:15|"
        "10|billing=2,cpu=2,node=1|00:05.000|10|None|exp1|debug|billing=2,cpu=2,node=1|het\n"
        "1853+0.batch|1853.batch|COMPLETED|0:0|2026-11-26T01:00:05|2026-11-26T01:00:05|"
        "2026-11-26T01:00:15|10|cpu=2,mem=0,node=1|00:01.000||||||batch\n"
        "1853+0.0|1853.0|COMPLETED|0:0|2026-11-26T01:00:06|2026-11-26T01:00:06|"
        "2026-11-26T01:00:14|8|cpu=2,mem=0,node=1|00:04.000||||||echo\n"
        "1853+1|1854|COMPLETED|0:0|2026-11-26T01:00:00|2026-11-26T01:00:05|2026-11-26T01:00:15|"
        "10|billing=4,cpu=4,gres/gpu=1,node=1|00:08.000|10|None|exp1|gpu|"
        "billing=4,cpu=4,gres/gpu=1,node=1|het\n"
        "1853+1.0|1854.0|COMPLETED|0:0|2026-11-26T01:00:06|2026-11-26T01:00:06|"
        "2026-11-26T01:00:14|8|cpu=4,gres/gpu=1,mem=0,node=1|00:06.000||||||echo\n"
        "1853+1.1+1|1854.1+1|COMPLETED|0:0|2026-11-26T01:00:14|2026-11-26T01:00:14|"
        "2026-11-26T01:00:15|1|cpu=4,gres/gpu=1,mem=0,node=1|00:02.000||||||echo\n"
    )

    early = parse_sacct_runs(text, with_steps=True, now=at(1, 0, 45))
    leader, component = parse_sacct_runs(text, with_steps=True, now=at(1, 1, 15))

    assert [r.state for r in early] == [COMPLETED, UNDETERMINED]  # +1 has no batch step
    assert (leader.job_id, leader.het_offset, leader.cpu_seconds) == ("1853+0", 0, 5.0)
    assert component == RunRecord(
        job_id="1853+1",
        raw_job_id="1854",
        array_job_id="1853",
        array_task_id=None,
        name="het",
        state=COMPLETED,
        scheduler_state="COMPLETED",
        exit_code=0,
        submit_time=at(1, 0, 0),
        start_time=at(1, 0, 5),
        end_time=at(1, 0, 15),
        elapsed_seconds=10,
        allocated_cpus=4,
        allocated_gpus=1,
        cpu_seconds=8.0,
        time_limit_minutes=10,
        reason="",
        user="exp1",
        partition="gpu",
        requested_cpus=4,
        requested_gpus=1,
        het_offset=1,
    )


def test_recorded_special_exit_run_is_requeued_and_its_held_next_run_cancelled():
    """sacct_runs_arguments(["148"]) for `sbatch --job-name=acct-special --time=1 -n1
    --wrap="sleep 30"` after root's `scontrol requeuehold State=SpecialExit 148` and then
    `scancel 148`: accounting stores the ended run as REQUEUED (slurmdbd keeps no
    SPECIAL_EXIT), and the held run never started."""
    ended, held = parse_sacct_runs(
        recorded("sacct_special_exit_with_steps.txt"), with_steps=True, now=LATER
    )

    assert (ended.state, ended.elapsed_seconds, ended.cpu_seconds) == (REQUEUED, 4, 0.001)
    assert (held.state, held.start_time, held.elapsed_seconds, held.reason) == (
        CANCELLED,
        None,
        0,
        "JobHeldUser",
    )
    assert ended.submit_time != held.submit_time


def test_recorded_ended_runs_of_two_tenants_with_an_array_and_a_job_a_job_submitted():
    """sacct_runs_arguments(["141", "142", "144", "146"]): exp1's array 141 (`--array=0-3%1
    --wrap="sleep 20"`), exp2's job named "acct other|user", exp1's job 144 (`sbatch
    --job-name=cs-acct-parent acct-parent.sh`) and 146, which 144's script submitted itself
    (`sbatch --job-name=acct-child --wrap='sleep 2'`): an ordinary job of the same user."""
    records = parse_sacct_runs(recorded("sacct_ended_with_steps.txt"), with_steps=True, now=LATER)

    assert [
        (r.job_id, r.raw_job_id, r.array_job_id, r.array_task_id, r.user, r.name) for r in records
    ] == [
        ("142", "142", "142", None, "exp2", "acct other|user"),
        ("141_0", "143", "141", 0, "exp1", "acct-array"),
        ("141_1", "145", "141", 1, "exp1", "acct-array"),
        ("141_2", "147", "141", 2, "exp1", "acct-array"),
        # The last task keeps the array's own id as its raw id.
        ("141_3", "141", "141", 3, "exp1", "acct-array"),
        ("144", "144", "144", None, "exp1", "cs-acct-parent"),
        ("146", "146", "146", None, "exp1", "acct-child"),
    ]
    assert all(r.state == COMPLETED and r.exit_code == 0 for r in records)
    child = records[-1]
    assert child == RunRecord(
        job_id="146",
        raw_job_id="146",
        array_job_id="146",
        array_task_id=None,
        name="acct-child",
        state=COMPLETED,
        scheduler_state="COMPLETED",
        exit_code=0,
        submit_time=at(6, 2, 51),  # when its parent started
        start_time=at(6, 2, 54),
        end_time=at(6, 2, 56),
        elapsed_seconds=2,
        allocated_cpus=1,
        allocated_gpus=0,
        cpu_seconds=0.002,
        time_limit_minutes=1,
        reason="",
        user="exp1",
        partition="debug",
        requested_cpus=1,
        requested_gpus=0,
    )


def test_a_run_whose_batch_step_is_not_recorded_yet_waits_for_the_grace():
    """slurmdbd can have the job's end a moment before its batch step (seen on the test cluster:
    COMPLETED with a TotalCPU of 0 until the step arrived). Made from
    sacct_ended_with_steps.txt by leaving out the line of 144's batch step."""
    text = "".join(
        line
        for line in recorded("sacct_ended_with_steps.txt").splitlines(keepends=True)
        if not line.startswith("144.batch|")
    )

    early = {r.job_id: r.state for r in parse_sacct_runs(text, with_steps=True, now=at(6, 3, 30))}
    late = {r.job_id: r.state for r in parse_sacct_runs(text, with_steps=True, now=at(6, 3, 53))}

    # 144 ended at 06:02:53: 37 s before, then 60 s; the others have their batch steps.
    assert early == {
        "142": COMPLETED,
        "141_0": COMPLETED,
        "141_1": COMPLETED,
        "141_2": COMPLETED,
        "141_3": COMPLETED,
        "144": UNDETERMINED,
        "146": COMPLETED,
    }
    assert late == {**early, "144": COMPLETED}


def test_recorded_running_array_task_next_to_its_pending_placeholder():
    """sacct_runs_arguments(["162"]) while task 0 of `--array=0-5%2 --wrap="sleep 5"` ran and
    tasks 1-5 were still one placeholder record, which is not a run."""
    [running] = parse_sacct_runs(
        recorded("sacct_array_running_with_steps.txt"), with_steps=True, now=at(6, 7, 30)
    )

    assert (running.job_id, running.raw_job_id, running.array_task_id) == ("162_0", "163", 0)
    assert (running.state, running.end_time, running.exit_code) == (RUNNING, None, None)
    assert (running.elapsed_seconds, running.allocated_cpus) == (3, 1)


def test_recorded_array_cancelled_while_pending_ends_each_of_its_tasks():
    """sacct_runs_arguments(["10"]) for `sbatch --hold --array=0-3%2 --wrap="sleep 1"`
    cancelled before any task started: the placeholder is the only record, and each of its
    tasks ended without running, under the placeholder's raw id."""
    records = parse_sacct_runs(
        recorded("sacct_array_cancelled_pending_with_steps.txt"),
        with_steps=True,
        now=at(15, 47, 30),
    )

    assert [(r.job_id, r.raw_job_id, r.array_job_id, r.array_task_id) for r in records] == [
        ("10_0", "10", "10", 0),
        ("10_1", "10", "10", 1),
        ("10_2", "10", "10", 2),
        ("10_3", "10", "10", 3),
    ]
    assert {(r.state, r.scheduler_state, r.elapsed_seconds, r.start_time) for r in records} == {
        (CANCELLED, "CANCELLED by 1001", 0, None)
    }
    assert all(r.is_ended and r.end_time == at(15, 47, 18) for r in records)


def test_recorded_accounting_lag_is_undetermined_not_an_end():
    """sacct_runs_arguments(["156"]) polled every 50 ms right after `sbatch --time=1 -n1
    --job-name=acct-lag --wrap="sleep 2"` as exp2: until slurmdbd has the job's own record,
    sacct prints it named "allocation", without time limit, partition or request, PENDING while
    it runs, then COMPLETED before the record is whole."""
    [running] = parse_sacct_runs(
        recorded("sacct_lag_running_with_steps.txt"), with_steps=True, now=at(6, 5, 16)
    )
    [ended] = parse_sacct_runs(
        recorded("sacct_lag_ended_with_steps.txt"), with_steps=True, now=LATER
    )

    assert (running.state, running.scheduler_state, running.name) == (
        UNDETERMINED,
        "PENDING",
        "allocation",
    )
    assert (running.partition, running.requested_cpus, running.user) == ("", 0, "exp2")
    assert (ended.state, ended.scheduler_state, ended.exit_code, ended.time_limit_minutes) == (
        UNDETERMINED,
        "COMPLETED",
        None,
        None,
    )
    assert not running.is_ended and not ended.is_ended


def test_recorded_window_of_two_tenants_lists_every_run_without_steps():
    """sacct_users_arguments(["exp1", "exp2"], 06:01, 06:06 UTC) over the jobs of the tests
    above, and two jobs (153, 154, named "wrap") that another session ran as exp1 meanwhile.
    With -X sacct prints a TotalCPU of 0: CPU time comes from `runs` with steps. The held run
    of 148 that was cancelled before it was ever eligible is not in the window."""
    records = parse_sacct_runs(recorded("sacct_users_window.txt"))

    assert [(r.job_id, r.raw_job_id, r.state, r.user) for r in records] == [
        ("137", "137", REQUEUED, "exp1"),
        ("137", "137", COMPLETED, "exp1"),
        ("138", "138", CANCELLED, "exp1"),
        ("139+0", "139", CANCELLED, "exp1"),
        ("139+1", "140", CANCELLED, "exp1"),
        ("142", "142", COMPLETED, "exp2"),
        ("141_0", "143", COMPLETED, "exp1"),
        ("141_1", "145", COMPLETED, "exp1"),
        ("141_2", "147", COMPLETED, "exp1"),
        ("141_3", "141", COMPLETED, "exp1"),
        ("144", "144", COMPLETED, "exp1"),
        ("146", "146", COMPLETED, "exp1"),
        ("148", "148", REQUEUED, "exp1"),
        ("149", "149", RESIZED, "exp1"),
        ("149", "149", COMPLETED, "exp1"),
        ("150", "150", RESIZED, "exp1"),
        ("153", "153", CANCELLED, "exp1"),
        ("154", "154", COMPLETED, "exp1"),
        ("155", "155", COMPLETED, "exp2"),
        ("156", "156", COMPLETED, "exp2"),
    ]
    assert {r.cpu_seconds for r in records} == {0.0}
    assert (records[14].allocated_cpus, records[14].requested_cpus) == (2, 1)
    assert (records[16].allocated_cpus, records[16].requested_cpus) == (0, 2)


def test_reading_steps_needs_the_callers_aware_clock():
    text = recorded("sacct_requeued_with_steps.txt")

    with pytest.raises(ValueError, match="clock"):
        parse_sacct_runs(text, with_steps=True)
    with pytest.raises(ValueError, match="clock"):
        parse_sacct_runs(text, with_steps=True, now=datetime(2026, 11, 26, 7, 0))


def test_steps_where_none_can_be_are_unexpected():
    """A step line in allocations-only output, or one after another job's record, means the
    output is not what the command asked for: nothing of it is read."""
    requeued = recorded("sacct_requeued_with_steps.txt")
    orphan = "".join(requeued.splitlines(keepends=True)[1:])

    with pytest.raises(UnexpectedOutput):
        parse_sacct_runs(requeued)
    with pytest.raises(UnexpectedOutput):
        parse_sacct_runs(orphan, with_steps=True, now=LATER)
    with pytest.raises(UnexpectedOutput):
        parse_sacct_runs(
            recorded("sacct_salloc_with_steps.txt").replace("138.0|138.0", "138.0|139.0"),
            with_steps=True,
            now=LATER,
        )


def test_a_pending_array_placeholder_is_no_run_and_typed_gpus_count():
    # Hand-made: a GPU job (the test cluster has none).
    text = (
        "5_[2-9]|5|PENDING|0:0|2026-11-26T01:00:05|Unknown|Unknown|0||00:00:00|1|None|exp1|gpu|"
        "billing=2,cpu=2,gres/gpu:a100=1,mem=1G,node=1|cs-a\n"
        "5_0|6|RUNNING|0:0|2026-11-26T01:00:05|2026-11-26T01:00:06|Unknown|3|"
        "billing=2,cpu=2,gres/gpu=1,gres/gpu:a100=1,mem=1G,node=1|00:01.500|60|None|exp1|gpu|"
        "billing=2,cpu=2,gres/gpu:a100=1,mem=1G,node=1|cs-a\n"
    )

    [running] = parse_sacct_runs(text)

    assert (running.job_id, running.state, running.end_time) == ("5_0", RUNNING, None)
    assert (running.allocated_cpus, running.allocated_gpus, running.cpu_seconds) == (2, 1, 1.5)
    assert (running.requested_cpus, running.requested_gpus) == (2, 1)
    assert running.exit_code is None


def test_a_timed_out_run_with_days_and_unknown_times():
    # Hand-made: a two-day run.
    text = (
        "7|7|TIMEOUT|0:15|2026-11-20T00:00:00|2026-11-20T00:00:01|2026-11-22T00:00:01|172800|"
        "billing=4,cpu=4,node=1|3-01:00:00|2880|TimeLimit|exp1|debug|billing=4,cpu=4,node=1|"
        "cs-long\n"
        "8|8|CANCELLED by 0|0:0|2026-11-20T00:00:00|None|2026-11-20T00:10:00|0||00:00:00|"
        "UNLIMITED|None|exp1|debug|billing=1,cpu=1,node=1|cs-never\n"
    )

    timed_out, never = parse_sacct_runs(text)

    assert (timed_out.state, timed_out.exit_code, timed_out.reason) == (TIMEOUT, 143, "TimeLimit")
    assert timed_out.cpu_seconds == 3 * 86400 + 3600
    assert timed_out.time_limit_minutes == 2880
    assert (never.state, never.start_time, never.time_limit_minutes) == (CANCELLED, None, None)


@pytest.mark.parametrize(
    "text",
    [
        "18|18|COMPLETED|0:0|yesterday|x|y|1||00:00:00|1|None|exp1|debug||cs-a\n",
        # the format before User, Partition and ReqTRES
        "18|18|COMPLETED|0:0|2026-11-26T01:04:50|2026-11-26T01:04:51|2026-11-26T01:05:03|12|"
        "billing=1,cpu=1,node=1|00:00:00|1|None|cs-a\n",
        "18+x|18|COMPLETED|0:0|2026-11-26T01:04:50|None|None|0||00:00:00|1|None|exp1|debug||a\n",
        "18|18|COMPLETED|0:0|2026-11-26T01:04:50|None|None|0||00:00:00|1|None|exp1|debug|cpu|a\n",
    ],
)
def test_sacct_output_it_cannot_read_is_unexpected(text):
    with pytest.raises(UnexpectedOutput):
        parse_sacct_runs(text)


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
    assert parse_tres("").cpus == 0
    assert parse_tres("billing=1,cpu=1,node=1").gpus == 0
    assert parse_tres("cpu=8,gres/gpu:a100=2,gres/gpu:v100=1").gpus == 3
    assert parse_tres("cpu=8,gres/gpu=3,gres/gpu:a100=2,gres/gpu:v100=1").gpus == 3
    with pytest.raises(UnexpectedOutput):
        parse_tres("cpu")


def test_recorded_max_rss_is_the_largest_of_a_runs_steps_and_none_when_none_was_sampled():
    """Recorded on the test cluster (Slurm 22.05, jobacct_gather/linux every 5 s) with the
    current format: a 2-core job that kept one core busy for 10 s (796), one that held 64 MiB
    for 30 s with --mem-per-cpu=512M (797), an OpenMP run of 2 s (798), an MPI run of two srun
    tasks (799, its memory is its step's) and array tasks of a second (no sample: none)."""
    text = recorded("sacct_max_rss_with_steps.txt")

    records = parse_sacct_runs_of(text, with_steps=True, now=at(17, 0, 0))

    assert {record.job_id: record.max_rss_bytes for record in records} == {
        "788_2": None,
        "788_3": None,
        "796": 10796 * 1024,
        "797": 76436 * 1024,
        "798": None,
        "799": 8416 * 1024,
        "800_0": None,
        "800_1": None,
        "800_2": None,
        "800_3": None,
    }
    by_id = {record.job_id: record for record in records}
    assert (by_id["796"].allocated_cpus, by_id["796"].elapsed_seconds) == (2, 10)
    assert by_id["796"].cpu_seconds == pytest.approx(2.264)
    assert by_id["799"].cpu_seconds == pytest.approx(0.120)  # the batch step's and srun's
    assert by_id["797"].requested_cpus == 1


def test_recorded_array_tasks_of_under_a_second_ran_and_count_one_second_of_their_cores():
    """Tasks 800_0 and 800_1 of the recorded array ran for less than a second: sacct prints
    their Start equal to their End and an ElapsedRaw of 0, but they had a core and used CPU
    time. They ran (their start is a start), and their cores x elapsed, the denominator of
    efficiency, counts one second; their elapsed time, which is what is charged, stays 0."""
    records = parse_sacct_runs_of(
        recorded("sacct_max_rss_with_steps.txt"), with_steps=True, now=at(17, 0, 0)
    )
    by_id = {record.job_id: record for record in records}

    quick = by_id["800_0"]
    assert (quick.start_time, quick.end_time, quick.elapsed_seconds) == (
        at(16, 28, 21),
        at(16, 28, 21),
        0,
    )
    assert (quick.has_run, quick.counted_seconds, quick.allocated_cpus) == (True, 1, 1)
    assert (by_id["800_1"].has_run, by_id["800_1"].counted_seconds) == (True, 1)
    assert (by_id["800_2"].has_run, by_id["800_2"].counted_seconds) == (True, 1)
    assert (by_id["796"].has_run, by_id["796"].counted_seconds) == (True, 10)


def test_recorded_runs_cancelled_while_pending_never_ran():
    """An array cancelled before its tasks started and a heterogeneous job cancelled while it
    pended: no start, nothing allocated, so no start time and no seconds for efficiency."""
    array = parse_sacct_runs(
        recorded("sacct_array_cancelled_pending_with_steps.txt"),
        with_steps=True,
        now=at(15, 47, 30),
    )
    het = parse_sacct_runs(
        recorded("sacct_het_cancelled_pending_with_steps.txt"), with_steps=True, now=at(6, 2, 31)
    )

    assert [(r.job_id, r.has_run, r.counted_seconds) for r in [*array, *het]] == [
        ("10_0", False, 0),
        ("10_1", False, 0),
        ("10_2", False, 0),
        ("10_3", False, 0),
        ("139+0", False, 0),
        ("139+1", False, 0),
    ]
