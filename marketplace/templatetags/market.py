"""Template filters of the market's pages."""

from decimal import Decimal

from django import template
from django.conf import settings
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from computeshare import figures
from computeshare.templatetags import figures as figures_tags
from marketplace.models import Offer
from marketplace.serializers.fields import units_text

register = template.Library()


@register.filter
def price(value: Decimal | None) -> str:
    """A unit price: to the cent when that is exact (`2.50`), else every significant digit
    (`0.0125`, never `0.012500`)."""
    return "" if value is None else figures.price_text(value)


@register.filter
def price_html(value: Decimal | None) -> SafeString:
    """A unit price as the pages show it, with every digit on hover: a filter rather than an
    include, because the offers page shows two on each of its fifty rows and an include costs
    a template render each."""
    if value is None:
        return mark_safe("")
    return format_html(
        '<span class="font-monospace" title="{}">{}</span>',
        figures.amount_exact(value),
        price(value),
    )


@register.filter
def offer_price(offer: Offer, which: str = "reserve") -> SafeString:
    """What people compare, for the offer's reserve (`"reserve"`) or buy-now (`"buy_now"`)
    price: the price per core-hour (GPU-hour), the total for the offer's whole quantity, and for
    a reserved block the price per core (GPU) per day. A filter for the offers page's fifty rows,
    like `price_html`."""
    price = offer.reserve_price if which == "reserve" else offer.buy_now_price
    if price is None:
        return mark_safe('<span class="text-body-secondary">—</span>')
    currency = settings.PLATFORM_CURRENCY
    text = format_html(
        '<span data-field="per-hour">{} <span class="small">per {}</span></span>'
        '<br><span class="small" data-field="total">{} for {} {}</span>',
        figures_tags.unit_price(price, currency),
        offer.price_unit,
        figures_tags.money(offer.total_at(price), currency),
        offer.quantity,
        offer.resource_noun(offer.quantity) if offer.is_reserved else offer.quantity_unit,
    )
    if offer.is_reserved:
        text = format_html(
            '{}<br><span class="small" data-field="per-day">{} per {} per day</span>',
            text,
            figures_tags.unit_price(offer.per_day_at(price), currency),
            offer.resource_noun(1),
        )
    return text


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
