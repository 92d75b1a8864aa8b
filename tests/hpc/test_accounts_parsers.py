"""Account helpers on recorded sacctmgr output: `testcluster_*` from Slurm 22.05 on the test
cluster (with the exit statuses it gave), the GPU cluster's QOS hand-made for a cluster that
tracks GPUs."""

import json
import uuid
from pathlib import Path

import pytest

from hpc.errors import RemoteCommandFailed, UnexpectedOutput
from hpc.slurm import sacctmgr
from hpc.slurm.accounts import (
    account_ensure,
    account_limit_get,
    account_name_for,
    is_team_account,
    tenant_join,
    tenant_leave,
)
from hpc.slurm.sacctmgr import (
    AccountMissing,
    AdminLevelTooLow,
    Association,
    AssociationInUse,
    Qos,
    SlurmUser,
    TresNotTracked,
    parse_associations,
    parse_default_accounts,
    parse_grp_tres_mins,
    parse_qos,
    parse_users_with_associations,
    sacctmgr_text,
)
from hpc.ssh import CommandResult, SSHConnection, SSHSettings

RECORDED = Path(__file__).parent / "recorded"


def recorded_result(name: str, file: str = "testcluster_sacctmgr_results.json") -> CommandResult:
    results = json.loads((RECORDED / file).read_text())
    return CommandResult(elapsed_seconds=0.1, **results[name])


def recorded_tenants(name: str) -> CommandResult:
    """Recorded with a team account (and QOS) cs-fefe5345ba904974 and the tenant cs-tenant-04."""
    return recorded_result(name, "testcluster_sacctmgr_tenants.json")


TEAM = "cs-fefe5345ba904974"


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


def test_the_recorded_associations_of_a_team_account_with_its_tenant():
    rows = parse_associations(recorded_tenants("show_assoc_account").stdout)

    assert rows == [
        Association("computeshare-test", TEAM, "", "", (TEAM,), TEAM, "", None),
        Association("computeshare-test", TEAM, "cs-tenant-04", "", (TEAM,), TEAM, "", None),
    ]


def test_the_recorded_associations_of_the_idle_account_run_nothing():
    rows = parse_associations(recorded_tenants("show_assoc_idle").stdout)

    assert [(row.user, row.qos, row.max_jobs) for row in rows] == [
        ("", ("normal",), 0),
        ("computeshare", ("normal",), 0),
        ("cs-tenant-01", ("normal",), 0),
        ("cs-tenant-02", ("normal",), 0),
        ("cs-tenant-03", ("normal",), 0),
        ("cs-tenant-04", ("normal",), 0),
    ]


def test_associations_list_their_qos_sorted_and_keep_a_limit_left_on_them():
    text = (
        "hpc-gpu|cs-6f1c2d3e4a5b6c7d|||normal,cs-6f1c2d3e4a5b6c7d|normal|cpu=6000|\n"
        "hpc-gpu|cs-6f1c2d3e4a5b6c7d|cs-tenant-01|gpu|cs-6f1c2d3e4a5b6c7d||| \n"
    )

    with pytest.raises(UnexpectedOutput, match="MaxJobs"):
        parse_associations(text)
    [own] = parse_associations(text.splitlines()[0])
    assert (own.qos, own.default_qos, own.grp_tres_mins) == (
        ("cs-6f1c2d3e4a5b6c7d", "normal"),
        "normal",
        "cpu=6000",
    )


def test_the_recorded_tenant_in_a_team_account_defaults_to_it():
    users = parse_users_with_associations(recorded_tenants("show_user_joined").stdout)

    assert users == {
        "cs-tenant-04": SlurmUser(
            "cs-tenant-04",
            TEAM,
            (
                Association("computeshare-test", TEAM, "cs-tenant-04", "", (TEAM,), TEAM, "", None),
                Association(
                    "computeshare-test",
                    "computeshare-idle",
                    "cs-tenant-04",
                    "",
                    ("normal",),
                    "",
                    "",
                    0,
                ),
            ),
        )
    }
    assert parse_users_with_associations(recorded_tenants("show_user_unknown").stdout) == {}


def test_the_recorded_default_accounts_leave_out_unknown_users():
    defaults = parse_default_accounts(recorded_tenants("show_user_defaults").stdout)

    assert defaults == {
        "cs-tenant-01": "computeshare-idle",
        "cs-tenant-02": "computeshare-idle",
        "cs-tenant-03": "computeshare-idle",
        "cs-tenant-04": TEAM,
    }


def test_a_user_without_a_default_on_the_cluster_asked_is_left_out():
    assert parse_default_accounts("exp1|\nexp2|computeshare\n") == {"exp2": "computeshare"}


def test_the_recorded_qos_of_a_team():
    assert parse_qos(recorded_tenants("show_qos").stdout) == [
        Qos(TEAM, 6000, None, frozenset({"DenyOnLimit", "NoDecay"}))
    ]
    assert parse_qos(recorded_tenants("show_qos_missing").stdout) == []


def test_the_qos_of_a_team_on_a_gpu_cluster():
    text = "cs-6f1c2d3e4a5b6c7d|cpu=6000,gres/gpu=120,gres/gpu:a100=60|NoDecay\n"

    assert parse_qos(text) == [Qos("cs-6f1c2d3e4a5b6c7d", 6000, 120, frozenset({"NoDecay"}))]


@pytest.mark.parametrize(
    ("name", "is_team"),
    [
        ("cs-6f1c2d3e4a5b6c7d", True),
        ("computeshare-idle", False),
        ("cs-probe-idle", False),
        ("cs-6f1c2d3e4a5b6c7", False),
        ("cs-6f1c2d3e4a5b6c7d0", False),
        ("cs-6F1C2D3E4A5B6C7D", False),
        ("", False),
    ],
)
def test_team_accounts_are_the_ones_account_name_for_makes(name, is_team):
    assert is_team_account(name) is is_team


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
    assert sacctmgr.added(recorded_result(name)) is added


@pytest.mark.parametrize(
    ("name", "added"),
    [("add_qos", True), ("add_qos_again", False), ("add_account_with_qos", True)],
)
def test_a_qos_and_an_account_with_it_are_added_once(name, added):
    assert sacctmgr.added(recorded_tenants(name)) is added


def test_a_qos_refused_to_an_operator_says_that_it_needs_an_administrator():
    with pytest.raises(AdminLevelTooLow) as refused:
        sacctmgr.added(recorded_tenants("add_qos_denied_to_an_operator"))

    assert isinstance(refused.value, RemoteCommandFailed)
    assert refused.value.exit_status == 1
    assert "AdminLevel=Administrator" in str(refused.value)


def test_nothing_new_added_with_a_reason_on_stderr_is_a_failure():
    # sacctmgr prints "Nothing new added." when it refuses an association with an account
    # that does not exist, and says why on stderr.
    with pytest.raises(RemoteCommandFailed) as failed:
        sacctmgr.added(recorded_result("add_user_missing_account"))

    assert failed.value.exit_status == 1
    assert "doesn't exist" in failed.value.stderr


@pytest.mark.parametrize(
    "result",
    [
        recorded_result("modify"),
        recorded_tenants("modify_qos_limit"),
        recorded_tenants("modify_qos_flags"),
    ],
)
def test_a_modification_that_exited_zero_is_done(result):
    sacctmgr.require_modified(result, TEAM, cluster_name="computeshare-test")


@pytest.mark.parametrize(
    "result", [recorded_result("modify_missing_account"), recorded_tenants("modify_qos_missing")]
)
def test_nothing_modified_means_the_account_or_its_qos_is_missing(result):
    with pytest.raises(AccountMissing, match="cs-0000000000000000 or its QOS disappeared"):
        sacctmgr.require_modified(result, "cs-0000000000000000", cluster_name="computeshare-test")


@pytest.mark.parametrize(
    "result",
    [recorded_result("modify_gpu_untracked"), recorded_tenants("modify_qos_gpu_untracked")],
)
def test_a_gpu_limit_on_a_cluster_that_does_not_track_gpus_says_what_is_missing(result):
    with pytest.raises(TresNotTracked) as refused:
        sacctmgr.require_modified(result, TEAM, cluster_name="computeshare-test")

    assert str(refused.value) == (
        "cluster computeshare-test does not track gres/gpu: "
        "its slurm.conf needs AccountingStorageTRES=gres/gpu"
    )


@pytest.mark.parametrize(("name", "deleted"), [("delete_user", True), ("delete_user_again", False)])
def test_nothing_deleted_is_success_without_change(name, deleted):
    assert sacctmgr.deleted(recorded_tenants(name), user="cs-tenant-04", account=TEAM) is deleted


def test_an_association_with_jobs_is_not_deleted_and_the_error_says_so():
    with pytest.raises(AssociationInUse) as refused:
        sacctmgr.deleted(
            recorded_tenants("delete_user_jobs_active"), user="cs-tenant-04", account=TEAM
        )

    assert isinstance(refused.value, RemoteCommandFailed)
    assert refused.value.job_ids == ("220",)
    assert str(refused.value) == (
        f"sacctmgr refused to remove cs-tenant-04 from account {TEAM}: jobs still active (220)"
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
            description="",
            organization="",
        )
    with pytest.raises(ValueError, match="not a Slurm account name"):
        tenant_join(
            never_opened, cluster_name="computeshare-test", user="cs-tenant-01", account=account
        )
    with pytest.raises(ValueError, match="not a Slurm account name"):
        tenant_leave(
            never_opened,
            cluster_name="computeshare-test",
            user="cs-tenant-01",
            account=account,
            idle_account="computeshare-idle",
        )
    assert not never_opened.is_open
