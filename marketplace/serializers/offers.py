"""Input and output shapes of the offer and price history endpoints (docs/api.md).
They translate; the services decide."""

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from billing.serializers import Money
from computeshare.numbers import MICRO_PLACES, DecimalString
from marketplace.models import Capacity, Offer, Resource
from marketplace.serializers.clusters import TenantAccountsSerializer
from marketplace.serializers.fields import Units, WholeUnits, money_text, time_text


class HardwareSerializer(serializers.Serializer):
    """The partition's nodes as the cluster's last verification read them."""

    nodes = serializers.IntegerField()
    cpus_per_node = serializers.IntegerField(help_text="Of the smallest node.")
    memory_per_node_mb = serializers.IntegerField(help_text="Of the smallest node, in MB.")
    gpus_per_node = serializers.IntegerField(help_text="Of the smallest node.")
    gpu_types = serializers.ListField(child=serializers.CharField(), help_text="Of any node.")
    features = serializers.ListField(child=serializers.CharField(), help_text="Of any node.")
    nodes_differ = serializers.BooleanField(
        help_text="Whether the nodes differ: types and features are then not on every node."
    )


class OfferSerializer(serializers.Serializer):
    """An offer as everyone signed in sees it, with the public aggregate demand. Written out by
    hand in `to_representation`: the offers list is the busiest read of the site."""

    id = serializers.UUIDField()
    cluster = serializers.UUIDField()
    cluster_name = serializers.CharField()
    partition = serializers.CharField()
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(
        choices=Capacity.choices,
        help_text="`preemptible`: core- or GPU-hours on idle cores, at a low priority; the "
        "owner's own jobs preempt yours (SIGTERM, then after `preemption_grace_seconds` the "
        "job is requeued; a preempted run is not charged). `reserved`: whole cores (or GPUs, "
        "in whole nodes) held for you alone by a Slurm reservation for the whole window.",
    )
    quantity = serializers.CharField(help_text="In `quantity_unit`.")
    quantity_unit = serializers.ChoiceField(
        choices=["core-hours", "GPU-hours", "cores", "GPUs"],
        help_text="What `quantity`, `remaining`, bids and purchases count: hours of "
        "preemptible capacity, or cores (GPUs) held for the whole window.",
    )
    unit_hours = serializers.IntegerField(
        help_text="Core-hours (GPU-hours) in one unit of `quantity`: 1, or a reserved window's "
        "hours. Prices are always per core-hour (GPU-hour): a unit costs price x unit_hours."
    )
    preemption_grace_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="Preemptible: how long a job has between SIGTERM and its requeue when the "
        "owner's jobs take the cores back; null for reserved capacity, or where unknown.",
    )
    remaining = serializers.CharField(help_text="Units still for sale.")
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    reserve_price = serializers.CharField(help_text="Per unit.")
    buy_now_price = serializers.CharField(allow_null=True, help_text="Per unit.")
    auction_closes_at = serializers.DateTimeField()
    max_per_buyer = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=Offer.Status.choices)
    clearing_price = serializers.CharField(allow_null=True)
    cleared_at = serializers.DateTimeField(allow_null=True)
    bid_count = serializers.IntegerField()
    units_bid = serializers.CharField()
    currency = serializers.CharField()
    created_at = serializers.DateTimeField()
    tenant_accounts = TenantAccountsSerializer(
        allow_null=True,
        help_text="Of the offer's cluster; null on the demo's local backend, where jobs do not "
        "run as tenant accounts.",
    )
    hardware = HardwareSerializer()

    def to_representation(self, row: Mapping[str, Any]) -> dict[str, Any]:
        # The declared fields, each formatted as DRF would, in one dict: DRF's own loop over
        # the fields measured 5.3 ms for a page of 50 rows against 0.8 ms for this. Nothing
        # here decides: every value is the selector's.
        tenant_accounts = row["tenant_accounts"]
        return {
            "id": str(row["uuid"]),
            "cluster": str(row["cluster__uuid"]),
            "cluster_name": row["cluster__name"],
            "partition": row["partition__name"],
            "resource": row["resource"],
            "capacity": row["capacity"],
            "quantity": str(row["quantity"]),
            "quantity_unit": row["quantity_unit"],
            "unit_hours": row["unit_hours"],
            "preemption_grace_seconds": row["preemption_grace_seconds"],
            "remaining": str(row["remaining"]),
            "window_start": time_text(row["window_start"]),
            "window_end": time_text(row["window_end"]),
            "reserve_price": money_text(row["reserve_price"]),
            "buy_now_price": money_text(row["buy_now_price"]),
            "auction_closes_at": time_text(row["auction_closes_at"]),
            "max_per_buyer": None if row["max_per_buyer"] is None else str(row["max_per_buyer"]),
            "status": row["status"],
            "clearing_price": money_text(row["clearing_price"]),
            "cleared_at": time_text(row["cleared_at"]),
            "bid_count": row["bid_count"],
            "units_bid": str(row["units_bid"]),
            "currency": row["currency"],
            "created_at": time_text(row["created_at"]),
            # In the fields' order (PostgreSQL's jsonb keeps its own).
            "tenant_accounts": None
            if tenant_accounts is None
            else {"total": tenant_accounts["total"], "free": tenant_accounts["free"]},
            "hardware": {name: row["hardware"][name] for name in HARDWARE_FIELDS},
        }


HARDWARE_FIELDS = tuple(HardwareSerializer().fields)


class OfferCreateSerializer(serializers.Serializer):
    cluster = serializers.UUIDField()
    partition = serializers.CharField(max_length=64)
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(
        choices=Capacity.choices,
        default=Capacity.PREEMPTIBLE,
        help_text="`preemptible` (default): `quantity` core-hours (GPU-hours). `reserved`: "
        "`quantity` whole cores (GPUs, a multiple of a node's) for the whole window, which is "
        "a whole number of hours and starts after the auction closes. 409 "
        "`capacity_not_sold` where the cluster's verification found the kind impossible.",
    )
    quantity = WholeUnits()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    reserve_price = DecimalString(
        max_digits=20, decimal_places=MICRO_PLACES, noun="price", example="1.50"
    )
    buy_now_price = DecimalString(
        max_digits=20,
        decimal_places=MICRO_PLACES,
        required=False,
        allow_null=True,
        noun="price",
        example="2.00",
    )
    auction_closes_at = serializers.DateTimeField()
    max_per_buyer = WholeUnits(required=False, allow_null=True)


class PriceHistorySerializer(serializers.Serializer):
    offer = serializers.UUIDField(source="uuid")
    cluster = serializers.UUIDField(source="cluster.uuid")
    partition = serializers.CharField(source="partition.name")
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(choices=Capacity.choices)
    auction_closed_at = serializers.DateTimeField(source="auction_closes_at")
    cleared_at = serializers.DateTimeField()
    clearing_price = Money(allow_null=True, help_text="Null when nothing sold at auction.")
    quantity_sold = Units(source="units_sold")
    quantity = Units()


class PriceHistoryFilterSerializer(serializers.Serializer):
    cluster = serializers.UUIDField(required=False)
    partition = serializers.CharField(required=False, max_length=64)
    resource = serializers.ChoiceField(choices=Resource.choices, required=False)
    capacity = serializers.ChoiceField(
        choices=Capacity.choices,
        default=Capacity.PREEMPTIBLE,
        help_text="One kind at a time: their prices are not mixed.",
    )


class OfferExtendSerializer(serializers.Serializer):
    quantity = WholeUnits(required=False, allow_null=True)
    window_end = serializers.DateTimeField(required=False, allow_null=True)
