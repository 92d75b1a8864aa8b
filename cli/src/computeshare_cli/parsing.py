"""Pure functions the commands rely on: reading `--env` and `--input` arguments, checking the
names of files on either side, and finding the new part of a growing output's tail."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# The server's own rule for a job's file names (contract of issue 16): relative, `/`-separated,
# each part of these characters, neither `.` nor `..`. Checking it here too saves an upload
# that the server would refuse anyway, and guards the user's disk against a name from the
# server that would land outside the download folder.
NAME_PART = re.compile(r"[A-Za-z0-9._-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ArgumentError(ValueError):
    """An argument the user gave that cannot be right; shown as a usage error."""


@dataclass(frozen=True)
class InputFile:
    path: Path  # on the user's machine
    name: str  # in the job's folder
    size: int


def environment_parse(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`["A=1", "B=x=y"]` -> `{"A": "1", "B": "x=y"}`; a name given twice is an error rather
    than a silent overwrite."""
    environment: dict[str, str] = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not ENV_NAME.fullmatch(name):
            raise ArgumentError(f"--env {pair!r}: expected NAME=VALUE with a shell variable name.")
        if name in environment:
            raise ArgumentError(f"--env {name} is given twice.")
        environment[name] = value
    return environment


def job_file_name_check(name: str, *, max_depth: int = 4) -> str:
    """`name` if it is a job file name the server accepts (relative, `/`-separated, at most
    `max_depth` parts of [A-Za-z0-9._-], none `.` or `..`); else ArgumentError."""
    parts = name.split("/")
    if not name or name.startswith("/") or len(parts) > max_depth:
        raise ArgumentError(
            f"{name!r} is not a file name for the job's folder: relative, at most {max_depth} "
            "levels."
        )
    for part in parts:
        if part in (".", "..") or not NAME_PART.fullmatch(part):
            raise ArgumentError(
                f"{name!r} is not a file name for the job's folder: each part is letters, "
                "digits, '.', '_' or '-', and not '.' or '..'."
            )
    return name


def input_files_parse(specs: tuple[str, ...] | list[str]) -> list[InputFile]:
    """`--input FILE[:NAME]`: the local FILE, sent as NAME in the job's folder (default: the
    file's own name). A folder is refused: the job's layout is stated, one file at a time."""
    files: list[InputFile] = []
    seen: set[str] = set()
    for spec in specs:
        local, separator, name = spec.partition(":")
        path = Path(local).expanduser()
        if not path.is_file():
            raise ArgumentError(f"--input {spec!r}: {local} is not a file.")
        name = name if separator else path.name
        job_file_name_check(name)
        if name in seen:
            raise ArgumentError(f"--input: two files are named {name!r} in the job's folder.")
        seen.add(name)
        files.append(InputFile(path=path, name=name, size=path.stat().st_size))
    return files


def download_target(folder: Path, name: str) -> Path:
    """Where the job file `name` goes under `folder`; ArgumentError for a name that would land
    anywhere else (the server checks its names, and so does the client: defence in depth)."""
    job_file_name_check(name, max_depth=64)
    target = (folder / PurePosixPath(name)).resolve()
    root = folder.resolve()
    if root != target and root not in target.parents:
        raise ArgumentError(f"{name!r} would be written outside {folder}.")
    return target


def new_output(previous: str, current: str) -> str:
    """The part of `current` (the latest tail of a growing output) that follows `previous`
    (the tail read before). The output only grows, so the start of `current` overlaps the end
    of `previous`: the longest such overlap is taken. Output that repeats exactly the same
    text for a whole tail's length cannot be told apart from no output (a limit of reading
    tails; the API gives no offset)."""
    if not previous:
        return current
    if current == previous:
        return ""
    for start in range(len(previous)):
        overlap = previous[start:]
        if current.startswith(overlap):
            return current[len(overlap) :]
    return current  # no overlap: more was written than one tail holds


def array_task_count(array: str | None) -> int | None:
    """How many tasks an array spec (`0-99`, `1,3,5`, `0-999:2%20`) has, for a progress bar
    before the server has answered; None when it cannot be read here."""
    if not array:
        return 1
    spec = array.split("%", 1)[0]
    count = 0
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not match:
            return None
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if last < first or step < 1:
            return None
        count += (last - first) // step + 1
    return count
