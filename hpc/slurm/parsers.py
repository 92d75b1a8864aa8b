"""Pure functions from Slurm's explicit, delimited output to typed records."""

from __future__ import annotations

from dataclasses import dataclass

from hpc.errors import UnexpectedOutput


@dataclass(frozen=True)
class SubmittedJob:
    job_id: str
    cluster: str | None


def parse_sbatch_parsable(text: str) -> SubmittedJob:
    """`sbatch --parsable` prints `jobid` or `jobid;cluster`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise UnexpectedOutput(f"sbatch --parsable printed {len(lines)} lines: {text!r}")
    job_id, _, cluster = lines[0].partition(";")
    if not job_id.isdigit():
        raise UnexpectedOutput(f"sbatch --parsable printed no job id: {text!r}")
    return SubmittedJob(job_id=job_id, cluster=cluster or None)


def parse_parsable2(
    text: str, fields: list[str], *, last_field_is_free_text: bool = False
) -> list[dict[str, str]]:
    """Rows of `--parsable2 --noheader` output (fields separated by `|`, none trailing), keyed by
    the field names the command was given in `-o`/`--format`.

    With `last_field_is_free_text`, the last field takes the rest of the line, `|` included: a
    command that puts its one free-text field (a job name) last stays readable whatever that
    text holds, except a line break."""
    rows = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        values = line.split("|", len(fields) - 1) if last_field_is_free_text else line.split("|")
        if len(values) != len(fields):
            raise UnexpectedOutput(
                f"expected {len(fields)} fields ({'|'.join(fields)}), got {len(values)}: {line!r}"
            )
        rows.append(dict(zip(fields, values, strict=True)))
    return rows
