"""What a team holds: an allocation won or bought, and a reserved block's reservation
while it is being made."""

from datetime import datetime, timedelta
from decimal import Decimal
from typing import ClassVar

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from billing.models import ZERO, money_field
from computeshare.models import BaseModel
from computeshare.numbers import MICRO_PLACES
from marketplace.models.bids import Bid
from marketplace.models.clusters import Cluster, Partition
from marketplace.models.offers import Capacity, Offer, Resource
from organizations.models import Organization


def units_field(**options: object) -> models.DecimalField:  # type: ignore[type-arg]
    """Core-hours or GPU-hours as metered: six places, so a core-second is still counted."""
    return models.DecimalField(max_digits=20, decimal_places=MICRO_PLACES, **options)  # type: ignore[arg-type]


class Allocation(BaseModel):
    """The right to use up to `quantity` units on the offer's partition during its window, at
    `unit_price`, won at auction or bought outright. Its commitment hold (billing's) keeps
    `unit_price x quantity` for the window; jobs reserve units (`reserved`) and settle what they
    used (`used`) against it, and what is left is released when the window closes."""

    class Status(models.TextChoices):
        UPCOMING = "upcoming", "Upcoming"
        ACTIVE = "active", "Active"
        CLOSED = "closed", "Closed"

    class Source(models.TextChoices):
        AUCTION = "auction", "Won at auction"
        BUY_NOW = "buy_now", "Bought now"

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="allocations"
    )
    offer = models.ForeignKey(Offer, on_delete=models.PROTECT, related_name="allocations")
    # Copied from the offer: an allocation is read on every job submission and listed often.
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="allocations")
    partition = models.ForeignKey(Partition, on_delete=models.PROTECT, related_name="allocations")
    resource = models.CharField(max_length=8, choices=Resource.choices)
    capacity = models.CharField(
        max_length=16, choices=Capacity.choices, default=Capacity.PREEMPTIBLE
    )
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    source = models.CharField(max_length=16, choices=Source.choices)
    # Reserved capacity: the whole cores (or GPUs) held for the team for the whole window, and
    # the scheduler's reservation that holds them (`quantity` is then `block` x the window's
    # hours). The last check of that reservation against the cluster, and what it found amiss
    # ("" when it matched).
    block = models.PositiveIntegerField(null=True, blank=True)
    reservation = models.CharField(max_length=64, blank=True)
    reservation_checked_at = models.DateTimeField(null=True, blank=True)
    reservation_problem = models.CharField(max_length=500, blank=True)
    bid = models.OneToOneField(
        Bid, on_delete=models.PROTECT, null=True, blank=True, related_name="allocation"
    )
    quantity = models.PositiveIntegerField()
    unit_price = money_field()
    used = units_field(default=ZERO)
    reserved = units_field(default=ZERO)
    hold = models.OneToOneField("billing.Hold", on_delete=models.PROTECT, related_name="allocation")
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-window_start", "-id"]
        indexes = [
            models.Index(fields=["organization", "window_end"], name="allocation_org_window"),
            models.Index(fields=["closed_at", "window_end"], name="allocation_to_close"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(quantity__gt=0), name="allocation_quantity_positive"
            ),
            models.CheckConstraint(
                condition=Q(used__gte=0, reserved__gte=0)
                & Q(used__lte=F("quantity") - F("reserved")),
                name="allocation_never_overdrawn",
            ),
            models.CheckConstraint(
                condition=Q(source="buy_now", bid__isnull=True)
                | Q(source="auction", bid__isnull=False),
                name="allocation_source_matches_bid",
            ),
            # No reserved allocation exists without the reservation that holds its block.
            models.CheckConstraint(
                condition=Q(capacity="preemptible", block__isnull=True, reservation="")
                | (Q(capacity="reserved", block__gt=0) & ~Q(reservation="")),
                name="allocation_reserved_has_its_reservation",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.quantity} {self.resource} units for {self.organization}"

    @property
    def is_reserved(self) -> bool:
        return self.capacity == Capacity.RESERVED

    @property
    def remaining(self) -> Decimal:
        remaining: Decimal = Decimal(self.quantity) - self.used - self.reserved
        return remaining

    def status_at(self, moment: datetime) -> str:
        if self.closed_at is not None or moment >= self.window_end:
            return self.Status.CLOSED
        if moment >= self.window_start:
            return self.Status.ACTIVE
        return self.Status.UPCOMING

    @property
    def status(self) -> str:
        return self.status_at(timezone.now())


class PendingReservation(BaseModel):
    """A reservation being made for a reserved block that is not sold yet: written and
    committed before the scheduler is asked for it, removed in the transaction that makes its
    allocation (or once the sale is refused and the reservation taken back). The check of
    reservations against allocations leaves the scheduler's reservation `name` alone while this
    row is young, and takes it back once the row is old: a sale that crashed midway leaves no
    cores held for nobody. While it exists the team's tenant lease is not idle."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="pending_reservations"
    )
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="pending_reservations"
    )
    name = models.CharField(max_length=64, unique=True)

    # A sale takes a few SSH round trips; a row older than this belongs to a sale that died.
    STALE_AFTER: ClassVar[timedelta] = timedelta(minutes=15)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"reservation {self.name} being made on {self.cluster}"
