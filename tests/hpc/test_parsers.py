"""Parsers on recorded output of Slurm 22.05 on the test cluster."""

import pytest

from hpc.errors import UnexpectedOutput
from hpc.slurm.parsers import parse_parsable2, parse_sbatch_parsable
from hpc.ssh import remote_command


@pytest.mark.parametrize(
    ("text", "job_id", "cluster"),
    [("1\n", "1", None), ("4242;computeshare-test\n", "4242", "computeshare-test")],
)
def test_sbatch_parsable(text, job_id, cluster):
    submitted = parse_sbatch_parsable(text)

    assert (submitted.job_id, submitted.cluster) == (job_id, cluster)


@pytest.mark.parametrize(
    "text",
    ["", "Submitted batch job 12\n", "12\n13\n", "sbatch: error: Batch job submission failed"],
)
def test_sbatch_parsable_refuses_anything_else(text):
    with pytest.raises(UnexpectedOutput):
        parse_sbatch_parsable(text)


def test_parsable2_rows_keyed_by_the_requested_fields():
    recorded = "7|COMPLETED|0:0|cs-test\n7.batch|COMPLETED|0:0|batch\n"

    rows = parse_parsable2(recorded, ["JobIDRaw", "State", "ExitCode", "JobName"])

    assert rows == [
        {"JobIDRaw": "7", "State": "COMPLETED", "ExitCode": "0:0", "JobName": "cs-test"},
        {"JobIDRaw": "7.batch", "State": "COMPLETED", "ExitCode": "0:0", "JobName": "batch"},
    ]


def test_parsable2_refuses_rows_with_the_wrong_number_of_fields():
    with pytest.raises(UnexpectedOutput):
        parse_parsable2("7|COMPLETED|0:0|a|b\n", ["JobIDRaw", "State", "ExitCode", "JobName"])


def test_remote_command_quotes_every_argument_and_cleans_the_environment():
    command = remote_command(["echo", "$(id)", "`id`", "a;b", "it's"])

    assert command.startswith("exec env -i ")
    assert "TZ=UTC" in command
    # The inner command line is one single-quoted argument of /bin/sh -c.
    assert command.endswith(
        "/bin/sh -c 'echo '\"'\"'$(id)'\"'\"' '\"'\"'`id`'\"'\"' '\"'\"'a;b'\"'\"' "
        "'\"'\"'it'\"'\"'\"'\"'\"'\"'\"'\"'s'\"'\"''"
    )
