"""REST endpoints for an organization's money (API.md: Money): budget, top-ups, ledger and
earnings. Checks run in the house order: visible (404), allowed (403), input (400), then the
billing service."""

import uuid
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import selectors as billing_selectors
from billing import services as billing_services
from billing.models import Entry
from billing.serializers import (
    BudgetSerializer,
    BudgetUpdateSerializer,
    EarningsSerializer,
    LedgerEntrySerializer,
    LedgerFilterSerializer,
    TopUpCreatedSerializer,
    TopUpCreateSerializer,
    TopUpSerializer,
)
from computeshare.api import ErrorSerializer, paginated, paginated_response
from computeshare.errors import NotFound
from marketplace import selectors
from marketplace.api.common import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS

MONEY_ERRORS = {**ERRORS, 402: ErrorSerializer, 502: ErrorSerializer}
RANGE_PARAMETERS = [
    OpenApiParameter("from", str, OpenApiParameter.QUERY, required=False, description="ISO 8601"),
    OpenApiParameter("to", str, OpenApiParameter.QUERY, required=False, description="ISO 8601"),
]


def time_range(request: Request) -> dict[str, Any]:
    """The `from` and `to` of a report's query string (as `since` and `until`), validated."""
    filters = LedgerFilterSerializer(data=request.query_params)
    filters.is_valid(raise_exception=True)
    return dict(filters.validated_data)


class BudgetApi(APIView):
    @extend_schema(
        operation_id="organization_budget_retrieve",
        responses={200: BudgetSerializer, 401: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_for_user(request.user, organization_id)
        return Response(
            BudgetSerializer(billing_selectors.budget_status(membership.organization)).data
        )

    @extend_schema(
        operation_id="organization_budget_update",
        request=BudgetUpdateSerializer,
        responses={200: BudgetSerializer, **ERRORS},
    )
    def put(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_admin(request.user, organization_id)
        payload = BudgetUpdateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        billing_services.budget_set(
            organization=membership.organization,
            monthly_limit=payload.validated_data["monthly_limit"],
            alert_thresholds=payload.validated_data["alert_thresholds"],
        )
        return Response(
            BudgetSerializer(billing_selectors.budget_status(membership.organization)).data
        )


class TopUpListCreateApi(APIView):
    @extend_schema(
        operation_id="organization_top_ups_list",
        responses={200: paginated(TopUpSerializer), **LIST_ERRORS, 403: ErrorSerializer},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_admin(request.user, organization_id)
        return paginated_response(
            request, self, billing_selectors.top_up_list(membership.organization), TopUpSerializer
        )

    @extend_schema(
        operation_id="organization_top_ups_create",
        request=TopUpCreateSerializer,
        responses={201: TopUpCreatedSerializer, **MONEY_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Creates the top-up and its Stripe PaymentIntent and returns the `client_secret` "
            "for Stripe.js. The wallet is credited when Stripe's signed webhook confirms the "
            "payment. The same Idempotency-Key returns the same top-up."
        ),
    )
    def post(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_admin(request.user, organization_id)
        payload = TopUpCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        # Not `computeshare.api.idempotent`: it keeps a transaction open around its work, and
        # no transaction may stay open across a Stripe call. The top-up row carries the key.
        top_up = billing_services.top_up_create(
            organization=membership.organization,
            actor=request.user,
            amount=payload.validated_data["amount"],
            idempotency_key=request.headers.get("Idempotency-Key") or None,
        )
        return Response(TopUpCreatedSerializer(top_up).data, status=status.HTTP_201_CREATED)


class TopUpDetailApi(APIView):
    @extend_schema(
        operation_id="organization_top_ups_retrieve",
        responses={
            200: TopUpSerializer,
            401: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def get(self, request: Request, organization_id: str, top_up_id: uuid.UUID) -> Response:
        membership = selectors.membership_get_admin(request.user, organization_id)
        top_up = billing_selectors.top_up_get(membership.organization, top_up_id)
        if top_up is None:
            raise NotFound("No such top-up.")
        return Response(TopUpSerializer(top_up).data)


class LedgerApi(APIView):
    @extend_schema(
        operation_id="organization_ledger_list",
        responses={200: paginated(LedgerEntrySerializer), **LIST_ERRORS, 403: ErrorSerializer},
        parameters=[
            *PAGE_PARAMETERS,
            *RANGE_PARAMETERS,
            OpenApiParameter(
                "kind",
                str,
                OpenApiParameter.QUERY,
                required=False,
                enum=Entry.Kind.values,
                many=True,
                explode=True,
                description="Repeat to ask for several kinds.",
            ),
        ],
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_admin(request.user, organization_id)
        filters = time_range(request)
        entries = billing_selectors.ledger_entry_list(
            membership.organization,
            since=filters.get("since"),
            until=filters.get("until"),
            kinds=sorted(filters.get("kind") or []),
        )
        return paginated_response(request, self, entries, LedgerEntrySerializer)


class EarningsApi(APIView):
    @extend_schema(
        operation_id="organization_earnings_retrieve",
        responses={200: EarningsSerializer, **LIST_ERRORS, 403: ErrorSerializer},
        parameters=RANGE_PARAMETERS,
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = selectors.membership_get_admin(request.user, organization_id)
        filters = time_range(request)
        earnings = billing_selectors.earnings_summary(
            membership.organization, since=filters.get("since"), until=filters.get("until")
        )
        return Response(EarningsSerializer(earnings).data)
