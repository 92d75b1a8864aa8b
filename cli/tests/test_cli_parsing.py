"""Arguments read by the commands: environment, input files, time limits, names of files
on either side, and the new part of a growing output."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from computeshare_cli.jobs.submission import job_body, multipart_fields, time_limit_parse
from computeshare_cli.main import cli
from computeshare_cli.parsing import (
    ArgumentError,
    array_task_count,
    download_target,
    environment_parse,
    input_files_parse,
    job_file_name_check,
    new_output,
)


def test_environment_pairs() -> None:
    assert environment_parse(["A=1", "B=x=y", "EMPTY="]) == {"A": "1", "B": "x=y", "EMPTY": ""}
    for bad in (["A"], ["1A=2"], ["A-B=1"], ["A=1", "A=2"]):
        with pytest.raises(ArgumentError):
            environment_parse(bad)


@pytest.mark.parametrize(
    ("text", "minutes"), [("90", 90), ("45m", 45), ("2h", 120), ("1:30", 90), ("0:01:01", 2)]
)
def test_time_limits(text: str, minutes: int) -> None:
    assert time_limit_parse(text) == minutes


@pytest.mark.parametrize("text", ["0", "", "1.5", "-3", "1:2:3:4", "soon"])
def test_time_limits_refused(text: str) -> None:
    with pytest.raises(ArgumentError):
        time_limit_parse(text)


@pytest.mark.parametrize("name", ["in.txt", "data/in.txt", "a/b/c/d.bin", "-dash_.x", "..hidden"])
def test_job_file_names_accepted(name: str) -> None:
    assert job_file_name_check(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "/etc/passwd",
        "../up",
        "a/../../b",
        "a/./b",
        "a//b",
        "a/b/c/d/e",
        "sp ace",
        "tab\t",
        "nul\x00",
        "é.txt",
        "a/",
    ],
)
def test_job_file_names_refused(name: str) -> None:
    with pytest.raises(ArgumentError):
        job_file_name_check(name)


def test_input_files_with_and_without_a_name(tmp_path: Path) -> None:
    first = tmp_path / "one.csv"
    first.write_bytes(b"12345")
    files = input_files_parse([str(first), f"{first}:data/renamed.csv"])
    assert [(f.name, f.size) for f in files] == [("one.csv", 5), ("data/renamed.csv", 5)]
    with pytest.raises(ArgumentError, match="two files"):
        input_files_parse([str(first), str(first)])
    with pytest.raises(ArgumentError, match="not a file"):
        input_files_parse([str(tmp_path)])
    with pytest.raises(ArgumentError):
        input_files_parse([f"{first}:../escape"])


def test_downloads_stay_in_their_folder(tmp_path: Path) -> None:
    assert download_target(tmp_path, "out/result.txt") == tmp_path.resolve() / "out/result.txt"
    for bad in ("../x", "/abs", "a/../../x"):
        with pytest.raises(ArgumentError):
            download_target(tmp_path, bad)


def test_new_output_is_what_follows_the_overlap() -> None:
    assert new_output("", "abc") == "abc"
    assert new_output("line 1\nline 2\n", "line 2\nline 3\n") == "line 3\n"
    assert new_output("abc", "abc") == ""
    assert new_output("abcdef", "defghi") == "ghi"
    assert new_output("abc", "xyz") == "xyz"  # more than one tail was written between reads


def test_array_task_counts() -> None:
    assert array_task_count(None) == 1
    assert array_task_count("0-99") == 100
    assert array_task_count("1,3,5") == 3
    assert array_task_count("0-999:2%20") == 500
    assert array_task_count("5-1") is None


def test_job_body_and_its_form_fields(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    body = job_body(
        script,
        allocation="a1",
        name=None,
        time_limit="1:30",
        cpus_per_task=2,
        ntasks=1,
        nodes=1,
        gpus=0,
        array="0-9",
        env=("MODE=fast",),
        secret_env=(),
    )
    assert body == {
        "allocation": "a1",
        "script": "#!/bin/bash\necho hi\n",
        "script_name": "run.sh",
        "time_limit_minutes": 90,
        "cpus_per_task": 2,
        "ntasks": 1,
        "nodes": 1,
        "gpus": 0,
        "environment": {"MODE": "fast"},
        "array": "0-9",
    }
    fields = multipart_fields(body)
    assert fields["environment"] == '{"MODE": "fast"}'
    assert fields["time_limit_minutes"] == "90"


def test_a_memory_request_is_sent_only_when_given(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    sizes = {
        "allocation": "a1",
        "name": "mem",
        "time_limit": "5",
        "cpus_per_task": 2,
        "ntasks": 1,
        "nodes": 1,
        "gpus": 0,
        "array": None,
        "env": (),
        "secret_env": (),
    }
    assert "mem_per_cpu" not in job_body(script, **sizes)
    body = job_body(script, **sizes, mem_per_cpu=512)
    assert body["mem_per_cpu"] == 512
    assert multipart_fields(body)["mem_per_cpu"] == "512"


def test_flags_left_out_are_left_to_the_scripts_sbatch_lines(tmp_path: Path) -> None:
    script = tmp_path / "job.slurm"
    script.write_text("#!/bin/bash\n#SBATCH --time=5 -c 2\necho hi\n")
    nothing: dict[str, object] = {
        "name": None,
        "time_limit": None,
        "cpus_per_task": None,
        "ntasks": None,
        "nodes": None,
        "gpus": None,
        "array": None,
        "env": (),
        "secret_env": (),
    }

    body = job_body(script, allocation="a1", **nothing)  # type: ignore[arg-type]

    assert body == {
        "allocation": "a1",
        "script": "#!/bin/bash\n#SBATCH --time=5 -c 2\necho hi\n",
        "script_name": "job.slurm",
        "environment": {},
    }


def test_usage_errors_exit_2_before_anything_is_sent(tmp_path: Path) -> None:
    runner = CliRunner()
    answer = runner.invoke(cli, ["--token", "t", "--url", "http://127.0.0.1:9", "jobs", "submit"])
    assert answer.exit_code == 2
    assert "Missing argument 'SCRIPT'" in answer.output


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for command in (
        [],
        ["login"],
        ["offers", "list"],
        ["buy"],
        ["bid"],
        ["allocations", "list"],
        ["budget"],
        ["wallet"],
        ["usage"],
        ["jobs", "submit"],
        ["jobs", "quote"],
        ["jobs", "output"],
        ["jobs", "download"],
        ["jobs", "files"],
        ["completion"],
    ):
        answer = runner.invoke(cli, [*command, "--help"])
        assert answer.exit_code == 0, (command, answer.output)
        assert "Usage: " in answer.output


def test_completion_scripts() -> None:
    answer = CliRunner().invoke(cli, ["completion", "bash"])
    assert answer.exit_code == 0
    assert "_COMPUTESHARE_COMPLETE=bash_complete" in answer.output
