"""The names a job's stdout, stderr and stdin files take in its folder: sbatch's filename
patterns (`%j`, `%x`, `%A`, `%a`, `%N`...) and the platform's rule that every such file stays
in the job's own folder. Pure functions.

Slurm fills the patterns of a batch job as `_create_batch_fname` does in
src/slurmd/common/fname.c (22.05.8): `%%` is a `%`; `%` then digits pads a number with zeros
to that width (at most 10); `%a` the array task's index (4294967294 outside an array), `%A`
the array's id (the job's own outside an array), `%j` and `%J` the job's id (an array task's
own), `%n` and `%t` 0, `%N` the node's host name, `%s` "batch", `%u` the user, `%x` the job's
name. The platform names every job on the cluster itself (`cs-<uuid>`) and runs it as a pool
account, so it fills `%x` (with the job's name as the team gave it) and `%u` itself before
Slurm sees the name (`name_with`), and fills the rest when it reads the files back."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# What `%a` gives outside an array: Slurm's NO_VAL.
NO_ARRAY_TASK = 4294967294
_MAX_WIDTH = 10
# Letters Slurm fills in a batch job's file names.
LETTERS = frozenset("aAjJnNstux")
# Stands for a part that is not known when a name is read back (the node's name, an array
# task's own job id before accounting gave it): matched against the folder's files.
WILDCARD = "*"

# The characters a name of the job's folder may hold here: plain, unquoted-safe ones, `%` for
# the patterns and `/` between folders. No `\` (Slurm would then fill no pattern at all), no
# blanks, no glob characters.
_PART = re.compile(r"[A-Za-z0-9._+,=@#%-]+")
DEV_NULL = "/dev/null"
MAX_DEPTH = 4
_PATTERN = re.compile(r"%(%|[0-9]*[A-Za-z]?)")


class NameRefused(ValueError):
    """A file name the job's folder cannot take; the message says why."""


def rerooted(path: str, *, platform_names: Sequence[str] = ()) -> str:
    """Where a script's `--output`, `--error` or `--input` path lands in the job's folder: a
    relative path stays as it is (its folders are made before sbatch, which makes none), an
    absolute path or one that climbs out with `..` keeps its last part; `/dev/null` stays
    `/dev/null`. Raises `NameRefused` for a name the folder cannot take."""
    if path == DEV_NULL:
        return path
    parts = [part for part in path.split("/") if part]
    if path.startswith("/") or any(part in (".", "..") for part in parts):
        parts = parts[-1:]
    if not parts or path.endswith("/") or parts[-1] in (".", ".."):
        raise NameRefused(f"{path!r} names a folder, not a file")
    for part in parts:
        if not _PART.fullmatch(part):
            raise NameRefused(
                f"{path!r}: the platform keeps file names to letters, digits and . _ + , = @ # "
                "% - (no blanks, quotes or backslashes)"
            )
    if len(parts) > MAX_DEPTH:
        raise NameRefused(f"{path!r} is more than {MAX_DEPTH} folders deep")
    if any("%" in part for part in parts[:-1]):
        # Slurm makes no folder, so the platform makes them before sbatch: their names must
        # be known then.
        raise NameRefused(f"{path!r}: patterns go in the file's name, not in its folders")
    name = "/".join(parts)
    for match in _PATTERN.finditer(name):
        specifier = match.group(1)
        if specifier != "%" and (not specifier or specifier[-1] not in LETTERS):
            raise NameRefused(
                f"{path!r}: Slurm fills %a %A %j %J %n %N %s %t %u %x in file names, not "
                f"%{specifier}"
            )
    if name in platform_names:
        raise NameRefused(f"{name!r} is the platform's own file in the job's folder")
    return name


def name_with(pattern: str, values: Mapping[str, str | int]) -> str:
    """`pattern` with the specifiers of `values` filled (keys are letters, and `%` for `%%`),
    the others left for whoever fills them next. A number is padded to the specifier's width;
    `WILDCARD` stands for a part not known."""
    if pattern == DEV_NULL:
        return pattern

    def fill(match: re.Match[str]) -> str:
        specifier = match.group(1)
        letter = specifier[-1:] if specifier != "%" else "%"
        if letter not in values:
            return match.group(0)
        value = values[letter]
        if isinstance(value, int) and letter in "aAjJnt":
            width = min(int(specifier[:-1] or 0), _MAX_WIDTH)
            return f"{value:0{width}d}"
        return str(value)

    return _PATTERN.sub(fill, pattern)


def batch_values(
    *,
    job_id: int | str,
    array_job_id: int | str | None = None,
    array_task_id: int | None = None,
    node: str,
) -> dict[str, str | int]:
    """What Slurm gives a batch step's patterns but `%x` and `%u`: `%j` the job's (or array
    task's) own id (`WILDCARD` when not known), `%A` the array's id, `%a` the task's index."""
    own: int | str = job_id if job_id == WILDCARD else int(job_id)
    return {
        "%": "%",
        "j": own,
        "J": own,
        "A": int(array_job_id) if array_job_id is not None else own,
        "a": array_task_id if array_task_id is not None else NO_ARRAY_TASK,
        "n": 0,
        "t": 0,
        "s": "batch",
        "N": node,
    }


def safe_name_part(text: str) -> str:
    """`text` (a job's name for `%x`) with every character a file name here cannot hold made
    an underscore."""
    return re.sub(r"[^A-Za-z0-9._+,=@-]", "_", text) or "_"
