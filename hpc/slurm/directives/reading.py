"""sbatch's reading of a script's directive lines: which lines it reads, each cut into
arguments as `get_argument` cuts it, and all of them through one `getopt_long` over the option
table; and the script rewritten so that sbatch reads none of them."""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from hpc.slurm.directives.checks import other_directives_refuse, script_check
from hpc.slurm.directives.errors import DirectiveRefused
from hpc.slurm.directives.libc import C_SPACE
from hpc.slurm.directives.options import (
    BY_NAME,
    BY_SHORT,
    NO_ARGUMENT,
    OPTIONAL,
    OPTIONS,
    REMOVED_OPTIONS,
    Option,
)


@dataclass(frozen=True)
class Directive:
    """One option of the script's directives: the line it is on, the option's name in sbatch's
    table (`key`: an alias reads as the option it stands for), how it was written (`-c`,
    `--cpus-per-task`, `--cpus-per`) and its value (None for an option without one)."""

    line: int
    key: str
    written: str
    value: str | None
    # Its place among the script's options, in the order sbatch reads them.
    position: int = 0

    @property
    def text(self) -> str:
        """The option as written, with its value."""
        if self.value is None:
            return self.written
        if self.written.startswith("--"):
            return f"{self.written}={shlex.quote(self.value)}"
        return f"{self.written} {shlex.quote(self.value)}"


@dataclass(frozen=True)
class ScriptReading:
    """What sbatch reads of a script: its options in order, and the lines that carry them."""

    directives: tuple[Directive, ...]
    lines: frozenset[int]

    def last(self, key: str) -> Directive | None:
        """The option's last occurrence, whose value is the one sbatch keeps."""
        for directive in reversed(self.directives):
            if directive.key == key:
                return directive
        return None

    def options_given(self) -> list[str]:
        """The options given, each once, in the order of their last occurrence."""
        last_seen = {directive.key: index for index, directive in enumerate(self.directives)}
        return sorted(last_seen, key=last_seen.__getitem__)


_MAGIC_WORDS = ("#SBATCH", "#SLURM")


def read_directives(script: str) -> ScriptReading:
    """The script's options as sbatch reads them; raises `DirectiveRefused` where sbatch
    would stop (its first error), and for `#PBS` and `#BSUB` lines, which the platform does not
    read (sbatch is given `--ignore-pbs`)."""
    script_check(script)
    other_directives_refuse(script)
    arguments: list[tuple[str, int]] = []
    lines: set[int] = set()
    for number, text in _header_lines(script):
        lines.add(number)
        arguments += [(argument, number) for argument in _arguments(text, number)]
    read = tuple(
        replace(directive, position=position)
        for position, directive in enumerate(_getopt(arguments))
    )
    return ScriptReading(read, frozenset(lines))


def directive_lines(script: str) -> list[tuple[int, str]]:
    """Every line sbatch reads as directives (number, the text after the magic word)."""
    return list(_header_lines(script))


def _header_lines(script: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(script.split("\n"), start=1):
        word = next((word for word in _MAGIC_WORDS if line.startswith(word)), None)
        if word is not None:
            yield number, line[len(word) :]
            continue
        stripped = line.lstrip(C_SPACE)
        if stripped and not stripped.startswith("#"):
            return  # the first command: sbatch reads no further


def _arguments(text: str, number: int) -> Iterator[str]:
    """The arguments of one directive line after its magic word, cut as sbatch's
    `get_argument` cuts them."""
    length = len(text)
    position = len(text) - len(text.lstrip(C_SPACE))
    while True:
        # sbatch quotes the line from where each argument's reading starts.
        start = position
        while position < length and text[position] in C_SPACE:
            position += 1
        rest = text[position:]
        for separator in ("packjob", "hetjob"):
            if rest[: len(separator)].lower() == separator and (
                len(rest) == len(separator) or rest[len(separator)] in C_SPACE
            ):
                raise DirectiveRefused(
                    "not_supported",
                    f"`{separator}` starts a component of a heterogeneous job; the platform "
                    "runs one job of one component.",
                    line=number,
                    option=separator,
                )
        if position < length and text[position] == ":":
            raise DirectiveRefused(
                "invalid", f"line {number}: Unexpected `:` in [{text[start:]}]", line=number
            )
        if position >= length:
            return
        argument: list[str] = []
        quote = ""
        escaped = False
        while position < length and (quote or text[position] not in C_SPACE):
            character = text[position]
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
                position += 1
                continue
            elif quote:
                if character == quote:
                    quote = ""
                    position += 1
                    continue
            elif character in "\"'":
                quote = character
                position += 1
                continue
            elif character == "#":
                position = length  # an unescaped `#`: the rest of the line is a comment
                break
            argument.append(character)
            position += 1
        if quote:
            raise DirectiveRefused(
                "invalid", f"line {number}: Unmatched `{quote}` in [{text[start:]}]", line=number
            )
        if not argument:
            return
        yield "".join(argument)


def _getopt(arguments: list[tuple[str, int]]) -> Iterator[Directive]:
    """sbatch's `getopt_long` over the directives' arguments, in POSIX order ("+")."""
    index = 0
    while index < len(arguments):
        argument, line = arguments[index]
        index += 1
        if argument == "--":
            if index < len(arguments):
                _not_an_option(*arguments[index])
            return
        if argument.startswith("--"):
            directive, index = _long_option(argument, line, arguments, index)
            yield directive
        elif argument.startswith("-") and argument != "-":
            cluster, index = _short_options(argument, line, arguments, index)
            yield from cluster
        else:
            _not_an_option(argument, line)


def _not_an_option(argument: str, line: int) -> None:
    raise DirectiveRefused(
        "invalid", f"Invalid directive found in batch script: {argument}", line=line
    )


def _long_option(
    argument: str, line: int, arguments: list[tuple[str, int]], index: int
) -> tuple[Directive, int]:
    name, equals, value = argument[2:].partition("=")
    option = _long_option_named(name, argument, line)
    written = f"--{name}"
    if option.argument == NO_ARGUMENT:
        if equals:
            raise DirectiveRefused(
                "invalid",
                f"option '--{option.name}' doesn't allow an argument",
                line=line,
                option=written,
            )
        return Directive(line, option.key, written, None), index
    if equals:
        return Directive(line, option.key, written, value), index
    if option.argument == OPTIONAL:
        return Directive(line, option.key, written, None), index
    if index >= len(arguments):
        raise DirectiveRefused(
            "invalid",
            f"option '--{option.name}' requires an argument",
            line=line,
            option=written,
        )
    return Directive(line, option.key, written, arguments[index][0]), index + 1


def _long_option_named(name: str, argument: str, line: int) -> Option:
    """The option `--name` stands for: its exact name, else the one option it is a prefix of
    (several options under one getopt value count as one)."""
    if name in BY_NAME:
        return BY_NAME[name]
    candidates = [option for option in OPTIONS if option.name.startswith(name)] if name else []
    if not candidates:
        removed = REMOVED_OPTIONS.get(name)
        reason = f"unrecognized option '{argument}'"
        if removed is None:
            raise DirectiveRefused("unknown", reason, line=line, option=f"--{name}")
        instead = f"; write {removed.instead} instead" if removed.instead else ""
        raise DirectiveRefused(
            "removed",
            f"{reason}: sbatch no longer has --{name} (gone since Slurm {removed.since}){instead}",
            line=line,
            option=f"--{name}",
        )
    first = candidates[0]
    if any(
        (option.key, option.argument) != (first.key, first.argument) for option in candidates[1:]
    ):
        possibilities = " ".join(f"'--{option.name}'" for option in candidates)
        raise DirectiveRefused(
            "invalid",
            f"option '{argument}' is ambiguous; possibilities: {possibilities}",
            line=line,
            option=f"--{name}",
        )
    return first


def _short_options(
    argument: str, line: int, arguments: list[tuple[str, int]], index: int
) -> tuple[list[Directive], int]:
    """A cluster of short options (`-H`, `-c2`, `-Hc 2`), and the index of the argument after
    it (one further when its last option took the next argument as its value)."""
    found: list[Directive] = []
    position = 1
    while position < len(argument):
        letter = argument[position]
        position += 1
        option = BY_SHORT.get(letter)
        if option is None:
            raise DirectiveRefused(
                "unknown", f"invalid option -- '{letter}'", line=line, option=f"-{letter}"
            )
        written = f"-{letter}"
        if option.argument == NO_ARGUMENT:
            found.append(Directive(line, option.key, written, None))
            continue
        attached = argument[position:]
        if attached or option.argument == OPTIONAL:
            found.append(Directive(line, option.key, written, attached or None))
            return found, index
        if index >= len(arguments):
            raise DirectiveRefused(
                "invalid",
                f"option requires an argument -- '{letter}'",
                line=line,
                option=written,
            )
        found.append(Directive(line, option.key, written, arguments[index][0]))
        return found, index + 1
    return found, index


# --- What reaches Slurm ------------------------------------------------------------------------


def neutralised(script: str, notes: Mapping[int, str]) -> str:
    """The script with every directive line turned into a plain comment that says what became
    of it (`notes`, by line; a generic note otherwise): sbatch then reads no option of the
    script's, and every line keeps its number."""
    lines = script.split("\n")
    for number, _ in _header_lines(script):
        original = lines[number - 1]
        word = next(word for word in _MAGIC_WORDS if original.startswith(word))
        note = notes.get(number, "read by the platform")
        lines[number - 1] = f"# [computeshare: {note}] {word[1:]}{original[len(word) :]}"
    return "\n".join(lines)
