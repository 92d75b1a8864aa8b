"""The offers list writes each offer by hand (`OfferSerializer.to_representation`, from the rows
`offer_rows` shapes in SQL and Python) for speed: it must write, byte for byte, what DRF's own
field-by-field serialization of the offer's declared fields writes."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer

from marketplace.models import Capacity, Cluster, Offer, TenantAccount, window_hours
from marketplace.serializers.offers import OfferSerializer
from tests.factories import ClusterFactory, OfferFactory, PartitionFactory, UserFactory, token_for

pytestmark = pytest.mark.django_db

API = "/api/v1/offers/"


def drf_written(offer: Offer) -> dict[str, Any]:
    """The offer through DRF's generic `Serializer.to_representation`, from the model."""
    cluster, partition = offer.cluster, offer.partition
    pool = TenantAccount.objects.filter(cluster=cluster)
    reserved = offer.capacity == Capacity.RESERVED
    source = {
        "id": offer.uuid,
        "cluster": cluster.uuid,
        "cluster_name": cluster.name,
        "partition": partition.name,
        "resource": offer.resource,
        "capacity": offer.capacity,
        "quantity": offer.quantity,
        "quantity_unit": offer.quantity_unit,
        "unit_hours": window_hours(offer.window_start, offer.window_end) if reserved else 1,
        "preemption_grace_seconds": None if reserved else cluster.preemption_grace_seconds,
        "remaining": offer.quantity - offer.units_sold,
        "window_start": offer.window_start,
        "window_end": offer.window_end,
        "reserve_price": offer.reserve_price,
        "buy_now_price": offer.buy_now_price,
        "auction_closes_at": offer.auction_closes_at,
        "max_per_buyer": offer.max_per_buyer,
        "status": offer.status,
        "clearing_price": offer.clearing_price,
        "cleared_at": offer.cleared_at,
        "bid_count": offer.bid_count,
        "units_bid": offer.units_bid,
        "currency": "USD",
        "created_at": offer.created_at,
        "tenant_accounts": {
            "total": pool.exclude(status=TenantAccount.Status.RETIRED).count(),
            "free": pool.filter(status=TenantAccount.Status.AVAILABLE).count(),
        }
        if cluster.backend == Cluster.Backend.SLURM
        else None,
        "hardware": {
            "nodes": partition.nodes,
            "cpus_per_node": partition.cpus_per_node,
            "memory_per_node_mb": partition.memory_per_node_mb,
            "gpus_per_node": partition.gpus_per_node,
            "gpu_types": partition.gpu_types,
            "features": partition.features,
            "nodes_differ": partition.nodes_differ,
        },
    }
    return serializers.Serializer.to_representation(OfferSerializer(), source)


def varied_offers() -> None:
    """Offers of every shape the list writes: both resources and kinds of capacity, prices
    and limits present and absent, cleared and cancelled, on a pool with accounts of every
    state and on the demo's local backend (no pool), on partitions with and without GPUs."""
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    pooled = ClusterFactory(tenants=4, preemption_grace_seconds=300)
    statuses = ["leased", "quarantined", "retired"]
    accounts = TenantAccount.objects.filter(cluster=pooled).order_by("pk")[: len(statuses)]
    for account, status in zip(accounts, statuses, strict=True):
        account.status = status
        account.save(update_fields=["status"])
    gpus = PartitionFactory(cluster=pooled, name="gpu", gpus=16, nodes_differ=True)
    cpus = PartitionFactory(cluster=pooled, name="cpu", gpus=0, features=[])
    local = PartitionFactory(cluster=ClusterFactory(backend=Cluster.Backend.LOCAL))
    OfferFactory(partition=cpus, reserve_price=Decimal("0.125"))
    OfferFactory(
        partition=gpus,
        resource="gpu",
        capacity=Capacity.RESERVED,
        quantity=8,
        reserve_price=Decimal("3.50"),
        buy_now_price=Decimal("7.000001"),
        max_per_buyer=4,
        auction_closes_at=now + timedelta(hours=2),
        window_start=now + timedelta(hours=3),
        window_end=now + timedelta(hours=51),
    )
    OfferFactory(
        partition=gpus,
        resource="gpu",
        status=Offer.Status.CLEARED,
        units_sold=60,
        bid_count=3,
        units_bid=250,
        clearing_price=Decimal("2.25"),
        cleared_at=timezone.now(),
        auction_closes_at=timezone.now() - timedelta(minutes=5),
    )
    OfferFactory(partition=local, status=Offer.Status.CANCELLED, buy_now_price=Decimal("9"))


def test_the_list_writes_each_offer_as_drf_would():
    varied_offers()
    client_header = {"HTTP_AUTHORIZATION": f"Token {token_for(UserFactory())}"}

    answer = Client().get(f"{API}?ordering=-reserve_price", **client_header)

    assert answer.status_code == 200, answer.content
    listed = answer.json()["results"]
    offers = Offer.objects.select_related("cluster", "partition").order_by("-reserve_price", "pk")
    expected = [drf_written(offer) for offer in offers]
    assert [(row["unit_hours"], row["tenant_accounts"]) for row in listed] == [
        (48, {"total": 3, "free": 1}),
        (1, {"total": 3, "free": 1}),
        (1, None),
        (1, {"total": 3, "free": 1}),
    ]
    # Rendered again, so that the keys' order counts as well as their values.
    assert JSONRenderer().render(listed) == JSONRenderer().render(expected)


def test_one_offer_is_written_as_the_list_writes_it():
    varied_offers()
    client_header = {"HTTP_AUTHORIZATION": f"Token {token_for(UserFactory())}"}
    client = Client()
    listed = client.get(API, **client_header).json()["results"]

    for row in listed:
        detail = client.get(f"{API}{row['id']}/", **client_header)
        assert detail.content == JSONRenderer().render(row)
