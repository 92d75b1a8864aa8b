"""Slurm's reason codes in words on the job pages and in the notifications; the platform's own
reasons, already sentences, unchanged."""

import pytest

from scheduler_bridge.job_reasons import reason_text


@pytest.mark.parametrize(
    ("reason", "exit_code", "words"),
    [
        ("NonZeroExitCode", 3, "Exited with code 3"),
        ("NonZeroExitCode", None, "Exited with a non-zero code"),
        ("TimeLimit", 0, "Reached its time limit"),
        ("Resources", None, "Waiting for cores or nodes to free up"),
        (
            "JobArrayTaskLimit",
            None,
            "Waiting: the array runs at most its throttle of tasks at once",
        ),
        (
            "ReqNodeNotAvail, UnavailableNodes:node[1-2]",
            None,
            "Waiting: a node it needs is not available",
        ),
        (
            "AssocGrpCpuLimit",
            None,
            "Waiting: a limit of its Slurm account or QOS is reached (assoc grp cpu limit)",
        ),
        ("SomeNewSlurmReason", None, "Slurm says: some new slurm reason"),
        ("None", None, ""),
        ("", 3, ""),
        # The platform's own words.
        ("Cancelled by mia", None, "Cancelled by mia"),
        (
            "Waiting to reach the cluster: timed out",
            None,
            "Waiting to reach the cluster: timed out",
        ),
    ],
)
def test_a_reason_in_words(reason, exit_code, words):
    assert reason_text(reason, exit_code) == words
