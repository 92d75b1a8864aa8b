"""The Stripe webhook. The other money endpoints are per organization: `billing.api.money`."""

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing import services
from computeshare.api import ErrorSerializer


class StripeWebhookApi(APIView):
    """Stripe signs the raw body; it is verified before anything is parsed or stored."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type] = []

    @extend_schema(
        operation_id="billing_stripe_webhook",
        request={"application/json": {"type": "object"}},
        responses={
            200: inline_serializer(
                "StripeWebhookReceived",
                {"received": serializers.BooleanField(), "outcome": serializers.CharField()},
            ),
            400: ErrorSerializer,
        },
        auth=[],
        description=(
            "Stripe's events, verified against STRIPE_WEBHOOK_SECRET (5 minutes' tolerance)."
        ),
    )
    def post(self, request: Request) -> Response:
        event = services.stripe_webhook_receive(
            payload=request.body, signature_header=request.headers.get("Stripe-Signature")
        )
        return Response({"received": True, "outcome": event.outcome})
