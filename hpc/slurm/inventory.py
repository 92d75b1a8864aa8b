"""What a cluster offers: its name, its Slurm version and, per partition, the nodes, CPUs, GPUs
and time limit a job of the service user can get, and the hardware of its nodes (CPUs, memory,
GPU types and counts, features) that the market shows buyers and filters by.

The inventory is read with two commands whose output formats are fixed by us, not by the site:
`scontrol show config` (one `Key = Value` per line) and a node-oriented `sinfo` with an explicit,
`|`-delimited format (see `SINFO_NODES_COMMAND`). Parsing is kept in pure functions so that it
is tested on recorded output of real and hand-made clusters."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpc.errors import UnexpectedOutput
from hpc.slurm.parsers import parse_parsable2
from hpc.ssh import SSHConnection

# One line per (partition, node). %R is the bare partition name; %P is the same name with a
# trailing `*` on the default partition, which is the only place sinfo shows that flag. None of
# these fields can contain `|`. Without `--all`, sinfo leaves out hidden partitions and those the
# service user's groups may not use: exactly the partitions the platform can sell.
SINFO_NODES_FIELDS = (
    "partition",
    "partition_flagged",
    "node",
    "cpus",
    "gres",
    "time_limit",
    "availability",
    "memory",
    "features",
)
# %m is the node's RealMemory in megabytes, %f its available features (comma-separated).
SINFO_NODES_COMMAND = (
    "sinfo",
    "--noheader",
    "--Node",
    "--format",
    "%R|%P|%N|%c|%G|%l|%a|%m|%f",
)
SCONTROL_CONFIG_COMMAND = ("scontrol", "show", "config")

# What sinfo prints in the node column of a partition without nodes: no real node is called so,
# since `/` cannot appear in a host name.
_NO_NODE = "n/a"
# What sinfo prints for a node without generic resources (or without features).
_NO_GRES = ("", "(null)")
_UNLIMITED = ("infinite", "unlimited")
_DIGITS = re.compile(r"[0-9]+")
# What slurm.conf accepts in a feature name, and what the market's filters accept back.
FEATURE_PATTERN = r"[A-Za-z0-9_.+-]{1,64}"
_FEATURE = re.compile(FEATURE_PATTERN)
_CONFIG_LINE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_\[\]]*)\s*=\s?(?P<value>.*)")


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    nodes: int
    cpus: int
    """Total CPUs over the partition's distinct nodes."""
    gpus: int
    """Total GPUs over the partition's distinct nodes, from their `gpu` GRES of any type."""
    max_time_minutes: int | None
    """The partition's time limit; None when it has none (`infinite`)."""
    is_up: bool
    is_default: bool
    cpus_per_node: int = 0
    """CPUs of the partition's smallest node: what a one-node job can count on wherever it
    lands. So are the memory and the GPUs per node."""
    memory_per_node_mb: int = 0
    gpus_per_node: int = 0
    gpu_types: tuple[str, ...] = ()
    """The GPU types (`a100`) any node of the partition has, sorted; an untyped GRES adds none."""
    features: tuple[str, ...] = ()
    """The node features (`avx512`, `ib`) any node of the partition has, sorted."""
    nodes_differ: bool = False
    """Whether the partition's nodes differ in CPUs, memory, GPUs or features: the per-node
    figures are then the smallest node's and the types and features not on every node."""


@dataclass(frozen=True)
class NodeHardware:
    cpus: int
    memory_mb: int
    gpus: int
    gpu_types: frozenset[str]
    features: frozenset[str]


@dataclass(frozen=True)
class ClusterInventory:
    cluster_name: str
    """Slurm's ClusterName: the name sacctmgr and `--clusters` know the cluster by."""
    slurm_version: str
    partitions: tuple[PartitionInfo, ...]
    """Sorted by name."""


def parse_duration_minutes(text: str) -> int | None:
    """Minutes in one of Slurm's time formats: `minutes`, `minutes:seconds`,
    `hours:minutes:seconds`, `days-hours`, `days-hours:minutes` or `days-hours:minutes:seconds`;
    None for `infinite`/`UNLIMITED`.

    Seconds round up to a whole minute, because a limit is a ceiling: a job that fits in the
    minutes we report must fit in the partition."""
    value = text.strip()
    if value.lower() in _UNLIMITED:
        return None
    days_text, dash, clock = value.rpartition("-")
    parts = clock.split(":")
    numbers = [*parts, days_text] if dash else parts
    if len(parts) > 3 or not all(_DIGITS.fullmatch(number) for number in numbers):
        raise UnexpectedOutput(f"not a Slurm time limit: {text!r}")
    values = [int(part) for part in parts]
    if dash:
        # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = (*values, 0, 0)[:3]
        seconds += ((int(days_text) * 24 + hours) * 60 + minutes) * 60
    elif len(values) == 3:
        hours, minutes, seconds = values
        seconds += (hours * 60 + minutes) * 60
    else:
        # minutes[:seconds]
        minutes, seconds = (*values, 0)[:2]
        seconds += minutes * 60
    return -(-seconds // 60)


def parse_sinfo_nodes(text: str) -> tuple[PartitionInfo, ...]:
    """Partitions from the output of `SINFO_NODES_COMMAND`, sorted by name.

    A node in several partitions counts in each of them; a node listed more than once in one
    partition counts once. Per-node values (CPUs, GRES) and per-partition values (time limit,
    availability, default flag) must agree across the lines that repeat them: if they do not,
    the output is not what we think it is, and that raises rather than guessing."""
    partitions: dict[str, _PartitionLines] = {}
    for row in parse_parsable2(text, list(SINFO_NODES_FIELDS)):
        name = row["partition"]
        flagged = row["partition_flagged"]
        if not name or flagged not in (name, f"{name}*"):
            raise UnexpectedOutput(f"sinfo printed partition {flagged!r} for {name!r}")
        settings = (
            parse_duration_minutes(row["time_limit"]),
            row["availability"] == "up",
            flagged.endswith("*"),
        )
        lines = partitions.setdefault(name, _PartitionLines(settings))
        if lines.settings != settings:
            raise UnexpectedOutput(f"sinfo printed two different settings for partition {name!r}")
        node = row["node"]
        if node == _NO_NODE:
            continue
        hardware = NodeHardware(
            cpus=_count(row["cpus"], "CPU count"),
            memory_mb=_count(row["memory"], "memory size"),
            gpus=gpus_in_gres(row["gres"]),
            gpu_types=frozenset(gpu_types_in_gres(row["gres"])),
            features=frozenset(features_of(row["features"])),
        )
        if lines.nodes.setdefault(node, hardware) != hardware:
            raise UnexpectedOutput(f"sinfo printed two different sizes for node {node!r}")
    return tuple(_partition_info(name, lines) for name, lines in sorted(partitions.items()))


def _partition_info(name: str, lines: _PartitionLines) -> PartitionInfo:
    nodes = list(lines.nodes.values())
    return PartitionInfo(
        name=name,
        nodes=len(nodes),
        cpus=sum(node.cpus for node in nodes),
        gpus=sum(node.gpus for node in nodes),
        max_time_minutes=lines.settings[0],
        is_up=lines.settings[1],
        is_default=lines.settings[2],
        cpus_per_node=min((node.cpus for node in nodes), default=0),
        memory_per_node_mb=min((node.memory_mb for node in nodes), default=0),
        gpus_per_node=min((node.gpus for node in nodes), default=0),
        gpu_types=tuple(sorted(set().union(*(node.gpu_types for node in nodes)))),
        features=tuple(sorted(set().union(*(node.features for node in nodes)))),
        nodes_differ=len(set(nodes)) > 1,
    )


def gpus_in_gres(text: str) -> int:
    """The number of GPUs in a node's GRES as sinfo prints it: comma-separated
    `name[:type]:count` items, each perhaps followed by a socket binding such as `(S:0-1)`, for
    example `gpu:a100:4(S:0-1),gpu:2,shard:8`. Only `gpu` items count, whatever their type."""
    return sum(count for _, count in _gpu_items(text))


def gpu_types_in_gres(text: str) -> set[str]:
    """The GPU types named in a node's GRES (`a100` in `gpu:a100:4`); `gpu:2` names none."""
    return {gpu_type for gpu_type, _ in _gpu_items(text) if gpu_type}


def features_of(text: str) -> set[str]:
    """A node's features as sinfo's %f prints them: comma-separated names, `(null)` for none."""
    if text in _NO_GRES:
        return set()
    features = set(text.split(","))
    if not all(_FEATURE.fullmatch(feature) for feature in features):
        raise UnexpectedOutput(f"unreadable node features {text!r}")
    return features


def _gpu_items(text: str) -> list[tuple[str, int]]:
    """(type, count) of each `gpu` item of a GRES; the type is "" when the item names none."""
    if text in _NO_GRES:
        return []
    items = []
    for item in _split_outside_parentheses(text):
        spec, parenthesis, binding = item.partition("(")
        if parenthesis and not binding.endswith(")"):
            raise UnexpectedOutput(f"unreadable GRES {item!r} in {text!r}")
        fields = spec.split(":")
        if fields[0] != "gpu":
            continue
        if len(fields) > 3:
            raise UnexpectedOutput(f"unreadable GRES {item!r} in {text!r}")
        # A GRES configured without a count (`Gres=gpu`) is one device.
        count = 1 if len(fields) == 1 else _count(fields[-1], f"GPU count in {text!r}")
        items.append((fields[1] if len(fields) == 3 else "", count))
    return items


def parse_cluster_config(text: str) -> tuple[str, str]:
    """(ClusterName, SLURM_VERSION) from the output of `scontrol show config`."""
    wanted = {"ClusterName": "", "SLURM_VERSION": ""}
    for line in text.splitlines():
        match = _CONFIG_LINE.fullmatch(line.strip())
        if match is None or match["key"] not in wanted:
            continue
        value = match["value"].strip()
        if wanted[match["key"]] not in ("", value):
            raise UnexpectedOutput(f"scontrol show config printed {match['key']} twice")
        wanted[match["key"]] = value
    missing = [key for key, value in wanted.items() if value in ("", "(null)")]
    if missing:
        raise UnexpectedOutput(f"scontrol show config printed no {' or '.join(missing)}")
    return wanted["ClusterName"], wanted["SLURM_VERSION"]


def parse_config(text: str) -> dict[str, str]:
    """Every `Key = Value` of `scontrol show config` (the controller's settings as it runs
    them, defaults included), the value stripped; a key printed twice raises."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        match = _CONFIG_LINE.fullmatch(line.strip())
        if match is None:
            continue
        key, value = match["key"], match["value"].strip()
        if key in settings and settings[key] != value:
            raise UnexpectedOutput(f"scontrol show config printed {key} twice")
        settings[key] = value
    return settings


def config_read(connection: SSHConnection, *, timeout: float = 30.0) -> dict[str, str]:
    """The controller's running configuration (see `parse_config`)."""
    return parse_config(connection.run(list(SCONTROL_CONFIG_COMMAND), timeout=timeout).stdout)


def config_list(value: str) -> set[str]:
    """A comma-separated setting (`AccountingStorageEnforce`, `PrivateData`...) as a set of
    lower-case words; Slurm prints `(null)` or `none` for an empty one."""
    words = {word.strip().lower() for word in value.split(",") if word.strip()}
    return words - {"(null)", "none"}


def inventory_read(connection: SSHConnection, *, timeout: float = 30.0) -> ClusterInventory:
    """Reads the inventory of the cluster behind `connection`. `timeout` is the deadline of each
    of the two commands."""
    config = connection.run(list(SCONTROL_CONFIG_COMMAND), timeout=timeout)
    cluster_name, slurm_version = parse_cluster_config(config.stdout)
    nodes = connection.run(list(SINFO_NODES_COMMAND), timeout=timeout)
    return ClusterInventory(
        cluster_name=cluster_name,
        slurm_version=slurm_version,
        partitions=parse_sinfo_nodes(nodes.stdout),
    )


@dataclass
class _PartitionLines:
    """What the lines of one partition said so far."""

    settings: tuple[int | None, bool, bool]  # time limit, is up, is default
    nodes: dict[str, NodeHardware] = field(default_factory=dict)


def _count(text: str, what: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise UnexpectedOutput(f"not a {what}: {text!r}")
    return int(text)


def _split_outside_parentheses(text: str) -> list[str]:
    """Splits at the commas that separate GRES items, not those inside a binding like
    `(S:0,2)`."""
    items: list[str] = []
    depth = 0
    start = 0
    for position, character in enumerate(text):
        if character == "(":
            depth += 1
        elif character == ")":
            depth -= 1
            if depth < 0:
                raise UnexpectedOutput(f"unbalanced parentheses in GRES {text!r}")
        elif character == "," and depth == 0:
            items.append(text[start:position])
            start = position + 1
    if depth != 0:
        raise UnexpectedOutput(f"unbalanced parentheses in GRES {text!r}")
    items.append(text[start:])
    if not all(items):
        raise UnexpectedOutput(f"empty item in GRES {text!r}")
    return items


# --- Idle time -----------------------------------------------------------------------------------

# One line per (partition, node) with what is idle on the node now: %C is the node's CPUs as
# `allocated/idle/other/total` (Slurm counts those of a drained or down node as `other`), %G
# its configured GRES, %b the GRES in use, %t its state in short form.
SINFO_IDLE_FIELDS = ("partition", "node", "cpus", "gres", "gres_used", "state")
SINFO_IDLE_COMMAND = ("sinfo", "--noheader", "--Node", "--format", "%R|%N|%C|%G|%b|%t")
# Node states in which a new job can start on the node's idle CPUs and GPUs: idle, partly
# allocated, and either of them powered down to be woken on demand (`~`). A node that does not
# respond (`*`), drains, is down, reserved or failing takes nothing new.
_SCHEDULABLE_STATES = frozenset({"idle", "mix", "idle~", "mix~"})


@dataclass(frozen=True)
class PartitionIdle:
    """What one partition had idle at the moment sinfo answered, over its distinct nodes."""

    name: str
    cpus: int
    idle_cpus: int
    gpus: int
    idle_gpus: int


def parse_sinfo_idle(text: str) -> tuple[PartitionIdle, ...]:
    """Idle CPUs and GPUs per partition from the output of `SINFO_IDLE_COMMAND`, sorted by
    name. A node in several partitions counts in each; a node listed twice in one partition
    counts once, and must read the same both times. The idle CPUs are the `idle` field of
    `%C` on a node that can take work; its idle GPUs are its configured ones less those in
    use. A line that does not read as such raises rather than guessing."""
    partitions: dict[str, dict[str, tuple[int, int, int, int]]] = {}
    for row in parse_parsable2(text, list(SINFO_IDLE_FIELDS)):
        name, node = row["partition"], row["node"]
        if not name or name.endswith("*"):
            raise UnexpectedOutput(f"sinfo printed partition {name!r}")
        nodes = partitions.setdefault(name, {})
        if node == _NO_NODE:
            continue
        counts = row["cpus"].split("/")
        if len(counts) != 4:
            raise UnexpectedOutput(f"not a CPU state (allocated/idle/other/total): {row['cpus']!r}")
        allocated, idle, other, total = (_count(count, "CPU count") for count in counts)
        if allocated + idle + other != total:
            raise UnexpectedOutput(f"CPU states that do not add up: {row['cpus']!r}")
        gpus = gpus_in_gres(row["gres"])
        used = gpus_in_gres(row["gres_used"])
        if row["state"] in _SCHEDULABLE_STATES:
            figures = (total, idle, gpus, max(gpus - used, 0))
        else:
            figures = (total, 0, gpus, 0)
        if nodes.setdefault(node, figures) != figures:
            raise UnexpectedOutput(f"sinfo printed node {node!r} twice, differently")
    return tuple(
        PartitionIdle(
            name=name,
            cpus=sum(figures[0] for figures in nodes.values()),
            idle_cpus=sum(figures[1] for figures in nodes.values()),
            gpus=sum(figures[2] for figures in nodes.values()),
            idle_gpus=sum(figures[3] for figures in nodes.values()),
        )
        for name, nodes in sorted(partitions.items())
    )


def idle_read(connection: SSHConnection, *, timeout: float = 30.0) -> tuple[PartitionIdle, ...]:
    """What each partition the service user can use has idle now: one sinfo command."""
    return parse_sinfo_idle(connection.run(list(SINFO_IDLE_COMMAND), timeout=timeout).stdout)
