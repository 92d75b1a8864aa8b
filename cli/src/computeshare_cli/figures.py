"""Money and shares as the CLI writes them, by the rules the pages follow
(computeshare/figures.py on the server; the CLI installs apart, so the rules are written here
again and tested alike):

- an amount to the cent with its currency, `12.35 USD`; one that is not zero but under a cent is
  `< 0.01 USD (0.000095)`: a terminal has no hover, so the exact figure follows it; `--json`
  gives every figure exactly as the API does;
- a unit price (per core-hour or GPU-hour) with the digits it has, at least two: `0.0125 USD`;
- a share as a percentage with one decimal, `0.4 %`, `< 0.1 %` when not zero but under it."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

CENT = Decimal("0.01")
TENTH = Decimal("0.1")


def _decimal(value: Any) -> Decimal | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _with(text: str, currency: str | None) -> str:
    return f"{text} {currency}" if currency else text


def exact_text(value: Any) -> str:
    """Every digit, at least to the cent: `0.000095`, `12.50`."""
    number = _decimal(value)
    if number is None:
        return str(value)
    exact = number.normalize()
    if exact == exact.quantize(CENT):
        exact = exact.quantize(CENT)
    return f"{exact:f}"


def amount_text(value: Any, currency: str | None = None) -> str:
    """`12.35 USD`, `1,200.00 USD`; `< 0.01 USD (0.000095)` for what would round to 0.00."""
    number = _decimal(value)
    if number is None:
        return "-" if value is None or value == "" else str(value)
    if number != 0 and abs(number) < CENT / 2:
        bound = "< 0.01" if number > 0 else "> -0.01"
        return f"{_with(bound, currency)} ({exact_text(number)})"
    text = f"{number.quantize(CENT, rounding=ROUND_HALF_UP):,f}"
    return _with("0.00" if text == "-0.00" else text, currency)


def price_text(value: Any, currency: str | None = None) -> str:
    """A price per core-hour (GPU-hour): to the cent when exact, else every digit."""
    number = _decimal(value)
    if number is None:
        return "-" if value is None or value == "" else str(value)
    exact = number.normalize()
    text = f"{number.quantize(CENT):f}" if exact == exact.quantize(CENT) else f"{exact:f}"
    return _with(text, currency)


def percent_text(fraction: Any) -> str:
    """A fraction from 0 to 1 as `0.4 %`; `< 0.1 %` when not zero but under a tenth of one."""
    number = _decimal(fraction)
    if number is None:
        return "-" if fraction is None or fraction == "" else str(fraction)
    share = number * 100
    if share != 0 and abs(share) < TENTH / 2:
        return "< 0.1 %"
    return f"{share.quantize(TENTH, rounding=ROUND_HALF_UP):f} %"


def offer_prices(offer: dict[str, Any], key: str) -> str:
    """What people compare for an offer's `reserve_price` or `buy_now_price`: the price per
    core-hour (GPU-hour), the total for the whole quantity, and for a reserved block the price
    per core (GPU) per day. `-` when the offer has no such price."""
    price = _decimal(offer.get(key))
    if price is None:
        return "-"
    currency = offer.get("currency") or None
    gpu = offer.get("resource") == "gpu"
    hours = _decimal(offer.get("unit_hours")) or Decimal(1)
    quantity = _decimal(offer.get("quantity")) or Decimal(0)
    unit = offer.get("quantity_unit") or "units"
    if offer.get("capacity") == "reserved" and quantity == 1:
        unit = "GPU" if gpu else "core"
    parts = [
        f"{price_text(price, currency)}/{'GPU' if gpu else 'core'}-hour",
        f"{amount_text(price * quantity * hours, currency)} for {quantity:f} {unit}",
    ]
    if offer.get("capacity") == "reserved":
        parts.append(f"{price_text(price * 24, currency)}/{'GPU' if gpu else 'core'}/day")
    return "; ".join(parts)
