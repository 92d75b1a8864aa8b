"""The price history's chart as the data Chart.js draws (static/js/charts.js): x is when each
auction closed, y its clearing price. The page shows the same points as a table."""

from typing import Any

from django.conf import settings

from computeshare.figures import price_text
from marketplace.models import Offer


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
