"""REST endpoints of the market (API.md: Clusters, Offers, bids, purchases, Allocations).

Checks run in the house order: visible (404), allowed (403), state (409), input (400), then
the service. Clusters and offers are public to anyone signed in; bids and allocations only to
the members of the organization that holds them."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import (
    ErrorSerializer,
    idempotent,
    paginated,
    paginated_response,
    validated,
)
from computeshare.errors import NotFound, PermissionDenied, ValidationFailed
from marketplace import selectors, services
from marketplace.api.common import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from marketplace.filters import OfferFilter
from marketplace.models import Cluster, Membership
from marketplace.serializers_market import (
    AllocationFilterSerializer,
    AllocationSerializer,
    BidCreateSerializer,
    BidFilterSerializer,
    BidSerializer,
    ClusterConnectionSerializer,
    ClusterCreateSerializer,
    ClusterSerializer,
    OfferCreateSerializer,
    OfferSerializer,
    PriceHistoryFilterSerializer,
    PriceHistorySerializer,
    PurchaseSerializer,
)

ORDER_ERRORS = {**ERRORS, 402: ErrorSerializer}


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
    actor = selectors.membership_for_body(request.user, named["organization"])
    if not actor.is_admin:
        raise PermissionDenied(f"Only an admin of the organization can {what}.")
    return actor


def _owner_membership(request: Request, cluster: Cluster) -> Membership:
    """The caller's membership of the cluster's organization; 403 for anyone else (the cluster
    itself is public, so it is not hidden)."""
    membership = selectors.membership_in(request.user, cluster.organization_id)
    if membership is None:
        raise PermissionDenied("Only the cluster's owners can do this.")
    return membership


# --- Clusters ------------------------------------------------------------------------------------


def _cluster_response(request: Request, cluster: Cluster, code: int = 200) -> Response:
    context = {"owner_of": selectors.organization_ids_of(request.user)}
    return Response(ClusterSerializer(cluster, context=context).data, status=code)


class ClusterListCreateApi(APIView):
    @extend_schema(
        operation_id="clusters_list",
        responses={200: paginated(ClusterSerializer), **LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request) -> Response:
        context = {"owner_of": selectors.organization_ids_of(request.user)}
        return paginated_response(
            request, self, selectors.cluster_list(), ClusterSerializer, context=context
        )

    @extend_schema(
        operation_id="clusters_create",
        request=ClusterCreateSerializer,
        responses={201: ClusterSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
    )
    def post(self, request: Request) -> Response:
        def create() -> Response:
            actor = _admin_named_in_body(request, "register clusters")
            data = validated(ClusterCreateSerializer, request.data)
            data.pop("organization")
            cluster = services.cluster_create(actor=actor, **data)
            return _cluster_response(request, selectors.cluster_get(cluster.uuid), 201)

        return idempotent(request, create)


class ClusterDetailApi(APIView):
    @extend_schema(
        operation_id="clusters_retrieve",
        responses={200: ClusterSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, cluster_id: str) -> Response:
        return _cluster_response(request, selectors.cluster_get(cluster_id))

    @extend_schema(
        operation_id="clusters_partial_update",
        request=ClusterConnectionSerializer,
        responses={200: ClusterSerializer, **ERRORS},
        description=(
            "The owners change the connection settings (for example a rotated host key); the "
            "cluster is `unverified` until verified again."
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
        return _cluster_response(request, selectors.cluster_get(cluster_id))


class ClusterVerifyApi(APIView):
    @extend_schema(
        operation_id="clusters_verify",
        request=None,
        responses={200: ClusterSerializer, **ERRORS, 502: ErrorSerializer},
        description=(
            "Connects with the pinned host key and reads the partitions with sinfo. 409 "
            "`host_key_mismatch` when the host offers another key; 502 `cluster_unreachable` "
            "with the reason when it cannot be reached or refuses the service user."
        ),
    )
    def post(self, request: Request, cluster_id: str) -> Response:
        cluster = selectors.cluster_get(cluster_id)
        actor = _owner_membership(request, cluster)
        services.cluster_verify(actor=actor, cluster=cluster)
        return _cluster_response(request, selectors.cluster_get(cluster_id))


# --- Offers --------------------------------------------------------------------------------------

OFFER_FILTERS = [
    OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False),
    OpenApiParameter("cluster", str, description="A cluster id.", required=False),
    OpenApiParameter("partition", str, required=False),
    OpenApiParameter("status", str, enum=["open", "cleared", "cancelled"], required=False),
    OpenApiParameter("min_quantity", str, description="At least this many units left."),
    OpenApiParameter("max_price", str, description="Reserve price at most this."),
    OpenApiParameter("window_starts_before", str, description="ISO 8601"),
    OpenApiParameter("window_ends_after", str, description="ISO 8601"),
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
    @extend_schema(
        operation_id="offers_list",
        responses={200: paginated(OfferSerializer), **LIST_ERRORS},
        parameters=[*PAGE_PARAMETERS, *OFFER_FILTERS],
    )
    def get(self, request: Request) -> Response:
        filters = OfferFilter(request.query_params, queryset=selectors.offer_list())
        if not filters.is_valid():
            raise ValidationFailed(
                fields={
                    name: [str(message) for message in messages]
                    for name, messages in filters.errors.items()
                }
            )
        return paginated_response(request, self, selectors.offer_rows(filters.qs), OfferSerializer)

    @extend_schema(
        operation_id="offers_create",
        request=OfferCreateSerializer,
        responses={201: OfferSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
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
                OfferSerializer(selectors.offer_get(offer.uuid)).data,
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, create)


class OfferDetailApi(APIView):
    @extend_schema(
        operation_id="offers_retrieve",
        responses={200: OfferSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, offer_id: str) -> Response:
        return Response(OfferSerializer(selectors.offer_get(offer_id)).data)


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
        return Response(OfferSerializer(selectors.offer_get(offer_id)).data)


class OfferBuyApi(APIView):
    @extend_schema(
        operation_id="offers_buy",
        request=PurchaseSerializer,
        responses={201: AllocationSerializer, **ORDER_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
    )
    def post(self, request: Request, offer_id: str) -> Response:
        offer = selectors.offer_get(offer_id)

        def create() -> Response:
            actor = _admin_named_in_body(request, "buy capacity")
            data = validated(PurchaseSerializer, request.data)
            allocation = services.offer_buy(actor=actor, offer=offer, quantity=data["quantity"])
            return Response(
                AllocationSerializer(
                    selectors.allocation_get_for_user(request.user, allocation.uuid)
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
                BidSerializer(selectors.bid_get_for_user(request.user, bid.uuid)).data,
                status=status.HTTP_201_CREATED,
            )

        return idempotent(request, create)


class PriceHistoryApi(APIView):
    @extend_schema(
        operation_id="offers_price_history",
        responses={200: paginated(PriceHistorySerializer), **LIST_ERRORS},
        parameters=[
            *PAGE_PARAMETERS,
            OpenApiParameter("cluster", str, description="A cluster id.", required=False),
            OpenApiParameter("partition", str, required=False),
            OpenApiParameter("resource", str, enum=["cpu", "gpu"], required=False),
        ],
        description="Cleared offers, oldest first: when each auction closed, its clearing "
        "price, the units sold and the units offered.",
    )
    def get(self, request: Request) -> Response:
        data = validated(PriceHistoryFilterSerializer, request.query_params)
        cluster = None
        if "cluster" in data:
            cluster = Cluster.objects.filter(uuid=data["cluster"]).first()
            if cluster is None:
                raise ValidationFailed(fields={"cluster": ["No such cluster."]})
        history = selectors.price_history(
            cluster=cluster, partition=data.get("partition"), resource=data.get("resource")
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
        ],
    )
    def get(self, request: Request) -> Response:
        filters = validated(BidFilterSerializer, request.query_params)
        bids = selectors.bid_list_for_user(request.user)
        if "offer" in filters:
            bids = bids.filter(offer__uuid=filters["offer"])
        if "status" in filters:
            bids = bids.filter(status=filters["status"])
        if "organization" in filters:
            bids = bids.filter(organization__uuid=filters["organization"])
        return paginated_response(request, self, bids, BidSerializer)


class BidDetailApi(APIView):
    @extend_schema(
        operation_id="bids_retrieve",
        responses={200: BidSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, bid_id: str) -> Response:
        return Response(BidSerializer(selectors.bid_get_for_user(request.user, bid_id)).data)

    @extend_schema(
        operation_id="bids_withdraw",
        responses={204: None, **ERRORS},
        description="Withdraws an open bid before the auction closes and releases its hold.",
    )
    def delete(self, request: Request, bid_id: str) -> Response:
        bid = selectors.bid_get_for_user(request.user, bid_id)
        actor = selectors.membership_in(request.user, bid.organization_id)
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
        ],
    )
    def get(self, request: Request) -> Response:
        filters = validated(AllocationFilterSerializer, request.query_params)
        allocations = selectors.allocation_list_for_user(request.user)
        if "status" in filters:
            allocations = selectors.allocations_with_status(allocations, filters["status"])
        if "organization" in filters:
            allocations = allocations.filter(organization__uuid=filters["organization"])
        if "cluster" in filters:
            allocations = allocations.filter(cluster__uuid=filters["cluster"])
        return paginated_response(request, self, allocations, AllocationSerializer)


class AllocationDetailApi(APIView):
    @extend_schema(
        operation_id="allocations_retrieve",
        responses={200: AllocationSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, allocation_id: str) -> Response:
        return Response(
            AllocationSerializer(
                selectors.allocation_get_for_user(request.user, allocation_id)
            ).data
        )
