"""The clearing rule's invariants on generated auctions: random supply, reserve and bids (with
ties in price and time, minimum fills and more demand than supply or less). No database."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace.auction import Clearing, SealedBid, rank_key, uniform_price_clear

D = Decimal
START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

# Few distinct prices and times, so that ties in both are common.
reserves = st.sampled_from([D("0.01"), D("0.50"), D("1.00"), D("1.25"), D("3.333333")])
margins = st.sampled_from([D(0), D("0.01"), D("0.25"), D("0.50"), D("1.00"), D("2.75")])


@st.composite
def auctions(draw: st.DrawFn) -> tuple[int, Decimal, list[SealedBid]]:
    supply = draw(st.integers(min_value=0, max_value=120))
    reserve = draw(reserves)
    count = draw(st.integers(min_value=0, max_value=12))
    # Ids are unique, as database ids are; their order need not follow time.
    sequences = draw(st.permutations(range(1, count + 1)))
    bids = []
    for index in range(count):
        quantity = draw(st.integers(min_value=1, max_value=60))
        bids.append(
            SealedBid(
                key=f"bid-{index}",
                price=reserve + draw(margins),
                quantity=quantity,
                min_quantity=draw(st.integers(min_value=1, max_value=quantity)),
                placed_at=START + timedelta(seconds=draw(st.integers(min_value=0, max_value=3))),
                sequence=sequences[index],
            )
        )
    return supply, reserve, bids


def check_invariants(
    supply: int, reserve: Decimal, bids: list[SealedBid], result: Clearing
) -> None:
    by_key = {each.key: each for each in bids}
    assert set(result.fills) <= set(by_key)
    assert result.units_sold == sum(result.fills.values()) <= supply
    for key, units in result.fills.items():
        assert by_key[key].min_quantity <= units <= by_key[key].quantity
    assert (result.price is None) == (not result.fills)
    if result.price is None:
        return
    assert result.price >= reserve
    assert all(result.price <= by_key[key].price for key in result.fills)


def check_greedy_in_rank_order(supply: int, bids: list[SealedBid], result: Clearing) -> None:
    """Walking the bids in rank order, each takes all it can of what the bids above it left,
    and a bid goes without only when what is left cannot reach its minimum."""
    left = supply
    for each in sorted(bids, key=rank_key):
        can_take = min(each.quantity, left)
        if each.key in result.fills:
            assert result.fills[each.key] == can_take, each
            left -= can_take
        else:
            assert can_take < each.min_quantity, each


def expected_price(reserve: Decimal, bids: list[SealedBid], result: Clearing) -> Decimal | None:
    """docs/design.md's words (Market rules): the highest price among units left unserved, never
    below the reserve and never above the lowest winning bid."""
    if not result.fills:
        return None
    unserved = [each.price for each in bids if result.fills.get(each.key, 0) < each.quantity]
    lowest_winning = min(each.price for each in bids if each.key in result.fills)
    if not unserved:
        return reserve
    return max(reserve, min(max(unserved), lowest_winning))


@settings(max_examples=400, deadline=None)
@given(auction=auctions(), shuffle=st.randoms(use_true_random=False))
def test_clearing_keeps_the_market_rules(auction, shuffle):
    supply, reserve, bids = auction

    result = uniform_price_clear(supply, reserve, bids)

    check_invariants(supply, reserve, bids, result)
    check_greedy_in_rank_order(supply, bids, result)
    assert result.price == expected_price(reserve, bids, result)
    shuffled = list(bids)
    shuffle.shuffle(shuffled)
    assert uniform_price_clear(supply, reserve, shuffled) == result


@settings(max_examples=200, deadline=None)
@given(auction=auctions())
def test_demand_within_supply_fills_every_bid_at_the_reserve(auction):
    supply, reserve, bids = auction
    supply = sum(each.quantity for each in bids) + supply % 7

    result = uniform_price_clear(supply, reserve, bids)

    assert result.fills == {each.key: each.quantity for each in bids}
    assert result.price == (reserve if bids else None)


@settings(max_examples=200, deadline=None)
@given(auction=auctions())
def test_more_supply_never_sells_fewer_units_to_bidders_without_minimums(auction):
    """Without minimum fills the clearing is monotone: one more unit for sale is never one
    fewer sold, and never a higher price."""
    supply, reserve, bids = auction
    bids = [
        SealedBid(
            key=each.key,
            price=each.price,
            quantity=each.quantity,
            min_quantity=1,
            placed_at=each.placed_at,
            sequence=each.sequence,
        )
        for each in bids
    ]

    smaller = uniform_price_clear(supply, reserve, bids)
    larger = uniform_price_clear(supply + 1, reserve, bids)

    assert larger.units_sold >= smaller.units_sold
    if smaller.price is not None:
        assert larger.price is not None and larger.price <= smaller.price


@settings(max_examples=300, deadline=None)
@given(
    auction=auctions(),
    buyers=st.lists(st.sampled_from("ABCDE"), min_size=12, max_size=12),
    seats=st.integers(min_value=0, max_value=4),
    seated=st.frozensets(st.sampled_from("ABCDE"), max_size=2),
)
def test_no_more_teams_win_than_the_cluster_has_tenant_accounts_for(auction, buyers, seats, seated):
    """With `seats` free tenant accounts, at most that many teams outside `seated` (those that
    hold one already) win; walking the bids in rank order, a bid goes without only when what
    is left cannot reach its minimum or its team would need an account there is none of; the
    price keeps docs/design.md's rule, skipped bids counting as unserved."""
    supply, reserve, bids = auction
    bids = [
        SealedBid(
            key=each.key,
            price=each.price,
            quantity=each.quantity,
            min_quantity=each.min_quantity,
            placed_at=each.placed_at,
            sequence=each.sequence,
            buyer=buyers[index],
        )
        for index, each in enumerate(bids)
    ]

    result = uniform_price_clear(supply, reserve, bids, seats=seats, seated=seated)

    check_invariants(supply, reserve, bids, result)
    buyer_of = {each.key: each.buyer for each in bids}
    new_winners = {buyer_of[key] for key in result.fills} - seated
    assert len(new_winners) <= seats
    left, newly_seated = supply, set()
    for each in sorted(bids, key=rank_key):
        can_take = min(each.quantity, left)
        has_seat = each.buyer in seated or each.buyer in newly_seated
        if each.key in result.fills:
            assert result.fills[each.key] == can_take
            left -= can_take
            newly_seated |= set() if has_seat else {each.buyer}
        else:
            assert can_take < each.min_quantity or (not has_seat and len(newly_seated) >= seats), (
                each
            )
    assert result.price == expected_price(reserve, bids, result)
    # With a seat for everyone, the accounts change nothing.
    assert uniform_price_clear(supply, reserve, bids, seats=5) == uniform_price_clear(
        supply, reserve, bids
    )
