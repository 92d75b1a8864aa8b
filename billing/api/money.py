"""REST endpoints for an organization's money (docs/api.md: organizations): budget, top-ups,
ledger and earnings. Checks run in the house order: visible (404), allowed (403), input (400),
then the billing service."""

import uuid
from typing import Any

from django.urls import reverse
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
    OnboardingLinkSerializer,
    PayoutAccountSerializer,
    PayoutCreateSerializer,
    PayoutSerializer,
    TopUpCreatedSerializer,
    TopUpCreateSerializer,
    TopUpSerializer,
)
from computeshare.api import ErrorSerializer, paginated, paginated_response
from computeshare.authentication import request_user
from computeshare.errors import NotFound
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from organizations import selectors as organization_selectors

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
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        return Response(
            BudgetSerializer(billing_selectors.budget_status(membership.organization)).data
        )

    @extend_schema(
        operation_id="organization_budget_update",
        request=BudgetUpdateSerializer,
        responses={200: BudgetSerializer, **ERRORS},
    )
    def put(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
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
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
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
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        payload = TopUpCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        # Not `computeshare.api.idempotent`: it keeps a transaction open around its work, and
        # no transaction may stay open across a Stripe call. The top-up row carries the key.
        top_up = billing_services.top_up_create(
            organization=membership.organization,
            actor=request_user(request),
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
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
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
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
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
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        filters = time_range(request)
        earnings = billing_selectors.earnings_summary(
            membership.organization, since=filters.get("since"), until=filters.get("until")
        )
        return Response(EarningsSerializer(earnings).data)


# --- Payouts (owners) --------------------------------------------------------------------------


def payout_account_data(organization: Any) -> dict[str, Any]:
    """The connected account's state and the earnings' split, as `PayoutAccountSerializer`."""
    balance = billing_selectors.payout_balance(organization)
    account = billing_selectors.connected_account_get(organization)
    return {
        "connected_account": account,
        "earnings": balance.earnings,
        "held": balance.held,
        "payable": balance.payable,
        "owed": balance.owed,
        "holding_days": balance.holding_days,
        "minimum": balance.minimum,
        "currency": balance.currency,
    }


class PayoutAccountApi(APIView):
    @extend_schema(
        operation_id="organization_payout_account_retrieve",
        responses={200: PayoutAccountSerializer, **LIST_ERRORS, 403: ErrorSerializer},
        description=(
            "The organization's Stripe Connect account (null before onboarding starts) and its "
            "earnings: held for the holding period, then payable."
        ),
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        return Response(PayoutAccountSerializer(payout_account_data(membership.organization)).data)


class PayoutOnboardingApi(APIView):
    @extend_schema(
        operation_id="organization_payout_account_onboard",
        request=None,
        responses={200: OnboardingLinkSerializer, **MONEY_ERRORS},
        description=(
            "Creates the organization's Stripe Express account on first use and answers a "
            "single-use onboarding link. Stripe sends the admin back to the payouts page; the "
            "account becomes active when Stripe's `account.updated` says so."
        ),
    )
    def post(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        page = request.build_absolute_uri(
            reverse("organization-payouts", args=[membership.organization.uuid])
        )
        link = billing_services.connected_account_onboard(
            organization=membership.organization,
            actor=request_user(request),
            return_url=f"{page}?onboarding=returned",
            refresh_url=f"{page}?onboarding=expired",
        )
        return Response(OnboardingLinkSerializer(link).data)


class PayoutListCreateApi(APIView):
    @extend_schema(
        operation_id="organization_payouts_list",
        responses={200: paginated(PayoutSerializer), **LIST_ERRORS, 403: ErrorSerializer},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        return paginated_response(
            request,
            self,
            billing_selectors.payout_list(membership.organization),
            PayoutSerializer,
        )

    @extend_schema(
        operation_id="organization_payouts_create",
        request=PayoutCreateSerializer,
        responses={201: PayoutSerializer, **MONEY_ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Transfers `amount` (everything payable when left out) to the organization's "
            "Stripe account. 409 `payouts_not_enabled` before onboarding is done, 409 "
            "`amount_not_payable` past what is payable or under the minimum, 402 "
            "`outstanding_debt` while the organization owes the platform. `status` is "
            "`pending` when Stripe did not answer: it is sent again with the same key."
        ),
    )
    def post(self, request: Request, organization_id: str) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        payload = PayoutCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        # Not `computeshare.api.idempotent`: no transaction may stay open across a Stripe
        # call. The payout row carries the key.
        payout = billing_services.payout_create(
            organization=membership.organization,
            actor=request_user(request),
            amount=payload.validated_data.get("amount"),
            idempotency_key=request.headers.get("Idempotency-Key") or None,
        )
        return Response(PayoutSerializer(payout).data, status=status.HTTP_201_CREATED)


class PayoutDetailApi(APIView):
    @extend_schema(
        operation_id="organization_payouts_retrieve",
        responses={
            200: PayoutSerializer,
            401: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
        },
    )
    def get(self, request: Request, organization_id: str, payout_id: uuid.UUID) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        payout = billing_selectors.payout_get(membership.organization, payout_id)
        if payout is None:
            raise NotFound("No such payout.")
        return Response(PayoutSerializer(payout).data)
