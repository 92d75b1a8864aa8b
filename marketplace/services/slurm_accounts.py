"""The Slurm accounts the platform manages for buying organizations on `managed` clusters: one
account per team and cluster, whose limit follows what the team bought there.

No transaction is open while SSH talks to a cluster: each service reads what it needs, lets go
of the database, talks to the cluster, then writes the result in one short transaction."""

from django.db.models import Sum
from django.utils import timezone

from marketplace.models import Allocation, Cluster, Organization, SlurmAccount
from marketplace.services.clusters import ssh_settings_for
from scheduler_bridge.slurm import accounts as slurm_accounts
from scheduler_bridge.slurm.errors import BridgeError
from scheduler_bridge.slurm.ssh import SSHConnection

# --- Managed Slurm accounts --------------------------------------------------------------------

MINUTES_PER_HOUR = 60


def slurm_account_plan(*, cluster: Cluster, organization: Organization) -> SlurmAccount | None:
    """Records what the organization's Slurm account on a `managed` cluster should allow: its
    allocations there, in TRES-minutes (an allocation of core-hours is a `GrpTRESMins` of
    cpu minutes; usage never decays on these accounts, so the limit is the sum of every
    allocation ever made). None on clusters that are not managed."""
    if cluster.account_mode != Cluster.AccountMode.MANAGED or cluster.backend != "slurm":
        return None
    account, _ = SlurmAccount.objects.get_or_create(
        cluster=cluster,
        organization=organization,
        defaults={"name": slurm_accounts.account_name_for(str(organization.uuid))},
    )
    # Locked before summing: a concurrent purchase of the same team on this cluster waits here
    # until this transaction commits, then sums again and sees these allocations too.
    account = SlurmAccount.objects.select_for_update().get(pk=account.pk)
    totals = dict(
        Allocation.objects.filter(cluster=cluster, organization=organization)
        .values_list("resource")
        .annotate(units=Sum("quantity"))
    )
    account.wanted_cpu_minutes = (totals.get("cpu") or 0) * MINUTES_PER_HOUR
    account.wanted_gpu_minutes = (totals.get("gpu") or 0) * MINUTES_PER_HOUR
    account.save(update_fields=["wanted_cpu_minutes", "wanted_gpu_minutes", "updated_at"])
    return account


def slurm_accounts_sync(*, cluster_id: int, account_ids: list[int] | None = None) -> int:
    """Makes the cluster enforce what its managed account rows want (all of them, or those
    named), over one SSH connection: creates each Slurm account and the service user's
    association when missing, then sets `GrpTRESMins`. Every step reads first and changes
    only what differs, so retries and the periodic reconciliation are harmless, and a limit
    changed by hand on the cluster is put back. A failure is kept on the row and raised
    (`BridgeError.is_transient` tells the task whether to retry). Returns the number synced."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if cluster.account_mode != Cluster.AccountMode.MANAGED or cluster.backend != "slurm":
        return 0
    accounts = SlurmAccount.objects.filter(cluster=cluster).select_related("organization")
    if account_ids is not None:
        accounts = accounts.filter(pk__in=account_ids)
    accounts = list(accounts.order_by("pk"))
    if not accounts:
        return 0
    current: SlurmAccount | None = None
    try:
        with SSHConnection(ssh_settings_for(cluster)) as connection:
            for current in accounts:
                # What is wanted now, not when the task was queued: a stale task must not put
                # back an older, lower limit.
                current.refresh_from_db(fields=["wanted_cpu_minutes", "wanted_gpu_minutes"])
                slurm_accounts.account_ensure(
                    connection,
                    cluster_name=cluster.slurm_cluster_name,
                    account=current.name,
                    user=cluster.ssh_user,
                    description=f"ComputeShare buyer {current.organization.uuid}",
                    organization=current.organization.name,
                )
                slurm_accounts.account_limit_set(
                    connection,
                    cluster_name=cluster.slurm_cluster_name,
                    account=current.name,
                    # A team with only GPU-hours here gets no CPU limit rather than zero.
                    cpu_minutes=current.wanted_cpu_minutes or None,
                    gpu_minutes=current.wanted_gpu_minutes or None,
                )
                # Recorded as applied only if nothing changed what is wanted meanwhile; if it
                # did, the sync queued by that change (or the reconciliation) applies it.
                SlurmAccount.objects.filter(
                    pk=current.pk,
                    wanted_cpu_minutes=current.wanted_cpu_minutes,
                    wanted_gpu_minutes=current.wanted_gpu_minutes,
                ).update(
                    applied_cpu_minutes=current.wanted_cpu_minutes,
                    applied_gpu_minutes=current.wanted_gpu_minutes,
                    synced_at=timezone.now(),
                    last_error="",
                    updated_at=timezone.now(),
                )
    except (BridgeError, ValueError) as error:
        failed = [current.pk] if current is not None else [account.pk for account in accounts]
        SlurmAccount.objects.filter(pk__in=failed).update(
            last_error=str(error)[:500], updated_at=timezone.now()
        )
        raise
    return len(accounts)


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
