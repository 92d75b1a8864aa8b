"""Running calls at the same moment in threads, for the race tests on PostgreSQL."""

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.db import connection


def run_together(calls: list[Callable[[], Any]], timeout: float = 60) -> list[Any]:
    """Runs each call in its own thread (with its own database connection), all released at
    once; returns what each returned or raised, in the order of `calls`."""
    barrier = threading.Barrier(len(calls), timeout=timeout)
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            outcomes[index] = call()
        except Exception as error:
            outcomes[index] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(index, call)) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    return outcomes


def kinds(outcomes: list[Any]) -> Counter[str]:
    """How many outcomes of each type: `{"Allocation": 5, "InsufficientQuantity": 15}`."""
    return Counter(type(outcome).__name__ for outcome in outcomes)
