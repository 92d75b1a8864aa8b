"""Template filters of the market's pages."""

from decimal import Decimal

from django import template

from marketplace.charts import price_text

register = template.Library()


@register.filter
def price(value: Decimal | None) -> str:
    """A unit price: to the cent when that is exact (`2.50`), else every significant digit
    (`0.0125`, never `0.012500`)."""
    return "" if value is None else price_text(Decimal(value))
