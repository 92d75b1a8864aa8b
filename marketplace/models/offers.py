"""What an owner lists: an offer of one kind of capacity, and its demand counted in shards."""

from datetime import datetime
from decimal import Decimal
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.expressions import CombinedExpression

from billing.models import money_field
from computeshare.models import BaseModel
from marketplace.models.clusters import Cluster, Partition


class Resource(models.TextChoices):
    CPU = "cpu", "Core-hours"
    GPU = "gpu", "GPU-hours"


class Capacity(models.TextChoices):
    """The two kinds of capacity an owner lists (docs/design.md, The product). Preemptible: units
    (core- or GPU-hours) used on idle cores at a low priority, given back the moment the owner's own
    jobs need them. Reserved: whole cores (or GPUs) for the whole window, held by a Slurm
    reservation for the team."""

    PREEMPTIBLE = "preemptible", "Preemptible"
    RESERVED = "reserved", "Reserved"


def quantity_unit(resource: str, capacity: str) -> str:
    """What an offer's quantity counts: core-hours or GPU-hours of preemptible capacity, cores
    or GPUs (each for the whole window) of reserved capacity."""
    if capacity == Capacity.RESERVED:
        return "GPUs" if resource == Resource.GPU else "cores"
    return "GPU-hours" if resource == Resource.GPU else "core-hours"


def window_hours(start: datetime, end: datetime) -> int:
    """The whole hours from `start` to `end` (a reserved window is a whole number of them)."""
    return int((end - start).total_seconds() // 3600)


class Offer(BaseModel):
    """A lot of `quantity` whole units of one resource on one partition, usable during the
    window, sold by buy-now while the auction is open and by a sealed-bid uniform-price auction
    when it closes. `units_sold` is every unit allocated so far, so `quantity - units_sold` is
    what is still for sale; `bid_count` and `units_bid` are the public aggregate demand: the
    sum of the offer's `OfferDemand` rows, copied here after each bid (and set from the bids
    themselves when the auction clears)."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        CLEARED = "cleared", "Cleared"
        CANCELLED = "cancelled", "Cancelled"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.OPEN: {Status.CLEARED, Status.CANCELLED},
        Status.CLEARED: set(),
        Status.CANCELLED: set(),
    }

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="offers")
    partition = models.ForeignKey(Partition, on_delete=models.PROTECT, related_name="offers")
    resource = models.CharField(max_length=8, choices=Resource.choices)
    capacity = models.CharField(
        max_length=16, choices=Capacity.choices, default=Capacity.PREEMPTIBLE
    )
    # Preemptible: units (core- or GPU-hours). Reserved: whole cores (or GPUs), each for the
    # whole window (`unit_hours` metered units apiece).
    quantity = models.PositiveIntegerField()
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    reserve_price = money_field()
    buy_now_price = money_field(null=True, blank=True)
    auction_closes_at = models.DateTimeField()
    max_per_buyer = models.PositiveIntegerField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    units_sold = models.PositiveIntegerField(default=0)
    bid_count = models.PositiveIntegerField(default=0)
    units_bid = models.PositiveBigIntegerField(default=0)
    # The auction's result: every clearing is recorded here, and the price history reads it.
    clearing_price = money_field(null=True, blank=True)
    units_sold_at_auction = models.PositiveIntegerField(default=0)
    cleared_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )

    class Meta:
        ordering = ["auction_closes_at", "id"]
        indexes = [
            models.Index(fields=["status", "auction_closes_at"], name="offer_status_closes"),
            models.Index(fields=["status", "reserve_price"], name="offer_status_price"),
            models.Index(fields=["status", "window_start"], name="offer_status_window"),
            models.Index(
                fields=["cluster", "partition", "resource", "capacity", "auction_closes_at"],
                name="offer_price_history_by_kind",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "cleared", "cancelled"]),
                name="offer_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(resource__in=["cpu", "gpu"]), name="offer_resource_valid"
            ),
            models.CheckConstraint(
                condition=Q(capacity__in=["preemptible", "reserved"]), name="offer_capacity_valid"
            ),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="offer_quantity_positive"),
            models.CheckConstraint(
                condition=Q(window_end__gt=F("window_start")), name="offer_window_ends_after_start"
            ),
            models.CheckConstraint(
                condition=Q(auction_closes_at__lt=F("window_end")),
                name="offer_auction_closes_before_window_ends",
            ),
            models.CheckConstraint(
                condition=Q(reserve_price__gt=0), name="offer_reserve_price_positive"
            ),
            models.CheckConstraint(
                condition=Q(buy_now_price__isnull=True) | Q(buy_now_price__gte=F("reserve_price")),
                name="offer_buy_now_at_or_above_reserve",
            ),
            models.CheckConstraint(
                condition=Q(units_sold__lte=F("quantity")), name="offer_never_oversold"
            ),
            models.CheckConstraint(
                condition=Q(max_per_buyer__isnull=True) | Q(max_per_buyer__gt=0),
                name="offer_max_per_buyer_positive",
            ),
        ]

    def __str__(self) -> str:
        if self.is_reserved:
            return (
                f"{self.quantity} reserved {self.resource_noun(self.quantity)} on {self.partition}"
            )
        return f"{self.quantity} {self.get_resource_display()} on {self.partition}"

    @property
    def is_reserved(self) -> bool:
        return self.capacity == Capacity.RESERVED

    @property
    def unit_hours(self) -> int:
        """The metered units (core- or GPU-hours) one unit of `quantity` is: 1 for preemptible
        capacity; for reserved, one core (or GPU) for each hour of the window, which is a whole
        number of hours."""
        return window_hours(self.window_start, self.window_end) if self.is_reserved else 1

    @property
    def quantity_unit(self) -> str:
        return quantity_unit(self.resource, self.capacity)

    @property
    def quantity_text(self) -> str:
        """The whole quantity with its unit, one or many: "1 core", "40 core-hours"."""
        unit = self.quantity_unit
        return f"{self.quantity} {unit[:-1] if self.quantity == 1 else unit}"

    @property
    def price_unit(self) -> str:
        """What a price is per, for both kinds of capacity: a core-hour or a GPU-hour."""
        return "GPU-hour" if self.resource == Resource.GPU else "core-hour"

    def total_at(self, price: Decimal) -> Decimal:
        """What the whole quantity costs at `price` (per core-hour or GPU-hour): a reserved
        block's cores (GPUs) for every hour of its window."""
        return price * self.quantity * self.unit_hours

    def per_day_at(self, price: Decimal) -> Decimal:
        """What one core (GPU) of a reserved block costs a day at `price`."""
        return price * 24

    def resource_noun(self, count: int) -> str:
        """ "core"/"cores" or "GPU"/"GPUs": what one unit of a reserved offer is."""
        noun = "GPU" if self.resource == Resource.GPU else "core"
        return noun if count == 1 else f"{noun}s"

    @property
    def remaining(self) -> int:
        """Units still for sale. `REMAINING` is the same in SQL, for the lists that read rows."""
        return self.quantity - self.units_sold

    REMAINING: ClassVar[CombinedExpression] = F("quantity") - F("units_sold")

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN

    def accepts_orders_at(self, moment: datetime) -> bool:
        return self.is_open and moment < self.auction_closes_at


class OfferDemand(models.Model):
    """The open bids on an offer counted in a few rows rather than one: a bid adds itself to
    the row of its organization's shard, in its own transaction, so that bids of different
    teams in an auction's closing rush do not wait on each other for one counter. The offer's
    `bid_count` and `units_bid` are these rows summed (`marketplace.services.orders`)."""

    SHARDS = 8

    offer = models.ForeignKey(Offer, on_delete=models.CASCADE, related_name="demand")
    shard = models.PositiveSmallIntegerField()
    bid_count = models.PositiveIntegerField(default=0)
    units_bid = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["offer", "shard"], name="offer_demand_one_row_per_shard"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.offer}: shard {self.shard}, {self.bid_count} bids"
