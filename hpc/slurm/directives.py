"""A batch script's `#SBATCH` lines, read as sbatch itself reads them: pure functions.

The rules are Slurm 22.05.8's, the version the platform's clusters run (Debian 12), taken from
its sources and checked against `sbatch -v --test-only` on the test cluster
(tests/scheduler_bridge/test_directives_sbatch.py):

- The script is refused as sbatch refuses it (`_get_script_buffer` in src/sbatch/sbatch.c):
  empty, only whitespace, no `#!` at its start, a NUL character, a DOS line break.
- Directives are lines that start with `#SBATCH` (or the old `#SLURM`) in the first column
  (`_opt_batch_script` in src/sbatch/opt.c). Reading stops at the first line that is neither
  blank nor a comment: a `#SBATCH` line after the first command is a plain comment.
- A line is cut into arguments as a shell would, roughly (`get_argument`): blanks separate,
  single and double quotes group, a backslash takes the next character as it is, and an
  unquoted `#` ends the line. `hetjob` (or `packjob`) starts a heterogeneous job's component.
- All the arguments of all the lines go through one `getopt_long` with sbatch's option table
  (src/common/slurm_opt.c) in POSIX order: options only, the first other word is an error;
  long options by any unambiguous prefix (`--out` is `--output`, `--tasks` is
  `--tasks-per-node`), with `=value` or the value as the next argument; short options
  clustered (`-Hc2`); the last value of an option wins.
- Options that sbatch reads only from its command line (`--help`, `--verbose`, `--wrap`...)
  are read and ignored in a script, as sbatch ignores them there.

What an honoured option's value means is read by the parsers below with sbatch's own rules
(`time_str2mins`, `str_to_mbytes`, `parse_int`, `verify_node_count`, `get_signal_opts`...),
and each refusal carries sbatch's own words. Which options the platform honours, overrides or
refuses is decided above this library; here is only what sbatch would read."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

SLURM_VERSION = "22.05.8"

NO_ARGUMENT, REQUIRED, OPTIONAL = 0, 1, 2


@dataclass(frozen=True)
class Option:
    """One option of sbatch's table: its long name, whether it takes a value, its short letter
    and whether sbatch reads it only on its command line (`sbatch_early_pass`)."""

    name: str
    argument: int
    short: str | None = None
    command_line_only: bool = False
    # Options that are one option under two names (getopt's `val`): `tasks-per-node` is
    # `ntasks-per-node`. Empty: the option is its own.
    same_as: str = ""

    @property
    def key(self) -> str:
        return self.same_as or self.name


def _option(
    name: str, argument: int, short: str | None = None, *, early: bool = False, same_as: str = ""
) -> Option:
    return Option(name, argument, short, early, same_as)


# sbatch 22.05.8's options, in the order of `common_options` in src/common/slurm_opt.c (getopt
# names the candidates of an ambiguous prefix in this order). Options of srun or salloc alone
# are not here: sbatch does not know them.
OPTIONS: tuple[Option, ...] = (
    _option("account", REQUIRED, "A"),
    _option("acctg-freq", REQUIRED),
    _option("array", REQUIRED, "a"),
    _option("batch", REQUIRED),
    _option("begin", REQUIRED, "b"),
    _option("bb", REQUIRED),
    _option("bbf", REQUIRED),
    _option("cluster-constraint", REQUIRED),
    _option("chdir", REQUIRED, "D"),
    _option("cluster", REQUIRED),
    _option("clusters", REQUIRED, "M"),
    _option("comment", REQUIRED),
    _option("container", REQUIRED),
    _option("context", REQUIRED),
    _option("contiguous", NO_ARGUMENT),
    _option("constraint", REQUIRED, "C"),
    _option("core-spec", REQUIRED, "S"),
    _option("cores-per-socket", REQUIRED),
    _option("cpu-freq", REQUIRED),
    _option("cpus-per-gpu", REQUIRED),
    _option("cpus-per-task", REQUIRED, "c"),
    _option("deadline", REQUIRED),
    _option("delay-boot", REQUIRED),
    _option("dependency", REQUIRED, "d"),
    _option("distribution", REQUIRED, "m"),
    _option("error", REQUIRED, "e"),
    _option("exclude", REQUIRED, "x"),
    _option("exclusive", OPTIONAL),
    _option("export", REQUIRED),
    _option("export-file", REQUIRED),
    _option("extra-node-info", REQUIRED, "B"),
    _option("get-user-env", OPTIONAL),
    _option("gid", REQUIRED),
    _option("gpu-bind", REQUIRED),
    _option("gpu-freq", REQUIRED),
    _option("gpus", REQUIRED, "G"),
    _option("gpus-per-node", REQUIRED),
    _option("gpus-per-socket", REQUIRED),
    _option("gpus-per-task", REQUIRED),
    _option("gres", REQUIRED),
    _option("gres-flags", REQUIRED),
    _option("help", NO_ARGUMENT, "h", early=True),
    _option("hint", REQUIRED),
    _option("hold", NO_ARGUMENT, "H"),
    _option("ignore-pbs", NO_ARGUMENT),
    _option("input", REQUIRED, "i"),
    _option("job-name", REQUIRED, "J"),
    _option("kill-on-invalid-dep", REQUIRED),
    _option("licenses", REQUIRED, "L"),
    _option("mail-type", REQUIRED),
    _option("mail-user", REQUIRED),
    _option("mcs-label", REQUIRED),
    _option("mem", REQUIRED),
    _option("mem-bind", REQUIRED),
    _option("mem-per-cpu", REQUIRED),
    _option("mem-per-gpu", REQUIRED),
    _option("mincpus", REQUIRED),
    _option("network", REQUIRED),
    _option("nice", OPTIONAL),
    _option("no-kill", OPTIONAL, "k"),
    _option("no-requeue", NO_ARGUMENT),
    _option("nodefile", REQUIRED, "F"),
    _option("nodelist", REQUIRED, "w"),
    _option("nodes", REQUIRED, "N"),
    _option("ntasks", REQUIRED, "n"),
    _option("ntasks-per-core", REQUIRED),
    _option("ntasks-per-gpu", REQUIRED),
    _option("ntasks-per-node", REQUIRED),
    _option("ntasks-per-socket", REQUIRED),
    _option("ntasks-per-tres", REQUIRED),
    _option("open-mode", REQUIRED),
    _option("output", REQUIRED, "o"),
    _option("overcommit", NO_ARGUMENT, "O"),
    _option("oversubscribe", NO_ARGUMENT, "s"),
    _option("parsable", NO_ARGUMENT),
    _option("partition", REQUIRED, "p"),
    _option("power", REQUIRED),
    _option("prefer", REQUIRED),
    _option("priority", REQUIRED),
    _option("profile", REQUIRED),
    _option("propagate", OPTIONAL),
    _option("qos", REQUIRED, "q"),
    _option("quiet", NO_ARGUMENT, "Q", early=True),
    _option("reboot", NO_ARGUMENT),
    _option("requeue", NO_ARGUMENT),
    _option("reservation", REQUIRED),
    _option("signal", REQUIRED),
    _option("sockets-per-node", REQUIRED),
    _option("spread-job", NO_ARGUMENT),
    _option("switches", REQUIRED),
    _option("tasks-per-node", REQUIRED, same_as="ntasks-per-node"),
    _option("test-only", NO_ARGUMENT),
    _option("thread-spec", REQUIRED),
    _option("threads-per-core", REQUIRED),
    _option("time", REQUIRED, "t"),
    _option("time-min", REQUIRED),
    _option("tmp", REQUIRED),
    _option("uid", REQUIRED),
    _option("use-min-nodes", NO_ARGUMENT),
    _option("verbose", NO_ARGUMENT, "v", early=True),
    _option("version", NO_ARGUMENT, "V", early=True),
    _option("usage", NO_ARGUMENT, early=True),
    _option("wait", NO_ARGUMENT, "W"),
    _option("wait-all-nodes", REQUIRED),
    _option("wckey", REQUIRED),
    _option("wrap", REQUIRED, early=True),
)
_BY_NAME = {option.name: option for option in OPTIONS}
_BY_SHORT = {option.short: option for option in OPTIONS if option.short}


@dataclass(frozen=True)
class Removed:
    """An option older sbatch versions had and 22.05 does not: the first release without it
    (from the option tables of each release's sources) and what to write instead, if anything."""

    since: str
    instead: str = ""


REMOVED_OPTIONS: Mapping[str, Removed] = {
    # BlueGene and Cray-XT options, gone with those systems' support.
    **dict.fromkeys(
        (
            "blrts-image",
            "cnload-image",
            "conn-type",
            "geometry",
            "ioload-image",
            "linux-image",
            "mloader-image",
            "no-rotate",
            "ramdisk-image",
        ),
        Removed("18.08"),
    ),
    "checkpoint": Removed("20.02"),
    "checkpoint-dir": Removed("19.05"),
    "immediate": Removed("19.05"),
    "jobid": Removed("19.05"),
    "mem_bind": Removed("19.05", "--mem-bind"),
    "mincores": Removed("19.05", "--cores-per-socket"),
    "minsockets": Removed("19.05", "--sockets-per-node"),
    "minthreads": Removed("19.05", "--threads-per-core"),
    "share": Removed("19.05", "--oversubscribe"),
    "workdir": Removed("19.05", "--chdir"),
    "x11": Removed("19.05"),
}


class DirectiveRefused(Exception):
    """The script is refused as sbatch would refuse it (or, for `not_supported`, as the
    platform does). `kind` names the rule: `unknown` (no such option), `removed` (an option
    sbatch no longer has), `invalid` (a value or a word sbatch cannot read), `conflict`
    (options that exclude each other), `not_batch_script` (empty, no `#!`, a NUL),
    `dos_line_breaks`, `other_directives` (`#PBS`, `#BSUB`), `not_supported`. `reason` is
    sbatch's own message; `line` the script's line (1 for the script as a whole); `option` the
    option as written."""

    def __init__(self, kind: str, reason: str, *, line: int, option: str = "") -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.line = line
        self.option = option


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
_OTHER_MAGIC_WORDS = ("#PBS", "#BSUB")
# sbatch's translator of #PBS and #BSUB lines gives up after this many lines that do not start
# with `#` (src/sbatch/xlate.c).
_OTHER_DIRECTIVES_SCAN_LINES = 100


def script_check(script: str) -> None:
    """Refuses what sbatch refuses before it reads a single option."""
    if not script:
        raise DirectiveRefused("not_batch_script", "Batch script is empty!", line=1)
    if not script.strip():
        raise DirectiveRefused("not_batch_script", "Batch script contains only whitespace!", line=1)
    if not script.startswith("#!"):
        raise DirectiveRefused(
            "not_batch_script",
            "This does not look like a batch script.  The first line must start with #! "
            "followed by the path to an interpreter. For instance: #!/bin/sh",
            line=1,
        )
    if "\x00" in script:
        raise DirectiveRefused(
            "not_batch_script",
            "The Slurm controller does not allow scripts that contain a NULL character '\\0'.",
            line=script.count("\n", 0, script.index("\x00")) + 1,
        )
    if "\r\n" in script:
        raise DirectiveRefused(
            "dos_line_breaks",
            "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
            "breaks (\\n).",
            line=script.count("\n", 0, script.index("\r\n")) + 1,
        )


def read_directives(script: str) -> ScriptReading:
    """The script's options as sbatch reads them; raises `DirectiveRefused` where sbatch
    would stop (its first error), and for `#PBS` and `#BSUB` lines, which the platform does not
    read (sbatch is given `--ignore-pbs`)."""
    script_check(script)
    _other_directives_refuse(script)
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
        stripped = line.lstrip(_C_SPACE)
        if stripped and not stripped.startswith("#"):
            return  # the first command: sbatch reads no further


def _other_directives_refuse(script: str) -> None:
    commands = 0
    for number, line in enumerate(script.split("\n"), start=1):
        word = next((word for word in _OTHER_MAGIC_WORDS if line.startswith(word)), None)
        if word is not None:
            raise DirectiveRefused(
                "other_directives",
                f"{word} lines are options of another scheduler; write them as #SBATCH "
                "options (sbatch here is given --ignore-pbs and would not read them).",
                line=number,
                option=word,
            )
        if not line.startswith("#"):
            commands += 1
            if commands > _OTHER_DIRECTIVES_SCAN_LINES:
                return


# C's isspace() in the "C" locale.
_C_SPACE = " \t\n\v\f\r"


def _arguments(text: str, number: int) -> Iterator[str]:
    """The arguments of one directive line after its magic word, cut as sbatch's
    `get_argument` cuts them."""
    length = len(text)
    position = len(text) - len(text.lstrip(_C_SPACE))
    while True:
        # sbatch quotes the line from where each argument's reading starts.
        start = position
        while position < length and text[position] in _C_SPACE:
            position += 1
        rest = text[position:]
        for separator in ("packjob", "hetjob"):
            if rest[: len(separator)].lower() == separator and (
                len(rest) == len(separator) or rest[len(separator)] in _C_SPACE
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
        while position < length and (quote or text[position] not in _C_SPACE):
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
    if name in _BY_NAME:
        return _BY_NAME[name]
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
        option = _BY_SHORT.get(letter)
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


def option_named(key: str) -> Option:
    return _BY_NAME[key]


def is_command_line_only(key: str) -> bool:
    return _BY_NAME[key].command_line_only


# --- Values, read as sbatch reads them -----------------------------------------------------------


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
        days, hours, minutes, seconds = [*_scanf_integers(value, "-::", 4), 0, 0, 0, 0][:4]
        total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    else:
        parts = _scanf_integers(value, "::", 3)
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


_SCANF_INTEGER = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def _scanf_integers(value: str, separators: str, count: int) -> list[int]:
    """What C's sscanf("%d<s1>%d<s2>%d...") assigns, in order, until the first mismatch."""
    found: list[int] = []
    position = 0
    for index in range(count):
        match = _SCANF_INTEGER.match(value, position)
        if match is None:
            break
        found.append(int(match.group(1)))
        position = match.end()
        if index < len(separators):
            if value[position : position + 1] != separators[index]:
                break
            position += 1
    return found


_STRTOLL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def megabytes(value: str, *, option: str = "--mem", line: int = 0) -> int:
    """MiB from a memory size as sbatch reads it (`str_to_mbytes`): a whole number, in MiB or
    with K, M, G or T (and an optional B), kibibytes rounded up."""
    match = _STRTOLL.match(value)
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
    match = _STRTOLL.fullmatch(value)
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
        if leftover.strip(_C_SPACE):
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
        match = _STRTOLL.match(seconds_text)
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
    match = _STRTOLL.match(name)
    if match is not None:
        return int(match.group(1)) if not name[match.end() :].strip(_C_SPACE) else 0
    bare = name.lstrip(_C_SPACE)
    if bare[:3].upper() == "SIG":
        bare = bare[3:]
    for signal_name, number in _SIGNALS.items():
        if bare[: len(signal_name)].upper() == signal_name and not bare[len(signal_name) :].strip(
            _C_SPACE
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
    match = _STRTOLL.match(value)
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


DEPENDENCY_KINDS = ("after", "afterany", "afterburstbuffer", "aftercorr", "afternotok", "afterok")


@dataclass(frozen=True)
class DependencyCondition:
    """One condition of `--dependency`: its kind and the jobs it names, each with the minutes
    after its start (`after:123+10`, None otherwise). `singleton` names no job."""

    kind: str
    jobs: tuple[tuple[str, int | None], ...] = ()


@dataclass(frozen=True)
class Dependency:
    """`--dependency`: conditions joined by `,` (all must hold) or `?` (any one)."""

    conditions: tuple[DependencyCondition, ...]
    any_of: bool = False


def dependency(value: str, *, line: int = 0) -> Dependency:
    """sbatch's dependency list, read into its conditions. A job is named by any word of
    letters, digits, `_` and `-` here (Slurm's ids, and the platform's own job ids); which ones
    the job may name is the platform's to decide."""

    def refused(why: str) -> DirectiveRefused:
        return DirectiveRefused(
            "invalid", f"Invalid dependency {value!r}: {why}", line=line, option="--dependency"
        )

    if "," in value and "?" in value:
        raise refused("`,` (all) and `?` (any) cannot be mixed")
    any_of = "?" in value
    conditions = []
    for part in value.split("?" if any_of else ","):
        kind, _, rest = part.partition(":")
        if kind == "singleton" and not rest:
            conditions.append(DependencyCondition(kind))
            continue
        if kind not in DEPENDENCY_KINDS:
            raise refused(f"`{kind}` is not a dependency type")
        if not rest:
            raise refused(f"`{kind}` names no job")
        jobs = []
        for reference in rest.split(":"):
            job, plus, minutes = reference.partition("+")
            if not re.fullmatch(r"[A-Za-z0-9_-]+", job) or (
                plus and (kind != "after" or not minutes.isdigit())
            ):
                raise refused(f"`{reference}` is not a job (with `+minutes` only after `after`)")
            jobs.append((job, int(minutes) if plus else None))
        conditions.append(DependencyCondition(kind, tuple(jobs)))
    return Dependency(tuple(conditions), any_of)


def dependency_text(value: Dependency) -> str:
    """A dependency as sbatch takes it."""
    parts = []
    for condition in value.conditions:
        jobs = "".join(
            f":{job}" + (f"+{minutes}" if minutes is not None else "")
            for job, minutes in condition.jobs
        )
        parts.append(condition.kind + jobs)
    return ("?" if value.any_of else ",").join(parts)
