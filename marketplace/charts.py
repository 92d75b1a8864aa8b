"""The price-history chart as coordinates for an inline SVG (no chart library, no request
leaves the page): x is when each auction closed, y its clearing price."""

import datetime
import math
from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone

from marketplace.models import Offer

CENT = Decimal("0.01")
UTC = datetime.UTC


def price_text(value: Decimal) -> str:
    """A unit price: to the cent when that is exact (`2.50`), else every digit (`0.0125`)."""
    exact = value.normalize()
    if exact == exact.quantize(CENT):
        return f"{value.quantize(CENT):f}"
    return f"{exact:f}"


@dataclass(frozen=True)
class ChartPoint:
    x: float
    y: float
    price: Decimal
    closed_at: datetime.datetime

    @property
    def label(self) -> str:
        return price_text(self.price)

    @property
    def label_y(self) -> float:
        return round(self.y - 9, 1)


@dataclass(frozen=True)
class Tick:
    position: float
    label: str


@dataclass(frozen=True)
class PriceChart:
    """Coordinates of an inline SVG line chart: x is when each auction closed, y its clearing
    price, from zero up to a round number above the highest price."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    points: list[ChartPoint]
    line: str
    x_ticks: list[Tick]
    y_ticks: list[Tick]


CHART_WIDTH, CHART_HEIGHT = 720, 280
CHART_LEFT, CHART_RIGHT, CHART_TOP, CHART_BOTTOM = 72, 24, 24, 48


def nice_step(highest: Decimal, intervals: int = 4) -> Decimal:
    """The smallest round step (1, 2, 2.5 or 5 times a power of ten) that reaches `highest`
    in at most `intervals` steps."""
    exponent = math.floor(math.log10(highest / intervals))
    for multiple in ("1", "2", "2.5", "5", "10"):
        step = Decimal(multiple).scaleb(exponent)
        if step * intervals >= highest:
            break
    return step


def price_chart(history: list[Offer]) -> PriceChart | None:
    sold = [offer for offer in history if offer.clearing_price is not None]
    if not sold:
        return None
    right_edge = CHART_WIDTH - CHART_RIGHT
    bottom_edge = CHART_HEIGHT - CHART_BOTTOM
    plot_width = right_edge - CHART_LEFT
    plot_height = bottom_edge - CHART_TOP

    highest = max(offer.clearing_price for offer in sold)  # type: ignore[type-var]
    step = nice_step(highest)
    steps = math.ceil(highest / step)
    places = max(2, -step.normalize().as_tuple().exponent)  # type: ignore[operator]
    y_top = step * steps

    def y_of(price: Decimal) -> float:
        return round(bottom_edge - float(price / y_top) * plot_height, 1)

    first = sold[0].auction_closes_at
    span = (sold[-1].auction_closes_at - first).total_seconds()

    def x_of(moment: datetime.datetime) -> float:
        if span == 0:
            return round(CHART_LEFT + plot_width / 2, 1)
        return round(CHART_LEFT + (moment - first).total_seconds() / span * plot_width, 1)

    points = [
        ChartPoint(
            x=x_of(offer.auction_closes_at),
            y=y_of(offer.clearing_price),  # type: ignore[arg-type]
            price=offer.clearing_price,  # type: ignore[arg-type]
            closed_at=offer.auction_closes_at,
        )
        for offer in sold
    ]
    y_ticks = [
        Tick(position=y_of(step * index), label=f"{step * index:.{places}f}")
        for index in range(steps + 1)
    ]
    # Ticks are evenly spaced in time, not at midnights: the hour is shown unless a tick's
    # date alone is precise enough for the span.
    time_format = "%Y-%m-%d %H:%M" if span < 7 * 86400 else "%Y-%m-%d"
    count = 1 if span == 0 else 4
    x_ticks = []
    for index in range(count):
        moment = first + datetime.timedelta(seconds=span * index / max(count - 1, 1))
        x_ticks.append(
            Tick(position=x_of(moment), label=timezone.localtime(moment, UTC).strftime(time_format))
        )
    return PriceChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        left=CHART_LEFT,
        right=right_edge,
        top=CHART_TOP,
        bottom=bottom_edge,
        points=points,
        line=" ".join(f"{point.x},{point.y}" for point in points),
        x_ticks=x_ticks,
        y_ticks=y_ticks,
    )
