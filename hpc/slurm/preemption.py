"""Preemptible capacity in Slurm: the teams' jobs run under a QOS that the owner's QOS preempt.

With `PreemptType=preempt/qos`, a pending job whose QOS lists the QOS of a running job in its
`Preempt` list may take that job's cores (Slurm's preempt.html and qos.html, "Job Preemption").
How the running job is stopped is its own QOS's `PreemptMode`, which overrides the cluster's
(sacctmgr(1), "PreemptMode"): here `requeue`, so the job goes back to the queue and runs again.
Its QOS's `GraceTime` is how long it may run on once chosen (preempt/qos takes the grace from
the preempted job's QOS: src/plugins/preempt/qos/preempt_qos.c, `_get_grace_time`).

What Slurm 22.05 does, as observed on the test cluster (tests/scheduler_bridge/
test_preemption_integration.py shows each of these):

- When an owner's job needs the cores, the market job's end is set to now + GraceTime, and its
  srun steps get SIGTERM at once; its batch script gets nothing then (`job_signal` without
  KILL_JOB_BATCH), unless the job asked for `--signal=B:TERM@N` and slurm.conf has
  `SlurmctldParameters=preempt_send_user_signal`: then the script gets SIGTERM at once. (The
  preempt.html page says GraceTime is honoured only for PreemptMode=CANCEL; the 22.05 code
  applies it before either mode, `slurm_job_preempt` in src/slurmctld/preempt.c, and so did
  the cluster.)
- At the end of the grace the job is requeued: its processes get SIGTERM and, KillWait later,
  SIGKILL. `sacct --duplicates` keeps the run as `PREEMPTED` (its End is the end of the grace);
  the job is pending again (`BeginTime` for the credential's lifetime, then `Resources`) under
  the same job id with a new Submit time, and its next run is a row of its own.
- A job that ends by itself during the grace (a script that exits on SIGTERM) is `COMPLETED`
  (or `FAILED`) and is not requeued: a job that wants to run again saves its state and waits.
- A job running in an advance reservation is not preempted by a job that may not use the
  reservation's cores.

In fixed mode every team's jobs run under one market QOS (`computeshare-market`, made by
scripts/cluster-setup --preemption), the tenants' only QOS. In managed mode a job has one QOS
and a team's jobs run under the team's own (its GrpTRESMins), so each team QOS is made
preemptable the same way (`team_qos_preemptable`): PreemptMode=requeue, the market QOS's
GraceTime, and a place in each owner QOS's Preempt list. The market QOS is made there too: it
records the owner's choice (which QOS preempt it, after what grace) that verification reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hpc.errors import BridgeError, UnexpectedOutput
from hpc.slurm.parsers import parse_parsable2
from hpc.slurm.sacctmgr import (
    AccountMissing,
    Association,
    require_slurm_name,
    sacctmgr_failure,
    sacctmgr_modify,
    sacctmgr_show,
)
from hpc.ssh import SSHConnection

DEFAULT_MARKET_QOS = "computeshare-market"
QOS_FIELDS = ("Name", "Priority", "GraceTime", "PreemptMode", "Preempt")
REQUEUE = "requeue"
# What slurm.conf needs (scripts/cluster-setup --preemption prints these lines).
PREEMPT_TYPE = "preempt/qos"
SEND_USER_SIGNAL = "preempt_send_user_signal"
# A QOS without a PreemptMode of its own follows the cluster's; sacctmgr prints "cluster".
_CLUSTER_MODE = ("", "cluster", "off")
_MODE_MODIFIERS = {"gang", "within"}
_NOTHING_MODIFIED = "Nothing modified"


class OwnerQosMissing(BridgeError):
    """A QOS that verification found preempting the market's is gone: a team's QOS cannot be
    put in its Preempt list until the cluster is verified again."""


@dataclass(frozen=True)
class QosPreemption:
    """A QOS's preemption settings, as `sacctmgr show qos` prints them."""

    name: str
    priority: int
    grace_seconds: int
    preempt_mode: str
    """Lower case; "cluster" when the QOS has none of its own."""
    preempts: tuple[str, ...]
    """The QOS it may preempt (its Preempt list), sorted."""


@dataclass(frozen=True)
class Preemption:
    """How a cluster's teams' jobs are preempted, as verification found it: by jobs of the
    owner's QOS, after `grace_seconds` of notice."""

    owner_qos: tuple[str, ...]
    grace_seconds: int


@dataclass(frozen=True)
class PreemptionAssessment:
    """Whether preemptible capacity can be sold: `preemption` when it can, else `refusal`, the
    reason in words an owner can act on."""

    preemption: Preemption | None
    refusal: str = ""


# --- Parsers and the assessment (pure) ----------------------------------------------------------


def parse_duration_seconds(text: str) -> int:
    """Seconds of a Slurm duration as sacctmgr prints it: `[D-][HH:]MM:SS`, empty for none."""
    text = text.strip()
    if not text:
        return 0
    days, _, clock = text.rpartition("-")
    parts = clock.split(":")
    if (days and not days.isdigit()) or len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise UnexpectedOutput(f"unreadable duration {text!r}")
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return int(days or 0) * 86400 + seconds


def parse_qos_preemption(text: str) -> list[QosPreemption]:
    """QOS from `sacctmgr --noheader --parsable2 show qos` with `QOS_FIELDS`."""
    records = []
    for row in parse_parsable2(text, list(QOS_FIELDS)):
        priority = row["Priority"] or "0"
        if not priority.isdigit():
            raise UnexpectedOutput(f"unreadable Priority {priority!r} of QOS {row['Name']}")
        records.append(
            QosPreemption(
                name=row["Name"],
                priority=int(priority),
                grace_seconds=parse_duration_seconds(row["GraceTime"]),
                preempt_mode=(row["PreemptMode"] or "cluster").lower(),
                preempts=tuple(sorted(name for name in row["Preempt"].split(",") if name)),
            )
        )
    return records


def effective_mode(qos: QosPreemption, cluster_mode: str) -> str:
    """How a job of `qos` is stopped when preempted: the QOS's own PreemptMode, else the
    cluster's (without its GANG and WITHIN modifiers), lower case."""
    if qos.preempt_mode not in _CLUSTER_MODE:
        return qos.preempt_mode
    words = [word.strip().lower() for word in cluster_mode.split(",") if word.strip()]
    return ",".join(word for word in words if word not in _MODE_MODIFIERS) or "off"


def preemption_assess(
    config: Mapping[str, str], qos: Sequence[QosPreemption], *, market_qos: str
) -> PreemptionAssessment:
    """Whether the teams' jobs, run under `market_qos` (or, in managed mode, under team QOS
    made like it), are preempted and requeued when the owner's jobs need their cores, from
    `scontrol show config` and every QOS. The first thing missing is the refusal."""
    if refusal := _config_refusal(config):
        return _refused(refusal)
    cluster_mode = config.get("PreemptMode", "")
    market = next((record for record in qos if record.name == market_qos), None)
    if market is None:
        return _refused(
            f"there is no QOS {market_qos}: run scripts/cluster-setup --preemption with the QOS "
            "your own users' jobs run under (most often normal)."
        )
    mode = effective_mode(market, cluster_mode)
    if mode != REQUEUE:
        return _refused(
            f"jobs of {market_qos} would be stopped by {mode.upper()}, not requeued: run "
            f"`sacctmgr modify qos {market_qos} set preemptmode=requeue` (scripts/cluster-setup "
            "--preemption does)."
        )
    if market.preempts:
        return _refused(
            f"{market_qos} may itself preempt {', '.join(market.preempts)}: the teams' jobs "
            f"could take your users' cores. Run `sacctmgr modify qos {market_qos} set "
            "preempt=''`."
        )
    owners = tuple(
        sorted(
            record.name
            for record in qos
            if market_qos in record.preempts and record.name != market_qos
        )
    )
    if not owners:
        return _refused(
            f"no QOS preempts {market_qos}, so the teams' jobs would keep cores your users "
            "need: run scripts/cluster-setup --preemption with the QOS your own users' jobs "
            "run under (most often normal)."
        )
    return PreemptionAssessment(Preemption(owners, market.grace_seconds))


def _config_refusal(config: Mapping[str, str]) -> str:
    """What slurm.conf lacks for preemption by QOS that requeues, or "" when nothing."""
    preempt_type = config.get("PreemptType", "")
    cluster_mode = config.get("PreemptMode", "")
    if preempt_type != PREEMPT_TYPE:
        return (
            f"PreemptType is {preempt_type or 'unset'}: add PreemptType={PREEMPT_TYPE} to "
            "slurm.conf (scripts/cluster-setup --preemption prints every line needed) and "
            "restart slurmctld and the slurmd daemons."
        )
    if cluster_mode.strip().upper() in ("", "OFF"):
        return (
            f"PreemptMode is {cluster_mode or 'unset'}, which turns preemption off: add "
            "PreemptMode=REQUEUE to slurm.conf."
        )
    if config.get("JobRequeue", "") != "1":
        return (
            f"JobRequeue is {config.get('JobRequeue') or 'unset'}: a job that a team's job "
            "submits itself would be cancelled instead of requeued when preempted. Set "
            "JobRequeue=1 in slurm.conf."
        )
    parameters = {word.strip().lower() for word in config.get("SlurmctldParameters", "").split(",")}
    if SEND_USER_SIGNAL not in parameters:
        return (
            f"SlurmctldParameters lacks {SEND_USER_SIGNAL}: without it a preempted job's "
            "script gets no SIGTERM before it is stopped (only its srun steps do). Add it to "
            "SlurmctldParameters in slurm.conf and run `scontrol reconfigure`."
        )
    return ""


def tenants_without_qos(
    associations: Sequence[Association], tenants: Sequence[str], qos: str
) -> list[str]:
    """The tenants (of a fixed pool) none of whose associations in the account lets their jobs
    run under `qos`, sorted: with AccountingStorageEnforce=qos, Slurm refuses those jobs."""
    allowed = {row.user for row in associations if row.user and qos in row.qos}
    return sorted(set(tenants) - allowed)


def _refused(reason: str) -> PreemptionAssessment:
    return PreemptionAssessment(None, reason)


# --- Reading and changing the QOS on the cluster --------------------------------------------------


def qos_preemption_read(
    connection: SSHConnection, *, names: Sequence[str] = (), timeout: float = 30.0
) -> list[QosPreemption]:
    """The preemption settings of the QOS named (every QOS when none is), in one command."""
    for name in names:
        require_slurm_name("QOS", name)
    conditions = [f"name={','.join(sorted(set(names)))}"] if names else []
    records = parse_qos_preemption(
        sacctmgr_show(connection, "qos", conditions, QOS_FIELDS, timeout)
    )
    if names and {record.name for record in records} - set(names):
        raise UnexpectedOutput(f"sacctmgr listed other QOS when asked for {', '.join(names)}")
    return records


def team_qos_preemptable(
    connection: SSHConnection, *, qos: str, preemption: Preemption, timeout: float = 30.0
) -> bool:
    """Makes a team's QOS (managed mode) preemptable like the market QOS: `PreemptMode=requeue`,
    `GraceTime` the market's, Priority 0, and each owner QOS able to preempt it. Reads first
    (one command) and changes only what differs; returns whether it changed anything.

    Raises `AccountMissing` when the team's QOS does not exist, `OwnerQosMissing` when an owner
    QOS does not, and `AdminLevelTooLow` when the service user may not change a QOS."""
    if preemption.grace_seconds < 0:
        raise ValueError(f"a grace time is a number of seconds, not {preemption.grace_seconds}")
    found = {
        record.name: record
        for record in qos_preemption_read(
            connection, names=[qos, *preemption.owner_qos], timeout=timeout
        )
    }
    team = found.get(qos)
    if team is None:
        raise AccountMissing(f"the QOS {qos} does not exist")
    missing = sorted(set(preemption.owner_qos) - set(found))
    if missing:
        raise OwnerQosMissing(
            f"the QOS {', '.join(missing)} that preempted the market's is gone: verify the "
            "cluster again"
        )
    settings = []
    if team.preempt_mode != REQUEUE:
        settings.append(f"preemptmode={REQUEUE}")
    if team.grace_seconds != preemption.grace_seconds:
        settings.append(f"gracetime={preemption.grace_seconds}")
    if team.priority != 0:
        settings.append("priority=0")
    changed = False
    if settings:
        _qos_modify(connection, qos, settings, timeout)
        changed = True
    for owner in preemption.owner_qos:
        if qos not in found[owner].preempts:
            _qos_modify(connection, owner, [f"preempt+={qos}"], timeout)
            changed = True
    return changed


def qos_preemption_remove(connection: SSHConnection, *, qos: str, timeout: float = 30.0) -> bool:
    """Takes `qos` out of every QOS's Preempt list, before the QOS itself goes: slurmdbd 22.05
    deletes a QOS without taking it out of the others' lists (as_mysql_remove_qos), and a QOS
    made later under the same id would be preempted in its place. Returns whether it changed
    anything."""
    require_slurm_name("QOS", qos)
    changed = False
    for record in qos_preemption_read(connection, timeout=timeout):
        if qos in record.preempts:
            _qos_modify(connection, record.name, [f"preempt-={qos}"], timeout)
            changed = True
    return changed


def _qos_modify(
    connection: SSHConnection, name: str, settings: Sequence[str], timeout: float
) -> None:
    result = sacctmgr_modify(connection, "qos", [f"name={name}"], settings, timeout)
    if result.exit_status == 0:
        return
    if _NOTHING_MODIFIED in result.stdout and not result.stderr.strip():
        raise AccountMissing(f"the QOS {name} disappeared")
    raise sacctmgr_failure(result)
