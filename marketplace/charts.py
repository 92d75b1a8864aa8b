"""The price history's chart as the data Chart.js draws (static/js/charts.js): x is when each
auction closed, y its clearing price. The page shows the same points as a table."""

from decimal import Decimal
from typing import Any

from django.conf import settings

from marketplace.models import Offer

CENT = Decimal("0.01")


def price_text(value: Decimal) -> str:
    """A unit price: to the cent when that is exact (`2.50`), else every digit (`0.0125`)."""
    exact = value.normalize()
    if exact == exact.quantize(CENT):
        return f"{value.quantize(CENT):f}"
    return f"{exact:f}"


def price_chart(history: list[Offer]) -> dict[str, Any] | None:
    """The auctions of `history` (oldest first) that sold something, as points: `x` when the
    auction closed in milliseconds since 1970 (JavaScript's time), `y` the clearing price as a
    JSON number for drawing, `label` the exact price for its tooltip. None when none sold."""
    points = [
        {
            "x": int(offer.auction_closes_at.timestamp() * 1000),
            "y": float(offer.clearing_price),
            "label": price_text(offer.clearing_price),
        }
        for offer in history
        if offer.clearing_price is not None
    ]
    if not points:
        return None
    return {"unit": settings.PLATFORM_CURRENCY, "points": points}
