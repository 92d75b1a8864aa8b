"""Money and shares as the pages write them: the one home of the rules, used by the templates
(`computeshare/templatetags/figures.py`) and by sentences built in Python (a refusal, a message).

- An amount is rounded to the cent and followed by its currency: `12.35 USD`, `1,200.00 USD`.
- An amount that is not zero but under a cent (a job of seconds) is `< 0.01 USD` (`> -0.01 USD`
  below zero), never `0.00`, which would read as nothing.
- The exact figure, as the ledger keeps it (six places, trailing zeros dropped down to cents), is
  `amount_exact`: the pages put it on hover; the API and the CSV give it as they always did.
- A unit price (per core-hour or GPU-hour) is a rate, not an amount: rounding 0.0125 to 0.01 would
  misstate every total. It is written to the cent when that is exact, else with every digit.
- A share (CPU efficiency, a budget used) is a percentage with one decimal, `0.4 %`; a share
  that is not zero but under a tenth of a percent is `< 0.1 %`. The CLI writes them the same way
  (cli/src/computeshare_cli/figures.py)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

CENT = Decimal("0.01")
TENTH = Decimal("0.1")


def _decimal(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _with_currency(text: str, currency: str) -> str:
    return f"{text} {currency}" if currency else text


def amount_exact(value: Any, currency: str = "") -> str:
    """Every digit the ledger keeps, at least to the cent, ungrouped as the API and the CSV
    write it: `0.000095`, `12.50`, `1200.00`."""
    exact = _decimal(value).normalize()
    if exact == exact.quantize(CENT):
        exact = exact.quantize(CENT)
    return _with_currency(f"{exact:f}", currency)


def is_under_a_cent(value: Any) -> bool:
    """Not zero, but rounds to 0.00."""
    amount = _decimal(value)
    return amount != 0 and abs(amount) < CENT / 2


def amount_text(value: Any, currency: str = "") -> str:
    """To the cent, with the currency when given: `12.35 USD`; `< 0.01 USD` for a non-zero
    amount under half a cent (which would round to 0.00)."""
    amount = _decimal(value)
    if is_under_a_cent(amount):
        text = "< 0.01" if amount > 0 else "> -0.01"
    else:
        text = f"{amount.quantize(CENT, rounding=ROUND_HALF_UP):,f}"
        if text == "-0.00":
            text = "0.00"
    return _with_currency(text, currency)


def price_text(value: Any, currency: str = "") -> str:
    """A unit price: to the cent when that is exact (`2.50`), else every significant digit
    (`0.0125`, never `0.012500`)."""
    price = _decimal(value)
    exact = price.normalize()
    text = f"{price.quantize(CENT):f}" if exact == exact.quantize(CENT) else f"{exact:f}"
    return _with_currency(text, currency)


def percent_text(fraction: Any) -> str:
    """A fraction from 0 to 1 as a percentage with one decimal: `0.4 %`, `100.0 %`; `< 0.1 %`
    when it is not zero but would round to 0.0."""
    share = _decimal(fraction) * 100
    if share != 0 and abs(share) < TENTH / 2:
        return "< 0.1 %"
    return f"{share.quantize(TENTH, rounding=ROUND_HALF_UP):f} %"


def quantity_text(value: Any) -> str:
    """Core-hours or GPU-hours as a total is read (an allocation's used and remaining units):
    to the hundredth, `< 0.01` when not zero but under it, like an amount without currency."""
    return amount_text(value)
