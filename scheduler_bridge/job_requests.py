"""What a job asks for, and what that reserves of its allocation: the request the API, the
pages, sweeps and the sizing advice build, and the one rule of its reservation. Plain, below the
services and the selectors, which both use it."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal

from computeshare.numbers import MICRO_UNIT
from marketplace.models import Resource

# sbatch takes --mem-per-cpu in MiB; a TiB per CPU is beyond any node the market lists.
MAX_MEM_PER_CPU_MIB = 1024 * 1024


@dataclass(frozen=True)
class JobRequest:
    name: str
    script: str
    time_limit_minutes: int
    cpus_per_task: int = 1
    ntasks: int = 1
    nodes: int = 1
    gpus: int = 0
    array: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    # Given to the job like `environment`, kept encrypted and never shown again.
    secret_environment: dict[str, str] = field(default_factory=dict)
    # MiB per allocated CPU (sbatch --mem-per-cpu); None leaves the partition's default.
    mem_per_cpu: int | None = None
    # The ready template the job starts from (`job_templates`), "" for none.
    template: str = ""


def job_units(*, resource: str, request: JobRequest, task_count: int) -> Decimal:
    """What a job reserves: allocated cores (or GPUs) x time limit in hours for each task,
    rounded up to the micro-unit so that the reservation always covers the use, times the
    tasks (each task reserves, and settles, its own share)."""
    per_hour = request.gpus if resource == Resource.GPU else request.ntasks * request.cpus_per_task
    per_task = (Decimal(per_hour * request.time_limit_minutes) / Decimal(60)).quantize(
        MICRO_UNIT, rounding=ROUND_CEILING
    )
    return per_task * task_count
