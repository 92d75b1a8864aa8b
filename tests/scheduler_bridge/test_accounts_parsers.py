"""Account helpers on recorded sacctmgr output: `testcluster_*` from Slurm 22.05 on the test
cluster (with the exit statuses it gave), `gpucluster_*` hand-made for a cluster that tracks
GPUs."""

import json
import uuid
from pathlib import Path

import pytest

from scheduler_bridge.slurm import accounts
from scheduler_bridge.slurm.accounts import (
    ASSOCIATION_FIELDS,
    AccountMissing,
    TresNotTracked,
    account_ensure,
    account_limit_get,
    account_name_for,
    parse_grp_tres_mins,
    sacctmgr_text,
)
from scheduler_bridge.slurm.errors import RemoteCommandFailed, UnexpectedOutput
from scheduler_bridge.slurm.parsers import parse_parsable2
from scheduler_bridge.slurm.ssh import CommandResult, SSHConnection, SSHSettings

RECORDED = Path(__file__).parent / "recorded"


def recorded_result(name: str) -> CommandResult:
    results = json.loads((RECORDED / "testcluster_sacctmgr_results.json").read_text())
    return CommandResult(elapsed_seconds=0.1, **results[name])


def test_account_names_are_the_first_16_hex_digits_of_the_uuid():
    assert account_name_for("6F1C2D3E-4A5B-6C7D-8E9F-0A1B2C3D4E5F") == "cs-6f1c2d3e4a5b6c7d"


def test_account_names_are_the_same_for_every_spelling_of_one_uuid():
    organization = uuid.uuid4()

    names = {
        account_name_for(spelling)
        for spelling in (str(organization), organization.hex, f"{{{organization}}}")
    }

    assert names == {"cs-" + organization.hex[:16]}


@pytest.mark.parametrize(
    "text",
    ["", "quantum-lab", "6f1c2d3e-4a5b-6c7d-8e9f", "6f1c2d3e-4a5b-6c7d-8e9f-0a1b2c3d4e5f; id"],
)
def test_anything_but_a_uuid_has_no_account_name(text):
    with pytest.raises(ValueError, match="not an organization UUID"):
        account_name_for(text)


@pytest.mark.parametrize(
    ("text", "limits"),
    [
        ("", (None, None)),
        ("cpu=6000", (6000, None)),
        ("gres/gpu=120", (None, 120)),
        ("cpu=6000,gres/gpu=120", (6000, 120)),
        ("gres/gpu=120,cpu=6000", (6000, 120)),
        ("cpu=0", (0, None)),
        ("cpu=6000,mem=1000,gres/gpu:a100=60", (6000, None)),
    ],
)
def test_grp_tres_mins(text, limits):
    assert parse_grp_tres_mins(text) == limits


@pytest.mark.parametrize(
    "text", ["cpu", "cpu=", "=6000", "cpu=-1", "cpu=6k", "cpu=1,,gres/gpu=2", "cpu=1,cpu=2"]
)
def test_unreadable_grp_tres_mins_raise(text):
    with pytest.raises(UnexpectedOutput):
        parse_grp_tres_mins(text)


def test_the_recorded_associations_of_a_test_cluster_account():
    rows = parse_parsable2(
        (RECORDED / "testcluster_sacctmgr_show_assoc.txt").read_text(), list(ASSOCIATION_FIELDS)
    )

    assert [(row["User"], parse_grp_tres_mins(row["GrpTRESMins"])) for row in rows] == [
        ("", (6000, None)),
        ("computeshare", (None, None)),
    ]


def test_the_recorded_associations_of_a_gpu_cluster_account():
    rows = parse_parsable2(
        (RECORDED / "gpucluster_sacctmgr_show_assoc.txt").read_text(), list(ASSOCIATION_FIELDS)
    )

    assert [
        (row["User"], row["Partition"], parse_grp_tres_mins(row["GrpTRESMins"])) for row in rows
    ] == [
        ("", "", (6000, 120)),
        ("computeshare", "", (None, None)),
        ("computeshare", "gpu", (None, None)),
    ]


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("Quantum Lab", "Quantum Lab"),
        ('Quantum Lab\'s "Best" | Co., Inc.', "Quantum Lab s Best Co. Inc."),
        ("  a\tb\nc  ", "a b c"),
        ("$(id) `id` ; rm -rf /", "id id rm -rf"),
        ("Müller_GmbH-2", "Müller_GmbH-2"),
        ("'\"|,=", ""),
    ],
)
def test_free_text_keeps_letters_digits_spaces_and_dash_underscore_dot(text, cleaned):
    assert sacctmgr_text(text) == cleaned


# The decision on sacctmgr's exit: these helpers are private, but what they decide is the part
# of the module that depends on sacctmgr's wording, so they are tested on its recorded words.


@pytest.mark.parametrize(
    ("name", "added"),
    [
        ("add_account", True),
        ("add_account_again", False),
        ("add_user", True),
        ("add_user_again", False),
    ],
)
def test_nothing_new_added_is_success_without_change(name, added):
    assert accounts._added(recorded_result(name)) is added


def test_nothing_new_added_with_a_reason_on_stderr_is_a_failure():
    # sacctmgr prints "Nothing new added." when it refuses an association with an account
    # that does not exist, and says why on stderr.
    with pytest.raises(RemoteCommandFailed) as failed:
        accounts._added(recorded_result("add_user_missing_account"))

    assert failed.value.exit_status == 1
    assert "doesn't exist" in failed.value.stderr


def test_a_modification_that_exited_zero_is_done():
    accounts._require_modified(
        recorded_result("modify"), cluster_name="computeshare-test", account="cs-e1fd195b77ca4a64"
    )


def test_nothing_modified_means_the_account_is_missing():
    with pytest.raises(AccountMissing):
        accounts._require_modified(
            recorded_result("modify_missing_account"),
            cluster_name="computeshare-test",
            account="cs-0000000000000000",
        )


def test_a_gpu_limit_on_a_cluster_that_does_not_track_gpus_says_what_is_missing():
    with pytest.raises(TresNotTracked) as refused:
        accounts._require_modified(
            recorded_result("modify_gpu_untracked"),
            cluster_name="computeshare-test",
            account="cs-e1fd195b77ca4a64",
        )

    assert str(refused.value) == (
        "cluster computeshare-test does not track gres/gpu: "
        "its slurm.conf needs AccountingStorageTRES=gres/gpu"
    )


@pytest.mark.parametrize("account", ["cs-a,root", "cs-a cluster=other", "CS-A", "-cs", ""])
def test_a_name_sacctmgr_would_read_as_more_than_a_name_is_refused_before_connecting(account):
    # 192.0.2.1 is TEST-NET-1: had the function tried to connect, it would have failed otherwise.
    never_opened = SSHConnection(
        SSHSettings(host="192.0.2.1", port=22, user="nobody", private_key="", host_key="")
    )

    with pytest.raises(ValueError, match="not a Slurm account name"):
        account_limit_get(never_opened, cluster_name="computeshare-test", account=account)
    with pytest.raises(ValueError, match="not a Slurm account name"):
        account_ensure(
            never_opened,
            cluster_name="computeshare-test",
            account=account,
            user="computeshare",
            description="",
            organization="",
        )
    assert not never_opened.is_open
