"""The values of the options the platform honours, read by sbatch's own parsers
(`time_str2mins`, `str_to_mbytes`, `parse_int`, `verify_node_count`, `get_signal_opts`,
`verify_hint`...) with sbatch's words where they refuse one, and its check that the memory
options exclude each other."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpc.slurm.directives.errors import DirectiveRefused
from hpc.slurm.directives.libc import C_SPACE, STRTOLL, scanf_integers
from hpc.slurm.directives.reading import ScriptReading


def time_minutes(value: str, *, option: str = "--time", line: int = 0) -> int | None:
    """Minutes from any time sbatch takes (`time_str2mins`): `minutes`, `minutes:seconds`,
    `hours:minutes:seconds`, `days-hours`, `days-hours:minutes`, `days-hours:minutes:seconds`,
    seconds rounded up to the next minute; None (no limit) for `UNLIMITED`, `INFINITE`, `-1`
    and 0. A time below zero, which sbatch hands on for the controller to refuse, is refused
    here."""
    if value.upper() in ("-1", "INFINITE", "UNLIMITED"):
        return None
    refused = DirectiveRefused(
        "invalid", f"Invalid {option} specification", line=line, option=option
    )
    if not _is_valid_timespec(value):
        raise refused
    if "-" in value:
        days, hours, minutes, seconds = [*scanf_integers(value, "-::", 4), 0, 0, 0, 0][:4]
        total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    else:
        parts = scanf_integers(value, "::", 3)
        if len(parts) == 3:
            total = parts[0] * 3600 + parts[1] * 60 + parts[2]
        else:
            parts += [0, 0]
            total = parts[0] * 60 + parts[1]
    if total < 0:
        raise refused
    if total == 0:
        return None
    return (total + 59) // 60


def _is_valid_timespec(value: str) -> bool:
    """parse_time.c's `_is_valid_timespec`."""
    digits = dashes = colons = 0
    in_digits = False
    for character in value:
        if "0" <= character <= "9":
            if not in_digits:
                digits += 1
                in_digits = True
        elif character == "-":
            in_digits = False
            dashes += 1
            if colons:
                return False
        elif character == ":":
            in_digits = False
            colons += 1
        else:
            return False
    if not digits or dashes > 1 or colons > 2:
        return False
    if dashes:
        return not (colons == 1 and digits < 3) and not (colons == 2 and digits < 4)
    return not (colons == 1 and digits < 2) and not (colons == 2 and digits < 3)


def megabytes(value: str, *, option: str = "--mem", line: int = 0) -> int:
    """MiB from a memory size as sbatch reads it (`str_to_mbytes`): a whole number, in MiB or
    with K, M, G or T (and an optional B), kibibytes rounded up."""
    match = STRTOLL.match(value)
    refused = DirectiveRefused(
        "invalid", f"Invalid {option} specification", line=line, option=option
    )
    if match is None:
        raise refused
    number = int(match.group(1))
    unit = value[match.end() :]
    if number < 0:
        raise refused
    if unit == "":
        return number
    if len(unit) > 2 or (len(unit) == 2 and unit[1] not in "Bb"):
        raise refused
    factor = {"k": None, "m": 1, "g": 1024, "t": 1024 * 1024}.get(unit[0].lower(), 0)
    if factor == 0:
        raise refused
    if factor is None:
        return (number + 1023) // 1024
    return number * factor


def whole_number(value: str, *, option: str, line: int = 0) -> int:
    """A positive whole number, as sbatch's `parse_int` reads one."""
    match = STRTOLL.fullmatch(value)
    if match is None or int(match.group(1)) <= 0:
        raise DirectiveRefused(
            "invalid",
            f'Invalid numeric value "{value}" for {option}.',
            line=line,
            option=option,
        )
    return int(match.group(1))


def node_count(value: str, *, line: int = 0) -> tuple[int, int]:
    """The minimum and maximum node counts of `--nodes` (`verify_node_count`): `N`, or
    `min-max`, each a whole number with an optional k or m multiplier."""

    def count(text: str) -> int:
        match = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)([kK]?)([mM]?)", text)
        leftover = text if match is None else text[match.end() :]
        if leftover.strip(C_SPACE):
            raise DirectiveRefused(
                "invalid", f'"{text}" is not a valid node count', line=line, option="--nodes"
            )
        if match is None:
            return -1
        number = int(match.group(1))
        return number * (1024 if match.group(2) else 1) * (1024 * 1024 if match.group(3) else 1)

    minimum_text, dash, maximum_text = value.partition("-")
    if dash:
        minimum = count(minimum_text)
        minimum = 1 if minimum < 0 else minimum
        maximum = count(maximum_text)
        if maximum and maximum < minimum:
            raise DirectiveRefused(
                "invalid",
                f"Maximum node count {maximum} is less than minimum node count {minimum}",
                line=line,
                option="--nodes",
            )
        return minimum, maximum
    nodes = count(value)
    if nodes < 0:
        raise DirectiveRefused(
            "invalid", f'"{value}" is not a valid node count', line=line, option="--nodes"
        )
    return nodes, nodes


def open_mode(value: str, *, line: int = 0) -> str:
    """`append` or `truncate`, from the first letter as sbatch reads it."""
    first = value[:1].lower()
    if first == "a":
        return "append"
    if first == "t":
        return "truncate"
    raise DirectiveRefused(
        "invalid", "Invalid --open-mode specification", line=line, option="--open-mode"
    )


_SIGNALS = {
    "HUP": 1,
    "INT": 2,
    "QUIT": 3,
    "ABRT": 6,
    "KILL": 9,
    "ALRM": 14,
    "TERM": 15,
    "USR1": 10,
    "USR2": 12,
    "URG": 23,
    "CONT": 18,
    "STOP": 19,
    "TSTP": 20,
    "TTIN": 21,
    "TTOU": 22,
    "XCPU": 24,
}


@dataclass(frozen=True)
class Signal:
    """`--signal=[{R|B}:]<sig_num>[@sig_time]`: the signal, the seconds before the time limit
    it is sent, and whether it goes to the batch shell alone (B) and at a reservation's end
    (R)."""

    number: int
    seconds: int = 60
    batch_only: bool = False
    at_reservation_end: bool = False

    @property
    def text(self) -> str:
        flags = ("R" if self.at_reservation_end else "") + ("B" if self.batch_only else "")
        name = next((name for name, number in _SIGNALS.items() if number == self.number), None)
        return f"{flags}{':' if flags else ''}{name or self.number}@{self.seconds}"


def signal(value: str, *, line: int = 0) -> Signal:
    """sbatch's `get_signal_opts`."""
    refused = DirectiveRefused(
        "invalid", "Invalid --signal specification", line=line, option="--signal"
    )
    text = value
    at_reservation_end = batch_only = False
    if text[:1].upper() == "R":
        at_reservation_end, text = True, text[1:]
    if text[:1].upper() == "B":
        batch_only, text = True, text[1:]
    if text[:1].upper() == "R":
        at_reservation_end, text = True, text[1:]
    text = text.removeprefix(":")
    name, at, seconds_text = text.partition("@")
    number = _signal_number(name) & 0xFFFF
    if not 1 <= number <= 0xFFFF:
        raise refused
    seconds = 60
    if at:
        match = STRTOLL.match(seconds_text)
        if match is None and seconds_text:
            raise refused
        if match is not None and match.end() != len(seconds_text):
            raise refused
        seconds = int(match.group(1)) if match is not None else 0
        if not 0 <= seconds <= 0xFFFF:
            raise refused
    return Signal(number, seconds, batch_only, at_reservation_end)


def _signal_number(name: str) -> int:
    """`sig_name2num`: a number, or a name (with or without SIG) among those Slurm knows."""
    match = STRTOLL.match(name)
    if match is not None:
        return int(match.group(1)) if not name[match.end() :].strip(C_SPACE) else 0
    bare = name.lstrip(C_SPACE)
    if bare[:3].upper() == "SIG":
        bare = bare[3:]
    for signal_name, number in _SIGNALS.items():
        if bare[: len(signal_name)].upper() == signal_name and not bare[len(signal_name) :].strip(
            C_SPACE
        ):
            return number
    return 0


def exclusive(value: str | None, *, line: int = 0) -> str:
    """`--exclusive`'s kind: `exclusive` (no value), `oversubscribe`, `user` or `mcs`."""
    kind = (value or "exclusive").lower()
    if kind not in ("exclusive", "oversubscribe", "user", "mcs"):
        raise DirectiveRefused(
            "invalid", "Invalid --exclusive specification", line=line, option="--exclusive"
        )
    return kind


NICE_LIMIT = 0x80000000 - 3


def nice(value: str | None, *, line: int = 0) -> int:
    """`--nice[=adjustment]`: 100 without a value; strtoll's reading of one."""
    if value is None:
        return 100
    match = STRTOLL.match(value)
    adjustment = int(match.group(1)) if match else 0
    if abs(adjustment) > NICE_LIMIT:
        raise DirectiveRefused(
            "invalid",
            f"Invalid --nice value, out of range (+/- {NICE_LIMIT})",
            line=line,
            option="--nice",
        )
    return adjustment


HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread")


def hint(value: str, *, line: int = 0) -> str:
    """`--hint`, each of its comma-separated words one sbatch knows (`verify_hint`)."""
    for word in re.split(r",(?![0-9])", value):
        if word.lower() == "help":
            raise DirectiveRefused(
                "invalid",
                "--hint=help prints sbatch's help on hints and submits nothing",
                line=line,
                option="--hint",
            )
        if word.lower() not in HINTS:
            raise DirectiveRefused(
                "invalid",
                f'unrecognized --hint argument "{word}", see --hint=help',
                line=line,
                option="--hint",
            )
    return value


def mutually_exclusive_memory(reading: ScriptReading) -> None:
    """sbatch's `_validate_memory_options`: one of --mem, --mem-per-cpu and --mem-per-gpu."""
    given = [
        directive
        for directive in (reading.last(key) for key in ("mem", "mem-per-cpu", "mem-per-gpu"))
        if directive is not None
    ]
    if len(given) > 1:
        raise DirectiveRefused(
            "conflict",
            "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.",
            line=max(directive.line for directive in given),
            option=given[-1].written,
        )
