"""REST endpoints of the market (docs/api.md: clusters, offers, bids, allocations).

Checks run in the house order: visible (404), allowed (403), state (409), input (400), then
the service. Offers and the price history are public, as their pages are: visitors read them
without a token (`PUBLIC_READS`), and sign in to list, bid or buy. Clusters are public to
anyone signed in; bids and allocations only to the members of the organization that holds
them."""

from typing import Any

from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticatedOrReadOnly
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import (
    ErrorSerializer,
    idempotent,
    idempotent_replay,
    paginated,
    paginated_response,
    validated,
)
from computeshare.authentication import request_user
from computeshare.errors import NotFound, PermissionDenied, ValidationFailed
from computeshare.ids import ID_PREFIX_PARAMETER
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from marketplace import capacity, selectors, services
from marketplace.models import Cluster
from marketplace.serializers.market import (
    TRACK_RECORD_HOW,
    AllocationFilterSerializer,
    AllocationSerializer,
    BidCreateSerializer,
    BidFilterSerializer,
    BidSerializer,
    CalendarFilterSerializer,
    CalendarSerializer,
    ClusterConnectionSerializer,
    ClusterCreateSerializer,
    ClusterDetailSerializer,
    ClusterFilterSerializer,
    ClusterSerializer,
    IdleFilterSerializer,
    IdleTimeSerializer,
    OfferCreateSerializer,
    OfferExtendSerializer,
    OfferSerializer,
    PriceHistoryFilterSerializer,
    PriceHistorySerializer,
    PurchaseSerializer,
    TenantAccountSerializer,
    TrackRecordSerializer,
)
from organizations import selectors as organization_selectors
from organizations.models import Membership

ORDER_ERRORS = {**ERRORS, 402: ErrorSerializer, 502: ErrorSerializer}
# Reads (GET) for anyone, a token (or a session) for everything else.
PUBLIC_READS = [IsAuthenticatedOrReadOnly]


class _OrganizationField(serializers.Serializer):
    organization = serializers.UUIDField()


class _ClusterField(serializers.Serializer):
    cluster = serializers.UUIDField()


def _admin_named_in_body(request: Request, what: str) -> Membership:
    """The caller's admin membership of the organization the body names, checked before the
    rest of the body (house order: allowed, 403, before input, 400). Not a member: 400 on
    `organization`; a member but not an admin: 403."""
    data = request.data if isinstance(request.data, dict) else {}
    named = validated(_OrganizationField, {"organization": data.get("organization")})
    actor = organization_selectors.membership_for_body(request_user(request), named["organization"])
    if not actor.is_admin:
        raise PermissionDenied(f"Only an admin of the organization can {what}.")
    return actor


def _owner_membership(request: Request, cluster: Cluster) -> Membership:
    """The caller's membership of the cluster's organization; 403 for anyone else (the cluster
    itself is public, so it is not hidden)."""
    membership = organization_selectors.membership_in(
        request_user(request), cluster.organization_id
    )
    if membership is None:
        raise PermissionDenied("Only the cluster's owners can do this.")
    return membership


# --- Clusters ------------------------------------------------------------------------------------


def _cluster_response(request: Request, cluster_uuid: Any, code: int = 200) -> Response:
    cluster = selectors.cluster_get_for_user(request_user(request), cluster_uuid)
    return Response(ClusterSerializer(cluster).data, status=code)


def _cluster_detail_response(
    request: Request, cluster_uuid: Any, code: int = 200, headers: dict[str, str] | None = None
) -> Response:
    """One cluster; to its owners with its latest verification."""
    cluster = selectors.cluster_get_for_user(request_user(request), cluster_uuid)
    return Response(ClusterDetailSerializer(cluster).data, status=code, headers=headers)


class ClusterListCreateApi(APIView):
    @extend_schema(
        operation_id="clusters_list",
        responses={200: paginated(ClusterSerializer), **LIST_ERRORS},
        parameters=[*PAGE_PARAMETERS, ID_PREFIX_PARAMETER],
        description=(
            "Every cluster with its partitions and `tenant_accounts`: how many teams it serves "
            "at once (`total`) and how many more it can take now (`free`). The owners also see "
            "their connection and pool settings."
        ),
    )
    def get(self, request: Request) -> Response:
        filters = validated(ClusterFilterSerializer, request.query_params)
        clusters = selectors.cluster_list_for_user(
            request_user(request), id_prefix=filters.get("id_prefix")
        )
        return paginated_response(request, self, clusters, ClusterSerializer)

    @extend_schema(
        operation_id="clusters_create",
        request=ClusterCreateSerializer,
        responses={201: ClusterSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Registers a cluster, `unverified`, with its host key pinned. `tenant_group` names "
            "the Unix group of the tenant accounts scripts/cluster-setup made on it (each team "
            "works as one of them); `sftp_server` the SFTP server program of its sshd_config."
        ),
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            actor = _admin_named_in_body(request, "register clusters")
            data = validated(ClusterCreateSerializer, request.data)
            data.pop("organization")
            cluster = services.cluster_create(actor=actor, **data)
            return _cluster_response(request, cluster.uuid, 201)

        return idempotent(request, create)


class ClusterDetailApi(APIView):
    @extend_schema(
        operation_id="clusters_retrieve",
        responses={200: ClusterDetailSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description=(
            "A cluster. Its owners also see its latest `verification`: `status` `running` while "
            "a worker verifies it, with the steps as they run, then `succeeded` or `failed` "
            "with the outcome's `code` and `detail`."
        ),
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        return _cluster_detail_response(request, cluster_id)

    @extend_schema(
        operation_id="clusters_partial_update",
        request=ClusterConnectionSerializer,
        responses={200: ClusterDetailSerializer, **ERRORS},
        description=(
            "The owners change the connection settings (for example a rotated host key) or the "
            "pool's (`tenant_group`, `sftp_server`); the cluster is `unverified` until verified "
            "again. A host that resolves to an address the platform does not connect to "
            "(loopback, private, link-local, metadata...) is 400 `address_not_allowed`."
        ),
    )
    def patch(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = _owner_membership(request, cluster)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of the owning organization can do this.")
        changes = validated(ClusterConnectionSerializer, request.data)
        if unknown := set(request.data) - set(ClusterConnectionSerializer().fields):
            raise ValidationFailed(
                fields={name: ["Cannot be changed."] for name in sorted(unknown)}
            )
        services.cluster_connection_update(actor=actor, cluster=cluster, **changes)
        return _cluster_detail_response(request, cluster_id)


class ClusterVerifyApi(APIView):
    @extend_schema(
        operation_id="clusters_verify",
        request=None,
        responses={202: ClusterDetailSerializer, **ERRORS, 429: ErrorSerializer},
        description=(
            "Queues a verification in a worker and answers at once: 202 with the cluster and "
            "its `verification` (`status: running`), and `Location`, the cluster, whose GET "
            "follows it. A verification already running is returned, not queued again. The "
            "worker checks every capability the platform will use, as the steps of "
            "`verification.steps`, in order: `connect` (with the pinned host key), `partitions` "
            "(sinfo), `queries` (squeue and sacct), `visibility` (the service user sees every "
            "tenant's jobs), in managed mode `operator` and `limits` (GrpTRESMins on QOS that "
            "never decay), `pool` (the members of `tenant_group`), `sudo` (to each tenant "
            "without a password and to nobody else), `homes` (only their owner reads them), "
            "`sftp` (as a tenant), in managed mode `idle` (idle tenants sit in an account that "
            "runs nothing), `sbatch` (a `--test-only` submission as a tenant), `gpus` "
            "(accounting records GPUs), `proctrack` (Slurm ends every process of a job), "
            "`nodes` (a job as a tenant on each compute node: the login node's uid, the shared "
            "home, no other users' processes; a node no job reached is a warning), "
            "`preemption` and `reservations` (the two kinds of capacity; either may fail while "
            "the other passes). "
            "Each step is `running`, `passed`, `failed` or `warning` (the cluster is usable; "
            "`detail` says what is at risk). When all pass, the partitions and the pool are "
            "stored, the cluster is `online` and the verification `succeeded`. Otherwise it "
            "`failed` with its `code`: `cluster_unreachable` (no SSH connection could be "
            "opened: one reason whatever kept it from opening), `host_key_mismatch` (the "
            "cluster is marked so), `cluster_misconfigured` (it answered, but the check "
            "`failed_step` failed). Refused at once: 409 `cluster_suspended`; 429 `throttled` "
            "(with `Retry-After`) past the organization's `CLUSTER_VERIFY_RATE`."
        ),
    )
    def post(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = _owner_membership(request, cluster)
        services.cluster_verification_start(actor=actor, cluster=cluster)
        location = reverse("api-cluster", args=[cluster.uuid])
        return _cluster_detail_response(
            request,
            cluster_id,
            status.HTTP_202_ACCEPTED,
            headers={"Location": location},
        )


# --- Tenant accounts: the cluster's owners --------------------------------------------------------


class TenantAccountListApi(APIView):
    @extend_schema(
        operation_id="clusters_tenant_accounts_list",
        responses={200: paginated(TenantAccountSerializer), **LIST_ERRORS, 403: ErrorSerializer},
        parameters=PAGE_PARAMETERS,
        description=(
            "The cluster's pool of tenant accounts, by user name, for its owners (members of "
            "its organization; 403 for anyone else): each account's `status` (`available`, "
            "`leased`, `quarantined` when a scrub left something behind, with the reason in "
            "`status_detail`, `retired` when it left the tenant group), the organization whose "
            "lease holds it, and when it was last scrubbed."
        ),
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        _owner_membership(request, cluster)
        return paginated_response(
            request, self, selectors.tenant_account_list(cluster), TenantAccountSerializer
        )


class TenantAccountScrubApi(APIView):
    @extend_schema(
        operation_id="clusters_tenant_accounts_scrub",
        request=None,
        responses={202: TenantAccountSerializer, **ERRORS},
        description=(
            "An admin of the cluster's owners, having looked at a quarantined account (and "
            "perhaps cleaned it by hand), asks for another scrub: a worker cancels the "
            "tenant's jobs, ends its processes and removes its files, and returns the account "
            "to the pool if nothing is left (it stays quarantined, with the new reason, "
            "otherwise). 202 with the account as it is now; 409 "
            "`tenant_account_not_quarantined` for an account that is not quarantined; 404 for "
            "a user name not in the cluster's pool."
        ),
    )
    def post(self, request: Request, cluster_id: str, username: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = _owner_membership(request, cluster)
        account = selectors.tenant_account_get(cluster, username)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of the cluster's owners can do this.")
        services.tenant_account_rescrub(actor=actor, account=account)
        return Response(
            TenantAccountSerializer(selectors.tenant_account_get(cluster, username)).data,
            status=status.HTTP_202_ACCEPTED,
        )


# --- Offers --------------------------------------------------------------------------------------

OFFER_FILTERS = [
    ID_PREFIX_PARAMETER,
    OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False),
    OpenApiParameter(
        "capacity",
        str,
        enum=["preemptible", "reserved"],
        required=False,
        description="Preemptible hours, or reserved blocks of whole cores.",
    ),
    OpenApiParameter("cluster", str, description="A cluster id.", required=False),
    OpenApiParameter("partition", str, required=False),
    OpenApiParameter("status", str, enum=["open", "cleared", "cancelled"], required=False),
    OpenApiParameter("min_quantity", str, description="At least this many units left."),
    OpenApiParameter("max_price", str, description="Reserve price at most this."),
    OpenApiParameter("window_starts_before", str, description="ISO 8601"),
    OpenApiParameter("window_ends_after", str, description="ISO 8601"),
    OpenApiParameter(
        "q",
        str,
        description="Words each found in the cluster, owner, partition, GPU types or "
        "node features.",
    ),
    OpenApiParameter("gpu_type", str, description="A GPU type any node has, such as `a100`."),
    OpenApiParameter("feature", str, description="A node feature any node has, such as `ib`."),
    OpenApiParameter("min_cpus_per_node", int, description="CPUs of the smallest node."),
    OpenApiParameter("min_memory_per_node_gb", str, description="Memory of the smallest node."),
    OpenApiParameter("min_gpus_per_node", int, description="GPUs of the smallest node."),
    OpenApiParameter(
        "ordering",
        str,
        enum=[
            "reserve_price",
            "-reserve_price",
            "window_start",
            "-window_start",
            "auction_closes_at",
            "-auction_closes_at",
        ],
    ),
]


class OfferListCreateApi(APIView):
    permission_classes = PUBLIC_READS

    @extend_schema(
        operation_id="offers_list",
        responses={200: paginated(OfferSerializer), **LIST_ERRORS},
        parameters=[*PAGE_PARAMETERS, *OFFER_FILTERS],
        description=(
            "Offers with their public aggregate demand and, in `tenant_accounts`, how many "
            "teams the offer's cluster serves at once and how many more it can take now. "
            "Public: no token needed, as the offers pages need no log-in."
        ),
    )
    def get(self, request: Request) -> Response:
        rows, filters = selectors.offer_rows_filtered(request.query_params)
        return paginated_response(
            request,
            self,
            rows,
            OfferSerializer,
            count_key=f"offers:{sorted(filters.items())!r}",
        )

    @extend_schema(
        operation_id="offers_create",
        request=OfferCreateSerializer,
        responses={201: OfferSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "The owners list capacity of an online cluster's partition. 409 "
            "`cluster_not_online`; 409 `gpu_not_metered` for a GPU offer on a cluster whose "
            "accounting does not record GPUs (gres/gpu is not in AccountingStorageTRES: its "
            "GPU-hours could not be metered). 409 `partition_capacity_exceeded` when, with the "
            "offers already open or sold on the partition, some hour of the window would be "
            "sold past what the partition has (`extra.hours`: each such hour's `start`, what "
            "the other offers take, `sold`, what this one would, `asked`, and `capacity`; "
            "`extra.hour_count` counts them all); see the partition's calendar. 409 "
            "`capacity_not_sold` for a kind of capacity the cluster's last verification found "
            "Slurm unable to hold (`extra.reason`)."
        ),
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            body = request.data if isinstance(request.data, dict) else {}
            named = validated(_ClusterField, {"cluster": body.get("cluster")})
            try:
                cluster = selectors.cluster_get(named["cluster"])
            except NotFound as error:
                raise ValidationFailed(fields={"cluster": ["No such cluster."]}) from error
            actor = _owner_membership(request, cluster)
            if not actor.is_admin:
                raise PermissionDenied("Only an admin of the owning organization can do this.")
            data = validated(OfferCreateSerializer, request.data)
            data.pop("cluster")
            offer = services.offer_create(actor=actor, cluster=cluster, **data)
            return Response(
                OfferSerializer(selectors.offer_row_get(offer.uuid)).data,
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, create)


class OfferDetailApi(APIView):
    permission_classes = PUBLIC_READS

    @extend_schema(
        operation_id="offers_retrieve",
        responses={200: OfferSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description=(
            "One offer. `tenant_accounts.free` is 0 when every tenant account of its cluster is "
            "another team's: a team without an account there is then refused a purchase or a "
            "win until one frees. Public: no token needed."
        ),
    )
    def get(self, request: Request, offer_id: str) -> Response:
        return Response(OfferSerializer(selectors.offer_row_get(offer_id)).data)


class OfferCancelApi(APIView):
    @extend_schema(
        operation_id="offers_cancel",
        request=None,
        responses={200: OfferSerializer, **ERRORS},
        description="The owners withdraw an open offer that has no bids and no sales.",
    )
    def post(self, request: Request, offer_id: str) -> Response:
        offer = selectors.offer_get(offer_id)
        services.offer_cancel(actor=_owner_membership(request, offer.cluster), offer=offer)
        return Response(OfferSerializer(selectors.offer_row_get(offer_id)).data)


class OfferBuyApi(APIView):
    @extend_schema(
        operation_id="offers_buy",
        request=PurchaseSerializer,
        responses={201: AllocationSerializer, **ORDER_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Buys units at the buy-now price: 201 an allocation, its price held on the wallet. "
            "The organization leases one of the cluster's tenant accounts for as long as it "
            "has an allocation or a job there. 409 `offer_not_open`, `insufficient_quantity`, "
            "`max_per_buyer_exceeded`; 409 `tenant_accounts_exhausted` when every tenant "
            "account of the cluster is leased to other teams (`extra.tenant_accounts`, "
            "`extra.free`); 402 `insufficient_funds`, `budget_exceeded`. A reserved offer's "
            "`quantity` is whole cores (GPUs): Slurm holds them for the team by a reservation "
            "before any money moves; 409 `reservation_refused` when it will not (the cores are "
            "already reserved or in use: `extra.reason` has Slurm's words), nothing sold or "
            "held; 502 `cluster_unreachable` when the cluster could not be asked."
        ),
    )
    def post(self, request: Request, offer_id: str) -> Response:
        offer = selectors.offer_get(offer_id)
        if (replayed := idempotent_replay(request)) is not None:
            return replayed
        actor = _admin_named_in_body(request, "buy capacity")
        data = validated(PurchaseSerializer, request.data)
        # A reserved block is held by the scheduler outside the transaction that writes the
        # purchase (and its idempotency record), and given back if no allocation takes it.
        with services.purchase_block(actor=actor, offer=offer, quantity=data["quantity"]) as block:

            def create() -> Response:
                allocation = services.offer_buy(
                    actor=actor, offer=offer, quantity=data["quantity"], block=block
                )
                return Response(
                    AllocationSerializer(
                        selectors.allocation_get_for_user(request_user(request), allocation.uuid)
                    ).data,
                    status=status.HTTP_201_CREATED,
                )

            return idempotent(request, create)


class OfferBidCreateApi(APIView):
    @extend_schema(
        operation_id="offers_bids_create",
        request=BidCreateSerializer,
        responses={201: BidSerializer, **ORDER_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Places a sealed bid, its price x units held on the wallet until the auction "
            "clears. A bid of an organization that holds no tenant account on the cluster can "
            "win only if an account is free when the auction clears (it loses otherwise, and "
            "its hold is released). 400 when `price` is below the reserve; 402 "
            "`insufficient_funds`, `budget_exceeded`; 409 `offer_not_open`."
        ),
    )
    def post(self, request: Request, offer_id: str) -> Response:
        offer = selectors.offer_get(offer_id)

        def create() -> Response:
            actor = _admin_named_in_body(request, "bid")
            data = validated(BidCreateSerializer, request.data)
            bid = services.bid_place(
                actor=actor,
                offer=offer,
                quantity=data["quantity"],
                price=data["price"],
                min_quantity=data.get("min_quantity"),
            )
            return Response(
                BidSerializer(selectors.bid_get_for_user(request_user(request), bid.uuid)).data,
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, create)


class PriceHistoryApi(APIView):
    permission_classes = PUBLIC_READS

    @extend_schema(
        operation_id="offers_price_history",
        responses={200: paginated(PriceHistorySerializer), **LIST_ERRORS},
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("cluster", str, description="A cluster id.", required=False),
            OpenApiParameter("partition", str, required=False),
            OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False),
            OpenApiParameter(
                "capacity",
                str,
                enum=["preemptible", "reserved"],
                required=False,
                description="The kind of capacity (default `preemptible`): one at a time, "
                "their prices are not mixed.",
            ),
        ],
        description="Cleared offers of one kind of capacity, oldest first: when each auction "
        "closed, its clearing price (per core-hour or GPU-hour), the units sold and the units "
        "offered. Public: no token needed.",
    )
    def get(self, request: Request) -> Response:
        data = validated(PriceHistoryFilterSerializer, request.query_params)
        cluster = None
        if "cluster" in data:
            cluster = selectors.cluster_find(data["cluster"])
            if cluster is None:
                raise ValidationFailed(fields={"cluster": ["No such cluster."]})
        history = selectors.price_history(
            cluster=cluster,
            partition=data.get("partition"),
            resource=data.get("resource"),
            capacity=data["capacity"],
        )
        return paginated_response(request, self, history, PriceHistorySerializer)


# --- Bids ----------------------------------------------------------------------------------------


class BidListApi(APIView):
    @extend_schema(
        operation_id="bids_list",
        responses={200: paginated(BidSerializer), **LIST_ERRORS},
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("offer", str, description="An offer id.", required=False),
            OpenApiParameter(
                "status",
                str,
                enum=["open", "won", "partially_won", "lost", "withdrawn"],
                required=False,
            ),
            OpenApiParameter("organization", str, required=False),
            ID_PREFIX_PARAMETER,
        ],
    )
    def get(self, request: Request) -> Response:
        filters = validated(BidFilterSerializer, request.query_params)
        bids = selectors.bid_list_for_user(
            request_user(request),
            offer_uuid=filters.get("offer"),
            organization_uuid=filters.get("organization"),
            status=filters.get("status"),
            id_prefix=filters.get("id_prefix"),
        )
        return paginated_response(request, self, bids, BidSerializer)


class BidDetailApi(APIView):
    @extend_schema(
        operation_id="bids_retrieve",
        responses={200: BidSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, bid_id: str) -> Response:
        return Response(
            BidSerializer(selectors.bid_get_for_user(request_user(request), bid_id)).data
        )

    @extend_schema(
        operation_id="bids_withdraw",
        responses={204: None, **ERRORS},
        description="Withdraws an open bid before the auction closes and releases its hold.",
    )
    def delete(self, request: Request, bid_id: str) -> Response:
        bid = selectors.bid_get_for_user(request_user(request), bid_id)
        actor = organization_selectors.membership_in(request_user(request), bid.organization_id)
        assert actor is not None  # the bid is visible only to its organization's members
        services.bid_withdraw(actor=actor, bid=bid)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Allocations ---------------------------------------------------------------------------------


class AllocationListApi(APIView):
    @extend_schema(
        operation_id="allocations_list",
        responses={200: paginated(AllocationSerializer), **LIST_ERRORS},
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("status", str, enum=["upcoming", "active", "closed"], required=False),
            OpenApiParameter("organization", str, required=False),
            OpenApiParameter("cluster", str, required=False),
            ID_PREFIX_PARAMETER,
        ],
    )
    def get(self, request: Request) -> Response:
        filters = validated(AllocationFilterSerializer, request.query_params)
        allocations = selectors.allocation_list_for_user(
            request_user(request),
            organization_uuid=filters.get("organization"),
            cluster_uuid=filters.get("cluster"),
            status=filters.get("status"),
            id_prefix=filters.get("id_prefix"),
        )
        return paginated_response(request, self, allocations, AllocationSerializer)


class AllocationDetailApi(APIView):
    @extend_schema(
        operation_id="allocations_retrieve",
        responses={200: AllocationSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, allocation_id: str) -> Response:
        return Response(
            AllocationSerializer(
                selectors.allocation_get_for_user(request_user(request), allocation_id)
            ).data
        )


# --- Capacity ------------------------------------------------------------------------------------


class PartitionCalendarApi(APIView):
    @extend_schema(
        operation_id="clusters_partitions_calendar",
        parameters=[
            OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False),
            OpenApiParameter(
                "start", str, description="ISO 8601; the hour it falls in comes first. Now."
            ),
            OpenApiParameter("hours", int, description="How many hours, 1 to 840; 168."),
        ],
        responses={
            200: CalendarSerializer,
            400: ErrorSerializer,
            401: ErrorSerializer,
            404: ErrorSerializer,
        },
        description=(
            "The partition's capacity calendar: for each hour, the units (core-hours, or "
            "GPU-hours with `resource=gpu`) that its offers take, open or sold, and what is "
            "free of the `capacity_per_hour` its verified CPUs or GPUs give. An offer's units "
            "are spread evenly over its window from the hour it was listed; a cleared offer "
            "counts what it sold, a cancelled one nothing. Listing or extending an offer that "
            "would take any hour past its capacity is refused with 409 "
            "`partition_capacity_exceeded` and those hours. Public, as the offers are."
        ),
    )
    def get(self, request: Request, cluster_id: str, partition: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        found = selectors.partition_get(cluster, partition)
        data = validated(CalendarFilterSerializer, request.query_params)
        start = capacity.hour_floor(data.get("start") or timezone.now())
        hours = selectors.partition_calendar(
            found, data["resource"], start, start + data["hours"] * capacity.HOUR
        )
        return Response(
            CalendarSerializer(
                {
                    "cluster": cluster.uuid,
                    "partition": found.name,
                    "resource": data["resource"],
                    "capacity_per_hour": selectors.partition_capacity(found, data["resource"]),
                    "hours": [
                        {
                            "start": hour.start,
                            "sold": capacity.units_text(hour.sold),
                            "free": capacity.units_text(hour.free),
                        }
                        for hour in hours
                    ],
                }
            ).data
        )


class OfferExtendApi(APIView):
    @extend_schema(
        operation_id="offers_extend",
        request=OfferExtendSerializer,
        responses={200: OfferSerializer, **ERRORS},
        description=(
            "The owners grow an open offer whose auction has not closed: a larger `quantity`, "
            "and, while it has no bids and no sales, a later `window_end`; neither shrinks "
            "(400). 409 `partition_capacity_exceeded` when the grown offer would take an hour "
            "of the partition past its capacity (`extra.hours`: each hour's `start`, `sold` "
            "by the other offers, `asked` by this one, `capacity`); 409 `offer_not_extendable` "
            "for an offer closed to orders, or a window with bids or sales."
        ),
    )
    def post(self, request: Request, offer_id: str) -> Response:
        offer = selectors.offer_get(offer_id)
        actor = _owner_membership(request, offer.cluster)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of the owning organization can do this.")
        data = validated(OfferExtendSerializer, request.data)
        services.offer_extend(actor=actor, offer=offer, **data)
        return Response(OfferSerializer(selectors.offer_row_get(offer_id)).data)


class TrackRecordApi(APIView):
    @extend_schema(
        operation_id="clusters_track_record",
        responses={200: TrackRecordSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
        description="The owners' track record on this cluster, public. " + TRACK_RECORD_HOW,
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        record = selectors.track_record(cluster)
        return Response(
            TrackRecordSerializer(
                {
                    "cluster": cluster.uuid,
                    "days": record.days,
                    "since": record.since,
                    "runs_ended_by_owner": record.runs_ended_by_owner,
                    "run_ends": record.run_ends,
                    "outages": record.outages,
                    "unreachable_seconds": record.unreachable_seconds,
                    "unreachable_while_sold_seconds": record.unreachable_while_sold_seconds,
                    "hardware_changes": record.hardware_changes,
                    "how_computed": TRACK_RECORD_HOW,
                }
            ).data
        )


class PartitionIdleApi(APIView):
    @extend_schema(
        operation_id="clusters_partitions_idle",
        parameters=[OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False)],
        responses={200: IdleTimeSerializer, **ERRORS},
        description=(
            "The owners (members of the cluster's organization; 403 for anyone else): when the "
            "partition has been idle over the last four weeks, by weekday and hour (UTC), from "
            "one sinfo of the cluster per `IDLE_SAMPLE_SECONDS` with the poll; and `suggestion`, "
            "an offer for its next idle window (null when none comes in the coming week): the "
            "units idle and unsold in its leanest hour, in each hour, at the median clearing "
            "price of the partition's last auctions (else of the market's). List it with "
            "POST /offers/."
        ),
    )
    def get(self, request: Request, cluster_id: str, partition: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        found = selectors.partition_get(cluster, partition)
        _owner_membership(request, cluster)
        resource = validated(IdleFilterSerializer, request.query_params)["resource"]
        grid = selectors.idle_pattern(found, resource)
        suggestion = selectors.offer_suggestion(found, resource)
        return Response(
            IdleTimeSerializer(
                {
                    "cluster": cluster.uuid,
                    "partition": found.name,
                    "resource": resource,
                    "days": selectors.IDLE_PATTERN_DAYS,
                    "hours": [
                        {
                            "weekday": cell.weekday,
                            "hour": cell.hour,
                            "samples": cell.samples,
                            "mean_idle": f"{cell.mean_idle:.2f}",
                            "share": f"{cell.share:.4f}",
                        }
                        for row in grid
                        for cell in row
                        if cell is not None
                    ],
                    "suggestion": None
                    if suggestion is None
                    else {
                        "window_start": suggestion.window_start,
                        "window_end": suggestion.window_end,
                        "per_hour": suggestion.per_hour,
                        "quantity": suggestion.quantity,
                        "auction_closes_at": suggestion.auction_closes_at,
                        "reserve_price": None
                        if suggestion.reserve_price is None
                        else f"{suggestion.reserve_price:.6f}",
                        "price_basis": suggestion.price_basis,
                    },
                }
            ).data
        )
