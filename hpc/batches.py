"""Cutting a long list into pieces: the library's remote commands and the apps' bulk statements
all bound what one of them carries this one way."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, cast

Items = TypeVar("Items", bound=Sequence[Any])


def batched(items: Items, size: int) -> Iterator[Items]:
    """Consecutive slices of `items` of at most `size` each, in order (a list's are lists).
    Python 3.12's `itertools.batched` gives tuples, and the platform runs on 3.11."""
    if size < 1:
        raise ValueError(f"a batch holds at least one item, not {size}")
    for start in range(0, len(items), size):
        yield cast(Items, items[start : start + size])
