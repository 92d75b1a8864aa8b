"""REST endpoints of offers and the price history (docs/api.md). Offers and the price
history are public, as their pages are: visitors read them without a token
(`PUBLIC_READS`), and sign in to list or change an offer."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import IsAuthenticatedOrReadOnly
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, idempotent, paginated, paginated_response, validated
from computeshare.errors import NotFound, PermissionDenied, ValidationFailed
from computeshare.ids import ID_PREFIX_PARAMETER
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from marketplace import selectors, services
from marketplace.api.access import owner_membership
from marketplace.serializers.offers import (
    OfferCreateSerializer,
    OfferExtendSerializer,
    OfferSerializer,
    PriceHistoryFilterSerializer,
    PriceHistorySerializer,
)

# Reads (GET) for anyone, a token (or a session) for everything else.
PUBLIC_READS = [IsAuthenticatedOrReadOnly]


class _ClusterField(serializers.Serializer):
    cluster = serializers.UUIDField()


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
            actor = owner_membership(request, cluster)
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
        services.offer_cancel(actor=owner_membership(request, offer.cluster), offer=offer)
        return Response(OfferSerializer(selectors.offer_row_get(offer_id)).data)


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
        actor = owner_membership(request, offer.cluster)
        if not actor.is_admin:
            raise PermissionDenied("Only an admin of the owning organization can do this.")
        data = validated(OfferExtendSerializer, request.data)
        services.offer_extend(actor=actor, offer=offer, **data)
        return Response(OfferSerializer(selectors.offer_row_get(offer_id)).data)


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
