"""What sbatch's C code relies on of the C library, read the same way here: `isspace()` in the
"C" locale, `strtoll`'s and `sscanf("%d")`'s reading of a whole number."""

from __future__ import annotations

import re

# C's isspace() in the "C" locale.
C_SPACE = " \t\n\v\f\r"

# Blanks, then a sign and digits: what strtoll and sscanf's %d take of a string's front.
STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def scanf_integers(value: str, separators: str, count: int) -> list[int]:
    """What C's sscanf("%d<s1>%d<s2>%d...") assigns, in order, until the first mismatch."""
    found: list[int] = []
    position = 0
    for index in range(count):
        match = STRTOLL.match(value, position)
        if match is None:
            break
        found.append(int(match.group(1)))
        position = match.end()
        if index < len(separators):
            if value[position : position + 1] != separators[index]:
                break
            position += 1
    return found
