"""REST endpoints of purchases, bids and allocations (docs/api.md): an admin of the
buying organization orders; only the members of the organization that holds a bid or
an allocation see it."""

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
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
from computeshare.ids import ID_PREFIX_PARAMETER
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from marketplace import selectors, services
from marketplace.api.access import admin_named_in_body
from marketplace.models import Allocation, Bid
from marketplace.serializers.orders import (
    AllocationFilterSerializer,
    AllocationSerializer,
    BidCreateSerializer,
    BidFilterSerializer,
    BidSerializer,
    PurchaseSerializer,
)
from organizations import selectors as organization_selectors

ORDER_ERRORS = {**ERRORS, 402: ErrorSerializer, 502: ErrorSerializer}


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
        actor = admin_named_in_body(request, "buy capacity")
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
            actor = admin_named_in_body(request, "bid")
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


# --- Bids and allocations: the lists of what the caller's organizations hold ---------------------


def _held_list_parameters(
    statuses: list[str], *narrowing: OpenApiParameter
) -> list[OpenApiParameter]:
    """The query of a list of what the caller's organizations hold (bids, allocations): a page,
    a status of `statuses`, an organization, the start of an id, and what else narrows it."""
    return [
        *PAGE_PARAMETERS,
        *narrowing,
        OpenApiParameter("status", str, enum=statuses, required=False),
        OpenApiParameter("organization", str, required=False),
        ID_PREFIX_PARAMETER,
    ]


def _held_list_response(
    view: APIView,
    request: Request,
    filter_serializer: type[serializers.Serializer],
    list_for_user: Callable[..., QuerySet[Any]],
    serializer: type[serializers.Serializer],
    **narrowing: str,
) -> Response:
    """One page of what the caller's organizations hold, as `_held_list_parameters` narrows
    it; `narrowing` maps each further keyword of the selector to its filter's name."""
    filters = validated(filter_serializer, request.query_params)
    rows = list_for_user(
        request_user(request),
        organization_uuid=filters.get("organization"),
        status=filters.get("status"),
        id_prefix=filters.get("id_prefix"),
        **{keyword: filters.get(name) for keyword, name in narrowing.items()},
    )
    return paginated_response(request, view, rows, serializer)


class BidListApi(APIView):
    @extend_schema(
        operation_id="bids_list",
        responses={200: paginated(BidSerializer), **LIST_ERRORS},
        parameters=_held_list_parameters(
            Bid.Status.values,
            OpenApiParameter("offer", str, description="An offer id.", required=False),
        ),
    )
    def get(self, request: Request) -> Response:
        return _held_list_response(
            self,
            request,
            BidFilterSerializer,
            selectors.bid_list_for_user,
            BidSerializer,
            offer_uuid="offer",
        )


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


class AllocationListApi(APIView):
    @extend_schema(
        operation_id="allocations_list",
        responses={200: paginated(AllocationSerializer), **LIST_ERRORS},
        parameters=_held_list_parameters(
            Allocation.Status.values, OpenApiParameter("cluster", str, required=False)
        ),
    )
    def get(self, request: Request) -> Response:
        return _held_list_response(
            self,
            request,
            AllocationFilterSerializer,
            selectors.allocation_list_for_user,
            AllocationSerializer,
            cluster_uuid="cluster",
        )


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
