"""The checks of a cluster's verification, in the order they run (see `verification`, whose
module says what each proves): one SSH connection to the login node, one step per capability,
each a function of its own that reads what it needs and records what it read in `Findings`.
Nothing here writes to the database; `verification` stores the findings once every step passed."""

from __future__ import annotations

import logging
from contextlib import closing
from dataclasses import dataclass, field

from hpc.errors import ClusterUnreachable, RemoteCommandFailed, ReservationRefused
from hpc.slurm import accounts as slurm_accounts
from hpc.slurm import preemption as slurm_preemption
from hpc.slurm.inventory import (
    ClusterInventory,
    PartitionInfo,
    config_list,
    config_read,
    inventory_read,
)
from hpc.slurm.reservations import reservation_probe
from hpc.slurm.tenants import (
    PoolAccount,
    PoolProbe,
    pool_probe,
    pool_read,
    sftp_probe,
    submission_probe,
)
from hpc.ssh import SSHConnection
from marketplace.models import Cluster, TenantAccount
from marketplace.services.clusters import ssh_settings_for
from marketplace.services.verification_nodes import NodesCheckFailed, nodes_check
from marketplace.services.verification_steps import (
    FAILED,
    PASSED,
    WARNING,
    CheckFailed,
    Steps,
    step_reason,
)

# The operators' log of a verification keeps its name, whichever module of it writes.
logger = logging.getLogger("marketplace.services.verification")

VERIFY_TIMEOUT_SECONDS = 30.0
# The one reason an owner reads for any failure to open the SSH connection (see `verification`).
UNREACHABLE_REASON = (
    "no SSH connection could be opened to this host and port. Check the host name and the "
    "port, and that sshd there accepts connections from the platform."
)


@dataclass
class Findings:
    """What the steps read, written once every step has passed."""

    inventory: ClusterInventory | None = None
    pool: tuple[PoolAccount, ...] = ()
    idle_account: str = ""
    tracks_gpus: bool = False
    market_qos: str = ""
    preemption: slurm_preemption.Preemption | None = None
    preemptible_refusal: str = ""
    reserved_refusal: str = ""


@dataclass
class _Session:
    """What the steps of one verification share: the connection, the cluster, its Slurm
    configuration once read, and where the steps and their findings go."""

    connection: SSHConnection
    cluster: Cluster
    steps: Steps
    findings: Findings
    config: dict[str, str] = field(default_factory=dict)
    timeout: float = VERIFY_TIMEOUT_SECONDS

    @property
    def user(self) -> str:
        return self.cluster.ssh_user

    @property
    def managed(self) -> bool:
        return self.cluster.account_mode == Cluster.AccountMode.MANAGED

    @property
    def cluster_name(self) -> str:
        return self.cluster.slurm_cluster_name or self.config.get("ClusterName", "")


def cluster_checks_run(cluster: Cluster, steps: Steps, findings: Findings) -> None:
    """Every step, in order, over one connection: the first that fails raises (`CheckFailed`,
    or the bridge's error); the steps of the two kinds of capacity fail the run only together."""
    connection = SSHConnection(ssh_settings_for(cluster))
    with closing(connection):
        run = _Session(connection, cluster, steps, findings)
        _connect(run)
        up = _partitions(run)
        _queries(run)
        _slurm_rights(run)
        pool = _pool(run)
        _sudo_and_homes(run, pool)
        tenant = pool[0].user
        with steps.check("sftp", f"SFTP as a tenant ({tenant})"):
            sftp_probe(connection, tenant, timeout=run.timeout)
        account = _idle_account(run, pool) if run.managed else cluster.slurm_account or None
        partition = next((p for p in up if p.is_default), up[0])
        _sbatch(run, tenant, partition.name, account)
        _gpus(run)
        _proctrack(run)
        with steps.check("nodes", "Each compute node knows the tenants as the login node does"):
            _check_nodes(connection, cluster, steps, findings, run.config, up)
        kinds_check(connection, cluster, steps, findings, run.config, partition.name, tenant)


def _connect(run: _Session) -> None:
    cluster = run.cluster
    title = f"Connect to {cluster.ssh_host}:{cluster.ssh_port} as {run.user} with the pinned key"
    with run.steps.check("connect", title):
        try:
            run.connection.open()
        except ClusterUnreachable as error:
            logger.warning(
                "verification of cluster %s (%s:%s) could not connect: %s (%r)",
                cluster.uuid,
                cluster.ssh_host,
                cluster.ssh_port,
                error,
                error.__cause__,
            )
            raise ClusterUnreachable(UNREACHABLE_REASON) from error


def _partitions(run: _Session) -> list[PartitionInfo]:
    """The partitions that are up (at least one), and the configuration the later steps read."""
    with run.steps.check("partitions", "Read the partitions, CPUs, GPUs and time limits"):
        run.findings.inventory = inventory = inventory_read(run.connection, timeout=run.timeout)
        run.config = config_read(run.connection, timeout=run.timeout)
        up = [partition for partition in inventory.partitions if partition.is_up]
        if not up:
            raise CheckFailed("sinfo lists no partition that is up.")
    return up


def _queries(run: _Session) -> None:
    with run.steps.check("queries", "squeue and sacct answer"):
        run.connection.run(
            ["squeue", "--noheader", f"--user={run.user}", "--format=%i"], timeout=run.timeout
        )
        run.connection.run(
            [
                "sacct",
                "--noheader",
                "--parsable2",
                "-X",
                f"--user={run.user}",
                "--starttime=now-1hours",
                "--format=JobID",
            ],
            timeout=run.timeout,
        )


def _slurm_rights(run: _Session) -> None:
    """The service user sees every tenant's jobs; in managed mode it may also manage QOS, and
    Slurm enforces their limits."""
    user, config = run.user, run.config
    level = slurm_accounts.admin_level_get(run.connection, user=user, timeout=run.timeout)
    is_operator = level in slurm_accounts.ACCOUNT_ADMIN_LEVELS
    with run.steps.check("visibility", "The service user sees every tenant's jobs and usage"):
        hidden = config_list(config.get("PrivateData", "")) & {"jobs", "usage"}
        if hidden and not is_operator:
            raise CheckFailed(
                f"PrivateData hides {', '.join(sorted(hidden))} from {user}, which is not a "
                f"Slurm operator: run `sacctmgr modify user {user} set adminlevel=operator`."
            )
    if not run.managed:
        return
    with run.steps.check("operator", "The service user may manage the teams' QOS"):
        if level not in slurm_accounts.QOS_ADMIN_LEVELS:
            raise CheckFailed(
                f"managed mode gives each team a QOS with its limit, and Slurm lets only "
                f"an administrator add or change a QOS; {user}'s admin level is {level}: "
                f"run `sacctmgr modify user {user} set adminlevel=administrator` (or "
                "scripts/cluster-setup --mode managed), or use fixed mode."
            )
    with run.steps.check("limits", "Slurm enforces limits on QOS that never decay"):
        enforce = config_list(config.get("AccountingStorageEnforce", ""))
        missing = {"associations", "limits", "qos"} - enforce
        if missing:
            raise CheckFailed(
                "AccountingStorageEnforce must include associations,limits,qos (it has "
                f"{','.join(sorted(enforce)) or 'nothing'}): without them a team's "
                "limit does not hold at the cluster."
            )
        if config.get("PriorityType", "") != "priority/multifactor":
            raise CheckFailed(
                f"PriorityType is {config.get('PriorityType') or 'unset'}: GrpTRESMins "
                "limits need priority/multifactor to count usage."
            )


def _pool(run: _Session) -> tuple[PoolAccount, ...]:
    group = run.cluster.tenant_group
    with run.steps.check("pool", f"Tenant accounts of the group {group}") as step:
        try:
            run.findings.pool = pool = pool_read(run.connection, group, timeout=run.timeout)
        except RemoteCommandFailed as error:
            raise CheckFailed(
                f"no group {group} on the login node: run scripts/cluster-setup there."
            ) from error
        if not pool:
            raise CheckFailed(f"the group {group} has no members.")
        if any(account.user == run.user for account in pool):
            raise CheckFailed(
                f"the service user {run.user} is a member of {group}: it must not "
                "be one of the tenants."
            )
        step.detail = f"{len(pool)} accounts: " + ", ".join(account.user for account in pool)
    return pool


def _sudo_and_homes(run: _Session, pool: tuple[PoolAccount, ...]) -> None:
    with run.steps.check("sudo", "sudo to each tenant without a password, and to nobody else"):
        probe = pool_probe(run.connection, pool, timeout=run.timeout * 2)
        _check_sudo(probe)
    with run.steps.check("homes", "Homes that only their owner can read"):
        _check_homes(probe)


def _idle_account(run: _Session, pool: tuple[PoolAccount, ...]) -> str:
    with run.steps.check("idle", "Idle tenants sit in a Slurm account that runs nothing"):
        run.findings.idle_account = account = _check_idle_account(
            run.connection, run.cluster, run.cluster_name, pool, run.timeout
        )
    return account


def _sbatch(run: _Session, tenant: str, partition: str, account: str | None) -> None:
    with run.steps.check("sbatch", f"sbatch --test-only as {tenant} on {partition}") as step:
        try:
            step.detail = submission_probe(
                run.connection, tenant, partition=partition, account=account, timeout=run.timeout
            )
        except RemoteCommandFailed as error:
            raise CheckFailed(f"Slurm refused a test submission: {step_reason(error)}") from error


def _gpus(run: _Session) -> None:
    tres = config_list(run.config.get("AccountingStorageTRES", ""))
    run.findings.tracks_gpus = "gres/gpu" in tres
    assert run.findings.inventory is not None
    with run.steps.check("gpus", "Accounting records GPUs") as step:
        has_gpus = any(partition.gpus for partition in run.findings.inventory.partitions)
        if not run.findings.tracks_gpus:
            step.end(
                WARNING if has_gpus else PASSED,
                "gres/gpu is not in AccountingStorageTRES: GPU jobs would meter zero, so "
                "GPU offers are refused until it is."
                if has_gpus
                else "No GPUs here; add gres/gpu to AccountingStorageTRES before adding any.",
            )


def _proctrack(run: _Session) -> None:
    with run.steps.check("proctrack", "Slurm ends every process of a job") as step:
        proctrack = run.config.get("ProctrackType", "")
        if proctrack != "proctrack/cgroup":
            step.end(
                WARNING,
                f"ProctrackType is {proctrack or 'unset'}: a process a job double-forks can "
                "outlive the job on its node, unmetered, until the scrub at the end of the "
                "team's lease. proctrack/cgroup ends them all with the job.",
            )


def _check_nodes(
    connection: SSHConnection,
    cluster: Cluster,
    steps: Steps,
    findings: Findings,
    config: dict[str, str],
    up: list[PartitionInfo],
) -> None:
    """One job as a tenant on each node of the partitions that are up (see
    `verification_nodes`): failed with the nodes that are not as the login node, warning with
    those no job could reach."""
    step = steps.steps[-1]
    try:
        reached, step.detail = nodes_check(
            connection,
            cluster,
            partitions=[partition.name for partition in up],
            tenants=[account.user for account in findings.pool],
            cluster_name=cluster.slurm_cluster_name or config.get("ClusterName", ""),
            idle_account=findings.idle_account,
            timeout=VERIFY_TIMEOUT_SECONDS,
        )
    except NodesCheckFailed as error:
        raise CheckFailed(str(error)) from error
    if not reached:
        step.end(WARNING)


def kinds_check(
    connection: SSHConnection,
    cluster: Cluster,
    steps: Steps,
    findings: Findings,
    config: dict[str, str],
    partition: str,
    tenant: str,
) -> None:
    """The steps of the two kinds of capacity; when neither can be sold, the verification
    fails at the first of them."""
    timeout = VERIFY_TIMEOUT_SECONDS
    market_qos = findings.market_qos = cluster.market_qos or slurm_preemption.DEFAULT_MARKET_QOS
    title = f"Preemptible capacity: your QOS preempt {market_qos}, whose jobs are requeued"
    with steps.check_kind("preemption", title) as step:
        findings.preemption = _check_preemption(
            connection, cluster, config, market_qos, findings.pool, timeout
        )
        owners = ", ".join(findings.preemption.owner_qos)
        step.detail = (
            f"{owners} {'preempts' if len(findings.preemption.owner_qos) == 1 else 'preempt'} "
            f"{market_qos}; a preempted job gets SIGTERM "
            f"{findings.preemption.grace_seconds} s before it is requeued."
        )
    title = "Reserved capacity: the service user may make Slurm reservations"
    with steps.check_kind("reservations", title) as step:
        step.detail = _check_reservations(connection, cluster, partition, tenant, timeout)
    preemption_step, reservations_step = steps.step("preemption"), steps.step("reservations")
    if preemption_step is not None and preemption_step.status == FAILED:
        findings.preemptible_refusal = preemption_step.detail
    if reservations_step is not None and reservations_step.status == FAILED:
        findings.reserved_refusal = reservations_step.detail
    if findings.preemptible_refusal and findings.reserved_refusal:
        steps.kind_failures_count()
        raise CheckFailed(
            f"{findings.preemptible_refusal} Reserved capacity cannot be sold either: "
            f"{findings.reserved_refusal}"
        )


def _check_preemption(
    connection: SSHConnection,
    cluster: Cluster,
    config: dict[str, str],
    market_qos: str,
    pool: tuple[PoolAccount, ...],
    timeout: float,
) -> slurm_preemption.Preemption:
    """How the teams' jobs are preempted (see `hpc.slurm.preemption`), read live; in fixed
    mode the pool's tenants must also be allowed the market QOS."""
    qos = slurm_preemption.qos_preemption_read(connection, timeout=timeout)
    assessment = slurm_preemption.preemption_assess(config, qos, market_qos=market_qos)
    if assessment.preemption is None:
        raise CheckFailed(assessment.refusal)
    if cluster.account_mode == Cluster.AccountMode.FIXED and cluster.slurm_account:
        associations = slurm_accounts.associations_get(
            connection,
            cluster_name=cluster.slurm_cluster_name or config.get("ClusterName", ""),
            account=cluster.slurm_account,
            timeout=timeout,
        )
        refused = slurm_preemption.tenants_without_qos(
            associations, [account.user for account in pool], market_qos
        )
        if refused:
            raise CheckFailed(
                f"the tenants {', '.join(refused)} may not run jobs under {market_qos} in the "
                f"Slurm account {cluster.slurm_account}, so Slurm would refuse the teams' jobs: "
                "run scripts/cluster-setup --preemption for this pool."
            )
    return assessment.preemption


def _check_reservations(
    connection: SSHConnection, cluster: Cluster, partition: str, tenant: str, timeout: float
) -> str:
    """Creates and deletes a one-minute reservation a day ahead, as the service user, for the
    first tenant (`reservation_probe`); the step's detail."""
    try:
        probe = reservation_probe(connection, partition=partition, user=tenant, timeout=timeout)
    except ReservationRefused as refusal:
        words = str(refusal)
        if "invalid user id" in words.lower() or "access" in words.lower():
            raise CheckFailed(
                f"Slurm refused {cluster.ssh_user} a reservation ({words}): making and removing "
                f"reservations takes operator rights. Run `sacctmgr modify user "
                f"{cluster.ssh_user} set adminlevel=operator` (scripts/cluster-setup "
                "--reservations does)."
            ) from refusal
        raise CheckFailed(f"Slurm refused a test reservation: {words}") from refusal
    return (
        f"Made and removed a one-minute reservation of {probe.cpus} core on {partition} for "
        f"{tenant}."
    )


def _check_sudo(probe: PoolProbe) -> None:
    if probe.unreachable:
        names = ", ".join(f"{tenant.user} ({tenant.problem})" for tenant in probe.unreachable)
        raise CheckFailed(
            f"{probe.service_user} cannot act as {names}: the sudoers rule is missing or asks "
            "for a password; run scripts/cluster-setup."
        )
    if probe.other_targets_allowed:
        raise CheckFailed(
            f"{probe.service_user} may act as {', '.join(probe.other_targets_allowed)}: it must "
            "be able to act as the tenants and nobody else."
        )
    may_sudo = [tenant.user for tenant in probe.tenants if tenant.may_sudo]
    if may_sudo:
        raise CheckFailed(f"tenants may run sudo: {', '.join(may_sudo)}.")


def _check_homes(probe: PoolProbe) -> None:
    problems = []
    for tenant in probe.tenants:
        if not tenant.home_is_private:
            problems.append(
                f"{tenant.home} is mode {tenant.home_mode} owned by {tenant.home_owner}"
            )
        if tenant.reads_service_home:
            problems.append(f"{tenant.user} can read the service user's home")
        if tenant.reads_other_homes:
            problems.append(f"{tenant.user} can read {', '.join(tenant.reads_other_homes)}")
    mode = probe.service_home_mode
    if mode and mode[-2:] != "00":
        problems.append(f"the service user's home is mode {mode}")
    if problems:
        raise CheckFailed("; ".join(problems) + ".")


def _check_idle_account(
    connection: SSHConnection,
    cluster: Cluster,
    cluster_name: str,
    pool: tuple[PoolAccount, ...],
    timeout: float,
) -> str:
    defaults = slurm_accounts.default_accounts_get(
        connection, users=[account.user for account in pool], timeout=timeout
    )
    leased = set(
        cluster.tenant_accounts.filter(status=TenantAccount.Status.LEASED).values_list(
            "username", flat=True
        )
    )
    idle = {defaults.get(account.user, "") for account in pool if account.user not in leased}
    idle.discard("")
    if len(idle) != 1:
        missing = [account.user for account in pool if account.user not in defaults]
        raise CheckFailed(
            "idle tenants must all have one default Slurm account (the one scripts/cluster-setup "
            f"makes with MaxJobs=0); found {sorted(idle) or 'none'}"
            + (f", and no Slurm user for {', '.join(missing)}" if missing else "")
            + "."
        )
    [account] = idle
    max_jobs = slurm_accounts.account_max_jobs_get(
        connection,
        cluster_name=cluster_name,
        account=account,
        timeout=timeout,
    )
    if max_jobs != 0:
        raise CheckFailed(
            f"the idle tenants' account {account} may run jobs (MaxJobs is {max_jobs}): a "
            f"tenant between leases could run for free. Run `sacctmgr modify account {account} "
            "set MaxJobs=0`."
        )
    return account
