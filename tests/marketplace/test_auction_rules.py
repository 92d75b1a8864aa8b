"""The uniform-price clearing rule (`marketplace.auction`) by example, without a database: the
worked example of docs/design.md, the rank order (price, then time, then id), minimum fills, the
reserve, and the bounds on the price."""

import itertools
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from marketplace.auction import Clearing, SealedBid, uniform_price_clear

D = Decimal
START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def bid(
    key: str,
    quantity: int,
    price: str,
    *,
    min_quantity: int = 1,
    second: int | None = None,
    sequence: int | None = None,
) -> SealedBid:
    """A bid placed `second` seconds after START (by default in the order of its name, A
    first), with the database id `sequence` (by default the same order)."""
    order = ord(key[0]) - ord("A")
    return SealedBid(
        key=key,
        price=D(price),
        quantity=quantity,
        min_quantity=min_quantity,
        placed_at=START + timedelta(seconds=order if second is None else second),
        sequence=order if sequence is None else sequence,
    )


WORKED_EXAMPLE = [
    bid("A", 40, "2.50"),
    bid("B", 30, "2.00"),
    bid("C", 50, "1.80"),
    bid("D", 20, "1.20"),
]


# --- docs/design.md's worked example ----------------------------------------------------------


def test_worked_example_fills_a_b_and_part_of_c_at_c_s_price():
    clearing = uniform_price_clear(100, D("1.00"), WORKED_EXAMPLE)

    assert clearing == Clearing(price=D("1.80"), fills={"A": 40, "B": 30, "C": 30})
    assert clearing.units_sold == 100


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))))
def test_bids_in_any_order_clear_the_same(order):
    bids = [WORKED_EXAMPLE[index] for index in order]

    assert uniform_price_clear(100, D("1.00"), bids) == Clearing(
        price=D("1.80"), fills={"A": 40, "B": 30, "C": 30}
    )


def test_bids_given_as_a_generator_clear_the_same():
    clearing = uniform_price_clear(100, D("1.00"), (each for each in reversed(WORKED_EXAMPLE)))

    assert clearing == Clearing(price=D("1.80"), fills={"A": 40, "B": 30, "C": 30})


# --- Ties ----------------------------------------------------------------------------------------


def test_equal_prices_are_served_in_the_order_the_bids_were_placed():
    # Y came first although its id is larger: time ranks before id.
    later = bid("X", 40, "2.00", second=5, sequence=1)
    earlier = bid("Y", 40, "2.00", second=3, sequence=2)

    clearing = uniform_price_clear(50, D("1.00"), [later, earlier])

    assert clearing == Clearing(price=D("2.00"), fills={"Y": 40, "X": 10})


def test_equal_prices_and_times_are_served_in_id_order():
    first = bid("P", 30, "2.00", second=0, sequence=7)
    second = bid("Q", 30, "2.00", second=0, sequence=8)

    for bids in ([first, second], [second, first]):
        assert uniform_price_clear(40, D("1.00"), bids) == Clearing(
            price=D("2.00"), fills={"P": 30, "Q": 10}
        )


def test_a_higher_price_beats_an_earlier_bid():
    early_low = bid("E", 30, "1.50", second=0, sequence=1)
    late_high = bid("L", 30, "1.60", second=9, sequence=2)

    clearing = uniform_price_clear(30, D("1.00"), [early_low, late_high])

    assert clearing == Clearing(price=D("1.50"), fills={"L": 30})


# --- Minimum fills -------------------------------------------------------------------------------


def test_a_partial_fill_goes_down_to_the_bid_s_minimum():
    clearing = uniform_price_clear(
        50, D("1.00"), [bid("A", 40, "3.00"), bid("B", 20, "2.50", min_quantity=10)]
    )

    assert clearing == Clearing(price=D("2.50"), fills={"A": 40, "B": 10})


def test_a_bid_that_cannot_reach_its_minimum_is_skipped_and_the_next_one_is_tried():
    bids = [
        bid("A", 40, "3.00"),
        bid("B", 20, "2.50", min_quantity=15),  # only 10 are left when B's turn comes
        bid("C", 10, "2.00"),
    ]

    clearing = uniform_price_clear(50, D("1.00"), bids)

    # B's 2.50 is unserved, but the price never goes above the lowest winning bid, C's.
    assert clearing == Clearing(price=D("2.00"), fills={"A": 40, "C": 10})


def test_a_skipped_bid_s_price_counts_as_unserved():
    # After A, 10 units are left and nobody takes them: B wanted at least 15 of them. Its
    # 2.50 is the highest unserved price, so A pays 2.50, not the reserve.
    clearing = uniform_price_clear(
        50, D("1.00"), [bid("A", 40, "3.00"), bid("B", 20, "2.50", min_quantity=15)]
    )

    assert clearing == Clearing(price=D("2.50"), fills={"A": 40})
    assert clearing.units_sold == 40


def test_a_bid_whose_minimum_is_its_quantity_is_all_or_nothing():
    bids = [bid("A", 30, "2.00", min_quantity=30), bid("B", 30, "1.50", min_quantity=30)]

    assert uniform_price_clear(45, D("1.00"), bids) == Clearing(price=D("1.50"), fills={"A": 30})
    assert uniform_price_clear(60, D("1.00"), bids) == Clearing(
        price=D("1.00"), fills={"A": 30, "B": 30}
    )


def test_when_every_bid_misses_its_minimum_nothing_is_sold():
    bids = [bid("A", 40, "3.00", min_quantity=25), bid("B", 30, "2.00", min_quantity=21)]

    assert uniform_price_clear(20, D("1.00"), bids) == Clearing(price=None, fills={})


# --- Reserve, supply and no bids -----------------------------------------------------------------


def test_no_bids_sell_nothing():
    clearing = uniform_price_clear(100, D("1.00"), [])

    assert clearing == Clearing(price=None, fills={})
    assert clearing.units_sold == 0


def test_bids_below_the_reserve_never_win():
    bids = [bid("A", 40, "0.99"), bid("B", 30, "0.50")]

    assert uniform_price_clear(100, D("1.00"), bids) == Clearing(price=None, fills={})


def test_a_bid_below_the_reserve_does_not_set_the_price():
    bids = [bid("A", 40, "2.00"), bid("B", 90, "0.99")]

    assert uniform_price_clear(100, D("1.00"), bids) == Clearing(price=D("1.00"), fills={"A": 40})


def test_nothing_left_to_sell_sells_nothing():
    assert uniform_price_clear(0, D("1.00"), WORKED_EXAMPLE) == Clearing(price=None, fills={})


@pytest.mark.parametrize("supply", [60, 100], ids=["demand-equals-supply", "supply-exceeds"])
def test_with_enough_supply_for_every_bid_everyone_pays_the_reserve(supply):
    bids = [bid("A", 40, "2.50"), bid("B", 20, "1.50")]

    clearing = uniform_price_clear(supply, D("1.25"), bids)

    assert clearing == Clearing(price=D("1.25"), fills={"A": 40, "B": 20})


def test_bids_at_exactly_the_reserve_win():
    assert uniform_price_clear(10, D("1.25"), [bid("A", 10, "1.25")]) == Clearing(
        price=D("1.25"), fills={"A": 10}
    )


# --- Bounds on the price -------------------------------------------------------------------------


def test_the_price_is_never_above_the_lowest_winning_bid():
    # A asks for more than is for sale and insists on 15: its 5.00 is unserved, yet the only
    # winner bid 2.00.
    bids = [bid("A", 20, "5.00", min_quantity=15), bid("B", 10, "2.00")]

    clearing = uniform_price_clear(10, D("1.00"), bids)

    assert clearing == Clearing(price=D("2.00"), fills={"B": 10})


def test_the_first_bid_left_out_sets_the_price_when_supply_runs_out_exactly():
    bids = [bid("A", 40, "2.50"), bid("B", 60, "2.00"), bid("C", 10, "1.70"), bid("D", 5, "1.60")]

    clearing = uniform_price_clear(100, D("1.00"), bids)

    assert clearing == Clearing(price=D("1.70"), fills={"A": 40, "B": 60})


def test_every_winner_pays_the_same_price_below_its_own_bid():
    bids = [bid("A", 10, "9.00"), bid("B", 10, "4.00"), bid("C", 10, "3.00"), bid("D", 10, "2.00")]

    clearing = uniform_price_clear(25, D("1.00"), bids)

    assert clearing == Clearing(price=D("3.00"), fills={"A": 10, "B": 10, "C": 5})
    assert all(clearing.price <= each.price for each in bids if each.key in clearing.fills)
