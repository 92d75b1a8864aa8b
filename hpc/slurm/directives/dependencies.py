"""`--dependency`: the conditions on other jobs a script's line names, and their text as sbatch
takes it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpc.slurm.directives.errors import DirectiveRefused

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
