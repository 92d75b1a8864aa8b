"""The sealed-bid uniform-price auction, as a pure function (no database, no Django), so that it
can be tested on its own and with generated bids.

The rules (docs/design.md, Market rules): rank bids by price, highest first, then by time, then by
id; fill whole units in that order until the supply is used up, a bid taking less than it asked
only down to its minimum (a bid that cannot reach its minimum is skipped and the next one is
tried). Every winner pays the same price: the highest price among units left unserved, but never
below the reserve and never above the lowest winning bid.

A cluster serves at most as many teams at once as it has tenant accounts: given `seats`, the
number of teams that may newly win (teams in `seated` already hold an account there), a bid of
a team that would need one more account than there are is skipped like a bid that cannot reach
its minimum, and its units count as unserved. So is a bid in `skipped`: a reserved block
the cluster's scheduler would not hold for it."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple


class SealedBid(NamedTuple):
    """A bid as the clearing ranks and fills it. A named tuple: a clearing builds one per open
    bid, and a frozen dataclass's construction was a tenth of a 10,000-bid clearing."""

    key: Hashable
    price: Decimal
    quantity: int
    min_quantity: int
    placed_at: datetime
    # The tie-breaker after time: the bid's database id, which grows with insertion order.
    sequence: int
    # Who bids: a team's bids share one tenant account on the cluster.
    buyer: Hashable = None


class BidRow(NamedTuple):
    """An open bid as the clearing reads it from the database (the field names are the
    columns'), and as the clearing's notices and webhook events are told of it."""

    pk: int
    price: Decimal
    quantity: int
    min_quantity: int
    created_at: datetime
    hold_id: int
    organization_id: int


@dataclass(frozen=True)
class Clearing:
    price: Decimal | None  # None when nothing was sold
    fills: dict[Hashable, int]  # the winners' keys and the units each won

    @property
    def units_sold(self) -> int:
        return sum(self.fills.values())


def rank_key(bid: SealedBid) -> tuple[Decimal, datetime, int]:
    return (-bid.price, bid.placed_at, bid.sequence)


def uniform_price_clear(
    supply: int,
    reserve: Decimal,
    bids: Iterable[SealedBid],
    *,
    seats: int | None = None,
    seated: frozenset[Hashable] = frozenset(),
    skipped: frozenset[Hashable] = frozenset(),
) -> Clearing:
    """Clears `supply` units among `bids`. Bids below the reserve never win (the market refuses
    them earlier; this keeps the function total). Bids may come in any order; already ranked
    input (as the database returns it) sorts in linear time. `seats` (None: no limit) is how
    many buyers outside `seated` may win."""
    ranked = sorted((bid for bid in bids if bid.price >= reserve), key=rank_key)
    remaining = supply
    fills: dict[Hashable, int] = {}
    lowest_winning: Decimal | None = None
    highest_unserved: Decimal | None = None
    newly_seated: set[Hashable] = set()
    for bid in ranked:
        if remaining == 0:
            # Ranked by price, so the first bid left over is the highest unserved one, and no
            # later bid can change the result.
            highest_unserved = bid.price if highest_unserved is None else highest_unserved
            break
        take = min(bid.quantity, remaining)
        needs_seat = bid.buyer not in seated and bid.buyer not in newly_seated
        if needs_seat and seats is not None and len(newly_seated) >= seats:
            take = 0  # no account left for this team on the cluster
        if bid.key in skipped:
            take = 0
        if take >= max(bid.min_quantity, 1):
            fills[bid.key] = take
            remaining -= take
            lowest_winning = bid.price
            if needs_seat:
                newly_seated.add(bid.buyer)
        if take < bid.quantity and highest_unserved is None:
            highest_unserved = bid.price
    if lowest_winning is None:
        return Clearing(price=None, fills={})
    price = reserve if highest_unserved is None else highest_unserved
    price = max(min(price, lowest_winning), reserve)
    return Clearing(price=price, fills=fills)
