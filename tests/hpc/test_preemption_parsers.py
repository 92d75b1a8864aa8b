"""What verification makes of a cluster's preemption settings, from output recorded on the test
cluster after `scripts/cluster-setup --preemption normal` (grace 10 s) and the slurm.conf lines
it prints, with a managed team's QOS made preemptable (cs-5eed000000004000) and the fixed
pool's associations: then each thing an owner can get wrong, one at a time, and the reason the
owner reads."""

from dataclasses import replace
from pathlib import Path

import pytest

from hpc.errors import UnexpectedOutput
from hpc.slurm.inventory import parse_config
from hpc.slurm.preemption import (
    Preemption,
    PreemptionAssessment,
    QosPreemption,
    effective_mode,
    parse_duration_seconds,
    parse_qos_preemption,
    preemption_assess,
    tenants_without_qos,
)
from hpc.slurm.sacctmgr import (
    parse_associations,
)

RECORDED = Path(__file__).parent / "recorded"
MARKET = "computeshare-market"
TEAM = "cs-5eed000000004000"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def recorded_qos() -> list[QosPreemption]:
    return parse_qos_preemption(recorded("testcluster_sacctmgr_qos_preemption.txt"))


def recorded_config(**changes: str) -> dict[str, str]:
    return parse_config(recorded("testcluster_scontrol_show_config_preemption.txt")) | changes


def refusal(config: dict[str, str], qos: list[QosPreemption]) -> str:
    assessment = preemption_assess(config, qos, market_qos=MARKET)
    assert assessment.preemption is None
    return assessment.refusal


def test_the_recorded_qos_with_their_preemption_settings():
    assert recorded_qos() == [
        QosPreemption("normal", 0, 0, "cluster", (MARKET, TEAM)),
        QosPreemption(MARKET, 0, 10, "requeue", ()),
        QosPreemption(TEAM, 0, 10, "requeue", ()),
    ]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:00:10", 10), ("00:02:00", 120), ("05:30", 330), ("1-00:00:00", 86400), ("", 0)],
)
def test_durations_as_sacctmgr_prints_them(text, seconds):
    assert parse_duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["2 minutes", "1:2:3:4", "x-00:00:10"])
def test_an_unreadable_duration_is_unexpected_output(text):
    with pytest.raises(UnexpectedOutput):
        parse_duration_seconds(text)


def test_the_test_cluster_preempts_the_market_qos_by_normal_after_10_seconds():
    assert preemption_assess(recorded_config(), recorded_qos(), market_qos=MARKET) == (
        PreemptionAssessment(Preemption(owner_qos=("normal",), grace_seconds=10))
    )


def test_a_cluster_without_preemption_is_told_which_line_to_add():
    # As the test cluster was before issue 27: preempt/none, PreemptMode OFF.
    config = parse_config(recorded("testcluster_scontrol_show_config.txt"))

    assert refusal(config, recorded_qos()) == (
        "PreemptType is preempt/none: add PreemptType=preempt/qos to slurm.conf "
        "(scripts/cluster-setup --preemption prints every line needed) and restart slurmctld "
        "and the slurmd daemons."
    )


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"PreemptMode": "OFF"}, "PreemptMode is OFF, which turns preemption off"),
        ({"JobRequeue": "0"}, "JobRequeue is 0: a job that a team's job submits itself"),
        (
            {"SlurmctldParameters": "(null)"},
            "SlurmctldParameters lacks preempt_send_user_signal",
        ),
        (
            {"SlurmctldParameters": "enable_configless"},
            "SlurmctldParameters lacks preempt_send_user_signal",
        ),
    ],
)
def test_each_slurm_conf_setting_missing_is_the_reason(changes, start):
    assert refusal(recorded_config(**changes), recorded_qos()).startswith(start)


def test_no_market_qos_is_the_reason():
    qos = [record for record in recorded_qos() if record.name != MARKET]

    assert refusal(recorded_config(), qos) == (
        f"there is no QOS {MARKET}: run scripts/cluster-setup --preemption with the QOS your own "
        "users' jobs run under (most often normal)."
    )


def test_a_market_qos_that_would_cancel_its_jobs_is_the_reason():
    qos = [
        replace(record, preempt_mode="cluster") if record.name == MARKET else record
        for record in recorded_qos()
    ]

    reason = refusal(recorded_config(PreemptMode="CANCEL"), qos)

    assert reason == (
        f"jobs of {MARKET} would be stopped by CANCEL, not requeued: run `sacctmgr modify qos "
        f"{MARKET} set preemptmode=requeue` (scripts/cluster-setup --preemption does)."
    )


def test_the_market_qos_may_follow_a_cluster_wide_requeue():
    qos = [
        replace(record, preempt_mode="cluster") if record.name == MARKET else record
        for record in recorded_qos()
    ]

    assessment = preemption_assess(recorded_config(), qos, market_qos=MARKET)

    assert assessment.preemption == Preemption(("normal",), 10)


def test_a_qos_of_its_own_overrides_the_clusters_suspend():
    [market] = [record for record in recorded_qos() if record.name == MARKET]

    assert effective_mode(market, "SUSPEND,GANG") == "requeue"
    assert effective_mode(replace(market, preempt_mode="cluster"), "SUSPEND,GANG") == "suspend"


def test_a_market_qos_that_preempts_others_is_the_reason():
    qos = [
        replace(record, preempts=("normal",)) if record.name == MARKET else record
        for record in recorded_qos()
    ]

    assert refusal(recorded_config(), qos).startswith(
        f"{MARKET} may itself preempt normal: the teams' jobs could take your users' cores."
    )


def test_no_qos_preempting_the_market_is_the_reason():
    qos = [replace(record, preempts=()) for record in recorded_qos()]

    assert refusal(recorded_config(), qos) == (
        f"no QOS preempts {MARKET}, so the teams' jobs would keep cores your users need: run "
        "scripts/cluster-setup --preemption with the QOS your own users' jobs run under (most "
        "often normal)."
    )


def test_every_qos_that_preempts_the_market_is_the_owners():
    qos = [*recorded_qos(), QosPreemption("urgent", 100, 0, "cluster", (MARKET, "normal"))]

    assessment = preemption_assess(recorded_config(), qos, market_qos=MARKET)

    assert assessment.preemption == Preemption(("normal", "urgent"), 10)


def test_the_fixed_tenants_are_allowed_the_market_qos_only():
    rows = parse_associations(recorded("testcluster_sacctmgr_fixed_associations.txt"))
    tenants = [f"cs-fixed-0{number}" for number in range(1, 5)]

    assert {(row.user, row.qos, row.default_qos) for row in rows} == {
        (user, (MARKET,), MARKET) for user in ["", *tenants]
    }
    assert tenants_without_qos(rows, tenants, MARKET) == []


def test_the_fixed_tenants_not_allowed_the_market_qos_are_named():
    text = recorded("testcluster_sacctmgr_fixed_associations.txt").replace(
        "|cs-fixed-02||computeshare-market|computeshare-market|", "|cs-fixed-02||normal|normal|"
    )
    rows = parse_associations(text)

    missing = tenants_without_qos(rows, ["cs-fixed-01", "cs-fixed-02", "cs-fixed-05"], MARKET)

    assert missing == ["cs-fixed-02", "cs-fixed-05"]
