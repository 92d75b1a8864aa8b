"""What a job asks for, and what that reserves of its allocation: the request the API, the
pages, sweeps and the sizing advice build, its script's `#SBATCH` lines read into it, and the
one rule of its reservation. Plain, below the services and the selectors, which both use it.

A request may give only its script: each size comes from the request's own field when it gives
one, else from the script's directive, else from the platform's default, as sbatch's command
line overrides a script's `#SBATCH` lines (ADR 0021). `job_request_resolve` says where each
effective value came from (`request`, `script`, `default`) and what became of every directive:
honoured, or overridden and why."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from computeshare.errors import FieldErrors
from computeshare.numbers import MICRO_UNIT
from hpc.sizes import JobSize as JobSize
from hpc.slurm import directives
from hpc.slurm.directives import DirectiveRefused, ScriptReading
from hpc.types import JobOptions
from marketplace.models import Resource
from scheduler_bridge.job_directives import (
    Asked,
    GpuAsk,
    MemoryAsk,
    Overridden,
    PartitionFacts,
    ScriptAsks,
    script_asks,
)

# A job's name when neither the request nor the script gives one and the script has no file
# name: what sbatch names a script it reads from its standard input.
DEFAULT_NAME = "sbatch"

REQUEST, SCRIPT, DEFAULT = "request", "script", "default"


@dataclass(frozen=True)
class JobRequest:
    """What a caller asks for: the script, and the fields it gives. A size left None is the
    script's (its `#SBATCH` line) or the platform's default."""

    script: str
    name: str | None = None
    time_limit_minutes: int | None = None
    cpus_per_task: int | None = None
    ntasks: int | None = None
    nodes: int | None = None
    # GPUs for the whole job (sbatch --gpus).
    gpus: int | None = None
    array: str | None = None
    environment: dict[str, str] = field(default_factory=dict)
    # Given to the job like `environment`, kept encrypted and never shown again.
    secret_environment: dict[str, str] = field(default_factory=dict)
    # MiB per allocated CPU (sbatch --mem-per-cpu); None: the script's memory, or the
    # partition's default.
    mem_per_cpu: int | None = None
    # The ready template the job starts from (`job_templates`), "" for none.
    template: str = ""
    # The script's file name, the job's name when neither `name` nor the script's --job-name
    # gives one (as sbatch names a job after its script).
    script_name: str = ""


def job_units(*, resource: str, size: JobSize, task_count: int) -> Decimal:
    """What a job reserves: allocated cores (or GPUs) x time limit in hours for each task,
    rounded up to the micro-unit so that the reservation always covers the use, times the
    tasks (each task reserves, and settles, its own share)."""
    per_hour = size.per_hour(counts_gpus=resource == Resource.GPU)
    per_task = (Decimal(per_hour * size.time_limit_minutes) / Decimal(60)).quantize(
        MICRO_UNIT, rounding=ROUND_CEILING
    )
    return per_task * task_count


@dataclass(frozen=True)
class Effective:
    """One value the job runs with: its field, the value as text, where it came from, and the
    directive that gave it (its option as written and line) when the script did."""

    field: str
    value: str
    source: str
    option: str = ""
    line: int | None = None


@dataclass(frozen=True)
class Honoured:
    option: str
    value: str
    line: int
    note: str = ""


@dataclass(frozen=True)
class DirectiveReport:
    """What became of the script's directives, and where each effective value came from: the
    answer's `directives`, the job's page, and the comments the directive lines become."""

    honoured: tuple[Honoured, ...] = ()
    overridden: tuple[Overridden, ...] = ()
    effective: tuple[Effective, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "honoured": [vars(each) for each in self.honoured],
            "overridden": [each.as_json() for each in self.overridden],
            "effective": [vars(each) for each in self.effective],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> DirectiveReport:
        data = data or {}
        return cls(
            honoured=tuple(Honoured(**each) for each in data.get("honoured", [])),
            overridden=tuple(Overridden(**each) for each in data.get("overridden", [])),
            effective=tuple(Effective(**each) for each in data.get("effective", [])),
        )

    def line_notes(self) -> dict[int, str]:
        """What became of each directive line, for the comment it is turned into."""
        honoured: dict[int, list[str]] = {}
        overridden: dict[int, list[str]] = {}
        for each in self.honoured:
            honoured.setdefault(each.line, []).append(each.option)
        for other in self.overridden:
            overridden.setdefault(other.line, []).append(other.option)
        notes = {}
        for line in sorted(set(honoured) | set(overridden)):
            parts = []
            if line in honoured:
                parts.append("honoured " + " ".join(honoured[line]))
            if line in overridden:
                parts.append("overridden " + " ".join(overridden[line]))
            notes[line] = "; ".join(parts)
        return notes


@dataclass(frozen=True)
class JobPlan:
    """A request with its script's directives read into it: the job as it will be priced,
    checked and written for sbatch."""

    name: str
    script: str
    size: JobSize
    array: str | None
    options: JobOptions
    requeue: bool | None
    dependency: directives.Dependency | None
    report: DirectiveReport
    environment: dict[str, str] = field(default_factory=dict)
    secret_environment: dict[str, str] = field(default_factory=dict)
    template: str = ""


def script_reading(script: str) -> ScriptReading:
    """sbatch's reading of the script (`DirectiveRefused` where it would refuse)."""
    return directives.read_directives(script)


def job_request_resolve(
    request: JobRequest,
    partition: PartitionFacts,
    *,
    not_for_this_job: dict[str, str] | None = None,
    directives_from: str | None = None,
) -> JobPlan:
    """The request with its script's directives read in: each field from the request, else
    the script, else the default. `not_for_this_job` names script options that the caller
    sets itself (a sweep's array and output), overridden with the reason given;
    `directives_from` is the script whose directives are read when the job runs another (a
    sweep's wrapper runs the team's script). Raises `DirectiveRefused` for a directive sbatch
    or the platform refuses, `ValidationFailed` when no time limit is given anywhere."""
    reading = script_reading(request.script if directives_from is None else directives_from)
    asks = script_asks(reading, partition)
    for key, why in (not_for_this_job or {}).items():
        _set_aside(asks, key, why)
    merge = _Merge(asks)
    size, gpu = _sizes(request, asks, merge)
    options = _options(asks, merge, gpu)
    name = merge.pick("name", request.name.strip() if request.name else None, asks.name)
    if name is None:
        name = request.script_name or DEFAULT_NAME
        merge.effective.append(Effective("name", name, DEFAULT))
    array = merge.pick("array", request.array, asks.array)
    dependency = merge.script_only(
        "dependency",
        asks.dependency,
        directives.dependency_text(asks.dependency.value) if asks.dependency else "",
    )
    return JobPlan(
        name=name,
        script=request.script,
        size=size,
        array=array,
        options=options,
        requeue=merge.script_only("requeue", asks.requeue),
        dependency=dependency,
        report=merge.report(),
        environment=request.environment,
        secret_environment=request.secret_environment,
        template=request.template,
    )


def _set_aside(asks: ScriptAsks, key: str, why: str) -> None:
    asked = getattr(asks, key.replace("-", "_"), None)
    if isinstance(asked, Asked):
        setattr(asks, key.replace("-", "_"), None)
        directive = asked.directive
        asks.overridden.append(
            Overridden(
                directive.written, directive.value or "", directive.line, why, directive.position
            )
        )


class _Merge:
    """Takes each field from the request, else the script, else the default, and records
    where it came from; a script's value the request replaces is recorded as overridden."""

    def __init__(self, asks: ScriptAsks) -> None:
        self.asks = asks
        self.effective: list[Effective] = []
        self.replaced: list[Overridden] = []

    def pick(self, name: str, requested: Any, asked: Asked[Any] | None, shown: str = "") -> Any:
        if requested is not None:
            self.effective.append(Effective(name, shown or str(requested), REQUEST))
            if asked is not None:
                self.request_wins(name, asked)
            return requested
        if asked is not None:
            self.effective.append(self.from_script(name, asked, shown))
            return asked.value
        return None

    def script_only(self, name: str, asked: Asked[Any] | None, shown: str = "") -> Any:
        if asked is None:
            return None
        self.effective.append(self.from_script(name, asked, shown))
        return asked.value

    def default(self, name: str, value: Any) -> Any:
        self.effective.append(Effective(name, str(value), DEFAULT))
        return value

    @staticmethod
    def from_script(name: str, asked: Asked[Any], shown: str = "") -> Effective:
        directive = asked.directive
        value = shown or _shown(asked.value)
        return Effective(name, value, SCRIPT, directive.text, directive.line)

    def request_wins(self, name: str, asked: Asked[Any]) -> None:
        directive = asked.directive
        self.replaced.append(
            Overridden(
                directive.written,
                directive.value or "",
                directive.line,
                f"The request's `{name}` replaces it, as sbatch's command line replaces a "
                "script's directive.",
                directive.position,
            )
        )

    def report(self) -> DirectiveReport:
        replaced_lines = {(each.line, each.option) for each in self.replaced}
        honoured = tuple(
            Honoured(
                asked.directive.written,
                asked.directive.value or "",
                asked.directive.line,
                asked.note,
            )
            for asked in self.asks.honoured()
            if (asked.directive.line, asked.directive.written) not in replaced_lines
        )
        overridden = sorted([*self.asks.overridden, *self.replaced], key=lambda each: each.position)
        return DirectiveReport(honoured, tuple(overridden), tuple(self.effective))


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, MemoryAsk):
        return f"{value.mib}M per {value.per}"
    if isinstance(value, GpuAsk):
        kind = f"{value.type}:" if value.type else ""
        return f"{kind}{value.count} per {value.per}"
    return str(value)


def _sizes(request: JobRequest, asks: ScriptAsks, merge: _Merge) -> tuple[JobSize, GpuAsk | None]:
    """The sizes that price the job, each from the request, the script or the default, with
    sbatch's own derivations: tasks from nodes and tasks per node, GPUs per node or per task
    counted for the whole job."""
    time_limit = merge.pick(
        "time_limit_minutes", request.time_limit_minutes, asks.time_limit_minutes
    )
    if time_limit is None:
        problems = FieldErrors()
        problems.add(
            "time_limit_minutes",
            "Give a time limit: this field, or an #SBATCH --time line in the script.",
        )
        problems.raise_if_any()
    nodes = merge.pick("nodes", request.nodes, asks.nodes)
    cpus_per_task = merge.pick("cpus_per_task", request.cpus_per_task, asks.cpus_per_task)
    ntasks = _ntasks(request, asks, merge, nodes)
    nodes = nodes if nodes is not None else merge.default("nodes", 1)
    cpus_per_task = (
        cpus_per_task if cpus_per_task is not None else merge.default("cpus_per_task", 1)
    )
    gpu = _gpus(request, asks, merge)
    gpus = 0 if gpu is None else _gpu_total(gpu, nodes, ntasks)
    if gpu is None:
        merge.default("gpus", 0)
    cpus_per_gpu = _cpus_per_gpu(request, asks, merge)
    mem_per_cpu = _memory(request, asks, merge)
    exclusive = bool(merge.script_only("exclusive", asks.exclusive))
    size = JobSize(
        time_limit_minutes=time_limit,
        cpus_per_task=cpus_per_task,
        ntasks=ntasks,
        nodes=nodes,
        gpus=gpus,
        mem_per_cpu=mem_per_cpu,
        cpus_per_gpu=cpus_per_gpu,
        exclusive=exclusive,
    )
    return size, gpu


def _cpus_per_gpu(request: JobRequest, asks: ScriptAsks, merge: _Merge) -> int | None:
    """CPUs per GPU, the script's alone: the request's `cpus_per_task` replaces it, and the
    script may not give both."""
    asked = asks.cpus_per_gpu
    if asked is None:
        return None
    if request.cpus_per_task is not None:
        merge.request_wins("cpus_per_task", asked)
        asks.cpus_per_gpu = None
        return None
    if asks.cpus_per_task is not None:
        raise DirectiveRefused(
            "conflict",
            "--cpus-per-gpu and --cpus-per-task both give the job's CPUs; give one of them.",
            line=max(asked.directive.line, asks.cpus_per_task.directive.line),
            option=asked.directive.written,
        )
    return int(merge.script_only("cpus_per_gpu", asked))


def _ntasks(request: JobRequest, asks: ScriptAsks, merge: _Merge, nodes: int | None) -> int:
    """sbatch's tasks: given, else nodes x tasks per node, else one a node when the node count
    is given (`_opt_verify` in src/sbatch/opt.c), else one."""
    ntasks: int | None = merge.pick("ntasks", request.ntasks, asks.ntasks)
    if ntasks is not None:
        return ntasks
    per_node = asks.ntasks_per_node
    if per_node is not None:
        value = (nodes or 1) * per_node.value
        merge.effective.append(
            Effective(
                "ntasks", str(value), SCRIPT, per_node.directive.text, per_node.directive.line
            )
        )
        return value
    if nodes is not None:
        node_source = next(each for each in merge.effective if each.field == "nodes")
        merge.effective.append(replace(node_source, field="ntasks", value=str(nodes)))
        return nodes
    return int(merge.default("ntasks", 1))


def _gpus(request: JobRequest, asks: ScriptAsks, merge: _Merge) -> GpuAsk | None:
    if request.gpus is not None:
        merge.effective.append(Effective("gpus", str(request.gpus), REQUEST))
        if asks.gpus is not None:
            merge.request_wins("gpus", asks.gpus)
        return GpuAsk("job", request.gpus) if request.gpus else None
    if asks.gpus is None:
        return None
    merge.effective.append(merge.from_script("gpus", asks.gpus))
    return asks.gpus.value


def _gpu_total(gpu: GpuAsk, nodes: int, ntasks: int) -> int:
    return gpu.count * {"job": 1, "node": nodes, "task": ntasks}[gpu.per]


def _memory(request: JobRequest, asks: ScriptAsks, merge: _Merge) -> int | None:
    """Memory per CPU when asked per CPU (the request's field, or the script's); the script's
    per-node or per-GPU memory goes in the options."""
    if request.mem_per_cpu is not None:
        merge.effective.append(Effective("memory", f"{request.mem_per_cpu}M per cpu", REQUEST))
        if asks.memory is not None:
            merge.request_wins("mem_per_cpu", asks.memory)
            asks.memory = None
        return request.mem_per_cpu
    if asks.memory is None:
        merge.default("memory", "the partition's default")
        return None
    merge.effective.append(merge.from_script("memory", asks.memory))
    return asks.memory.value.mib if asks.memory.value.per == "cpu" else None


def _options(asks: ScriptAsks, merge: _Merge, gpu: GpuAsk | None) -> JobOptions:
    """The script's other honoured options, for sbatch (the dependency is written once the
    jobs it names have their Slurm ids)."""
    memory = asks.memory.value if asks.memory is not None else None
    pick = merge.script_only
    return JobOptions(
        time_min_minutes=pick("time_min_minutes", asks.time_min_minutes),
        ntasks_per_node=pick("ntasks_per_node", asks.ntasks_per_node),
        mem_per_node=memory.mib if memory is not None and memory.per == "node" else None,
        mem_per_gpu=memory.mib if memory is not None and memory.per == "gpu" else None,
        gpus_per_node=gpu.count if gpu is not None and gpu.per == "node" else None,
        gpus_per_task=gpu.count if gpu is not None and gpu.per == "task" else None,
        gpu_type=gpu.type if gpu is not None else "",
        cpus_per_gpu=asks.cpus_per_gpu.value if asks.cpus_per_gpu else None,
        output=pick("output", asks.output) or "",
        error=pick("error", asks.error) or "",
        input=pick("input", asks.input) or "",
        open_mode=pick("open_mode", asks.open_mode) or "",
        signal=pick("signal", asks.signal) or "",
        constraint=pick("constraint", asks.constraint) or "",
        hint=pick("hint", asks.hint) or "",
        comment=pick("comment", asks.comment) or "",
        exclusive=asks.exclusive is not None,
        nice=pick("nice", asks.nice),
    )


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_platform_job_id(reference: str) -> bool:
    """Whether a dependency names a job by the platform's id (its UUID) rather than Slurm's."""
    return bool(_UUID.fullmatch(reference.lower()))
