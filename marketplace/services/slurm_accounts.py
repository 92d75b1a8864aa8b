"""The Slurm accounts the platform manages for buying organizations on `managed` clusters: one
account per team and cluster, with a NoDecay QOS of the same name whose `GrpTRESMins` follows
what the team may still use there, and the team's leased tenant moved in and out of it.

A job has one QOS, and a team's jobs run under the team's: on a cluster that sells preemptible
capacity that QOS is also made preemptable, as the market QOS of a fixed cluster is (requeued
after the same GraceTime, preempted by each of the owner's QOS that verification found:
`hpc.slurm.preemption`), before any tenant of the team runs in it.

No transaction is open while SSH talks to a cluster: each service reads what it needs, lets go
of the database, talks to the cluster, then writes the result in one short transaction."""

import logging
import math
from decimal import Decimal

from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from hpc.errors import BridgeError
from hpc.slurm import accounts as slurm_accounts
from hpc.slurm import preemption as slurm_preemption
from hpc.slurm import sacctmgr
from hpc.ssh import SSHConnection
from marketplace.models import Allocation, Cluster, Resource, SlurmAccount, TenantLease
from marketplace.services.clusters import ssh_settings_for
from organizations.models import Organization

logger = logging.getLogger(__name__)

MINUTES_PER_HOUR = 60


def _is_managed(cluster: Cluster) -> bool:
    return (
        cluster.account_mode == Cluster.AccountMode.MANAGED
        and cluster.backend == Cluster.Backend.SLURM
    )


# --- What each team's account should allow ------------------------------------------------------


def slurm_account_plan(*, cluster: Cluster, organization: Organization) -> SlurmAccount | None:
    """Records what the organization's Slurm account on a `managed` cluster should allow, in
    TRES-minutes per resource: the quantity of each of its allocations there that is not closed,
    plus what each closed one used (the hours a closed window left unused are gone), rounded up
    to whole minutes. Usage never decays on the account's QOS, so that total is a budget the
    cluster holds by itself. None on clusters that are not managed.

    Call it in the transaction that changes the team's allocations on the cluster (a purchase,
    a clearing, a window's close); what an open allocation used does not change it."""
    if not _is_managed(cluster):
        return None
    account, _ = SlurmAccount.objects.get_or_create(
        cluster=cluster,
        organization=organization,
        defaults={"name": slurm_accounts.account_name_for(str(organization.uuid))},
    )
    # Locked before summing: a concurrent purchase of the same team on this cluster waits here
    # until this transaction commits, then sums again and sees these allocations too.
    account = SlurmAccount.objects.select_for_update().get(pk=account.pk)
    totals = {
        row["resource"]: (row["open_units"] or 0) + (row["used_units"] or Decimal(0))
        for row in Allocation.objects.filter(cluster=cluster, organization=organization)
        .values("resource")
        .annotate(
            open_units=Sum("quantity", filter=Q(closed_at__isnull=True)),
            used_units=Sum("used", filter=Q(closed_at__isnull=False)),
        )
        .order_by()
    }
    account.wanted_cpu_minutes = _minutes(totals.get(Resource.CPU, 0))
    account.wanted_gpu_minutes = _minutes(totals.get(Resource.GPU, 0))
    account.save(update_fields=["wanted_cpu_minutes", "wanted_gpu_minutes", "updated_at"])
    return account


def _minutes(units: Decimal | int) -> int:
    """Core-hours or GPU-hours as whole TRES-minutes, rounded up (a metered 0.000001 hour is a
    minute the cluster must still allow)."""
    return math.ceil(Decimal(units) * MINUTES_PER_HOUR)


# --- Making the cluster enforce it ---------------------------------------------------------------


def slurm_accounts_sync(*, cluster_id: int, account_ids: list[int] | None = None) -> int:
    """Makes the cluster enforce what its managed account rows want (all of them, or those
    named), over one SSH connection: creates each account's QOS and Slurm account when missing
    (`account_ensure`), then sets the QOS's `GrpTRESMins`. Every step reads first and changes
    only what differs, so retries and the periodic reconciliation are harmless, and a limit
    changed by hand on the cluster is put back. The service user gets no association with the
    accounts (one left by an older version is removed once no job holds it). A failure is kept
    on the row and raised (`BridgeError.is_transient` tells the task whether to retry). Returns
    the number synced."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if not _is_managed(cluster):
        return 0
    rows = SlurmAccount.objects.filter(cluster=cluster).select_related("organization")
    if account_ids is not None:
        rows = rows.filter(pk__in=account_ids)
    accounts = list(rows.order_by("pk"))
    if not accounts:
        return 0
    current: SlurmAccount | None = None
    try:
        with SSHConnection(ssh_settings_for(cluster)) as connection:
            legacy = _service_user_accounts(connection, cluster)
            for current in accounts:
                _account_sync(connection, cluster, current)
                if current.name in legacy:
                    _service_user_association_remove(connection, cluster, current.name)
    except (BridgeError, ValueError) as error:
        failed = [current.pk] if current is not None else [account.pk for account in accounts]
        SlurmAccount.objects.filter(pk__in=failed).update(
            last_error=str(error)[:500], updated_at=timezone.now()
        )
        raise
    return len(accounts)


def _account_sync(connection: SSHConnection, cluster: Cluster, account: SlurmAccount) -> None:
    # What is wanted now, not when the task was queued: a stale task must not put back an
    # older limit (higher after a window closed, lower after a purchase).
    account.refresh_from_db(fields=["wanted_cpu_minutes", "wanted_gpu_minutes"])
    slurm_accounts.account_ensure(
        connection,
        cluster_name=cluster.slurm_cluster_name,
        account=account.name,
        description=f"ComputeShare buyer {account.organization.uuid}",
        organization=account.organization.name,
    )
    preemption = cluster_preemption(cluster)
    if preemption is not None:
        slurm_preemption.team_qos_preemptable(connection, qos=account.name, preemption=preemption)
    cpu_minutes, gpu_minutes = _limits(cluster, account)
    slurm_accounts.account_limit_set(
        connection,
        cluster_name=cluster.slurm_cluster_name,
        account=account.name,
        cpu_minutes=cpu_minutes,
        gpu_minutes=gpu_minutes,
    )
    # Recorded as applied only if nothing changed what is wanted meanwhile; if it did, the sync
    # queued by that change (or the reconciliation) applies it.
    now = timezone.now()
    SlurmAccount.objects.filter(
        pk=account.pk,
        wanted_cpu_minutes=account.wanted_cpu_minutes,
        wanted_gpu_minutes=account.wanted_gpu_minutes,
    ).update(
        applied_cpu_minutes=account.wanted_cpu_minutes,
        applied_gpu_minutes=account.wanted_gpu_minutes,
        synced_at=now,
        last_error="",
        updated_at=now,
    )


def cluster_preemption(cluster: Cluster) -> slurm_preemption.Preemption | None:
    """How the cluster preempts the teams' jobs, as its last verification found it; None when
    it sells no preemptible capacity (the teams' QOS are then left as they are)."""
    if not cluster.sells_preemptible or not cluster.owner_qos:
        return None
    return slurm_preemption.Preemption(
        owner_qos=tuple(cluster.owner_qos),
        grace_seconds=cluster.preemption_grace_seconds or 0,
    )


def _limits(cluster: Cluster, account: SlurmAccount) -> tuple[int | None, int | None]:
    """The (CPU, GPU) minutes the QOS holds; None leaves a TRES unlimited. A team with nothing
    left gets 0 CPU minutes and runs nothing. A team that bought only GPU-hours gets no CPU limit
    (its GPU jobs need CPUs; its GPU minutes are the limit). A cluster that does not account for
    GPUs cannot hold a GPU limit (`account_limit_set` raises when one is wanted there)."""
    cpu_minutes: int | None = account.wanted_cpu_minutes
    if not account.wanted_cpu_minutes and account.wanted_gpu_minutes:
        cpu_minutes = None
    gpu_minutes: int | None = account.wanted_gpu_minutes
    if not account.wanted_gpu_minutes and not cluster.tracks_gpus:
        gpu_minutes = None
    return cpu_minutes, gpu_minutes


def _service_user_accounts(connection: SSHConnection, cluster: Cluster) -> set[str]:
    """The team accounts the service user has an association with: none, but older versions
    ran every job as the service user in the team's account. (One command per sync.)"""
    user = slurm_accounts.slurm_user_get(
        connection, cluster_name=cluster.slurm_cluster_name, user=cluster.ssh_user
    )
    return {row.account for row in user.associations if slurm_accounts.is_team_account(row.account)}


def _service_user_association_remove(
    connection: SSHConnection, cluster: Cluster, account: str
) -> None:
    """Removes what an older version left: the service user's association with a team's
    account, once no job of it is left (until then, the next sync tries again)."""
    try:
        slurm_accounts.association_delete(
            connection,
            cluster_name=cluster.slurm_cluster_name,
            user=cluster.ssh_user,
            account=account,
        )
    except sacctmgr.AssociationInUse as busy:
        logger.info("kept the service user's association with %s for now: %s", account, busy)


def slurm_account_clusters_to_reconcile() -> list[int]:
    """The online managed clusters that have accounts: the periodic task syncs each one."""
    return list(
        Cluster.objects.filter(
            status=Cluster.Status.ONLINE,
            account_mode=Cluster.AccountMode.MANAGED,
            backend=Cluster.Backend.SLURM,
            slurm_accounts__isnull=False,
        )
        .distinct()
        .values_list("pk", flat=True)
    )


# --- A lease's tenant in and out of the team's account ----------------------------------------


def tenant_slurm_join(*, lease_id: int) -> bool:
    """On a managed cluster, moves the lease's tenant into its team's Slurm account (made and
    synced first, so that the tenant never runs without the team's limit) and records the
    lease as `prepared_at`. Returns False, changing nothing, on other clusters and for a lease
    that is no longer active. Raises the bridge's error when the cluster refuses or cannot be
    reached (`is_transient` tells which).

    A lease that ended while the tenant was being moved in is undone at once: the tenant goes
    back to the idle account, and False is returned."""
    lease = TenantLease.objects.select_related("account", "cluster", "organization").get(
        pk=lease_id
    )
    cluster = lease.cluster
    if not _is_managed(cluster) or lease.status != TenantLease.Status.ACTIVE:
        return False
    account = SlurmAccount.objects.filter(cluster=cluster, organization=lease.organization).first()
    if account is None:
        with transaction.atomic():
            account = slurm_account_plan(cluster=cluster, organization=lease.organization)
        assert account is not None
    account = SlurmAccount.objects.select_related("organization").get(pk=account.pk)
    try:
        with SSHConnection(ssh_settings_for(cluster)) as connection:
            _account_sync(connection, cluster, account)
            slurm_accounts.tenant_join(
                connection,
                cluster_name=cluster.slurm_cluster_name,
                user=lease.account.username,
                account=account.name,
            )
    except (BridgeError, ValueError) as error:
        SlurmAccount.objects.filter(pk=account.pk).update(
            last_error=str(error)[:500], updated_at=timezone.now()
        )
        raise
    now = timezone.now()
    prepared = TenantLease.objects.filter(pk=lease.pk, status=TenantLease.Status.ACTIVE).update(
        prepared_at=now, updated_at=now
    )
    if not prepared:
        _tenant_leave(lease, account.name)
        return False
    return True


def tenant_slurm_leave(*, lease_id: int) -> bool:
    """On a managed cluster, moves the lease's tenant out of its team's Slurm account (its jobs
    gone: call it after the scrub) into the cluster's idle account, which runs nothing. Returns
    False, changing nothing, on other clusters. Raises the bridge's error when the cluster
    refuses (`AssociationInUse` while jobs are left) or cannot be reached, and `AccountMissing`
    when the cluster has no idle account recorded."""
    lease = TenantLease.objects.select_related("account", "cluster", "organization").get(
        pk=lease_id
    )
    if not _is_managed(lease.cluster):
        return False
    name = (
        SlurmAccount.objects.filter(cluster=lease.cluster, organization=lease.organization)
        .values_list("name", flat=True)
        .first()
    ) or slurm_accounts.account_name_for(str(lease.organization.uuid))
    _tenant_leave(lease, name)
    return True


def _tenant_leave(lease: TenantLease, account: str) -> None:
    cluster = lease.cluster
    if not cluster.tenant_idle_account:
        raise sacctmgr.AccountMissing(
            f"cluster {cluster.name} has no idle account recorded for its tenants: "
            "verify the cluster again"
        )
    with SSHConnection(ssh_settings_for(cluster)) as connection:
        slurm_accounts.tenant_leave(
            connection,
            cluster_name=cluster.slurm_cluster_name,
            user=lease.account.username,
            account=account,
            idle_account=cluster.tenant_idle_account,
        )
