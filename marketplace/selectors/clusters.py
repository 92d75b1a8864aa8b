"""Clusters: public to anyone signed in; their connection, pool and verifications are for
their owners (`viewer_is_owner`)."""

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import (
    BooleanField,
    Case,
    Count,
    IntegerField,
    OuterRef,
    Prefetch,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.utils import timezone

from computeshare.errors import NotFound
from computeshare.ids import id_prefix_q
from computeshare.models import User
from marketplace.models import Cluster, ClusterVerification, Offer, Partition, TenantAccount
from organizations.models import Organization
from organizations.selectors import organization_ids_of

# The tenant accounts that count towards how many teams a cluster serves at once (retired ones
# have left the pool); those a new team could lease now are the available ones.
_POOL_STATUSES = (
    TenantAccount.Status.AVAILABLE,
    TenantAccount.Status.LEASED,
    TenantAccount.Status.QUARANTINED,
)


def _tenant_account_count(cluster: OuterRef, statuses: tuple[str, ...]) -> Coalesce:
    """How many of the cluster's tenant accounts have one of `statuses`, as a subquery: a list
    reads its counts in its own query, on the (cluster, status) index, whatever its length."""
    counted = (
        TenantAccount.objects.filter(cluster=cluster, status__in=statuses)
        .order_by()
        .values("cluster")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return Coalesce(Subquery(counted), 0)


def tenant_account_counts(cluster: str = "pk") -> dict[str, Coalesce]:
    """Annotations `tenant_accounts_total` and `tenant_accounts_free` of the cluster that the
    field `cluster` of the annotated rows names (`pk` for clusters, `cluster` for offers)."""
    return {
        "tenant_accounts_total": _tenant_account_count(OuterRef(cluster), _POOL_STATUSES),
        "tenant_accounts_free": _tenant_account_count(
            OuterRef(cluster), (TenantAccount.Status.AVAILABLE,)
        ),
    }


def tenant_account_counts_of_offers() -> dict[str, RawSQL]:
    """`tenant_account_counts("cluster")` for a query whose base table is the offers', written
    as SQL: compiling the ORM's two subqueries was a tenth of the offers list's CPU a request,
    and a count without a GROUP BY is already 0 for a cluster without accounts. It names the
    offers table as the outer query calls it, so it serves that query only, never one nested
    in another (where Django renames the tables)."""
    accounts = TenantAccount._meta.db_table
    cluster = f'"{Offer._meta.db_table}"."cluster_id"'

    def count(statuses: tuple[str, ...]) -> RawSQL:
        marks = ", ".join(["%s"] * len(statuses))
        # Only the models' own table names go into the text; the statuses are parameters.
        return RawSQL(  # noqa: S611
            f'SELECT COUNT(*) FROM "{accounts}" pool '  # noqa: S608
            f'WHERE pool."cluster_id" = {cluster} AND pool."status" IN ({marks})',
            [str(status) for status in statuses],
            output_field=IntegerField(),
        )

    return {
        "tenant_accounts_total": count(_POOL_STATUSES),
        "tenant_accounts_free": count((TenantAccount.Status.AVAILABLE,)),
    }


def tenant_account_totals(cluster: Cluster) -> dict[str, int]:
    """`{"tenant_accounts", "free"}` of one cluster, counted as the lists count them."""
    # annotate(**mapping): the stubs cannot see the names it adds, which values() then reads.
    counts = (
        Cluster.objects.filter(pk=cluster.pk)  # type: ignore[misc]
        .annotate(**tenant_account_counts())
        .values("tenant_accounts_total", "tenant_accounts_free")
        .get()
    )
    return {
        "tenant_accounts": counts["tenant_accounts_total"],
        "free": counts["tenant_accounts_free"],
    }


def cluster_list() -> QuerySet[Cluster]:
    """Every cluster: their public fields are visible to anyone signed in, with how many teams
    each serves at once and how many more it can take now (`tenant_accounts_total`,
    `tenant_accounts_free`)."""
    return (
        Cluster.objects.select_related("organization")
        .prefetch_related(Prefetch("partitions", queryset=Partition.objects.order_by("name")))
        .annotate(**tenant_account_counts())
        .order_by("name", "id")
    )


def cluster_choices() -> QuerySet[Cluster]:
    """Every cluster with its organization, as a filter's choices name them: nothing else is
    read (a cluster's private key would be decrypted for each row)."""
    return (
        Cluster.objects.select_related("organization")
        .only("uuid", "name", "organization__name")
        .order_by("name", "id")
    )


def cluster_get(cluster_uuid: Any) -> Cluster:
    try:
        return cluster_list().get(uuid=cluster_uuid)
    except (Cluster.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such cluster.") from error


def cluster_list_for_user(user: User, *, id_prefix: str | None = None) -> QuerySet[Cluster]:
    """`cluster_list`, each cluster with `viewer_is_owner`: whether the user is a member of its
    organization. Its owners alone see its connection and pool settings and its
    verifications; this is where that is decided, the serializers render it. Narrowed to the
    clusters whose id starts with `id_prefix` when given."""
    owner_of = organization_ids_of(user)
    clusters = cluster_list()
    if id_prefix:
        clusters = clusters.filter(id_prefix_q(id_prefix))
    return clusters.annotate(
        viewer_is_owner=Case(
            When(organization_id__in=owner_of, then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        )
    )


def cluster_get_for_user(user: User, cluster_uuid: Any) -> Cluster:
    """One cluster as `cluster_list_for_user` has it, and for its owners its
    `latest_verification` (None for anyone else, who are not shown it)."""
    try:
        cluster = cluster_list_for_user(user).get(uuid=cluster_uuid)
    except (Cluster.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such cluster.") from error
    is_owner: bool = cluster.viewer_is_owner  # type: ignore[attr-defined]
    cluster.latest_verification = (  # type: ignore[attr-defined]
        cluster_verification_latest(cluster) if is_owner else None
    )
    return cluster


def cluster_find(cluster_uuid: Any) -> Cluster | None:
    """The cluster of this id, or None: a filter's lookup, without the partitions and counts
    a cluster's answer reads."""
    try:
        return Cluster.objects.select_related("organization").filter(uuid=cluster_uuid).first()
    except (ValueError, ValidationError):
        return None


def cluster_list_for_organization(
    organization: Organization, *, online_only: bool = False
) -> QuerySet[Cluster]:
    """The organization's own clusters, as its owners' pages list them; only those online
    (that can list offers) with `online_only`."""
    clusters = cluster_list().filter(organization=organization)
    if online_only:
        clusters = clusters.filter(status=Cluster.Status.ONLINE)
    return clusters


def cluster_verification_latest(cluster: Cluster) -> ClusterVerification | None:
    return cluster.verifications.order_by("-created_at", "-id").first()


# How long after a verification ended `cluster_verifications_latest` reads its cluster again.
JUST_FINISHED = timedelta(minutes=1)


def cluster_verifications_latest(clusters: Iterable[Cluster]) -> dict[int, ClusterVerification]:
    """The latest verification of each of the clusters that has one, by cluster id, in one
    query however many clusters (an owner's clusters page shows each)."""
    latest = (
        ClusterVerification.objects.filter(cluster=OuterRef("cluster"))
        .order_by("-created_at", "-id")
        .values("pk")[:1]
    )
    clusters = list(clusters)
    found = ClusterVerification.objects.filter(
        cluster__in=[cluster.pk for cluster in clusters], pk=Subquery(latest)
    )
    verifications = {verification.cluster_id: verification for verification in found}
    # The worker commits a verified cluster's status before its verification's end. One that
    # ended between the caller's read of the clusters and this one would leave the cluster as
    # it was ("Unverified" beside "Online: ..."), on a finished card that polls no more: a
    # cluster whose verification ended within the last minute is read again.
    just_now = timezone.now() - JUST_FINISHED
    for cluster in clusters:
        verification = verifications.get(cluster.pk)
        if verification is not None and (verification.finished_at or just_now) > just_now:
            cluster.refresh_from_db()
    return verifications
