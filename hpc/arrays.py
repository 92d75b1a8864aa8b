"""Job array expressions as sbatch's `--array` takes them: `0-99`, `1,3,5`, `0-15:4`, with an
optional `%N` throttle (`0-999%20`: at most 20 tasks at once)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Slurm's default MaxArraySize is 1001: indices 0 to 1000.
MAX_ARRAY_INDEX = 1000
MAX_ARRAY_TASKS = 1001

# ASCII digits only: `\d` would take "٣" (Arabic-Indic three), which int() reads as 3 but sbatch
# would be given as typed.
_PART = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?", re.ASCII)
_THROTTLE = re.compile(r"[0-9]{1,9}", re.ASCII)


class InvalidArray(ValueError):
    pass


@dataclass(frozen=True)
class ArraySpec:
    indices: tuple[int, ...]  # ascending, without repeats
    throttle: int | None  # at most this many tasks run at once


def parse_array(expression: str) -> ArraySpec:
    """Parses and checks an array expression; raises `InvalidArray` with a sentence a user can
    act on."""
    text = expression.strip()
    if not text:
        raise InvalidArray("An array expression such as 0-99, 1,3,5 or 0-999%20.")
    body, percent, throttle_text = text.partition("%")
    throttle = None
    if percent:
        # Not str.isdigit(), which is true of "²" (and int() then refuses it).
        if not _THROTTLE.fullmatch(throttle_text) or int(throttle_text) < 1:
            raise InvalidArray("The limit after % must be a whole number of at least 1.")
        throttle = int(throttle_text)
    indices: set[int] = set()
    for part in body.split(","):
        match = _PART.fullmatch(part.strip())
        if match is None:
            raise InvalidArray(
                f"`{part}` is not an index, a range `a-b` or a stepped range `a-b:s`."
            )
        first = int(match[1])
        last = int(match[2]) if match[2] is not None else first
        step = int(match[3]) if match[3] is not None else 1
        if last < first:
            raise InvalidArray(f"The range `{part}` ends before it starts.")
        if step < 1:
            raise InvalidArray(f"The step in `{part}` must be at least 1.")
        if last > MAX_ARRAY_INDEX:
            raise InvalidArray(f"Array indices go up to {MAX_ARRAY_INDEX}.")
        indices.update(range(first, last + 1, step))
        if len(indices) > MAX_ARRAY_TASKS:
            raise InvalidArray(f"An array has at most {MAX_ARRAY_TASKS} tasks.")
    return ArraySpec(indices=tuple(sorted(indices)), throttle=throttle)


def parse_index_ranges(text: str) -> list[int]:
    """The task indices of squeue's not-yet-split pending range, `5-19` or `1,3,7-9`, with any
    throttle suffix (`%4`) ignored."""
    return list(parse_array(text.split("%", 1)[0]).indices)
