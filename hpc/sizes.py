"""A job's size: the one type for what a job asks of a partition (its time limit, CPUs per task,
tasks, nodes, GPUs and memory per CPU) and what it reserves of its allocation, with the limits
of every size declared once, here.

The API's serializers and the pages' forms build their fields from `LIMITS`
(`scheduler_bridge/serializers/sizes.py`, `scheduler_bridge/forms/sizes.py`), a request's
plan carries a `JobSize`, the job's row is written from one and read back as one
(`Job.size`), a template's `#SBATCH` lines are read into one, and the spec sent to the
scheduler takes its sizes from one (`JobSize.columns`): a bound written twice drifts
(docs/design.md, Accepting a job; ADR 0027). Plain: no Django, so that the library's spec
can use it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict


@dataclass(frozen=True)
class SizeLimit:
    """The bounds of one size, as the API states them (docs/api.md: "at least ...; at most
    ..."): the name it has in the API, the pages and the job's row, and sbatch's option."""

    name: str
    minimum: int
    maximum: int
    option: str


# A year: beyond any partition's MaxTime worth selling.
TIME_LIMIT_MINUTES = SizeLimit("time_limit_minutes", 1, 525_600, "--time")
CPUS_PER_TASK = SizeLimit("cpus_per_task", 1, 100_000, "--cpus-per-task")
NTASKS = SizeLimit("ntasks", 1, 100_000, "--ntasks")
NODES = SizeLimit("nodes", 1, 10_000, "--nodes")
# For the whole job (sbatch --gpus); none is a size too.
GPUS = SizeLimit("gpus", 0, 10_000, "--gpus")
# sbatch takes --mem-per-cpu in MiB; a TiB per CPU is beyond any node the market lists.
MEM_PER_CPU = SizeLimit("mem_per_cpu", 1, 1024 * 1024, "--mem-per-cpu")
# How many tasks of an array run at once: the array's `%N` (a sweep's `concurrency`), bounded
# as the CPUs are, since each running task takes at least one.
ARRAY_THROTTLE = SizeLimit("concurrency", 1, CPUS_PER_TASK.maximum, "--array=<indices>%N")

# The sizes a job's row, its request and its spec have, by name, in the API's order.
LIMITS = {
    limit.name: limit
    for limit in (TIME_LIMIT_MINUTES, CPUS_PER_TASK, NTASKS, NODES, GPUS, MEM_PER_CPU)
}


class SizeColumns(TypedDict):
    """A size as the job's row and the scheduler's spec keep it: one value per name of
    `LIMITS`."""

    time_limit_minutes: int
    cpus_per_task: int
    ntasks: int
    nodes: int
    gpus: int
    mem_per_cpu: int | None


@dataclass(frozen=True)
class JobSize:
    """What each task of a job asks of the partition, as it is checked, priced and submitted.
    An exclusive job takes its nodes whole, and reserves each node's CPUs (or GPUs) whatever it
    asked (`node_cpus`, `node_gpus`: the partition's smallest node)."""

    time_limit_minutes: int
    cpus_per_task: int = 1
    ntasks: int = 1
    nodes: int = 1
    # GPUs for the whole job (sbatch --gpus).
    gpus: int = 0
    # MiB per allocated CPU (sbatch --mem-per-cpu); None: the script's memory per node or per
    # GPU (`JobOptions`), or the partition's default.
    mem_per_cpu: int | None = None
    cpus_per_gpu: int | None = None
    exclusive: bool = False
    node_cpus: int = 0
    node_gpus: int = 0

    @property
    def cores(self) -> int:
        """The CPUs one task of the job is given: ntasks x cpus-per-task, or its GPUs x
        cpus-per-gpu when that is more."""
        return max(self.ntasks * self.cpus_per_task, self.gpus * (self.cpus_per_gpu or 0))

    def per_hour(self, *, counts_gpus: bool) -> int:
        """The units one task uses an hour: its cores, or its GPUs when the allocation counts
        GPUs; whole nodes' worth when it takes its nodes whole."""
        if counts_gpus:
            asked, whole = self.gpus, self.nodes * self.node_gpus
        else:
            asked, whole = self.cores, self.nodes * self.node_cpus
        return max(asked, whole) if self.exclusive else asked

    @classmethod
    def of(cls, row: object, **pricing: Any) -> JobSize:
        """The size a row or a spec keeps in its columns (the names of `LIMITS`), with the
        pricing facts it keeps elsewhere (`cpus_per_gpu`, `exclusive`, ...)."""
        return cls(**{name: getattr(row, name) for name in LIMITS}, **pricing)

    def columns(self) -> SizeColumns:
        """The size as the job's row and the scheduler's spec keep it."""
        return SizeColumns(
            time_limit_minutes=self.time_limit_minutes,
            cpus_per_task=self.cpus_per_task,
            ntasks=self.ntasks,
            nodes=self.nodes,
            gpus=self.gpus,
            mem_per_cpu=self.mem_per_cpu,
        )

    def problems(self) -> dict[str, list[str]]:
        """What the size breaks of its limits, by field, in the API's words (400
        `validation_failed` on that field). A request's own fields were held to their whole
        range by the serializer or the form; a size the script gave is held here to its
        minimum, and above to the partition's figures, which say more (`planning`). Memory per
        CPU is held to its whole range here: a partition need not say its nodes' memory."""
        problems: dict[str, list[str]] = {}
        for limit in (TIME_LIMIT_MINUTES, CPUS_PER_TASK, NTASKS, NODES, GPUS):
            if getattr(self, limit.name) < limit.minimum:
                problems[limit.name] = [
                    f"Must be at least {limit.minimum}."
                    if limit.minimum
                    else "Must not be negative."
                ]
        memory = self.mem_per_cpu
        if memory is not None and not MEM_PER_CPU.minimum <= memory <= MEM_PER_CPU.maximum:
            problems[MEM_PER_CPU.name] = [
                f"From {MEM_PER_CPU.minimum} to {MEM_PER_CPU.maximum} MiB per CPU."
            ]
        return problems

    def problem(self) -> str | None:
        """`problems` in one line, for a check that answers in words (the library's own
        refusal of a spec), or None."""
        problems = self.problems()
        if not problems:
            return None
        named = ", ".join(
            f"{name} ({messages[0].rstrip('.').lower()})" for name, messages in problems.items()
        )
        return f"sizes must be positive (GPUs not negative) and within their limits: {named}"
