"""Tenant accounts and their leases: the pools their cluster's owners see, and the leases the
periodic tasks look after."""

import datetime
from collections.abc import Iterable
from typing import Any

from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from computeshare.errors import NotFound
from marketplace.models import Cluster, TenantAccount, TenantLease


def tenant_account_list(cluster: Cluster) -> QuerySet[TenantAccount]:
    """The cluster's pool accounts by user name, each with `leased_to`: the name of the
    organization whose lease holds it (active, being scrubbed, or whose scrub failed and
    quarantined it), None when no team holds it, and that lease's `lease_status`. For the
    cluster's owners only: the caller checks that."""
    return _tenant_accounts_with_leases(TenantAccount.objects.filter(cluster=cluster))


def tenant_accounts_by_cluster(clusters: Iterable[Cluster]) -> dict[int, list[TenantAccount]]:
    """`tenant_account_list` of each cluster, by cluster id, in one query however many
    clusters (an owner's clusters page shows each pool). For the clusters' owners only."""
    ids = [cluster.pk for cluster in clusters]
    pools: dict[int, list[TenantAccount]] = {pk: [] for pk in ids}
    for account in _tenant_accounts_with_leases(TenantAccount.objects.filter(cluster__in=ids)):
        pools[account.cluster_id].append(account)
    return pools


def _tenant_accounts_with_leases(accounts: QuerySet[TenantAccount]) -> QuerySet[TenantAccount]:
    holding = TenantLease.objects.filter(
        account=OuterRef("pk"), status__in=TenantLease.HOLDING_STATES
    )
    return accounts.annotate(
        leased_to=Subquery(holding.values("organization__name")[:1]),
        lease_status=Subquery(holding.values("status")[:1]),
    ).order_by("username", "id")


def tenant_account_get(cluster: Cluster, username: str) -> TenantAccount:
    if "\x00" in username:  # from the URL (%00): PostgreSQL refuses NUL in any text
        raise NotFound("No such tenant account on this cluster.")
    try:
        return tenant_account_list(cluster).select_related("cluster").get(username=username)
    except TenantAccount.DoesNotExist as error:
        raise NotFound("No such tenant account on this cluster.") from error


def tenant_lease_organization_ids(cluster: Cluster, organization_ids: set[int]) -> set[int]:
    """Which of these organizations hold an active lease on the cluster (keep their account for
    another purchase there)."""
    if not organization_ids:
        return set()
    return set(
        TenantLease.objects.filter(
            cluster=cluster,
            organization_id__in=organization_ids,
            status=TenantLease.Status.ACTIVE,
        ).values_list("organization_id", flat=True)
    )


def tenant_lease_active_id(cluster: Any, organization: Any) -> Subquery:
    """The id of the organization's active lease on the cluster, null without one, as a column
    of another query (`cluster` and `organization` are that query's `OuterRef`s). At most one
    lease of a team on a cluster is active (a unique index)."""
    return Subquery(
        TenantLease.objects.filter(
            cluster=cluster, organization=organization, status=TenantLease.Status.ACTIVE
        )
        .order_by()
        .values("pk")[:1]
    )


def tenant_leases_to_scrub_again(*, quiet_for: datetime.timedelta) -> list[int]:
    """Leases left `ending` with no scrub running and no change for `quiet_for`: their scrub's
    message was lost (the broker down) or it gave up retrying an unreachable cluster. Their
    accounts stay out of the pool until a scrub passes."""
    now = timezone.now()
    return list(
        TenantLease.objects.filter(status=TenantLease.Status.ENDING, updated_at__lt=now - quiet_for)
        .filter(Q(scrubbing_until__isnull=True) | Q(scrubbing_until__lt=now))
        .order_by("pk")
        .values_list("pk", flat=True)
    )
