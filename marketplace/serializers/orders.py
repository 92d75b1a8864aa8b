"""Input and output shapes of purchases, bids and allocations (docs/api.md). They
translate; the services decide."""

from django.conf import settings
from rest_framework import serializers

from billing.models import Hold
from billing.serializers import Money
from computeshare.ids import IdPrefixField
from computeshare.numbers import MICRO_PLACES, DecimalString
from marketplace.models import Allocation, Bid, Capacity, Resource
from marketplace.serializers.fields import Units, WholeUnits


class PurchaseSerializer(serializers.Serializer):
    organization = serializers.UUIDField()
    quantity = WholeUnits()


class BidCreateSerializer(serializers.Serializer):
    organization = serializers.UUIDField()
    quantity = WholeUnits()
    price = DecimalString(max_digits=20, decimal_places=MICRO_PLACES, noun="price", example="1.50")
    min_quantity = WholeUnits(required=False, allow_null=True)


class BidSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    offer = serializers.UUIDField(source="offer.uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    price = Money()
    quantity = Units()
    min_quantity = Units()
    status = serializers.ChoiceField(choices=Bid.Status.choices)
    quantity_won = Units()
    price_paid = Money(allow_null=True)
    held = Money(source="hold.amount", help_text="What the bid holds on the wallet now.")
    hold_status = serializers.ChoiceField(
        source="hold.status",
        choices=Hold.Status.choices,
        help_text="The bid's hold: `open` while the bid is open (a winning bid's stays open as "
        "its allocation's commitment); `releasing` from the clearing its bid lost until its "
        "money is back on the available balance, within seconds (`held` still shows it); "
        "`closed` once released (a withdrawn bid's at once).",
    )
    currency = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    withdrawn_at = serializers.DateTimeField(allow_null=True)

    def get_currency(self, bid: Bid) -> str:
        return str(settings.PLATFORM_CURRENCY)


class BidFilterSerializer(serializers.Serializer):
    id_prefix = IdPrefixField()
    offer = serializers.UUIDField(required=False)
    status = serializers.ChoiceField(choices=Bid.Status.choices, required=False)
    organization = serializers.UUIDField(required=False)


class AllocationSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    offer = serializers.UUIDField(source="offer.uuid")
    cluster = serializers.UUIDField(source="cluster.uuid")
    cluster_name = serializers.CharField(source="cluster.name")
    partition = serializers.CharField(source="partition.name")
    resource = serializers.ChoiceField(choices=Resource.choices)
    capacity = serializers.ChoiceField(choices=Capacity.choices)
    # A field named `source`: DRF collects declared fields by name, while the stubs take it for
    # Field.source (the attribute path).
    source = serializers.ChoiceField(choices=Allocation.Source.choices)  # type: ignore[assignment]
    quantity = Units(
        help_text="Core-hours (GPU-hours) the team may use; a reserved block's cores x the "
        "window's hours."
    )
    block = serializers.IntegerField(
        allow_null=True,
        help_text="Reserved: the cores (GPUs) held for the team alone for the whole window; "
        "null for preemptible capacity.",
    )
    reservation = serializers.CharField(
        help_text="Reserved: the Slurm reservation that holds the block (its jobs run with "
        "`--reservation`); empty for preemptible capacity."
    )
    reservation_problem = serializers.CharField(
        help_text="Reserved: what the last check found wrong with the reservation on the "
        "cluster and could not put right (empty when all is well)."
    )
    used = Units()
    reserved = Units()
    remaining = Units()
    unit_price = Money()
    held = Money(source="hold.amount", help_text="What the commitment hold keeps now.")
    currency = serializers.SerializerMethodField()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=Allocation.Status.choices)
    created_at = serializers.DateTimeField()

    def get_currency(self, allocation: Allocation) -> str:
        return str(settings.PLATFORM_CURRENCY)


class AllocationFilterSerializer(serializers.Serializer):
    id_prefix = IdPrefixField()
    status = serializers.ChoiceField(choices=Allocation.Status.choices, required=False)
    organization = serializers.UUIDField(required=False)
    cluster = serializers.UUIDField(required=False)
