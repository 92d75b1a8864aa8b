"""The pages' money and shares, written one way (the rules are computeshare/figures.py):
`{{ amount|money:currency }}` is `12.35 USD` with every digit on hover (the number alone, as the
API writes it), `{{ amount|money }}` the
same without the currency (a column whose heading names it), `{{ price|unit_price:currency }}` a
rate per core-hour or GPU-hour, `{{ fraction|percent }}` a share as `0.4 %`.

Filters rather than includes: the offers and jobs pages show several on each of their fifty
rows, and an include costs a template render each."""

from decimal import Decimal
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from computeshare import figures

register = template.Library()


@register.filter
def money(value: Decimal | None, currency: str = "") -> SafeString | str:
    """An amount to the cent, its sign coloured, the exact figure in the title; `< 0.01` for a
    non-zero amount under a cent. Empty for None."""
    if value is None or value == "":
        return ""
    amount = Decimal(value)
    return _exact_on_hover(
        amount, figures.amount_text(amount, currency), " text-danger" if amount < 0 else ""
    )


@register.filter
def money_text(value: Decimal | None, currency: str = "") -> str:
    """The same as `money`, as plain text (a title, an aria-label, a placeholder)."""
    return "" if value is None or value == "" else figures.amount_text(value, currency)


@register.filter
def unit_price(value: Decimal | None, currency: str = "") -> SafeString | str:
    """A price per core-hour or GPU-hour, every digit on hover."""
    if value is None or value == "":
        return ""
    return _exact_on_hover(value, figures.price_text(value, currency))


@register.filter
def percent(fraction: Any) -> str:
    """A fraction from 0 to 1 as `50.0 %`; empty when there is none (a job not yet ended)."""
    return "" if fraction is None or fraction == "" else figures.percent_text(fraction)


@register.filter
def quantity(value: Decimal | None, unit: str = "") -> SafeString | str:
    """Core-hours or GPU-hours to the hundredth, every digit on hover (`< 0.01` when under)."""
    if value is None or value == "":
        return ""
    return _exact_on_hover(value, figures.quantity_text(value) + (f" {unit}" if unit else ""))


def _exact_on_hover(value: Decimal, text: str, classes: str = "") -> SafeString:
    """`text` as the page shows a figure, with `value`'s every digit in the title."""
    return format_html(
        '<span class="font-monospace text-nowrap{}" title="{}">{}</span>',
        classes,
        figures.amount_exact(value),
        text,
    )
