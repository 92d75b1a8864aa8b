"""REST endpoints of an organization's webhooks (admins only): endpoints, their secret (shown
when made or rotated), the delivery log and redelivery. Checks in the house order: visible
(404), allowed (403), input (400), then the webhooks service."""

import uuid

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from computeshare.api import ErrorSerializer, idempotent, paginated, paginated_response, validated
from computeshare.authentication import request_user
from computeshare.openapi import ERRORS, IDEMPOTENCY_KEY, LIST_ERRORS, PAGE_PARAMETERS
from organizations import selectors as organization_selectors
from webhooks import selectors as webhook_selectors
from webhooks import services as webhook_services
from webhooks.serializers import (
    DeliverySerializer,
    EndpointCreateSerializer,
    EndpointSerializer,
    EndpointUpdateSerializer,
    EndpointWithSecretSerializer,
)

ADMIN_LIST_ERRORS = {**LIST_ERRORS, 403: ErrorSerializer}
READ_ERRORS = {401: ErrorSerializer, 403: ErrorSerializer, 404: ErrorSerializer}
TAGS = ["webhooks"]


class WebhookEndpointListCreateApi(APIView):
    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_endpoints_list",
        responses={200: paginated(EndpointSerializer), **ADMIN_LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
    )
    def get(self, request: Request, organization_id: uuid.UUID) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        return paginated_response(
            request,
            self,
            webhook_selectors.endpoint_list(membership.organization),
            EndpointSerializer,
        )

    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_endpoints_create",
        request=EndpointCreateSerializer,
        responses={201: EndpointWithSecretSerializer, **ERRORS},
        parameters=[IDEMPOTENCY_KEY],
        description=(
            "Registers an endpoint for the event types listed. The answer carries the "
            "endpoint's signing `secret` (`whsec_...`): it is shown only here and after a "
            "rotation. A URL whose host resolves to a loopback, private, link-local or "
            "otherwise reserved address is 400 `address_not_allowed`."
        ),
    )
    def post(self, request: Request, organization_id: uuid.UUID) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )

        def create() -> Response:
            data = validated(EndpointCreateSerializer, request.data)
            endpoint = webhook_services.endpoint_create(
                organization=membership.organization,
                url=data["url"],
                events=data["events"],
                description=data["description"],
                enabled=data["enabled"],
            )
            return Response(
                EndpointWithSecretSerializer(endpoint).data, status=status.HTTP_201_CREATED
            )

        return idempotent(request, create)


class WebhookEndpointDetailApi(APIView):
    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_endpoints_retrieve",
        responses={200: EndpointSerializer, **READ_ERRORS},
    )
    def get(self, request: Request, organization_id: uuid.UUID, endpoint_id: uuid.UUID) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        return Response(EndpointSerializer(endpoint).data)

    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_endpoints_update",
        request=EndpointUpdateSerializer,
        responses={200: EndpointSerializer, **ERRORS},
    )
    def patch(
        self, request: Request, organization_id: uuid.UUID, endpoint_id: uuid.UUID
    ) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        changes = validated(EndpointUpdateSerializer, request.data)
        endpoint = webhook_services.endpoint_update(endpoint=endpoint, **changes)
        return Response(EndpointSerializer(endpoint).data)

    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_endpoints_destroy",
        responses={204: None, **READ_ERRORS},
    )
    def delete(
        self, request: Request, organization_id: uuid.UUID, endpoint_id: uuid.UUID
    ) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        webhook_services.endpoint_delete(endpoint=endpoint)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookEndpointRotateSecretApi(APIView):
    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_endpoints_rotate_secret",
        request=None,
        responses={200: EndpointWithSecretSerializer, **READ_ERRORS},
        description="A new signing secret, shown in this answer only; the old one stops at once.",
    )
    def post(
        self, request: Request, organization_id: uuid.UUID, endpoint_id: uuid.UUID
    ) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        endpoint = webhook_services.endpoint_secret_rotate(endpoint=endpoint)
        return Response(EndpointWithSecretSerializer(endpoint).data)


class WebhookDeliveryListApi(APIView):
    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_deliveries_list",
        responses={200: paginated(DeliverySerializer), **ADMIN_LIST_ERRORS},
        parameters=PAGE_PARAMETERS,
        description="The endpoint's delivery log, newest event first.",
    )
    def get(self, request: Request, organization_id: uuid.UUID, endpoint_id: uuid.UUID) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        return paginated_response(
            request, self, webhook_selectors.delivery_list(endpoint), DeliverySerializer
        )


class WebhookDeliveryRedeliverApi(APIView):
    @extend_schema(
        tags=TAGS,
        operation_id="organization_webhook_deliveries_redeliver",
        request=None,
        responses={202: DeliverySerializer, **READ_ERRORS},
        description="Sends the delivery's event again now, with a fresh retry window.",
    )
    def post(
        self,
        request: Request,
        organization_id: uuid.UUID,
        endpoint_id: uuid.UUID,
        delivery_id: uuid.UUID,
    ) -> Response:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        delivery = webhook_selectors.delivery_get(endpoint, delivery_id)
        delivery = webhook_services.delivery_redeliver(delivery=delivery)
        delivery.event = webhook_selectors.delivery_get(endpoint, delivery.uuid).event
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
