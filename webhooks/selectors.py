"""Reads of the webhooks app, each scoped to the organization the caller was checked for."""

import uuid
from typing import Any

from django.db.models import QuerySet

from computeshare.errors import NotFound
from webhooks.models import WebhookDelivery, WebhookEndpoint


def endpoint_list(organization: Any) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(organization=organization).order_by("created_at", "pk")


def endpoint_get(organization: Any, endpoint_uuid: uuid.UUID | str) -> WebhookEndpoint:
    endpoint = endpoint_list(organization).filter(uuid=endpoint_uuid).first()
    if endpoint is None:
        raise NotFound("No such webhook endpoint.")
    return endpoint


def delivery_list(endpoint: WebhookEndpoint) -> QuerySet[WebhookDelivery]:
    return (
        WebhookDelivery.objects.filter(endpoint=endpoint)
        .select_related("event")
        .order_by("-event_id", "-pk")
    )


def delivery_get(endpoint: WebhookEndpoint, delivery_uuid: uuid.UUID | str) -> WebhookDelivery:
    delivery = delivery_list(endpoint).filter(uuid=delivery_uuid).first()
    if delivery is None:
        raise NotFound("No such delivery.")
    return delivery
