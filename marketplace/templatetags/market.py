"""Template filters of the market's pages."""

from decimal import Decimal

from django import template
from django.utils.formats import localize
from django.utils.html import format_html
from django.utils.safestring import SafeString

from marketplace.charts import price_text
from marketplace.serializers.market import units_text

register = template.Library()


@register.filter
def price(value: Decimal | None) -> str:
    """A unit price: to the cent when that is exact (`2.50`), else every significant digit
    (`0.0125`, never `0.012500`)."""
    return "" if value is None else price_text(Decimal(value))


@register.filter
def price_html(value: Decimal | None) -> SafeString:
    """A unit price as the pages show it, with every digit on hover: a filter rather than an
    include, because the offers page shows two on each of its fifty rows and an include costs
    a template render each."""
    return format_html(
        '<span class="font-monospace" title="{}">{}</span>', localize(value), price(value)
    )


@register.filter
def units(value: Decimal | int | None) -> str:
    """Core-hours or GPU-hours to the micro-unit without trailing zeros (`0.166667`, `6`), as
    the API gives them: a job of seconds still shows what it used."""
    return units_text(value) or ""


@register.filter
def gigabytes(megabytes: int | None) -> str:
    """A node's memory (Slurm's RealMemory, in MB) in GB: whole when it is, else one decimal."""
    if not megabytes:
        return "0"
    value = Decimal(megabytes) / 1024
    whole = value.to_integral_value()
    return f"{whole:f}" if value == whole else f"{value.quantize(Decimal('0.1')):f}"
