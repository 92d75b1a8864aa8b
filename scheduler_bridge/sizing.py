"""Right-sizing advice from what an ended job really used, as Slurm's accounting measured it
(TotalCPU and MaxRSS of its steps, Elapsed against its time limit): what it asked for, what
it used, and a concrete suggestion with its effect in money and in reservation.

Money and reservations are computed with the platform's own rules, never re-derived: a run's
units are `metered_units` (what settlement charges) at the allocation's unit price
(`money_of`), and a reservation is `job_units` (what submission reserves). The suggestions:

- cores: the average number of cores busy over the runs (CPU time over elapsed), rounded up
  after a twentieth of a core of slack (a job at 1.04 cores on average runs on 1, one at
  1.1 on 2), never below 1;
- time limit: half as much again as the longest run, in whole minutes (whole five minutes from
  ten minutes on); twice the limit for a job that hit it;
- memory: a quarter more than the largest MaxRSS, per CPU, in whole 16 MiB; twice the request
  for a job that ran out of memory.

A suggestion is made only when it changes something worth saying: fewer cores, a limit at
most half the one asked, less than two thirds of the memory asked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

from hpc.sizes import MEM_PER_CPU
from marketplace.models import Resource
from scheduler_bridge.job_requests import job_units
from scheduler_bridge.models import Job, JobRun, JobState, RunState, metered_units, money_of

CORE_SLACK = Decimal("0.05")
TIME_MARGIN = Decimal("1.5")
MEMORY_MARGIN = Decimal("1.25")
MEMORY_STEP_MIB = 16
MIB = 1024 * 1024
_HUNDREDTH = Decimal("0.01")


@dataclass(frozen=True)
class CoresAdvice:
    asked: int  # cores of one task: ntasks x cpus_per_task
    used: Decimal  # cores busy on average over the runs, to the hundredth
    suggested_cpus_per_task: int | None  # None: the cores asked were used
    suggested: int | None  # cores of one task with the suggestion
    cost: Decimal  # what the runs were charged
    cost_if_suggested: Decimal | None  # what they would have been charged
    text: str


@dataclass(frozen=True)
class TimeAdvice:
    limit_minutes: int
    longest_run_seconds: int
    suggested_limit_minutes: int | None
    reserved_units: Decimal
    reserved_units_if_suggested: Decimal | None
    reservation_ratio: Decimal | None  # how many times less (or more, below 1) it reserves
    text: str


@dataclass(frozen=True)
class MemoryAdvice:
    asked_mib: int | None  # per task: mem_per_cpu x cpus_per_task; None when not asked
    max_rss_mib: Decimal  # the largest MaxRSS of the runs' steps, to the hundredth
    suggested_mem_per_cpu: int | None
    text: str


@dataclass(frozen=True)
class SizingAdvice:
    cores: CoresAdvice
    time: TimeAdvice
    memory: MemoryAdvice | None  # None when accounting recorded no MaxRSS
    currency: str

    @property
    def suggested_sizes(self) -> dict[str, int]:
        """The sizes to ask for next time: only those the advice changes."""
        sizes: dict[str, int] = {}
        if self.cores.suggested_cpus_per_task is not None:
            sizes["cpus_per_task"] = self.cores.suggested_cpus_per_task
        if self.time.suggested_limit_minutes is not None:
            sizes["time_limit_minutes"] = self.time.suggested_limit_minutes
        if self.memory is not None and self.memory.suggested_mem_per_cpu is not None:
            sizes["mem_per_cpu"] = self.memory.suggested_mem_per_cpu
        return sizes

    @property
    def texts(self) -> list[str]:
        return [part.text for part in (self.cores, self.time, self.memory) if part is not None]


def job_sizing_advice(job: Job, runs: Sequence[JobRun], currency: str) -> SizingAdvice | None:
    """The advice on an ended job from its settled runs; None before it ended, or when it
    never ran (no run that started its script, owner-caused ends aside)."""
    if not job.is_ended or job.is_from_tenant:
        return None
    measured = [run for run in runs if _ran(run) and not run.is_owner_caused]
    if not measured:
        return None
    allocation = job.allocation
    return SizingAdvice(
        cores=_cores(job, measured, allocation.resource, allocation.unit_price, currency),
        time=_time(job, measured, allocation.resource),
        memory=_memory(job, measured),
        currency=currency,
    )


# Ends of a run that started its script: such a run ran even when sacct counts no whole second
# of it (a task of a fraction of a second); a run cancelled or ended otherwise in 0 s never did.
_RAN_STATES = frozenset(
    {RunState.COMPLETED, RunState.FAILED, RunState.TIMEOUT, RunState.OUT_OF_MEMORY}
)


def _ran(run: JobRun) -> bool:
    return run.elapsed_seconds > 0 or run.cpu_seconds > 0 or run.state in _RAN_STATES


def _cores(
    job: Job, runs: Sequence[JobRun], resource: str, unit_price: Decimal, currency: str
) -> CoresAdvice:
    asked = job.ntasks * job.cpus_per_task
    # sacct counts whole seconds: runs shorter than one count as one.
    elapsed = max(sum(run.elapsed_seconds for run in runs), 1)
    cpu_seconds = sum((run.cpu_seconds for run in runs), Decimal(0))
    used = (cpu_seconds / Decimal(elapsed)).quantize(_HUNDREDTH, rounding=ROUND_HALF_UP)
    cost = sum((run.cost for run in runs), Decimal(0))
    per_task = max(1, int((used / job.ntasks - CORE_SLACK).to_integral_value(ROUND_CEILING)))
    said = f"Asked for {_cores_text(asked)}, used {used.normalize():f} on average"
    if per_task >= job.cpus_per_task:
        return CoresAdvice(asked, used, None, None, cost, None, f"{said}: the size fits.")
    suggested = job.ntasks * per_task
    ask = (
        f"ask for {per_task} CPU{'s' if per_task > 1 else ''} per task ({suggested} cores)"
        if job.ntasks > 1
        else f"ask for {suggested}"
    )
    if resource == Resource.GPU:
        # GPU allocations are priced per GPU-hour: the cores are not what is paid for.
        return CoresAdvice(
            asked,
            used,
            per_task,
            suggested,
            cost,
            cost,
            f"{said}: {ask}. The price is per GPU, so the cost stays the same; the cores go "
            "back to the cluster for others.",
        )
    cost_if = sum(
        (
            money_of(min(metered_units(suggested, run.elapsed_seconds), run.units), unit_price)
            for run in runs
        ),
        Decimal(0),
    )
    text = (
        f"{said}: {ask}, this run would have cost {_money(cost_if)} instead of "
        f"{_money(cost)} {currency}."
    )
    return CoresAdvice(asked, used, per_task, suggested, cost, cost_if, text)


def _time(job: Job, runs: Sequence[JobRun], resource: str) -> TimeAdvice:
    limit = job.time_limit_minutes
    longest = max(run.elapsed_seconds for run in runs)
    reserved = _reservation(job, resource, limit)
    said = f"Ran {_duration(longest)} of a {limit}-minute limit"
    if job.state == JobState.TIMEOUT:
        suggested = limit * 2
        with_suggested = _reservation(job, resource, suggested)
        return TimeAdvice(
            limit,
            longest,
            suggested,
            reserved,
            with_suggested,
            _ratio(reserved, with_suggested),
            f"{said} and was stopped at it: a {suggested}-minute limit lets it finish; it "
            f"reserves {_units(with_suggested)} units instead of {_units(reserved)}.",
        )
    minutes = Decimal(longest) * TIME_MARGIN / 60
    step = 5 if minutes >= 10 else 1
    suggested = max(1, int((minutes / step).to_integral_value(ROUND_CEILING)) * step)
    if suggested * 2 > limit:
        return TimeAdvice(limit, longest, None, reserved, None, None, f"{said}: the limit fits.")
    with_suggested = _reservation(job, resource, suggested)
    ratio = _ratio(reserved, with_suggested)
    return TimeAdvice(
        limit,
        longest,
        suggested,
        reserved,
        with_suggested,
        ratio,
        f"{said}: a {suggested}-minute limit reserves {_times(ratio)} less "
        f"({_units(with_suggested)} units instead of {_units(reserved)}) and may start sooner.",
    )


def _memory(job: Job, runs: Sequence[JobRun]) -> MemoryAdvice | None:
    sizes = [run.max_rss_bytes for run in runs if run.max_rss_bytes is not None]
    if not sizes:
        return None
    largest = Decimal(max(sizes)) / MIB
    shown = largest.quantize(_HUNDREDTH, rounding=ROUND_HALF_UP)
    asked = job.mem_per_cpu * job.cpus_per_task if job.mem_per_cpu else None
    used = f"used at most {shown.normalize():f} MiB (MaxRSS)"
    if job.state == JobState.OUT_OF_MEMORY and job.mem_per_cpu:
        suggested = min(job.mem_per_cpu * 2, MEM_PER_CPU.maximum)
        return MemoryAdvice(
            asked,
            shown,
            suggested,
            f"Asked for {asked} MiB a task, {used} and ran out: ask for {suggested} MiB per CPU.",
        )
    if asked is None or job.mem_per_cpu is None:
        return MemoryAdvice(
            None,
            shown,
            None,
            f"No memory asked for (the partition's default): {used}.",
        )
    per_cpu = largest * MEMORY_MARGIN / job.cpus_per_task / MEMORY_STEP_MIB
    suggested = max(1, int(per_cpu.to_integral_value(ROUND_CEILING))) * MEMORY_STEP_MIB
    if suggested * 3 > job.mem_per_cpu * 2:
        return MemoryAdvice(asked, shown, None, f"Asked for {asked} MiB a task, {used}: it fits.")
    return MemoryAdvice(
        asked,
        shown,
        suggested,
        f"Asked for {asked} MiB a task, {used}: ask for {suggested} MiB per CPU; memory is "
        "not priced, but a smaller request fits on more nodes and may start sooner.",
    )


def _reservation(job: Job, resource: str, limit_minutes: int) -> Decimal:
    """What the job reserves with this time limit, by submission's own rule."""
    size = replace(job.size, time_limit_minutes=limit_minutes)
    return job_units(resource=resource, size=size, task_count=job.task_count)


def _ratio(before: Decimal, after: Decimal) -> Decimal:
    return (before / after).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def _times(ratio: Decimal) -> str:
    return f"{ratio.normalize():f} times"


def _cores_text(count: int) -> str:
    return f"{count} core{'s' if count != 1 else ''}"


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} seconds"
    return f"{(Decimal(seconds) / 60).quantize(Decimal('0.1')).normalize():f} minutes"


def _money(amount: Decimal) -> str:
    return f"{amount.normalize():f}" if amount else "0"


def _units(units: Decimal) -> str:
    return f"{units.normalize():f}"
