"""The one way the pages write money and shares (computeshare/figures.py and its template
filters): to the cent with the currency, `< 0.01` for what is not zero but under a cent, the
exact figure on hover; prices with their digits; shares as `0.4 %`."""

from decimal import Decimal

import pytest
from django.template import Context, Template

from computeshare import figures


@pytest.mark.parametrize(
    ("amount", "currency", "text"),
    [
        (Decimal("12.345"), "USD", "12.35 USD"),
        (Decimal("12.344999"), "USD", "12.34 USD"),
        (Decimal("1234567.5"), "USD", "1,234,567.50 USD"),
        (Decimal("0"), "USD", "0.00 USD"),
        (Decimal("0.000000"), "", "0.00"),
        (Decimal("0.000095"), "USD", "< 0.01 USD"),
        (Decimal("0.004999"), "USD", "< 0.01 USD"),
        (Decimal("0.005"), "USD", "0.01 USD"),
        (Decimal("-0.000095"), "USD", "> -0.01 USD"),
        (Decimal("-3.2"), "EUR", "-3.20 EUR"),
        (Decimal("-0.001"), "", "> -0.01"),
        ("149.99722", "", "150.00"),
    ],
)
def test_an_amount_is_written_to_the_cent_and_never_as_nothing_when_it_is_not(
    amount, currency, text
):
    assert figures.amount_text(amount, currency) == text


@pytest.mark.parametrize(
    ("amount", "exact"),
    [
        (Decimal("0.000095"), "0.000095 USD"),
        (Decimal("12.500000"), "12.50 USD"),
        (Decimal("1200"), "1200.00 USD"),
        (Decimal("-0.002819"), "-0.002819 USD"),
        (Decimal("0E-6"), "0.00 USD"),
    ],
)
def test_the_exact_figure_keeps_every_digit_and_at_least_the_cents(amount, exact):
    assert figures.amount_exact(amount, "USD") == exact


@pytest.mark.parametrize(
    ("price", "text"),
    [
        (Decimal("0.020000"), "0.02 USD"),
        (Decimal("2.5"), "2.50 USD"),
        (Decimal("0.012500"), "0.0125 USD"),
        (Decimal("0.000001"), "0.000001 USD"),
    ],
)
def test_a_price_is_a_rate_written_with_the_digits_it_has(price, text):
    assert figures.price_text(price, "USD") == text


@pytest.mark.parametrize(
    ("fraction", "text"),
    [
        (Decimal("0.0039"), "0.4 %"),
        (Decimal("0.002"), "0.2 %"),
        (Decimal("1"), "100.0 %"),
        (Decimal("0"), "0.0 %"),
        (Decimal("0.0004"), "< 0.1 %"),
        (0.5, "50.0 %"),
        ("0.12345", "12.3 %"),
    ],
)
def test_a_share_is_a_percentage_with_one_decimal(fraction, text):
    assert figures.percent_text(fraction) == text


def render(source: str, **context: object) -> str:
    return Template("{% load figures %}" + source).render(Context(context))


def test_the_money_filter_writes_cents_with_the_exact_figure_on_hover():
    assert render("{{ a|money:'USD' }}", a=Decimal("0.000095")) == (
        '<span class="font-monospace text-nowrap" title="0.000095">&lt; 0.01 USD</span>'
    )
    assert render("{{ a|money }}", a=Decimal("-2.5")) == (
        '<span class="font-monospace text-nowrap text-danger" title="-2.50">-2.50</span>'
    )
    assert render("{{ a|money:'USD' }}", a=None) == ""
    assert render("{{ a|money_text:'USD' }}", a=Decimal("3.14159")) == "3.14 USD"


def test_the_unit_price_quantity_and_percent_filters():
    assert render("{{ p|unit_price:'USD' }}", p=Decimal("0.012500")) == (
        '<span class="font-monospace text-nowrap" title="0.0125">0.0125 USD</span>'
    )
    assert render("{{ q|quantity }}", q=Decimal("0.00278")) == (
        '<span class="font-monospace text-nowrap" title="0.00278">&lt; 0.01</span>'
    )
    assert render("{{ f|percent }}", f=Decimal("0.0039")) == "0.4 %"
