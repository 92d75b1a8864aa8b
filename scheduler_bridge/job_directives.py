"""What the platform does with each `#SBATCH` option of a team's script (ADR 0021): the
options that ask for resources become the job's request, those that would reach outside what
the team bought are overridden with a warning, and the few the platform cannot honour are
refused with a stable code. sbatch's own reading is `hpc.slurm.directives`; this module is the
platform's rule on top of it, one entry per option, and nothing here touches the database.

Every option sbatch 22.05 knows is in exactly one of `HONOURED`, `OVERRIDDEN` and `REFUSED`
(a test holds that), so a new option of a new Slurm cannot slip through unread."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hpc.arrays import InvalidArray, parse_array
from hpc.slurm import directives, filenames
from hpc.slurm.directives import Directive, DirectiveRefused, ScriptReading
from hpc.slurm.jobs import ENVIRONMENT_FILE, EXPORT_FILE, SCRIPT_FILE

T = TypeVar("T")

# The job's own file names in its folder, which no stream may take.
PLATFORM_FILES = (SCRIPT_FILE, EXPORT_FILE, ENVIRONMENT_FILE)

# Options read into the job's request (priced, reserved, checked against the partition) or
# written by the platform after its own check. `partition` is honoured when it names the
# allocation's partition (else overridden), `nice` when it lowers the job's priority.
HONOURED = frozenset(
    {
        "time",
        "time-min",
        "nodes",
        "ntasks",
        "ntasks-per-node",
        "cpus-per-task",
        "mem",
        "mem-per-cpu",
        "mem-per-gpu",
        "gres",
        "gpus",
        "gpus-per-node",
        "gpus-per-task",
        "cpus-per-gpu",
        "array",
        "job-name",
        "output",
        "error",
        "input",
        "open-mode",
        "signal",
        "requeue",
        "no-requeue",
        "constraint",
        "hint",
        "comment",
        "exclusive",
        "dependency",
        "nice",
        "partition",
    }
)

_OUTSIDE = "It would reach outside what the team bought"
_LAYOUT = (
    "A layout of CPUs on the nodes that the platform does not pass: the job is priced and "
    "reserved as ntasks x cpus-per-task, and gets exactly that."
)
_TUNING = "A tuning of the nodes or of the accounting that only the cluster's owner sets."
_PLATFORM_RUNS_SBATCH = "The platform runs sbatch itself and reads its answer."
_COMMAND_LINE_ONLY = "sbatch reads it only on its command line and ignores it in a script."

# Options dropped with a warning in the answer (`directives.overridden`) and on the job's page:
# the job runs without them, as the team bought it.
OVERRIDDEN: dict[str, str] = {
    "account": f"{_OUTSIDE}: the job runs under the team's own Slurm account on this cluster.",
    "qos": f"{_OUTSIDE}: the platform chooses the QOS for the kind of capacity bought.",
    "partition": f"{_OUTSIDE}: the team bought time on another partition of this cluster.",
    "reservation": f"{_OUTSIDE}: the platform chooses the reservation that holds reserved "
    "capacity.",
    "clusters": f"{_OUTSIDE}: the job runs on the allocation's cluster.",
    "cluster": f"{_OUTSIDE}: the job runs on the allocation's cluster.",
    "cluster-constraint": f"{_OUTSIDE}: the job runs on the allocation's cluster.",
    "nodelist": f"{_OUTSIDE}: Slurm places the job on the partition's nodes.",
    "nodefile": f"{_OUTSIDE}: Slurm places the job on the partition's nodes.",
    "exclude": f"{_OUTSIDE}: Slurm places the job on the partition's nodes.",
    "chdir": "The job runs in its own folder, which the platform makes and reads its files from.",
    "export": "The job gets the platform's clean environment and the variables the request "
    "gives (`environment`), nothing of the login node's.",
    "export-file": "The job gets the platform's clean environment and the variables the "
    "request gives (`environment`), nothing of the login node's.",
    "get-user-env": "The job gets the platform's clean environment and the variables the "
    "request gives (`environment`), nothing of the login node's.",
    "mail-user": "The platform tells the team itself (notifications, mail and webhooks such "
    "as job.ended); the cluster mails nobody.",
    "mail-type": "The platform tells the team itself (notifications, mail and webhooks such "
    "as job.ended); the cluster mails nobody.",
    "wckey": f"{_OUTSIDE}: the cluster's accounting keys are its owner's.",
    "licenses": f"{_OUTSIDE}: the cluster's licenses are not part of what was bought.",
    "begin": "The job is queued as soon as it is accepted; it must run within the allocation's "
    "window.",
    "deadline": "The job is queued as soon as it is accepted; the allocation's window is its "
    "deadline.",
    "hold": "The job is queued as soon as it is accepted; cancel it to stop it.",
    "priority": f"{_OUTSIDE}: a job's priority is set by the cluster's administrators.",
    "uid": "The job runs as the team's own account on the cluster.",
    "gid": "The job runs as the team's own account on the cluster.",
    "acctg-freq": _TUNING,
    "batch": _TUNING,
    "context": _TUNING,
    "contiguous": _TUNING,
    "cpu-freq": _TUNING,
    "delay-boot": _TUNING,
    "distribution": _TUNING,
    "gpu-bind": _TUNING,
    "gpu-freq": _TUNING,
    "gres-flags": _TUNING,
    "kill-on-invalid-dep": _TUNING,
    "mcs-label": _TUNING,
    "mem-bind": _TUNING,
    "network": _TUNING,
    "no-kill": _TUNING,
    "oversubscribe": _TUNING,
    "power": _TUNING,
    "prefer": _TUNING,
    "profile": _TUNING,
    "propagate": "The login node's resource limits are not the job's.",
    "reboot": f"{_OUTSIDE}: nodes are rebooted by their owner.",
    "spread-job": _TUNING,
    "switches": _TUNING,
    "tmp": _TUNING,
    "use-min-nodes": _TUNING,
    "wait-all-nodes": _TUNING,
    "cores-per-socket": _LAYOUT,
    "sockets-per-node": _LAYOUT,
    "threads-per-core": _LAYOUT,
    "ntasks-per-core": _LAYOUT,
    "ntasks-per-socket": _LAYOUT,
    "extra-node-info": _LAYOUT,
    "core-spec": _LAYOUT,
    "thread-spec": _LAYOUT,
    "mincpus": _LAYOUT,
    "parsable": _PLATFORM_RUNS_SBATCH,
    "test-only": _PLATFORM_RUNS_SBATCH,
    "wait": _PLATFORM_RUNS_SBATCH,
    "ignore-pbs": _PLATFORM_RUNS_SBATCH,
    "help": _COMMAND_LINE_ONLY,
    "usage": _COMMAND_LINE_ONLY,
    "version": _COMMAND_LINE_ONLY,
    "verbose": _COMMAND_LINE_ONLY,
    "quiet": _COMMAND_LINE_ONLY,
    "wrap": _COMMAND_LINE_ONLY,
}

# Options refused (400 `sbatch_directive_not_supported`): without them the job would not be the
# job the script describes, and the platform cannot give what they ask.
REFUSED: dict[str, str] = {
    "bb": "Burst buffers stage the job's data; the platform has none to offer.",
    "bbf": "Burst buffers stage the job's data; the platform has none to offer.",
    "container": "The job would run in a container image the platform cannot check.",
    "overcommit": "Fewer CPUs than tasks is not a size the platform prices; ask for the CPUs "
    "the tasks need.",
    "ntasks-per-gpu": "Tasks counted from GPUs are not a size the platform prices; give "
    "--ntasks and the GPUs.",
    "ntasks-per-tres": "Tasks counted from GPUs are not a size the platform prices; give "
    "--ntasks and the GPUs.",
    "gpus-per-socket": "GPUs per socket are not a size the platform prices; give --gpus, "
    "--gpus-per-node or --gpus-per-task.",
}

_NEGATIVE_NICE = (
    "A negative nice raises the job above other jobs, which only the cluster's administrators "
    "may do."
)
_EXCLUSIVE_OVERSUBSCRIBE = "The platform does not oversubscribe nodes."


@dataclass(frozen=True)
class Asked(Generic[T]):
    """A value the script asks for, the option it came from, and a note on how it was read."""

    value: T
    directive: Directive
    note: str = ""


@dataclass(frozen=True)
class GpuAsk:
    """GPUs as the script asks for them: in all (`--gpus`), per node (`--gpus-per-node`,
    `--gres=gpu:N`) or per task, with a type when it names one."""

    per: str  # "job", "node" or "task"
    count: int
    type: str = ""


@dataclass(frozen=True)
class MemoryAsk:
    """Memory as the script asks for it, in MiB: per node (`--mem`, 0 for all of it), per CPU
    or per GPU."""

    per: str  # "node", "cpu" or "gpu"
    mib: int


@dataclass(frozen=True)
class Overridden:
    option: str
    value: str
    line: int
    why: str
    # Its place among the script's options (for the order of the report, not shown).
    position: int = 0

    def as_json(self) -> dict[str, object]:
        return {"option": self.option, "value": self.value, "line": self.line, "why": self.why}


@dataclass
class ScriptAsks:
    """What a script's directives ask for, option by option, and what the platform overrides
    of them. Filled by `script_asks`."""

    name: Asked[str] | None = None
    time_limit_minutes: Asked[int] | None = None
    time_min_minutes: Asked[int] | None = None
    nodes: Asked[int] | None = None
    ntasks: Asked[int] | None = None
    ntasks_per_node: Asked[int] | None = None
    cpus_per_task: Asked[int] | None = None
    cpus_per_gpu: Asked[int] | None = None
    memory: Asked[MemoryAsk] | None = None
    gpus: Asked[GpuAsk] | None = None
    array: Asked[str] | None = None
    output: Asked[str] | None = None
    error: Asked[str] | None = None
    input: Asked[str] | None = None
    open_mode: Asked[str] | None = None
    signal: Asked[str] | None = None
    requeue: Asked[bool] | None = None
    constraint: Asked[str] | None = None
    hint: Asked[str] | None = None
    comment: Asked[str] | None = None
    exclusive: Asked[bool] | None = None
    dependency: Asked[directives.Dependency] | None = None
    nice: Asked[int] | None = None
    partition: Asked[str] | None = None
    overridden: list[Overridden] = field(default_factory=list)

    def honoured(self) -> list[Asked[object]]:
        """Every value taken from the script, in the order of the script."""
        asked = [
            value
            for name, value in vars(self).items()
            if name != "overridden" and isinstance(value, Asked)
        ]
        return sorted(asked, key=lambda each: each.directive.position)


@dataclass(frozen=True)
class PartitionFacts:
    """What the rules need of the allocation's partition."""

    name: str
    features: tuple[str, ...]


def script_asks(reading: ScriptReading, partition: PartitionFacts) -> ScriptAsks:
    """Reads each option the script gives (its last value, as sbatch keeps) under the
    platform's rule; raises `DirectiveRefused` for a value sbatch would refuse or an option
    the platform refuses."""
    directives.mutually_exclusive_memory(reading)
    _one_way_of_asking_gpus(reading)
    asks = ScriptAsks()
    for earlier in _replaced(reading):
        asks.overridden.append(earlier)
    for key in reading.options_given():
        directive = reading.last(key)
        assert directive is not None
        if key in REFUSED:
            raise DirectiveRefused(
                "not_supported", REFUSED[key], line=directive.line, option=directive.written
            )
        if key in HONOURED:
            _honour(asks, directive, partition)
        else:
            asks.overridden.append(_overridden(directive, OVERRIDDEN[key]))
    _requeue_last(asks, reading)
    return asks


def _replaced(reading: ScriptReading) -> list[Overridden]:
    """The earlier values of options given again later: sbatch keeps an option's last value
    (--requeue and --no-requeue count as one option)."""
    last: dict[str, Directive] = {}
    for directive in reading.directives:
        last[_setting(directive.key)] = directive
    return [
        _overridden(
            directive,
            f"{last[_setting(directive.key)].written} on line "
            f"{last[_setting(directive.key)].line} replaces it: sbatch keeps an option's last "
            "value.",
        )
        for directive in reading.directives
        if last[_setting(directive.key)] is not directive
    ]


def _setting(key: str) -> str:
    return "requeue" if key == "no-requeue" else key


def _overridden(directive: Directive, why: str) -> Overridden:
    return Overridden(
        directive.written, directive.value or "", directive.line, why, directive.position
    )


def _one_way_of_asking_gpus(reading: ScriptReading) -> None:
    ways = [
        directive
        for directive in (reading.last(key) for key in ("gpus", "gpus-per-node", "gpus-per-task"))
        if directive is not None
    ]
    gres = reading.last("gres")
    if gres is not None and gres.value and "gpu" in gres.value:
        ways.append(gres)
    if len(ways) > 1:
        raise DirectiveRefused(
            "not_supported",
            "The script asks for GPUs more than one way ("
            + ", ".join(way.written for way in ways)
            + "): the platform prices one of --gpus, --gpus-per-node, --gpus-per-task and "
            "--gres=gpu.",
            line=max(way.line for way in ways),
            option=ways[-1].written,
        )


def _requeue_last(asks: ScriptAsks, reading: ScriptReading) -> None:
    """--requeue and --no-requeue are two options for one setting: the later one wins."""
    last = next(
        (
            directive
            for directive in reversed(reading.directives)
            if directive.key in ("requeue", "no-requeue")
        ),
        None,
    )
    asks.requeue = None if last is None else Asked(last.key == "requeue", last)


def _honour(asks: ScriptAsks, directive: Directive, partition: PartitionFacts) -> None:
    key = directive.key
    reader = _READERS.get(key)
    if reader is not None:
        reader(asks, directive, partition)


def _value(directive: Directive) -> str:
    return directive.value or ""


def _read_time(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    option = "--time" if directive.key == "time" else "--time-min"
    minutes = directives.time_minutes(_value(directive), option=option, line=directive.line)
    if minutes is None:
        raise DirectiveRefused(
            "not_supported",
            f"{directive.text} asks for no time limit; a job here has one, within the "
            "allocation's window.",
            line=directive.line,
            option=directive.written,
        )
    if directive.key == "time":
        asks.time_limit_minutes = Asked(minutes, directive)
    else:
        asks.time_min_minutes = Asked(minutes, directive)


def _read_nodes(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    minimum, maximum = directives.node_count(_value(directive), line=directive.line)
    if minimum != maximum and maximum != 0:
        raise DirectiveRefused(
            "not_supported",
            f"{directive.text} is a range of node counts; the platform prices one count: "
            "give -N with a single number.",
            line=directive.line,
            option=directive.written,
        )
    asks.nodes = Asked(minimum, directive)


def _read_count(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    option = "--" + directive.key
    count = directives.whole_number(_value(directive), option=option, line=directive.line)
    setattr(asks, directive.key.replace("-", "_"), Asked(count, directive))


def _read_memory(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    option = "--" + directive.key
    mib = directives.megabytes(_value(directive), option=option, line=directive.line)
    per = {"mem": "node", "mem-per-cpu": "cpu", "mem-per-gpu": "gpu"}[directive.key]
    if per != "node" and mib == 0:
        raise DirectiveRefused(
            "invalid",
            f"Invalid {option} specification",
            line=directive.line,
            option=directive.written,
        )
    asks.memory = Asked(MemoryAsk(per, mib), directive)


def _read_gpus(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    per = {"gpus": "job", "gpus-per-node": "node", "gpus-per-task": "task"}[directive.key]
    kind, colon, count = _value(directive).rpartition(":")
    if not colon:
        kind = ""
    if not count.isdigit() or int(count) < 1 or (kind and not _is_name(kind)):
        raise DirectiveRefused(
            "invalid",
            f"{directive.text}: GPUs as [type:]count, such as 2 or a100:2",
            line=directive.line,
            option=directive.written,
        )
    asks.gpus = Asked(GpuAsk(per, int(count), kind), directive)


def _read_gres(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    """`--gres=gpu[:type][:count]` (a count of 1 when none): GPUs per node. Other generic
    resources are not metered, so not sold."""
    value = _value(directive)
    if value.lower() == "none":
        return
    resources = value.split(",")
    others = [each for each in resources if each.split(":")[0] != "gpu"]
    if others:
        raise DirectiveRefused(
            "not_supported",
            f"{directive.text}: the platform sells GPUs only, not {', '.join(others)}.",
            line=directive.line,
            option=directive.written,
        )
    if len(resources) > 1:
        raise DirectiveRefused(
            "not_supported",
            f"{directive.text}: one GPU request, such as gpu:2 or gpu:a100:2.",
            line=directive.line,
            option=directive.written,
        )
    parts = resources[0].split(":")[1:]
    count = parts.pop() if parts and parts[-1].isdigit() else "1"
    kind = parts[0] if parts else ""
    if len(parts) > 1 or int(count) < 1 or (kind and not _is_name(kind)):
        raise DirectiveRefused(
            "invalid",
            f"{directive.text}: GPUs as gpu[:type][:count], such as gpu:2 or gpu:a100:2",
            line=directive.line,
            option=directive.written,
        )
    asks.gpus = Asked(GpuAsk("node", int(count), kind), directive, "GPUs per node")


def _is_name(text: str) -> bool:
    return bool(text) and all(character.isalnum() or character in "_.-" for character in text)


def _read_array(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    try:
        parse_array(_value(directive))
    except InvalidArray as error:
        raise DirectiveRefused(
            "invalid", f"{directive.text}: {error}", line=directive.line, option=directive.written
        ) from error
    asks.array = Asked(_value(directive).strip(), directive)


def _read_name(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    asks.name = Asked(_value(directive), directive)


def _read_stream(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    path = _value(directive)
    try:
        name = filenames.rerooted(path, platform_names=PLATFORM_FILES)
    except filenames.NameRefused as error:
        raise DirectiveRefused(
            "not_supported", str(error), line=directive.line, option=directive.written
        ) from error
    note = "" if name == path else f"kept in the job's folder as {name}"
    setattr(asks, directive.key, Asked(name, directive, note))


def _read_open_mode(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    asks.open_mode = Asked(directives.open_mode(_value(directive), line=directive.line), directive)


def _read_signal(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    read = directives.signal(_value(directive), line=directive.line)
    asks.signal = Asked(read.text, directive)


def _read_constraint(asks: ScriptAsks, directive: Directive, partition: PartitionFacts) -> None:
    value = _value(directive)
    names = [name for name in _FEATURE_SPLIT.split(value) if name and not name.isdigit()]
    missing = [name for name in names if name not in partition.features]
    if missing or not names:
        have = ", ".join(partition.features) or "none"
        raise DirectiveRefused(
            "not_supported",
            f"{directive.text}: the partition {partition.name} has no node with "
            f"{', '.join(missing) or 'that'} (its features: {have}).",
            line=directive.line,
            option=directive.written,
        )
    asks.constraint = Asked(value, directive)


def _read_hint(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    asks.hint = Asked(directives.hint(_value(directive), line=directive.line), directive)


def _read_comment(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    value = _value(directive)
    if not value.isprintable() or len(value) > 500:
        raise DirectiveRefused(
            "not_supported",
            "--comment: at most 500 printable characters.",
            line=directive.line,
            option=directive.written,
        )
    asks.comment = Asked(value, directive)


def _read_exclusive(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    kind = directives.exclusive(directive.value, line=directive.line)
    if kind == "oversubscribe":
        asks.overridden.append(_overridden(directive, _EXCLUSIVE_OVERSUBSCRIBE))
        return
    note = "" if kind == "exclusive" else f"whole nodes (--exclusive={kind} reads as --exclusive)"
    asks.exclusive = Asked(True, directive, note)


def _read_dependency(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    asks.dependency = Asked(
        directives.dependency(_value(directive), line=directive.line), directive
    )


def _read_nice(asks: ScriptAsks, directive: Directive, _: PartitionFacts) -> None:
    adjustment = directives.nice(directive.value, line=directive.line)
    if adjustment < 0:
        asks.overridden.append(_overridden(directive, _NEGATIVE_NICE))
        return
    asks.nice = Asked(adjustment, directive)


def _read_partition(asks: ScriptAsks, directive: Directive, partition: PartitionFacts) -> None:
    if partition.name in _value(directive).split(","):
        asks.partition = Asked(partition.name, directive, "the allocation's partition")
        return
    asks.overridden.append(_overridden(directive, OVERRIDDEN["partition"]))


# Slurm's feature expression: names joined by & | , and grouped by [ ] ( ), with *count.
_FEATURE_SPLIT = re.compile(r"[&|,\[\]()*]")

_READERS = {
    "time": _read_time,
    "time-min": _read_time,
    "nodes": _read_nodes,
    "ntasks": _read_count,
    "ntasks-per-node": _read_count,
    "cpus-per-task": _read_count,
    "cpus-per-gpu": _read_count,
    "mem": _read_memory,
    "mem-per-cpu": _read_memory,
    "mem-per-gpu": _read_memory,
    "gpus": _read_gpus,
    "gpus-per-node": _read_gpus,
    "gpus-per-task": _read_gpus,
    "gres": _read_gres,
    "array": _read_array,
    "job-name": _read_name,
    "output": _read_stream,
    "error": _read_stream,
    "input": _read_stream,
    "open-mode": _read_open_mode,
    "signal": _read_signal,
    "constraint": _read_constraint,
    "hint": _read_hint,
    "comment": _read_comment,
    "exclusive": _read_exclusive,
    "dependency": _read_dependency,
    "nice": _read_nice,
    "partition": _read_partition,
}
