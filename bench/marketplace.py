"""Figures for the market, on PostgreSQL, printed in one run.

    make bench        (or: .venv/bin/python bench/marketplace.py [--quick] [--seconds 5])

It migrates a scratch database `computeshare_bench` on the local PostgreSQL (DATABASE_URL's
server), empties it, drops it at the end (unless --keep), and prints:

1. clearing one offer's auction with 1,000, 10,000 and 100,000 open bids (--quick: not the
   last) from min(N, 2,000) teams: the time to load the bids as model objects against the
   time `auction_clear` takes, per bid and as a ratio (the aim: at most 3, growing as
   n log n), where the clearing's time goes, and whether the ledger still verifies;
2. the offers list under load: a gunicorn server on loopback answering the API's
   `GET /api/v1/offers/` against a bare Django view of the same page (bench_urls.py), both on
   the same server, from 8 keep-alive client threads, in rounds side by side (the aim: the
   API at least 0.6 as fast), and the SQL queries the API makes for a page of 10 and of 200
   (the aim: equal);
3. the closing rush (bench_bids.py): `bid_place` on one offer from 4 processes against one,
   in rounds with the CPU ceiling measured beside each trial (the aim: at least 0.9 of that
   ceiling), with the checks that every hold is exact afterwards.

Benchmarks print figures; they never pass or fail.
"""

import argparse
import random
import sys
import time
import warnings
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
# The repository first: this file's own name would otherwise hide the `marketplace` app.
sys.path[:0] = [str(REPOSITORY), str(BENCH)]

from bench_bids import bench_rush, print_rush  # noqa: E402
from bench_clearing import SIZES, bench_clearing, market_setup, print_clearing  # noqa: E402
from bench_offers import bench_offers_list  # noqa: E402
from bench_support import drop_database, prepare_django  # noqa: E402

SEED = 20_240_601


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 100,000-bid clearing")
    parser.add_argument("--seconds", type=float, default=1.5, help="per load round and target")
    parser.add_argument("--rounds", type=int, default=10, help="load rounds of each target")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--profile", action="store_true", help="cProfile the largest clearing")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--rush-seconds", type=float, default=1.5, help="of each trial of the closing rush"
    )
    parser.add_argument("--rush-rounds", type=int, default=9, help="rounds of 1 and 4 processes")
    parser.add_argument("--only", choices=["clearing", "offers", "bids"], help="run one part only")
    arguments = parser.parse_args()
    begun = time.perf_counter()
    # WhiteNoise warns once that `collectstatic` never ran; the API does not serve files.
    warnings.filterwarnings("ignore", message="No directory at")
    prepare_django()
    # Seeded, so that two runs bid the same: figures to compare, not secrets.
    rng = random.Random(SEED)  # noqa: S311
    try:
        if arguments.only in (None, "clearing"):
            market = market_setup()
            sizes = SIZES[:-1] if arguments.quick else SIZES
            runs = [
                bench_clearing(market, size, rng, arguments.profile and size == sizes[-1])
                for size in sizes
            ]
            print_clearing(runs)
            print()
        if arguments.only in (None, "offers"):
            bench_offers_list(
                rng,
                arguments.seconds,
                arguments.clients,
                arguments.workers,
                arguments.threads,
                arguments.rounds,
            )
        if arguments.only in (None, "bids"):
            print()
            print_rush(bench_rush(arguments.rush_seconds, arguments.rush_rounds))
    finally:
        if not arguments.keep:
            drop_database()
    print(f"(the whole run took {time.perf_counter() - begun:,.0f} s)")


if __name__ == "__main__":
    main()
