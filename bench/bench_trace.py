"""Where `auction_clear`'s time goes, for bench/marketplace.py: every SQL statement it runs is
timed (execute_wrapper) and the two functions it calls by name are timed by wrapping them for the
run."""

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_TABLE = re.compile(r'^\s*(?:SELECT\b.*?\bFROM|UPDATE|INSERT INTO|DELETE FROM) "(\w+)"', re.S)


def _statement_kind(sql: str) -> str:
    """`UPDATE billing_hold`, `SELECT FOR UPDATE billing_account`, `SAVEPOINT`, ..."""
    words = sql.split(None, 1)
    verb = words[0].upper() if words else "?"
    match = _TABLE.match(sql)
    if match is None:
        return verb
    if verb == "SELECT" and "FOR UPDATE" in sql:
        verb = "SELECT FOR UPDATE"
    if verb == "UPDATE" and "CASE WHEN" in sql:
        return f"UPDATE {match.group(1)} (bulk_update's CASE)"
    return f"{verb} {match.group(1)}"


@dataclass
class Trace:
    statements: list[tuple[str, float, float]] = field(default_factory=list)
    calls: dict[str, tuple[float, float]] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    bounds: list[tuple[str, float, float]] = field(default_factory=list)

    def __call__(self, execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, *args)
        finally:
            self.statements.append((_statement_kind(sql), start, time.perf_counter()))

    def statements_by_phase(self) -> list[str]:
        """For each phase that runs SQL: its statements by kind, count and time."""
        lines = []
        for name, start, end in self.bounds:
            kinds = sorted(self.sql_between(start, end).items(), key=lambda item: -item[1][0])
            kinds = [item for item in kinds if item[0] not in ("SAVEPOINT", "RELEASE")]
            if kinds:
                lines.append(
                    f"{name} ({(end - start) * 1e3:,.0f} ms): "
                    + "; ".join(
                        f"{count:,} x {kind} {seconds * 1e3:,.0f} ms"
                        for kind, (seconds, count) in kinds
                    )
                )
        return lines

    def sql_between(self, start: float, end: float) -> dict[str, tuple[float, int]]:
        """Seconds and statements of each kind run between `start` and `end`."""
        totals: dict[str, tuple[float, int]] = {}
        for kind, began, finished in self.statements:
            if start <= began and finished <= end:
                seconds, count = totals.get(kind, (0.0, 0))
                totals[kind] = (seconds + finished - began, count + 1)
        return totals

    def last_end(self, kind: str, after: float) -> float:
        ends = [end for k, start, end in self.statements if k == kind and start >= after]
        return max(ends) if ends else after

    def phases(self) -> list[tuple[str, float, float, int]]:
        """(phase, seconds, of which SQL seconds, SQL statements), in the order
        `auction_clear` runs them; holds_settle also by statement kind."""
        ranked_start, ranked_end = self.calls["uniform_price_clear"]
        settle_start, settle_end = self.calls["holds_settle"]
        locked = self.last_end("SELECT FOR UPDATE marketplace_offer", self.started)
        bids_updated = self.last_end("UPDATE marketplace_bid", settle_end)
        allocated = self.last_end("INSERT marketplace_allocation", bids_updated)
        # The COMMIT is no statement of execute_wrapper's: what follows the last statement.
        last_statement = max((end for _, _, end in self.statements), default=allocated)

        def phase(name: str, start: float, end: float) -> tuple[str, float, float, int]:
            kinds = self.sql_between(start, end).values()
            return (name, end - start, sum(s for s, _ in kinds), sum(n for _, n in kinds))

        settle = phase("holds_settle", settle_start, settle_end)
        self.bounds = [
            ("lock the offer", self.started, locked),
            ("read the open bids", locked, ranked_start),
            ("holds_settle", settle_start, settle_end),
            ("bid updates", settle_end, bids_updated),
            ("allocation inserts", bids_updated, allocated),
            ("save the offer, events", allocated, last_statement),
            ("commit", last_statement, self.ended),
        ]
        return [
            phase("lock the offer", self.started, locked),
            phase("read the open bids", locked, ranked_start),
            phase("rank and fill (pure clearing)", ranked_start, ranked_end),
            settle,
            *[
                (f"  {kind}", seconds, seconds, count)
                for kind, (seconds, count) in sorted(
                    self.sql_between(settle_start, settle_end).items(),
                    key=lambda item: -item[1][0],
                )
                if kind not in ("SAVEPOINT", "RELEASE")
            ],
            ("  Python in holds_settle", settle[1] - settle[2], 0.0, 0),
            phase("bid updates (bulk_update, UPDATE)", settle_end, bids_updated),
            phase("allocation inserts", bids_updated, allocated),
            phase("save the offer, events", allocated, last_statement),
            phase("commit", last_statement, self.ended),
        ]


@contextmanager
def traced(trace: Trace) -> Iterator[None]:
    from django.db import connection

    import billing.services
    from marketplace.services import auctions

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                trace.calls[name] = (start, time.perf_counter())

        return run

    ranked, settle = auctions.uniform_price_clear, billing.services.holds_settle
    auctions.uniform_price_clear = timed("uniform_price_clear", ranked)
    billing.services.holds_settle = timed("holds_settle", settle)
    try:
        with connection.execute_wrapper(trace):
            yield
    finally:
        auctions.uniform_price_clear = ranked
        billing.services.holds_settle = settle
