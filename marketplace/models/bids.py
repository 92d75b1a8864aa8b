"""A team's sealed bid on an offer."""

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from billing.models import money_field
from computeshare.models import BaseModel
from marketplace.models.offers import Offer
from organizations.models import Organization


class Bid(BaseModel):
    """A sealed bid: `price` per unit for up to `quantity` units, at least `min_quantity` of
    them. Its hold (`price x quantity` while open) is billing's; only the bidding organization
    ever reads a bid."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        WON = "won", "Won"
        PARTIALLY_WON = "partially_won", "Partially won"
        LOST = "lost", "Lost"
        WITHDRAWN = "withdrawn", "Withdrawn"

    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        Status.OPEN: {Status.WON, Status.PARTIALLY_WON, Status.LOST, Status.WITHDRAWN},
        Status.WON: set(),
        Status.PARTIALLY_WON: set(),
        Status.LOST: set(),
        Status.WITHDRAWN: set(),
    }

    offer = models.ForeignKey(Offer, on_delete=models.PROTECT, related_name="bids")
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="bids")
    placed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    price = money_field()
    quantity = models.PositiveIntegerField()
    min_quantity = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    quantity_won = models.PositiveIntegerField(default=0)
    price_paid = money_field(null=True, blank=True)
    hold = models.OneToOneField(
        "billing.Hold", on_delete=models.PROTECT, related_name="bid", null=True
    )
    withdrawn_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The clearing reads an offer's bids in rank order straight off this index. `status`
            # is in no index of bids, so that the clearing's status change of every losing
            # bid is a heap-only update (the table leaves half of each page free for it).
            models.Index(fields=["offer", "-price", "created_at", "id"], name="bid_ranking"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["open", "won", "partially_won", "lost", "withdrawn"]),
                name="bid_status_valid",
            ),
            models.CheckConstraint(condition=Q(price__gt=0), name="bid_price_positive"),
            models.CheckConstraint(condition=Q(quantity__gt=0), name="bid_quantity_positive"),
            models.CheckConstraint(
                condition=Q(min_quantity__gte=1, min_quantity__lte=F("quantity")),
                name="bid_min_quantity_within_quantity",
            ),
            models.CheckConstraint(
                condition=Q(quantity_won__lte=F("quantity")), name="bid_wins_at_most_its_quantity"
            ),
            models.CheckConstraint(
                condition=Q(price_paid__isnull=True) | Q(price_paid__lte=F("price")),
                name="bid_never_pays_above_its_price",
            ),
        ]

    def __str__(self) -> str:
        return f"bid {self.quantity}@{self.price} on {self.offer_id}"

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN
