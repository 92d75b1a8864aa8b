"""The sweep endpoints without a cluster: a table becomes one queued array job of one task per
row, what a bad table, script or result name is refused with (and that a refusal writes
nothing), who sees a sweep, what its array's script gives each task (run here by bash), and
how results are gathered from a job's fetched files, missing and failed ones marked."""

from __future__ import annotations

import csv
import io
import os
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler_bridge import services
from scheduler_bridge.job_files import job_files_storage, stored_name
from scheduler_bridge.models import Job, JobFile, JobTask, Sweep, SweepJob, SweepRow
from scheduler_bridge.services.sweep_tables import sweep_array_script, sweep_table_parse
from tests.conftest import client_for
from tests.factories import PartitionFactory, allocation_bought

pytestmark = pytest.mark.django_db

SCRIPT = '#!/bin/bash\necho "$alpha $beta"\n'


@pytest.fixture
def allocation(team):
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )


def _body(allocation, **changes):
    return {
        "allocation": str(allocation.uuid),
        "name": "grid",
        "script": SCRIPT,
        "table": "alpha,beta\n1,x\n2,y\n3,z\n",
        "time_limit_minutes": 30,
        "concurrency": 2,
        **changes,
    }


def _nothing_written(allocation):
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    assert Job.objects.count() == 0 and JobTask.objects.count() == 0
    assert Sweep.objects.count() == 0 and SweepRow.objects.count() == 0


def test_a_sweep_is_one_array_job_of_one_task_per_row_reserved_for_every_row(team, allocation):
    answer = client_for(team.member).post("/api/v1/sweeps/", _body(allocation), format="json")

    assert answer.status_code == 201, answer.json()
    sweep = answer.json()
    assert sweep["state"] == "running"
    assert sweep["columns"] == ["alpha", "beta"]
    assert (sweep["concurrency"], sweep["result_source"], sweep["result_file"]) == (2, "stdout", "")
    [job] = sweep["jobs"]
    assert (job["attempt"], job["array"], job["task_count"], job["state"]) == (
        1,
        "0-2%2",
        3,
        "queued",
    )
    assert job["reserved_units"] == "1.5"  # 3 rows x 1 core x 0.5 h
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("1.5")
    assert [(row["index"], row["parameters"], row["state"]) for row in sweep["rows"]] == [
        (0, {"alpha": "1", "beta": "x"}, "queued"),
        (1, {"alpha": "2", "beta": "y"}, "queued"),
        (2, {"alpha": "3", "beta": "z"}, "queued"),
    ]
    assert sweep["counts"] == {"states": {"queued": 3}, "results": {"pending": 3}}
    stored = Job.objects.get(uuid=job["id"])
    assert stored.script.startswith("#!/bin/bash\n# A ComputeShare sweep")
    assert SCRIPT in stored.script
    results = client_for(team.member).get(f"/api/v1/sweeps/{sweep['id']}/results/").json()
    assert results["state"] == "running" and results["count"] == 3
    assert {row["result_state"] for row in results["rows"]} == {"pending"}


def test_a_table_file_in_a_form_is_read_as_the_table(team, allocation):
    body = _body(allocation)
    body.pop("table")
    body["table_file"] = io.BytesIO("\ufeffalpha,beta\r\n1,x\r\n".encode())
    body["table_file"].name = "params.csv"

    answer = client_for(team.member).post("/api/v1/sweeps/", body, format="multipart")

    assert answer.status_code == 201, answer.json()
    assert answer.json()["columns"] == ["alpha", "beta"]
    assert answer.json()["jobs"][0]["task_count"] == 1


@pytest.mark.parametrize(
    ("table", "code", "extra"),
    [
        ("", "sweep_table_empty", {}),
        ("\n\n", "sweep_table_empty", {}),
        ("alpha,beta\n", "sweep_table_empty", {}),
        (
            "alpha,2beta\n1,2\n",
            "sweep_header_invalid",
            {
                "columns": {
                    "2beta": "`2beta` is not a valid name: letters, digits and _, not "
                    "starting with a digit."
                }
            },
        ),
        (
            "alpha,SLURM_JOB_ID\n1,2\n",
            "sweep_header_invalid",
            {
                "columns": {
                    "SLURM_JOB_ID": "`SLURM_JOB_ID` is the scheduler's: the platform sets it."
                }
            },
        ),
        (
            "alpha,alpha\n1,2\n",
            "sweep_header_invalid",
            {"columns": {"alpha": "`alpha` names two columns."}},
        ),
        (
            "UID,beta\n1,2\n",
            "sweep_header_invalid",
            {"columns": {"UID": "`UID` is read-only in bash, which sets the task's variables."}},
        ),
        ("alpha,beta\n1,2\n3\n", "sweep_row_ragged", {"line": 3, "expected": 2, "found": 1}),
        ("alpha,beta\n1,2,3\n", "sweep_row_ragged", {"line": 2, "expected": 2, "found": 3}),
        ('alpha\n"unclosed\n', "sweep_row_ragged", {"line": 2}),
        ("alpha\n" + "1\n" * 1001, "sweep_too_many_rows", {"limit": 1000, "found": 1001}),
        ("alpha\n" + "x" * 4097 + "\n", "sweep_value_invalid", {"line": 2, "column": "alpha"}),
        ("alpha\n" + ("x" * 4000 + "\n") * 50, "sweep_table_too_large", {"limit_bytes": 163840}),
    ],
)
def test_a_bad_table_is_refused_with_its_code_and_writes_nothing(
    team, allocation, table, code, extra
):
    answer = client_for(team.member).post(
        "/api/v1/sweeps/", _body(allocation, table=table), format="json"
    )

    assert answer.status_code == 400, answer.json()
    assert answer.json()["code"] == code
    assert answer.json()["extra"] == extra
    _nothing_written(allocation)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"result_source": "file"}, "result_file"),
        ({"result_source": "file", "result_file": "../escape.txt"}, "result_file"),
        ({"result_file": "out.txt"}, "result_file"),
        ({"result_source": "stderr"}, "result_source"),
        ({"concurrency": 0}, "concurrency"),
        ({"time_limit_minutes": 0}, "time_limit_minutes"),
        ({"cpus_per_task": 9}, "cpus_per_task"),
    ],
)
def test_bad_fields_are_refused_and_write_nothing(team, allocation, changes, field):
    answer = client_for(team.member).post(
        "/api/v1/sweeps/", _body(allocation, **changes), format="json"
    )

    assert answer.status_code == 400, answer.json()
    assert answer.json()["code"] == "invalid"
    assert field in answer.json()["extra"]["fields"]
    _nothing_written(allocation)


def test_a_teams_script_sbatch_would_refuse_is_refused_and_writes_nothing(team, allocation):
    for script, code in (
        ("echo no interpreter line", "script_not_a_batch_script"),
        ("#!/bin/bash\n#SBATCH --mem=lots\necho hi\n", "sbatch_directive_invalid"),
        ("#!/bin/bash\n#PBS -l nodes=1\necho hi\n", "sbatch_directive_not_allowed"),
    ):
        answer = client_for(team.member).post(
            "/api/v1/sweeps/", _body(allocation, script=script), format="json"
        )

        assert answer.status_code == 400
        assert answer.json()["code"] == code
        assert answer.json()["extra"]["line"] == (1 if code.startswith("script_") else 2)
    _nothing_written(allocation)


def test_the_teams_script_gives_each_tasks_sizes_and_the_sweep_sets_its_array_itself(
    team, allocation
):
    script = (
        "#!/bin/bash\n#SBATCH --time=20 -c 2 --mem-per-cpu=100\n#SBATCH --array=0-99 -o x.out\n"
        'echo "$alpha"\n'
    )
    body = _body(allocation, script=script)
    del body["time_limit_minutes"]
    answer = client_for(team.member).post("/api/v1/sweeps/", body, format="json")

    assert answer.status_code == 201, answer.json()
    sweep = Sweep.objects.get()
    assert (sweep.time_limit_minutes, sweep.cpus_per_task) == (20, 2)
    job = Job.objects.get()
    assert (job.array, job.task_count, job.mem_per_cpu) == ("0-2%2", 3, 100)
    # 3 rows x 2 cores x 1/3 h, each row's share rounded up to the micro-unit
    assert job.reserved_units == Decimal("2.000001")
    overridden = {each["option"]: each["why"] for each in job.directives["overridden"]}
    assert overridden == {
        "--array": "A sweep's array is its table: one task per row, `concurrency` at once.",
        "-o": "A sweep keeps each task's stdout, where its result is read from.",
    }
    # The wrapper runs the team's script, which keeps its lines: sbatch reads none of them.
    assert "#SBATCH" not in job.script.split("cat >")[0]


def test_a_sweep_larger_than_the_allocation_is_402_and_writes_nothing(team, allocation):
    rows = "alpha,beta\n" + "1,x\n" * 201  # 201 rows x 0.5 h > 100 units

    answer = client_for(team.member).post(
        "/api/v1/sweeps/", _body(allocation, table=rows), format="json"
    )

    assert answer.status_code == 402
    assert answer.json()["code"] == "allocation_exhausted"
    _nothing_written(allocation)


def test_outsiders_neither_submit_nor_see_a_sweep(team, allocation):
    refused = client_for(team.outsider).post("/api/v1/sweeps/", _body(allocation), format="json")
    assert refused.status_code == 400
    assert refused.json()["extra"]["fields"] == {"allocation": ["No such allocation."]}
    _nothing_written(allocation)
    sweep_id = (
        client_for(team.member)
        .post("/api/v1/sweeps/", _body(allocation), format="json")
        .json()["id"]
    )

    outsider = client_for(team.outsider)
    for path in ("", "results/", "results.csv"):
        answer = outsider.get(f"/api/v1/sweeps/{sweep_id}/{path}")
        assert answer.status_code == 404, path
    assert outsider.post(f"/api/v1/sweeps/{sweep_id}/retry-failed/").status_code == 404
    assert outsider.get("/api/v1/sweeps/").json()["count"] == 0
    assert client_for(team.admin).get("/api/v1/sweeps/").json()["count"] == 1
    assert client_for(team.member).get(f"/api/v1/sweeps/{sweep_id}/").status_code == 200
    assert client_for(team.member).get("/api/v1/sweeps/").status_code == 200
    assert api_unauthenticated(sweep_id) == 401


def api_unauthenticated(sweep_id) -> int:
    from rest_framework.test import APIClient

    return APIClient().get(f"/api/v1/sweeps/{sweep_id}/").status_code


def test_retrying_a_running_sweep_is_409_and_submits_nothing(team, allocation):
    sweep_id = (
        client_for(team.member)
        .post("/api/v1/sweeps/", _body(allocation), format="json")
        .json()["id"]
    )

    answer = client_for(team.member).post(f"/api/v1/sweeps/{sweep_id}/retry-failed/")

    assert answer.status_code == 409 and answer.json()["code"] == "sweep_still_running"
    assert Job.objects.count() == 1


def test_the_idempotency_key_replays_the_first_sweep(team, allocation):
    client = client_for(team.member)
    first = client.post(
        "/api/v1/sweeps/", _body(allocation), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    again = client.post(
        "/api/v1/sweeps/", _body(allocation), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )

    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert Sweep.objects.count() == 1 and Job.objects.count() == 1


def test_the_detail_reads_a_fixed_number_of_queries_whatever_the_rows(team, allocation):
    client = client_for(team.member)
    small = client.post("/api/v1/sweeps/", _body(allocation), format="json").json()["id"]
    large = client.post(
        "/api/v1/sweeps/", _body(allocation, table="alpha,beta\n" + "1,x\n" * 60), format="json"
    ).json()["id"]

    counts = []
    for sweep_id in (small, large):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/api/v1/sweeps/{sweep_id}/").status_code == 200
        counts.append(len(queries))

    assert counts[0] == counts[1]


def test_the_list_reads_a_fixed_number_of_queries_whatever_the_sweeps(team, allocation):
    client = client_for(team.member)
    client.post("/api/v1/sweeps/", _body(allocation), format="json")
    with CaptureQueriesContext(connection) as one:
        assert client.get("/api/v1/sweeps/").json()["count"] == 1
    for _ in range(3):
        client.post("/api/v1/sweeps/", _body(allocation), format="json")

    with CaptureQueriesContext(connection) as four:
        assert client.get("/api/v1/sweeps/").json()["count"] == 4

    assert len(four) == len(one)


def test_the_openapi_schema_describes_the_sweep_endpoints(team):
    schema = client_for(team.member).get("/api/v1/schema/?format=json").json()

    for path in (
        "/api/v1/sweeps/",
        "/api/v1/sweeps/{sweep_id}/",
        "/api/v1/sweeps/{sweep_id}/retry-failed/",
        "/api/v1/sweeps/{sweep_id}/results/",
        "/api/v1/sweeps/{sweep_id}/results.csv",
    ):
        assert path in schema["paths"], path


# --- The array's script, run by bash ----------------------------------------------------------


def test_each_task_gets_its_row_as_variables_and_arguments_in_its_own_folder(tmp_path: Path):
    table = sweep_table_parse(
        'x,label,script\n1,it\'s,$(touch pwned)\n2,"a ""b""",plain\n', max_rows=10
    )
    team_script = (
        '#!/bin/bash\nprintf "%s|" "$x" "$label" "$script" "$@" > got.txt\necho "row $x"\n'
    )
    wrapper = sweep_array_script(
        team_script=team_script,
        columns=table.columns,
        rows=[(7, table.rows[0]), (9, table.rows[1])],
    )
    (tmp_path / "job.sh").write_text(wrapper)
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}

    outputs = [
        subprocess.run(
            ["bash", "job.sh"],
            cwd=tmp_path,
            env={**environment, "SLURM_ARRAY_TASK_ID": str(task)},
            capture_output=True,
            text=True,
            check=False,
        )
        for task in (0, 1, 2)
    ]

    assert [(output.returncode, output.stdout) for output in outputs[:2]] == [
        (0, "row 1\n"),
        (0, "row 2\n"),
    ]
    assert outputs[2].returncode == 2
    assert (
        tmp_path / "row-7" / "got.txt"
    ).read_text() == "1|it's|$(touch pwned)|1|it's|$(touch pwned)|"
    assert (tmp_path / "row-9" / "got.txt").read_text() == '2|a "b"|plain|2|a "b"|plain|'
    assert not list(tmp_path.rglob("pwned"))
    # The team's script was written to a temporary file and removed after its run.
    assert not list(tmp_path.glob("computeshare-sweep.*"))


def test_a_failing_scripts_exit_status_is_the_tasks(tmp_path: Path):
    wrapper = sweep_array_script(team_script="#!/bin/sh\nexit 7", columns=["a"], rows=[(0, ["1"])])
    (tmp_path / "job.sh").write_text(wrapper)

    done = subprocess.run(
        ["bash", "job.sh"],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "0", "TMPDIR": str(tmp_path)},
        check=False,
    )

    assert done.returncode == 7


# --- Gathering results from a job's fetched files ---------------------------------------------


def _ended_with_files(sweep_id, states, files, *, results_state="ready"):
    """Ends the sweep's first job as the poll and the collection would: each task in its
    state, the job's files in storage."""
    sweep = Sweep.objects.get(uuid=sweep_id)
    job = SweepJob.objects.get(sweep=sweep, attempt=1).job
    now = timezone.now()
    for index, state in enumerate(states):
        JobTask.objects.filter(job=job, array_task_id=index).update(
            state=state, exit_code=0 if state == "completed" else 1, ended_at=now
        )
    storage = job_files_storage()
    for name, content in files.items():
        stored = storage.save(stored_name(job.uuid, "result", name), ContentFile(content))
        JobFile.objects.create(job=job, kind="result", name=name, size=len(content), stored=stored)
    Job.objects.filter(pk=job.pk).update(state="failed", ended_at=now, results_state=results_state)
    return job


def test_results_are_gathered_with_missing_and_failed_rows_marked_not_dropped(team, allocation):
    client = client_for(team.member)
    sweep_id = client.post(
        "/api/v1/sweeps/",
        _body(allocation, table="alpha,beta\n1,x\n2,y\n3,z\n4,w\n", result_source="stdout"),
        format="json",
    ).json()["id"]
    job = _ended_with_files(
        sweep_id,
        ["completed", "completed", "failed", "completed"],
        {
            "stdout-0.txt": b"warming up\n42\n\n",
            "stdout-1.txt": b"",
            "stdout-2.txt": b"partial\n",
        },
    )

    assert services.sweep_results_gather(job_id=job.pk) == 4
    assert services.sweep_results_gather(job_id=job.pk) == 0  # once

    results = client.get(f"/api/v1/sweeps/{sweep_id}/results/").json()
    assert results["state"] == "ended"
    assert [
        (row["index"], row["result_state"], row["result"], row["result_detail"])
        for row in results["rows"]
    ] == [
        (0, "ok", "42", ""),
        (1, "missing", "", "the task's stdout is empty."),
        (2, "failed", "partial", "The task ended failed, exit code 1."),
        (3, "missing", "", "The task wrote no stdout."),
    ]
    download = client.get(f"/api/v1/sweeps/{sweep_id}/results.csv")
    lines = list(csv.reader(io.StringIO(download.content.decode())))
    assert lines[0] == [
        "row",
        "alpha",
        "beta",
        "result",
        "result_state",
        "task_state",
        "exit_code",
        "detail",
    ]
    assert [line[:5] for line in lines[1:]] == [
        ["0", "1", "x", "42", "ok"],
        ["1", "2", "y", "", "missing"],
        ["2", "3", "z", "partial", "failed"],
        ["3", "4", "w", "", "missing"],
    ]


def test_file_results_are_read_from_each_rows_folder(team, allocation):
    client = client_for(team.member)
    sweep_id = client.post(
        "/api/v1/sweeps/",
        _body(
            allocation,
            table="alpha,beta\n1,x\n2,y\n",
            result_source="file",
            result_file="out/value.txt",
        ),
        format="json",
    ).json()["id"]
    job = _ended_with_files(
        sweep_id, ["completed", "completed"], {"row-0/out/value.txt": b"=1+1\n"}
    )

    services.sweep_results_gather(job_id=job.pk)

    rows = client.get(f"/api/v1/sweeps/{sweep_id}/results/").json()["rows"]
    assert [(row["result_state"], row["result"], row["result_detail"]) for row in rows] == [
        ("ok", "=1+1", ""),
        ("missing", "", "`row-1/out/value.txt` was not written."),
    ]
    # A result is anyone's text: the CSV keeps a spreadsheet from running it.
    download = client.get(f"/api/v1/sweeps/{sweep_id}/results.csv").content.decode()
    assert list(csv.reader(io.StringIO(download)))[1][3] == "'=1+1"


def test_rows_of_a_job_whose_files_could_not_be_fetched_are_marked_missing(team, allocation):
    client = client_for(team.member)
    sweep_id = client.post(
        "/api/v1/sweeps/", _body(allocation, table="alpha,beta\n1,x\n"), format="json"
    ).json()["id"]
    job = _ended_with_files(sweep_id, ["completed"], {}, results_state="failed")

    services.sweep_results_gather(job_id=job.pk)

    [row] = client.get(f"/api/v1/sweeps/{sweep_id}/results/").json()["rows"]
    assert (row["result_state"], row["result_detail"]) == (
        "missing",
        "The job's files could not be fetched (Could not be fetched).",
    )


def test_retry_failed_submits_the_failed_rows_alone_and_reserves_for_them_only(team, allocation):
    client = client_for(team.member)
    sweep_id = client.post(
        "/api/v1/sweeps/",
        _body(allocation, table="alpha,beta\n1,x\n2,y\n3,z\n4,w\n"),
        format="json",
    ).json()["id"]
    job = _ended_with_files(
        sweep_id,
        ["completed", "failed", "completed", "failed"],
        {"stdout-0.txt": b"a\n", "stdout-2.txt": b"c\n"},
    )
    services.sweep_results_gather(job_id=job.pk)
    allocation.refresh_from_db()
    reserved_before = allocation.reserved

    answer = client.post(f"/api/v1/sweeps/{sweep_id}/retry-failed/")

    assert answer.status_code == 201, answer.json()
    sweep = answer.json()
    assert sweep["state"] == "running"
    retry = sweep["jobs"][1]
    assert (retry["attempt"], retry["array"], retry["task_count"]) == (2, "0-1%2", 2)
    assert retry["reserved_units"] == "1"  # 2 rows x 1 core x 0.5 h
    allocation.refresh_from_db()
    assert allocation.reserved == reserved_before + Decimal("1")
    by_index = {row["index"]: row for row in sweep["rows"]}
    assert {index: (row["job"], row["attempts"]) for index, row in by_index.items()} == {
        0: (sweep["jobs"][0]["id"], 1),
        1: (retry["id"], 2),
        2: (sweep["jobs"][0]["id"], 1),
        3: (retry["id"], 2),
    }
    assert by_index[0]["result"] == "a" and by_index[1]["result_state"] == "pending"
    script = Job.objects.get(uuid=retry["id"]).script
    assert "  0) row=1;" in script and "  1) row=3;" in script and "row=0" not in script

    nothing = client.post(f"/api/v1/sweeps/{sweep_id}/retry-failed/")
    assert nothing.status_code == 409 and nothing.json()["code"] == "sweep_still_running"


def test_retrying_a_sweep_without_failed_rows_is_409(team, allocation):
    client = client_for(team.member)
    sweep_id = client.post(
        "/api/v1/sweeps/", _body(allocation, table="alpha,beta\n1,x\n"), format="json"
    ).json()["id"]
    job = _ended_with_files(sweep_id, ["completed"], {"stdout-0.txt": b"1\n"})
    services.sweep_results_gather(job_id=job.pk)

    answer = client.post(f"/api/v1/sweeps/{sweep_id}/retry-failed/")

    assert answer.status_code == 409 and answer.json()["code"] == "sweep_nothing_to_retry"
    assert Job.objects.count() == 1
