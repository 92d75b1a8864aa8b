"""Reads, always scoped to the user asking. What a user may not see is `NotFound`."""

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import (
    BooleanField,
    Case,
    Count,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.db.models.query import ValuesIterable
from django.utils import timezone

from billing.models import Account
from computeshare.errors import NotFound, ValidationFailed
from computeshare.ids import id_prefix_q
from computeshare.models import User
from computeshare.numbers import MICRO_UNIT
from marketplace import capacity
from marketplace.filters import OfferFilter
from marketplace.models import (
    Allocation,
    Bid,
    Capacity,
    Cluster,
    ClusterOutage,
    ClusterVerification,
    HardwareChange,
    Offer,
    OwnerSideRunEnd,
    Partition,
    PartitionIdleHour,
    Resource,
    TenantAccount,
    TenantLease,
    backend_runs_jobs_as_tenants,
    quantity_unit,
    window_hours,
)
from organizations.models import Membership, Organization
from organizations.selectors import organization_ids_of

# --- Clusters ------------------------------------------------------------------------------------

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


def cluster_verifications_latest(clusters: Iterable[Cluster]) -> dict[int, ClusterVerification]:
    """The latest verification of each of the clusters that has one, by cluster id, in one
    query however many clusters (an owner's clusters page shows each)."""
    latest = (
        ClusterVerification.objects.filter(cluster=OuterRef("cluster"))
        .order_by("-created_at", "-id")
        .values("pk")[:1]
    )
    found = ClusterVerification.objects.filter(
        cluster__in=[cluster.pk for cluster in clusters], pk=Subquery(latest)
    )
    return {verification.cluster_id: verification for verification in found}


# --- Tenant accounts: their cluster's owners see them -------------------------------------------


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


# --- Offers ------------------------------------------------------------------------------------


def offer_list() -> QuerySet[Offer]:
    """Every offer (public: the pages show them to visitors), with what its listing shows in one
    query. The cluster's private key is left out (read, and decrypted, only by what connects)."""
    return Offer.objects.select_related("cluster", "partition").defer("cluster__ssh_private_key")


# What the offers list shows of each offer, read as plain rows: the busiest read of the site
# builds no model objects, and never reads (let alone decrypts) a cluster's private key.
OFFER_LISTING_FIELDS = (
    "uuid",
    "cluster__uuid",
    "cluster__name",
    "partition__name",
    "resource",
    "capacity",
    "quantity",
    "units_sold",
    "window_start",
    "window_end",
    "reserve_price",
    "buy_now_price",
    "auction_closes_at",
    "max_per_buyer",
    "status",
    "clearing_price",
    "cleared_at",
    "bid_count",
    "units_bid",
    "created_at",
    "partition__nodes",
    "partition__cpus_per_node",
    "partition__memory_per_node_mb",
    "partition__gpus_per_node",
    "partition__gpu_types",
    "partition__features",
    "partition__nodes_differ",
)


class _OfferRowIterable(ValuesIterable):
    """`offer_rows`' rows, each finished in Python as it is read: the values are selected as
    plain columns and shaped here, because SQL-built objects (`JSONObject`, `Case`) cost
    Django about 3 ms of expression resolving on every request of the busiest read. Being the
    queryset's iterable, it keeps the rows lazy: the paginator counts and slices as before."""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for row in super().__iter__():
            yield _offer_row_finish(row)


_HARDWARE_FIELDS = (
    "nodes",
    "cpus_per_node",
    "memory_per_node_mb",
    "gpus_per_node",
    "gpu_types",
    "features",
    "nodes_differ",
)


def _offer_row_finish(row: dict[str, Any]) -> dict[str, Any]:
    row["currency"] = settings.PLATFORM_CURRENCY
    row["quantity_unit"] = quantity_unit(row["resource"], row["capacity"])
    row["unit_hours"] = (
        window_hours(row["window_start"], row["window_end"])
        if row["capacity"] == Capacity.RESERVED
        else 1
    )
    row["preemption_grace_seconds"] = (
        row.pop("cluster__preemption_grace_seconds")
        if row["capacity"] == Capacity.PREEMPTIBLE
        else None
    )
    row["hardware"] = {name: row[f"partition__{name}"] for name in _HARDWARE_FIELDS}
    total, free = row.pop("tenant_accounts_total"), row.pop("tenant_accounts_free")
    runs_as_tenants = backend_runs_jobs_as_tenants(row.pop("cluster__backend"))
    row["tenant_accounts"] = {"total": total, "free": free} if runs_as_tenants else None
    return row


def offer_rows(offers: QuerySet[Offer]) -> QuerySet[Offer, dict[str, Any]]:
    """The offers (already filtered and ordered) as rows of `OFFER_LISTING_FIELDS`, each with
    what `OfferSerializer` renders as it is: `remaining`, `currency`, `hardware` (the
    partition's nodes) and `tenant_accounts` (`{"total", "free"}` of the cluster's pool; None
    on a cluster whose jobs do not run as tenant accounts, the demo's local backend, which
    serves any number of teams). One query, however many rows."""
    rows: QuerySet[Offer, dict[str, Any]] = offers.annotate(
        **tenant_account_counts("cluster")
    ).values(
        *OFFER_LISTING_FIELDS,
        "cluster__backend",
        "cluster__preemption_grace_seconds",
        "tenant_accounts_total",
        "tenant_accounts_free",
        remaining=Offer.REMAINING,
    )
    rows._iterable_class = _OfferRowIterable
    return rows


def offer_rows_filtered(
    params: Mapping[str, Any],
) -> tuple[QuerySet[Offer, dict[str, Any]], dict[str, Any]]:
    """The offers as the API's query `params` filter and order them (`OfferFilter`), as
    `offer_rows`, with the filters as understood; `ValidationFailed` names each one not valid."""
    filters = OfferFilter(params, queryset=_offer_rows_unfiltered())
    if not filters.is_valid():
        errors = filters.errors.items()
        raise ValidationFailed(fields={name: list(map(str, each)) for name, each in errors})
    return filters.qs, dict(filters.form.cleaned_data)


# `offer_rows` of every offer, built once per process and cloned by each request's filters:
# building its joins, values and subqueries was a sixth of the offers list's CPU a request.
_offer_rows_unfiltered = functools.cache(lambda: offer_rows(offer_list()))


def offer_row_get(offer_uuid: Any) -> dict[str, Any]:
    """One offer as `offer_rows` reads each (public, as the offers are)."""
    try:
        return offer_rows(offer_list().filter(uuid=offer_uuid)).get()
    except (Offer.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such offer.") from error


def offer_get(offer_uuid: Any) -> Offer:
    """One offer, with its cluster's `tenant_accounts_total` and `tenant_accounts_free`."""
    try:
        return offer_list().annotate(**tenant_account_counts("cluster")).get(uuid=offer_uuid)
    except (Offer.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such offer.") from error


def offer_list_for_organization(organization: Organization) -> QuerySet[Offer]:
    """The offers on the organization's own clusters, newest first: an owner's listing."""
    return offer_list().filter(cluster__organization=organization).order_by("-created_at", "-id")


def price_history(
    *,
    cluster: Cluster | None = None,
    partition: str | None = None,
    resource: str | None = None,
    capacity: str = Capacity.PREEMPTIBLE,
) -> QuerySet[Offer]:
    """Cleared offers of one kind of capacity over time, oldest first: public. The two kinds'
    prices are never mixed (a reserved core-hour is dearer than a preemptible one)."""
    offers = Offer.objects.filter(status=Offer.Status.CLEARED, capacity=capacity).select_related(
        "cluster", "partition"
    )
    if cluster is not None:
        offers = offers.filter(cluster=cluster)
    if partition:
        offers = offers.filter(partition__name=partition)
    if resource:
        offers = offers.filter(resource=resource)
    return offers.order_by("auction_closes_at", "pk")


# --- Bids and allocations: only the holding organization's members see them --------------------


def bid_list_for_user(
    user: User,
    *,
    offer: Offer | None = None,
    organization: Organization | None = None,
    offer_uuid: uuid.UUID | None = None,
    organization_uuid: uuid.UUID | None = None,
    status: str | None = None,
    id_prefix: str | None = None,
) -> QuerySet[Bid]:
    """The bids of the user's organizations, newest first; narrowed to an offer, an
    organization (each by object or by id), a status or the start of the bid's id when
    given."""
    bids = Bid.objects.filter(
        organization__in=Membership.objects.filter(user=user).values("organization")
    )
    if offer is not None:
        bids = bids.filter(offer=offer)
    if offer_uuid is not None:
        bids = bids.filter(offer__uuid=offer_uuid)
    if organization is not None:
        bids = bids.filter(organization=organization)
    if organization_uuid is not None:
        bids = bids.filter(organization__uuid=organization_uuid)
    if status is not None:
        bids = bids.filter(status=status)
    if id_prefix:
        bids = bids.filter(id_prefix_q(id_prefix))
    return bids.select_related(
        "offer__cluster", "offer__partition", "organization", "hold"
    ).order_by("-created_at", "-id")


def bid_get_for_user(user: User, bid_uuid: Any) -> Bid:
    try:
        return bid_list_for_user(user).get(uuid=bid_uuid)
    except (Bid.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such bid.") from error


def allocation_list_for_user(
    user: User,
    *,
    organization: Organization | None = None,
    organization_uuid: uuid.UUID | None = None,
    cluster_uuid: uuid.UUID | None = None,
    status: str | None = None,
    id_prefix: str | None = None,
) -> QuerySet[Allocation]:
    """The allocations of the user's organizations, the latest window first; narrowed to an
    organization (by object or by id), a cluster, a window's status or the start of the
    allocation's id when given."""
    allocations = Allocation.objects.filter(
        organization__in=Membership.objects.filter(user=user).values("organization")
    )
    if organization is not None:
        allocations = allocations.filter(organization=organization)
    if organization_uuid is not None:
        allocations = allocations.filter(organization__uuid=organization_uuid)
    if cluster_uuid is not None:
        allocations = allocations.filter(cluster__uuid=cluster_uuid)
    if status is not None:
        allocations = allocations_with_status(allocations, status)
    if id_prefix:
        allocations = allocations.filter(id_prefix_q(id_prefix))
    return allocations.select_related(
        "organization", "offer", "cluster", "partition", "hold"
    ).order_by("-window_start", "-id")


def allocation_get_for_user(user: User, allocation_uuid: Any) -> Allocation:
    try:
        return allocation_list_for_user(user).get(uuid=allocation_uuid)
    except (Allocation.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such allocation.") from error


# The member's row, read beside the allocation it may submit to (`allocation_get_for_member`).
_MEMBER_COLUMNS = [field.attname for field in Membership._meta.concrete_fields]
# What a submission never reads of the cluster: how to reach and verify it, what it sells (the
# worker reads the cluster afresh to submit).
_CLUSTER_NOT_FOR_SUBMISSION = [
    f"cluster__{name}"
    for name in (
        "created_at",
        "updated_at",
        "status_detail",
        "ssh_host",
        "ssh_port",
        "ssh_user",
        "ssh_host_key",
        "ssh_private_key",
        "host_key_fingerprint",
        "slurm_version",
        "verified_at",
        "tenant_group",
        "sftp_server",
        "tracks_gpus",
        "sells_preemptible",
        "preemptible_refusal",
        "owner_qos",
        "sells_reserved",
        "reserved_refusal",
    )
]


def allocation_get_for_member(user: User, allocation_uuid: Any) -> tuple[Allocation, Membership]:
    """The allocation `allocation_get_for_user` finds (NotFound otherwise), with what a job's
    submission reads of it (its organization, cluster and partition; not the cluster's
    connection, verification or sales) and the user's membership of its organization, in one
    query: a job's
    submission asks this on every POST. The membership is the row a join on the team's
    members finds, the one the visibility rests on."""
    try:
        allocation = (
            Allocation.objects.filter(uuid=allocation_uuid, organization__memberships__user=user)
            .annotate(
                **{
                    f"member_{column}": F(f"organization__memberships__{column}")
                    for column in _MEMBER_COLUMNS
                }
            )
            .select_related("organization", "cluster", "partition")
            .defer(*_CLUSTER_NOT_FOR_SUBMISSION)
            .get()
        )
    except (Allocation.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such allocation.") from error
    member = Membership.from_db(
        allocation._state.db,
        _MEMBER_COLUMNS,
        [getattr(allocation, f"member_{column}") for column in _MEMBER_COLUMNS],
    )
    member.organization = allocation.organization
    member.user = user
    return allocation, member


def allocation_list_open(organization: Organization) -> QuerySet[Allocation]:
    """The organization's allocations whose window has not ended (upcoming and active), the
    soonest to start first, with what a listing shows of them."""
    return (
        Allocation.objects.filter(
            organization=organization, closed_at__isnull=True, window_end__gt=timezone.now()
        )
        .select_related("cluster", "partition")
        .defer("cluster__ssh_private_key")
        .order_by("window_start", "id")
    )


def allocations_with_status(allocations: QuerySet[Allocation], status: str) -> QuerySet[Allocation]:
    """Filters by the window's status as `Allocation.status_at` computes it, in SQL."""
    now = timezone.now()
    if status == Allocation.Status.CLOSED:
        return allocations.filter(Q(closed_at__isnull=False) | Q(window_end__lte=now))
    open_now = allocations.filter(closed_at__isnull=True, window_end__gt=now)
    if status == Allocation.Status.ACTIVE:
        return open_now.filter(window_start__lte=now)
    return open_now.filter(window_start__gt=now)


def allocation_resubmit_target(
    user: User, allocation: Allocation, *, organization_id: int
) -> Allocation | None:
    """Where a copy of a job on `allocation` can run now: that allocation while its window is
    open, else the organization's active allocation of the same partition that ends last."""
    active = allocations_with_status(
        allocation_list_for_user(user).filter(
            organization_id=organization_id, partition_id=allocation.partition_id
        ),
        Allocation.Status.ACTIVE,
    )
    return active.filter(pk=allocation.pk).first() or active.order_by("-window_end").first()


def auctions_due(now: datetime.datetime | None = None) -> list[int]:
    """The open offers whose auction close time has passed, oldest first."""
    return list(
        Offer.objects.filter(status=Offer.Status.OPEN, auction_closes_at__lte=now or timezone.now())
        .order_by("auction_closes_at", "pk")
        .values_list("pk", flat=True)
    )


def offer_ids_by_uuid(offer_uuids: Iterable[str]) -> dict[int, uuid.UUID]:
    """The offers of these ids that exist: their database ids and their public ids."""
    return dict(Offer.objects.filter(uuid__in=list(offer_uuids)).values_list("pk", "uuid"))


def offer_uuids(offer_ids: Iterable[int]) -> dict[int, uuid.UUID]:
    """The public ids of these offers, by database id."""
    return dict(Offer.objects.filter(pk__in=list(offer_ids)).values_list("pk", "uuid"))


def allocations_due(now: datetime.datetime | None = None) -> list[int]:
    """The allocations not closed yet whose window has ended, the earliest end first."""
    return list(
        Allocation.objects.filter(closed_at__isnull=True, window_end__lte=now or timezone.now())
        .order_by("window_end", "pk")
        .values_list("pk", flat=True)
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


# --- Capacity: what each partition has sold per hour (marketplace/capacity.py) ------------------

# The calendar answers at most this many hours at once (five weeks).
CALENDAR_MAX_HOURS = 24 * 35


def capacity_loads(
    partition: Partition,
    resource: str,
    start: datetime.datetime,
    end: datetime.datetime,
    *,
    excluding: Offer | None = None,
) -> list[capacity.Load]:
    """What the partition's offers of `resource` take between `start` and `end`: an open offer
    its quantity, a cleared one what it sold, each spread over its window from when it was
    listed; cancelled offers nothing. A reserved offer takes its cores (GPUs) in every hour of
    its window; on the CPU calendar a reserved GPU block also takes the cores of the whole
    nodes it holds."""
    same_resource = Q(resource=resource)
    if resource == Resource.CPU:
        same_resource |= Q(resource=Resource.GPU, capacity=Capacity.RESERVED)
    offers = Offer.objects.filter(
        same_resource, partition=partition, window_end__gt=start, window_start__lt=end
    ).filter(Q(status=Offer.Status.OPEN) | Q(status=Offer.Status.CLEARED, units_sold__gt=0))
    if excluding is not None:
        offers = offers.exclude(pk=excluding.pk)
    rows = offers.values_list(
        "window_start",
        "window_end",
        "created_at",
        "auction_closes_at",
        "status",
        "quantity",
        "units_sold",
        "capacity",
        "resource",
    )
    loads = []
    for (
        window_start,
        window_end,
        created_at,
        closes_at,
        status,
        quantity,
        units_sold,
        kind,
        of,
    ) in rows:
        units = quantity if status == Offer.Status.OPEN else units_sold
        bought = units_sold
        if kind == Capacity.RESERVED:
            units *= window_hours(window_start, window_end)
            bought *= window_hours(window_start, window_end)
            if of != resource:  # a GPU block's nodes, on the CPU calendar
                units = units // max(partition.gpus_per_node, 1) * partition.cpus_per_node
                bought = bought // max(partition.gpus_per_node, 1) * partition.cpus_per_node
        loads.append(
            offer_load(
                window_start=window_start,
                window_end=window_end,
                listed_at=offer_listed_at(created_at, closes_at),
                units=units,
                bought=min(bought, units),
            )
        )
    return loads


def offer_load(
    *,
    window_start: datetime.datetime,
    window_end: datetime.datetime,
    listed_at: datetime.datetime,
    units: int,
    bought: int = 0,
) -> capacity.Load:
    """An offer's units, spread over the part of its window that could be sold when listed
    (from the hour it was listed in: the same for the check at listing and every later read)."""
    return capacity.Load(
        start=max(window_start, capacity.hour_floor(listed_at)),
        end=window_end,
        units=units,
        bought=bought,
    )


def offer_listed_at(
    created_at: datetime.datetime, auction_closes_at: datetime.datetime
) -> datetime.datetime:
    """When an offer was listed, for the calendar: its row's creation, and never after its
    auction closed (no offer is listed after that). A row whose times were moved back after it
    was written (the demo's history is written so) would otherwise count as listed in the last
    minutes of its window, and every unit it sold would fall into those minutes' hour."""
    return min(created_at, auction_closes_at)


def partition_capacity(partition: Partition, resource: str) -> int:
    """What the partition has in each hour: its CPUs, or its GPUs, as verification read them."""
    return partition.gpus if resource == Resource.GPU else partition.cpus


def partition_get(cluster: Cluster, name: str) -> Partition:
    # The name comes from the URL, where %00 reaches us: PostgreSQL refuses NUL in any text.
    partition = None if "\x00" in name else cluster.partitions.filter(name=name).first()
    if partition is None:
        raise NotFound("The cluster has no partition of this name.")
    return partition


def partition_calendar(
    partition: Partition, resource: str, start: datetime.datetime, end: datetime.datetime
) -> list[capacity.Hour]:
    """Each hour from `start` to `end` (at most `CALENDAR_MAX_HOURS`) with what is sold of the
    partition's `resource` and what it has: public, as the offers are."""
    end = min(end, capacity.hour_floor(start) + CALENDAR_MAX_HOURS * capacity.HOUR)
    return capacity.calendar(
        capacity_loads(partition, resource, start, end),
        partition_capacity(partition, resource),
        start,
        end,
    )


# --- Dashboards: what an owner listed and sold, per day ----------------------------------------


def days_of(since: datetime.date, until: datetime.date) -> list[datetime.date]:
    """Every day from `since` to `until`, both included."""
    return [since + datetime.timedelta(days=index) for index in range((until - since).days + 1)]


def spread_over_days(
    quantity: Any, start: datetime.datetime, end: datetime.datetime, days: list[datetime.date]
) -> dict[datetime.date, Decimal]:
    """`quantity` units usable evenly from `start` to `end`, as the share of them in each UTC
    day of `days`: an allocation of 240 core-hours over ten days is 24 a day."""
    seconds = Decimal((end - start).total_seconds())
    if seconds <= 0:
        return {}
    shares = {}
    for day in days:
        day_start = datetime.datetime.combine(day, datetime.time(), tzinfo=datetime.UTC)
        overlap = min(end, day_start + ONE_DAY) - max(start, day_start)
        if overlap.total_seconds() > 0:
            shares[day] = Decimal(quantity) * Decimal(overlap.total_seconds()) / seconds
    return shares


ONE_DAY = datetime.timedelta(days=1)


def owner_capacity_by_day(
    organization: Organization, days: list[datetime.date]
) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (cluster id, resource) of the organization's clusters: the units its offers listed
    and its allocations sold in each of `days`, each spread evenly over its window. Two
    queries (offers, allocations), whatever their number; cancelled offers listed nothing."""
    if not days:
        return {}
    first = datetime.datetime.combine(days[0], datetime.time(), tzinfo=datetime.UTC)
    last = datetime.datetime.combine(days[-1], datetime.time(), tzinfo=datetime.UTC) + ONE_DAY
    overlapping = {"window_start__lt": last, "window_end__gt": first}
    series: dict[tuple[int, str], dict[str, Any]] = {}

    def add(rows: Any, kind: str) -> None:
        for row in rows:
            key = (row["cluster_id"], row["resource"])
            entry = series.setdefault(
                key,
                {
                    "cluster_name": row["cluster__name"],
                    "cluster_uuid": row["cluster__uuid"],
                    "resource": row["resource"],
                    "offered": {},
                    "sold": {},
                },
            )
            units = row["quantity"]
            if row.get("capacity") == Capacity.RESERVED:  # an offer's cores, each for the window
                units *= window_hours(row["window_start"], row["window_end"])
            shares = spread_over_days(units, row["window_start"], row["window_end"], days)
            for day, share in shares.items():
                entry[kind][day] = entry[kind].get(day, Decimal(0)) + share

    fields = ("cluster_id", "cluster__name", "cluster__uuid", "resource", "quantity")
    add(
        Offer.objects.filter(cluster__organization=organization, **overlapping)
        .exclude(status=Offer.Status.CANCELLED)
        .values(*fields, "window_start", "window_end", "capacity")
        .order_by(),
        "offered",
    )
    add(
        Allocation.objects.filter(cluster__organization=organization, **overlapping)
        .values(*fields, "window_start", "window_end")
        .order_by(),
        "sold",
    )
    return series


def owner_sold_value(organization: Organization, *, since: datetime.datetime) -> Decimal:
    """What teams bought on the organization's clusters since `since` (allocations, by when they
    were bought), at their prices: what the owner sold, of which teams pay only what they use.
    One query."""
    total = Allocation.objects.filter(
        cluster__organization=organization, created_at__gte=since
    ).aggregate(total=Sum(F("quantity") * F("unit_price")))["total"]
    return total or Decimal(0)


def owner_reserved_cores_by_day(
    organization: Organization, days: list[datetime.date]
) -> dict[datetime.date, Decimal]:
    """The cores (GPUs) the organization's clusters held in reserved blocks for teams, on
    average over each UTC day of `days` (a block of 4 cores for 6 hours is 1 that day). One
    query."""
    if not days:
        return {}
    first = datetime.datetime.combine(days[0], datetime.time(), tzinfo=datetime.UTC)
    last = datetime.datetime.combine(days[-1], datetime.time(), tzinfo=datetime.UTC) + ONE_DAY
    held: dict[datetime.date, Decimal] = {}
    rows = Allocation.objects.filter(
        cluster__organization=organization,
        capacity=Capacity.RESERVED,
        window_start__lt=last,
        window_end__gt=first,
    ).values_list("quantity", "window_start", "window_end")
    for core_hours, start, end in rows:
        for day, share in spread_over_days(core_hours, start, end, days).items():
            held[day] = held.get(day, Decimal(0)) + share / 24
    return held


# --- The owners' track record: computed from what the platform saw, never typed in ---------------


@dataclasses.dataclass(frozen=True)
class TrackRecord:
    """What a cluster's owners' side did over the last `days` days (since `since`): runs of
    teams' jobs it ended, by Slurm's state; the time the platform could not reach the cluster,
    and how much of it fell while some team had hours bought there; hardware that changed
    between verifications."""

    cluster_id: int
    since: datetime.datetime
    days: int
    run_ends: dict[str, int]
    outages: int
    unreachable_seconds: int
    unreachable_while_sold_seconds: int
    hardware_changes: int

    @property
    def runs_ended_by_owner(self) -> int:
        return sum(self.run_ends.values())

    @property
    def is_clean(self) -> bool:
        return not (self.runs_ended_by_owner or self.outages or self.hardware_changes)

    @property
    def run_ends_in_words(self) -> list[tuple[str, int]]:
        """The runs it ended by how, in words rather than Slurm's state names."""
        return [
            (RUN_ENDS_IN_WORDS.get(state, state), count) for state, count in self.run_ends.items()
        ]


# How each state the owner's side ends a run in reads on the pages.
RUN_ENDS_IN_WORDS = {
    "NODE_FAIL": "a node failed",
    "BOOT_FAIL": "a node did not boot",
    "PREEMPTED": "preempted",
}


def _overlap_seconds(
    start: datetime.datetime, end: datetime.datetime, windows: list[tuple[Any, Any]]
) -> int:
    """Seconds of [start, end) covered by the union of `windows`."""
    covered = 0.0
    cursor = start
    for window_start, window_end in sorted(windows):
        lower, upper = max(window_start, cursor), min(window_end, end)
        if upper > lower:
            covered += (upper - lower).total_seconds()
            cursor = upper
    return int(covered)


def track_records(
    cluster_ids: set[int], now: datetime.datetime | None = None
) -> dict[int, TrackRecord]:
    """The track record of each cluster, in a few queries however many clusters (the offers
    page shows one per offer)."""
    now = now or timezone.now()
    days = settings.TRACK_RECORD_DAYS
    since = now - datetime.timedelta(days=days)
    if not cluster_ids:
        return {}
    run_ends: dict[int, dict[str, int]] = {cluster_id: {} for cluster_id in cluster_ids}
    for cluster_id, state, count in (
        OwnerSideRunEnd.objects.filter(cluster_id__in=cluster_ids, ended_at__gte=since)
        .values("cluster_id", "scheduler_state")
        .annotate(count=Count("pk"))
        .values_list("cluster_id", "scheduler_state", "count")
        .order_by()
    ):
        run_ends[cluster_id][state] = count
    changes = dict(
        HardwareChange.objects.filter(cluster_id__in=cluster_ids, created_at__gte=since)
        .values("cluster_id")
        .annotate(count=Count("pk"))
        .values_list("cluster_id", "count")
        .order_by()
    )
    outages = [
        (cluster_id, max(started, since), ended or now)
        for cluster_id, started, ended in ClusterOutage.objects.filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=since), cluster_id__in=cluster_ids
        ).values_list("cluster_id", "started_at", "ended_at")
    ]
    sold: dict[int, list[tuple[Any, Any]]] = {}
    if outages:
        overlapping = Q()
        for cluster_id, start, end in outages:
            overlapping |= Q(cluster_id=cluster_id, window_start__lt=end, window_end__gt=start)
        for cluster_id, window_start, window_end in Allocation.objects.filter(
            overlapping
        ).values_list("cluster_id", "window_start", "window_end"):
            sold.setdefault(cluster_id, []).append((window_start, window_end))
    unreachable = dict.fromkeys(cluster_ids, 0)
    while_sold = dict.fromkeys(cluster_ids, 0)
    counted = dict.fromkeys(cluster_ids, 0)
    for cluster_id, start, end in outages:
        counted[cluster_id] += 1
        unreachable[cluster_id] += int((end - start).total_seconds())
        while_sold[cluster_id] += _overlap_seconds(start, end, sold.get(cluster_id, []))
    return {
        cluster_id: TrackRecord(
            cluster_id=cluster_id,
            since=since,
            days=days,
            run_ends=dict(sorted(run_ends[cluster_id].items())),
            outages=counted[cluster_id],
            unreachable_seconds=unreachable[cluster_id],
            unreachable_while_sold_seconds=while_sold[cluster_id],
            hardware_changes=changes.get(cluster_id, 0),
        )
        for cluster_id in cluster_ids
    }


def track_record(cluster: Cluster, now: datetime.datetime | None = None) -> TrackRecord:
    return track_records({cluster.pk}, now)[cluster.pk]


def hardware_change_list(cluster: Cluster, limit: int = 10) -> list[HardwareChange]:
    return list(HardwareChange.objects.filter(cluster=cluster).order_by("-created_at")[:limit])


def outage_list(cluster: Cluster, limit: int = 10) -> list[ClusterOutage]:
    return list(ClusterOutage.objects.filter(cluster=cluster).order_by("-started_at")[:limit])


# --- Idle time and the offers suggested from it --------------------------------------------------

IDLE_PATTERN_DAYS = 28
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclasses.dataclass(frozen=True)
class IdleCell:
    """One hour of the week over the last weeks: the mean idle units in it, as a share of what
    the partition had, over `samples` samples."""

    weekday: int
    hour: int
    samples: int
    mean_idle: float
    share: float


def idle_pattern(
    partition: Partition, resource: str, now: datetime.datetime | None = None
) -> list[list[IdleCell | None]]:
    """The partition's idle CPUs (or GPUs) by weekday (Monday first) and hour (UTC) over the
    last `IDLE_PATTERN_DAYS` days; None where no sample fell."""
    now = now or timezone.now()
    sums: dict[tuple[int, int], list[float]] = {}
    rows = PartitionIdleHour.objects.filter(
        partition=partition, hour__gte=now - datetime.timedelta(days=IDLE_PATTERN_DAYS)
    ).values_list("hour", "samples", "idle_cpus", "idle_gpus", "cpus", "gpus")
    is_gpu = resource == Resource.GPU
    for hour, samples, idle_cpus, idle_gpus, cpus, gpus in rows:
        key = (hour.weekday(), hour.hour)
        total = sums.setdefault(key, [0, 0.0, 0.0])
        total[0] += samples
        total[1] += idle_gpus if is_gpu else idle_cpus
        total[2] += samples * (gpus if is_gpu else cpus)
    grid: list[list[IdleCell | None]] = [[None] * 24 for _ in range(7)]
    for (weekday, hour_of_day), (sampled, idle, had) in sums.items():
        grid[weekday][hour_of_day] = IdleCell(
            weekday=weekday,
            hour=hour_of_day,
            samples=int(sampled),
            mean_idle=idle / sampled,
            share=idle / had if had else 0.0,
        )
    return grid


@dataclasses.dataclass(frozen=True)
class OfferSuggestion:
    """An offer for the partition's next idle window: `per_hour` units in each of its hours
    (what was idle at least, on average, in those hours of the week, and is not sold yet),
    at the reserve price the price history suggests."""

    partition: Partition
    resource: str
    window_start: datetime.datetime
    window_end: datetime.datetime
    per_hour: int
    quantity: int
    auction_closes_at: datetime.datetime
    reserve_price: Decimal | None
    price_basis: str


# An hour counts as idle when, on average over the last weeks, at least this share of the
# partition was idle in it; a suggested window is at most a day, and starts at least two hours
# ahead, so that its auction has an hour.
IDLE_SHARE = 0.25
SUGGESTION_MAX_HOURS = 24
SUGGESTION_LEAD = datetime.timedelta(hours=2)
PRICE_SAMPLE = 10


def reserve_price_suggestion(partition: Partition, resource: str) -> tuple[Decimal | None, str]:
    """The median clearing price of the partition's last `PRICE_SAMPLE` auctions that sold
    something; without any, of the last auctions of this resource anywhere on the market."""
    for scope, offers in (
        (
            "this partition",
            price_history(cluster=partition.cluster, partition=partition.name, resource=resource),
        ),
        (f"every {resource} offer on the market", price_history(resource=resource)),
    ):
        prices = sorted(
            offers.filter(clearing_price__isnull=False)
            .order_by("-auction_closes_at", "-pk")
            .values_list("clearing_price", flat=True)[:PRICE_SAMPLE]
        )
        if prices:
            middle = len(prices) // 2
            median = (
                prices[middle]
                if len(prices) % 2
                else ((prices[middle - 1] + prices[middle]) / 2).quantize(MICRO_UNIT)
            )
            return median, (
                f"the median clearing price of the last {len(prices)} "
                f"auction{'s' if len(prices) != 1 else ''} of {scope}"
            )
    return None, "no auction has cleared on the market yet: set a reserve price yourself"


def offer_suggestion(
    partition: Partition, resource: str, now: datetime.datetime | None = None
) -> OfferSuggestion | None:
    """The next window, within a week, of consecutive hours in which the partition was idle
    over the last weeks (`IDLE_SHARE`), at most a day long, sized to what was idle in its
    leanest hour and is not sold yet; None when no such hour comes."""
    now = now or timezone.now()
    pattern = idle_pattern(partition, resource, now)
    first = capacity.hour_floor(now + SUGGESTION_LEAD)
    hours = [first + index * capacity.HOUR for index in range(24 * 7)]
    free = {
        hour.start: hour.free
        for hour in partition_calendar(partition, resource, first, hours[-1] + capacity.HOUR)
    }

    def idle_units(hour: datetime.datetime) -> int:
        cell = pattern[hour.weekday()][hour.hour]
        if cell is None or cell.share < IDLE_SHARE:
            return 0
        return int(min(cell.mean_idle, free.get(hour, 0)))

    window: list[tuple[datetime.datetime, int]] = []
    for hour in hours:
        units = idle_units(hour)
        if units >= 1:
            window.append((hour, units))
            if len(window) == SUGGESTION_MAX_HOURS:
                break
        elif window:
            break
    if not window:
        return None
    per_hour = min(units for _, units in window)
    start, end = window[0][0], window[-1][0] + capacity.HOUR
    price, basis = reserve_price_suggestion(partition, resource)
    return OfferSuggestion(
        partition=partition,
        resource=resource,
        window_start=start,
        window_end=end,
        per_hour=per_hour,
        quantity=per_hour * len(window),
        auction_closes_at=start - capacity.HOUR,
        reserve_price=price,
        price_basis=basis,
    )


@dataclasses.dataclass(frozen=True)
class NavigationWallet:
    """What the site's header shows a member: one organization's money available."""

    organization_uuid: uuid.UUID
    organization_name: str
    available: Decimal
    currency: str


def navigation_wallet_get(
    user: User, organization_uuid: uuid.UUID | str | None = None
) -> NavigationWallet | None:
    """The wallet of the organization the page is about when the user is a member of it,
    else of the user's first organization by name (the dashboard's own choice); None for a
    user in no organization. One query, whatever the number of organizations."""
    organizations = Organization.objects.filter(memberships__user=user)
    order: list[Any] = ["name", "id"]
    try:
        current = uuid.UUID(str(organization_uuid)) if organization_uuid else None
    except ValueError:
        current = None
    if current is not None:
        order.insert(0, Case(When(uuid=current, then=Value(0)), default=Value(1)))
    available = Account.objects.filter(
        organization=OuterRef("pk"), kind=Account.Kind.AVAILABLE
    ).values("balance")[:1]
    row = (
        organizations.annotate(available=Subquery(available))
        .order_by(*order)
        .values("uuid", "name", "available")
        .first()
    )
    if row is None:
        return None
    return NavigationWallet(
        organization_uuid=row["uuid"],
        organization_name=row["name"],
        available=row["available"] if row["available"] is not None else Decimal(0),
        currency=settings.PLATFORM_CURRENCY,
    )
