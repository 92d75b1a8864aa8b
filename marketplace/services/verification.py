"""Verifying a cluster: every capability the bridge will use, checked before the first job.

A cluster that verifies is one the bridge can work on: the pinned host key, the partitions,
squeue and sacct for every tenant, the pool of tenant accounts, sudo to each of them and to
nobody else, homes only their owners can read, SFTP as a tenant, `sbatch --test-only` as a
tenant, and, in managed mode, the Slurm settings that make limits hold at the cluster. Each
check is a step with its outcome and, when it fails, the reason in words an owner can act on;
the owner's page shows them as they run and the API returns them. Nothing is written unless
every step passed: the stored inventory and pool are always ones a whole verification read.

The `nodes` step runs a tiny job as a tenant on each compute node it can reach: the tenant
must have the login node's uid there, the shared home, and see nobody else's processes
(`verification_nodes`).

The last two steps are the two kinds of capacity (docs/design.md, The product): `preemption` (the
owner's QOS preempt the market's, whose jobs are requeued: `hpc.slurm.preemption`) and
`reservations` (the service user may make Slurm reservations). Either may fail while the other
passes: the cluster is then online and sells the other kind only, and the failed step's reason is
what the owner reads on the cluster's card. Only when neither kind can be sold is the cluster
misconfigured.

Every verification runs in a Celery worker (`cluster_verification_start` queues it), never in a
web process: connecting can take as long as the connect timeout, and a web process waiting on
an owner's cluster serves nobody else meanwhile.

Whatever keeps the platform from reaching a cluster (a closed port, a port where something
other than sshd answers, no answer at all, an address the outbound rules deny), the owner reads
one and the same reason: telling those apart would make verification a port scanner of any
network the platform can reach. The real reason goes to the operators' log.

No transaction is open while SSH talks to the cluster."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from computeshare.errors import Throttled
from computeshare.queue import enqueue_after_commit
from computeshare.ratelimit import rate_limit_hit
from hpc.errors import (
    AuthenticationRefused,
    BridgeError,
    ClusterUnreachable,
    RemoteCommandFailed,
    ReservationRefused,
)
from hpc.errors import HostKeyMismatch as BridgeHostKeyMismatch
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
from marketplace import errors, selectors
from marketplace.models import Cluster, ClusterVerification, TenantAccount
from marketplace.services.capacity import cluster_reachability_record
from marketplace.services.clusters import (
    cluster_host_key_refused,
    cluster_inventory_store,
    cluster_status_mark,
    local_inventory,
    require_admin,
    ssh_settings_for,
)
from marketplace.services.tenants import tenant_accounts_record
from marketplace.services.verification_nodes import NodesCheckFailed, nodes_check
from organizations.models import Membership

logger = logging.getLogger(__name__)

VERIFY_TIMEOUT_SECONDS = 30.0
# The one reason an owner reads for any failure to open the SSH connection (see the module).
UNREACHABLE_REASON = (
    "no SSH connection could be opened to this host and port. Check the host name and the "
    "port, and that sshd there accepts connections from the platform."
)

PASSED = "passed"
FAILED = "failed"
WARNING = "warning"
RUNNING = "running"


@dataclass
class Step:
    key: str
    title: str
    status: str = RUNNING
    detail: str = ""


class CheckFailed(Exception):
    """A step failed: the verification stops there, with the step's reason."""


@dataclass
class Steps:
    """The steps of one verification, reported to `on_change` as they start and end."""

    on_change: Callable[[list[dict[str, str]]], None] | None = None
    steps: list[Step] = field(default_factory=list)
    # The steps of a kind of capacity that failed while the other kind can be sold.
    kind_failures: list[str] = field(default_factory=list)

    def as_list(self) -> list[dict[str, str]]:
        return [asdict(step) for step in self.steps]

    @contextmanager
    def check(self, key: str, title: str) -> Iterator[Step]:
        """Runs one step: passed when its block ends, failed on `CheckFailed` (which goes on,
        to stop the verification) or on a bridge error (re-raised as is)."""
        step = Step(key, title)
        self.steps.append(step)
        self._changed()
        try:
            yield step
        except CheckFailed as failure:
            step.status, step.detail = FAILED, str(failure)
            self._changed()
            raise
        except (BridgeError, ValueError) as error:
            step.status, step.detail = FAILED, _reason(error)
            self._changed()
            raise
        if step.status == RUNNING:
            step.status = PASSED
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self.as_list())

    @contextmanager
    def check_kind(self, key: str, title: str) -> Iterator[Step]:
        """Runs the step of one kind of capacity: like `check`, except that a `CheckFailed`
        marks the step failed and the verification goes on (the cluster may sell the other
        kind). `failed` passes over such a step until `kind_failures_count` makes it count."""
        try:
            with self.check(key, title) as step:
                yield step
        except CheckFailed:
            self.kind_failures.append(key)

    def kind_failures_count(self) -> None:
        """The steps of the kinds that failed now fail the verification (neither kind can be
        sold)."""
        self.kind_failures.clear()

    @property
    def failed(self) -> Step | None:
        return next(
            (
                step
                for step in self.steps
                if step.status == FAILED and step.key not in self.kind_failures
            ),
            None,
        )

    def step(self, key: str) -> Step | None:
        return next((step for step in self.steps if step.key == key), None)


@dataclass
class _Findings:
    """What the steps read, written once every step has passed."""

    inventory: ClusterInventory | None = None
    pool: tuple[PoolAccount, ...] = ()
    idle_account: str = ""
    tracks_gpus: bool = False
    market_qos: str = ""
    preemption: slurm_preemption.Preemption | None = None
    preemptible_refusal: str = ""
    reserved_refusal: str = ""


def cluster_verify(
    *,
    actor: Membership | None,
    cluster: Cluster,
    progress: Callable[[list[dict[str, str]]], None] | None = None,
) -> tuple[Cluster, list[dict[str, str]]]:
    """Checks every capability the bridge uses (see the module) and, when all pass, stores the
    partitions and the pool of tenant accounts and makes the cluster `online`. Returns the
    cluster and the steps. A different host key marks the cluster `host_key_mismatch`
    (`errors.HostKeyMismatch`); a cluster that cannot be reached is `unreachable`
    (`errors.ClusterUnreachable`); one that answers but fails a check is `misconfigured`
    (`errors.ClusterMisconfigured`, with the steps in `extra`)."""
    if actor is not None:
        require_admin(actor)
    if cluster.status == Cluster.Status.SUSPENDED:
        raise errors.ClusterSuspended()
    steps = Steps(on_change=progress)
    if cluster.backend == Cluster.Backend.LOCAL:
        with steps.check("partitions", "Read this machine's CPUs"):
            pass
        return _local_verification_store(cluster), steps.as_list()
    findings = _Findings()
    try:
        _verify_steps(cluster, steps, findings)
    except BridgeHostKeyMismatch as error:
        detail = cluster_host_key_refused(cluster=cluster, error=error)
        raise errors.HostKeyMismatch(
            detail,
            extra={
                "offered_fingerprint": error.offered_fingerprint,
                "pinned_fingerprint": cluster.host_key_fingerprint,
                "steps": steps.as_list(),
            },
        ) from error
    except CheckFailed as error:
        cluster_reachability_record(cluster=cluster, is_reachable=True, source="verification")
        failed = steps.failed
        title = failed.title if failed else "A check"
        detail = f"{title}: {error}"
        cluster_status_mark(cluster, Cluster.Status.MISCONFIGURED, detail)
        raise errors.ClusterMisconfigured(
            f"The cluster answered, but a check failed. {detail}",
            extra={"failed_step": failed.key if failed else "", "steps": steps.as_list()},
        ) from error
    except (BridgeError, ValueError) as error:
        failed = steps.failed
        reason = _reason(error)
        # A connection lost or a command timed out midway is the network's doing, not the
        # cluster's setup.
        unreachable = (
            failed is None
            or failed.key == "connect"
            or (isinstance(error, BridgeError) and error.is_transient)
        )
        cluster_reachability_record(
            cluster=cluster, is_reachable=not unreachable, source="verification", detail=reason
        )
        extra: dict[str, Any] = {"reason": reason, "steps": steps.as_list()}
        if unreachable or failed is None:
            cluster_status_mark(cluster, Cluster.Status.UNREACHABLE, reason)
            raise errors.ClusterUnreachable(
                f"The cluster could not be verified: {reason}", extra=extra
            ) from error
        cluster_status_mark(cluster, Cluster.Status.MISCONFIGURED, f"{failed.title}: {reason}")
        raise errors.ClusterMisconfigured(
            f"The cluster answered, but a check failed. {failed.title}: {reason}",
            extra={"failed_step": failed.key, **extra},
        ) from error
    assert findings.inventory is not None
    cluster_reachability_record(cluster=cluster, is_reachable=True, source="verification")
    return _verification_store(cluster, findings), steps.as_list()


def _verify_steps(cluster: Cluster, steps: Steps, findings: _Findings) -> None:
    timeout = VERIFY_TIMEOUT_SECONDS
    user = cluster.ssh_user
    managed = cluster.account_mode == Cluster.AccountMode.MANAGED
    connection = SSHConnection(ssh_settings_for(cluster))
    with closing(connection):
        with steps.check(
            "connect",
            f"Connect to {cluster.ssh_host}:{cluster.ssh_port} as {user} with the pinned key",
        ):
            try:
                connection.open()
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
        with steps.check("partitions", "Read the partitions, CPUs, GPUs and time limits"):
            findings.inventory = inventory = inventory_read(connection, timeout=timeout)
            config = config_read(connection, timeout=timeout)
            up = [partition for partition in inventory.partitions if partition.is_up]
            if not up:
                raise CheckFailed("sinfo lists no partition that is up.")
        with steps.check("queries", "squeue and sacct answer"):
            connection.run(
                ["squeue", "--noheader", f"--user={user}", "--format=%i"], timeout=timeout
            )
            connection.run(
                [
                    "sacct",
                    "--noheader",
                    "--parsable2",
                    "-X",
                    f"--user={user}",
                    "--starttime=now-1hours",
                    "--format=JobID",
                ],
                timeout=timeout,
            )
        level = slurm_accounts.admin_level_get(connection, user=user, timeout=timeout)
        is_operator = level in slurm_accounts.ACCOUNT_ADMIN_LEVELS
        with steps.check("visibility", "The service user sees every tenant's jobs and usage"):
            hidden = config_list(config.get("PrivateData", "")) & {"jobs", "usage"}
            if hidden and not is_operator:
                raise CheckFailed(
                    f"PrivateData hides {', '.join(sorted(hidden))} from {user}, which is not a "
                    f"Slurm operator: run `sacctmgr modify user {user} set adminlevel=operator`."
                )
        if managed:
            with steps.check("operator", "The service user may manage the teams' QOS"):
                if level not in slurm_accounts.QOS_ADMIN_LEVELS:
                    raise CheckFailed(
                        f"managed mode gives each team a QOS with its limit, and Slurm lets only "
                        f"an administrator add or change a QOS; {user}'s admin level is {level}: "
                        f"run `sacctmgr modify user {user} set adminlevel=administrator` (or "
                        "scripts/cluster-setup --mode managed), or use fixed mode."
                    )
            with steps.check("limits", "Slurm enforces limits on QOS that never decay"):
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
        with steps.check("pool", f"Tenant accounts of the group {cluster.tenant_group}"):
            try:
                findings.pool = pool = pool_read(connection, cluster.tenant_group, timeout=timeout)
            except RemoteCommandFailed as error:
                raise CheckFailed(
                    f"no group {cluster.tenant_group} on the login node: run "
                    "scripts/cluster-setup there."
                ) from error
            if not pool:
                raise CheckFailed(f"the group {cluster.tenant_group} has no members.")
            if any(account.user == user for account in pool):
                raise CheckFailed(
                    f"the service user {user} is a member of {cluster.tenant_group}: it must not "
                    "be one of the tenants."
                )
            steps.steps[-1].detail = f"{len(pool)} accounts: " + ", ".join(
                account.user for account in pool
            )
        with steps.check("sudo", "sudo to each tenant without a password, and to nobody else"):
            probe = pool_probe(connection, pool, timeout=timeout * 2)
            _check_sudo(probe)
        with steps.check("homes", "Homes that only their owner can read"):
            _check_homes(probe)
        tenant = pool[0].user
        with steps.check("sftp", f"SFTP as a tenant ({tenant})"):
            sftp_probe(connection, tenant, timeout=timeout)
        account = cluster.slurm_account or None
        if managed:
            with steps.check("idle", "Idle tenants sit in a Slurm account that runs nothing"):
                cluster_name = cluster.slurm_cluster_name or config.get("ClusterName", "")
                findings.idle_account = account = _check_idle_account(
                    connection, cluster, cluster_name, pool, timeout
                )
        partition = next((p for p in up if p.is_default), up[0])
        with steps.check("sbatch", f"sbatch --test-only as {tenant} on {partition.name}") as step:
            try:
                step.detail = submission_probe(
                    connection, tenant, partition=partition.name, account=account, timeout=timeout
                )
            except RemoteCommandFailed as error:
                raise CheckFailed(f"Slurm refused a test submission: {_reason(error)}") from error
        tres = config_list(config.get("AccountingStorageTRES", ""))
        findings.tracks_gpus = "gres/gpu" in tres
        with steps.check("gpus", "Accounting records GPUs") as step:
            has_gpus = any(partition.gpus for partition in inventory.partitions)
            if not findings.tracks_gpus:
                step.status = WARNING if has_gpus else PASSED
                step.detail = (
                    "gres/gpu is not in AccountingStorageTRES: GPU jobs would meter zero, so "
                    "GPU offers are refused until it is."
                    if has_gpus
                    else "No GPUs here; add gres/gpu to AccountingStorageTRES before adding any."
                )
        with steps.check("proctrack", "Slurm ends every process of a job") as step:
            proctrack = config.get("ProctrackType", "")
            if proctrack != "proctrack/cgroup":
                step.status = WARNING
                step.detail = (
                    f"ProctrackType is {proctrack or 'unset'}: a process a job double-forks can "
                    "outlive the job on its node, unmetered, until the scrub at the end of the "
                    "team's lease. proctrack/cgroup ends them all with the job."
                )
        with steps.check("nodes", "Each compute node knows the tenants as the login node does"):
            _check_nodes(connection, cluster, steps, findings, config, up)
        _verify_kinds(connection, cluster, steps, findings, config, partition.name, tenant)


def _check_nodes(
    connection: SSHConnection,
    cluster: Cluster,
    steps: Steps,
    findings: _Findings,
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
        step.status = WARNING


def _verify_kinds(
    connection: SSHConnection,
    cluster: Cluster,
    steps: Steps,
    findings: _Findings,
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


CAPACITY_FIELDS = [
    "sells_preemptible",
    "preemptible_refusal",
    "market_qos",
    "owner_qos",
    "preemption_grace_seconds",
    "sells_reserved",
    "reserved_refusal",
]


@transaction.atomic
def _verification_store(cluster: Cluster, findings: _Findings) -> Cluster:
    assert findings.inventory is not None
    cluster = cluster_inventory_store(cluster, findings.inventory)
    tenant_accounts_record(cluster=cluster, accounts=findings.pool)
    cluster.tenant_idle_account = findings.idle_account
    cluster.tracks_gpus = findings.tracks_gpus
    preemption = findings.preemption
    cluster.sells_preemptible = preemption is not None
    cluster.preemptible_refusal = findings.preemptible_refusal[:500]
    cluster.market_qos = findings.market_qos
    cluster.owner_qos = list(preemption.owner_qos) if preemption else []
    cluster.preemption_grace_seconds = preemption.grace_seconds if preemption else None
    cluster.sells_reserved = not findings.reserved_refusal
    cluster.reserved_refusal = findings.reserved_refusal[:500]
    cluster.save(
        update_fields=["tenant_idle_account", "tracks_gpus", *CAPACITY_FIELDS, "updated_at"]
    )
    if preemption is not None and cluster.account_mode == Cluster.AccountMode.MANAGED:
        # The teams' QOS made before preemption was set up (or before the owner QOS changed)
        # become preemptable now rather than at the next reconciliation.
        enqueue_after_commit(
            "marketplace.tasks.slurm_accounts_sync_task",
            cluster.pk,
            recovered_by="the periodic reconciliation of Slurm accounts syncs them",
        )
    return cluster


@transaction.atomic
def _local_verification_store(cluster: Cluster) -> Cluster:
    """The `local` backend sells both kinds: its jobs are the demo's, and its reservations
    the backend's own bookkeeping."""
    cluster = cluster_inventory_store(cluster, local_inventory())
    cluster.sells_preemptible = cluster.sells_reserved = True
    cluster.preemptible_refusal = cluster.reserved_refusal = cluster.market_qos = ""
    cluster.owner_qos = []
    cluster.preemption_grace_seconds = None
    cluster.save(update_fields=[*CAPACITY_FIELDS, "updated_at"])
    return cluster


def _reason(error: BaseException) -> str:
    reason = str(error) or type(error).__name__
    if isinstance(error, AuthenticationRefused):
        reason = f"the service user's key was refused: {reason}"
    return reason


# --- Verification from the web page, in a Celery task ------------------------------------------


@transaction.atomic
def cluster_verification_start(*, actor: Membership, cluster: Cluster) -> ClusterVerification:
    """Records a verification request and runs it in a worker after the commit. One at a time
    per cluster: a request while one runs returns the running one (and is not counted). An
    organization asks for at most `CLUSTER_VERIFY_RATE` new verifications (`Throttled`); a
    suspended cluster is not verified (`ClusterSuspended`)."""
    require_admin(actor)
    locked = Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
    if locked is not None and locked.status == Cluster.Status.SUSPENDED:
        raise errors.ClusterSuspended()
    running = cluster.verifications.filter(
        status=ClusterVerification.Status.RUNNING,
        created_at__gte=timezone.now() - ClusterVerification.STALE_AFTER,
    ).first()
    if running is not None:
        return running
    wait = rate_limit_hit(f"cluster-verify:{actor.organization.uuid}", settings.CLUSTER_VERIFY_RATE)
    if wait is not None:
        raise Throttled(
            "Your organization has asked for as many cluster verifications as it may in this "
            f"period; try again in {wait} s.",
            retry_after_seconds=wait,
        )
    verification = ClusterVerification.objects.create(
        cluster=cluster, requested_by=actor.user, step="Waiting for a worker"
    )
    enqueue_after_commit(
        "marketplace.tasks.cluster_verification_run_task",
        verification.pk,
        recovered_by="it is stale after STALE_AFTER, and the owner may ask again",
    )
    return verification


def cluster_verification_run(*, verification_id: int) -> ClusterVerification | None:
    verification = (
        ClusterVerification.objects.select_related("cluster")
        .filter(pk=verification_id, status=ClusterVerification.Status.RUNNING)
        .first()
    )
    if verification is None:
        return None

    def progress(steps: list[dict[str, str]]) -> None:
        current = steps[-1]["title"] if steps else ""
        ClusterVerification.objects.filter(pk=verification.pk).update(
            step=current[:200], steps=steps, updated_at=timezone.now()
        )

    status, code, detail = ClusterVerification.Status.SUCCEEDED, "", ""
    try:
        cluster, _ = cluster_verify(actor=None, cluster=verification.cluster, progress=progress)
        count = cluster.partitions.filter(is_up=True).count()
        accounts = selectors.tenant_account_totals(cluster)["tenant_accounts"]
        detail = (
            f"Online: {count} partition{'' if count == 1 else 's'}, "
            f"{accounts} tenant account{'' if accounts == 1 else 's'}."
        )
    except (
        errors.HostKeyMismatch,
        errors.ClusterUnreachable,
        errors.ClusterMisconfigured,
        errors.ClusterSuspended,
    ) as error:
        status, code, detail = ClusterVerification.Status.FAILED, error.code, error.detail
    except BaseException:
        # A bug or the task's time limit: the row must not stay `running`, or the page would
        # wait on it. The error itself goes on to the worker's log.
        _verification_finish(
            verification,
            ClusterVerification.Status.FAILED,
            "internal_error",
            "The verification stopped on an internal error; try again.",
        )
        raise
    _verification_finish(verification, status, code, detail)
    verification.refresh_from_db()
    return verification


def _verification_finish(
    verification: ClusterVerification, status: str, code: str, detail: str
) -> None:
    ClusterVerification.objects.filter(pk=verification.pk).update(
        status=status,
        error_code=code,
        detail=detail[:1000],
        step="Done",
        finished_at=timezone.now(),
        updated_at=timezone.now(),
    )
