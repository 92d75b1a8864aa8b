"""sbatch 22.05.8's option table, as `getopt_long` is given it, and the options older releases
had that it refuses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SLURM_VERSION = "22.05.8"

NO_ARGUMENT, REQUIRED, OPTIONAL = 0, 1, 2


@dataclass(frozen=True)
class Option:
    """One option of sbatch's table: its long name, whether it takes a value, its short letter
    and whether sbatch reads it only on its command line (`sbatch_early_pass`)."""

    name: str
    argument: int
    short: str | None = None
    command_line_only: bool = False
    # Options that are one option under two names (getopt's `val`): `tasks-per-node` is
    # `ntasks-per-node`. Empty: the option is its own.
    same_as: str = ""

    @property
    def key(self) -> str:
        return self.same_as or self.name


def _option(
    name: str, argument: int, short: str | None = None, *, early: bool = False, same_as: str = ""
) -> Option:
    return Option(name, argument, short, early, same_as)


# sbatch 22.05.8's options, in the order of `common_options` in src/common/slurm_opt.c (getopt
# names the candidates of an ambiguous prefix in this order). Options of srun or salloc alone
# are not here: sbatch does not know them.
OPTIONS: tuple[Option, ...] = (
    _option("account", REQUIRED, "A"),
    _option("acctg-freq", REQUIRED),
    _option("array", REQUIRED, "a"),
    _option("batch", REQUIRED),
    _option("begin", REQUIRED, "b"),
    _option("bb", REQUIRED),
    _option("bbf", REQUIRED),
    _option("cluster-constraint", REQUIRED),
    _option("chdir", REQUIRED, "D"),
    _option("cluster", REQUIRED),
    _option("clusters", REQUIRED, "M"),
    _option("comment", REQUIRED),
    _option("container", REQUIRED),
    _option("context", REQUIRED),
    _option("contiguous", NO_ARGUMENT),
    _option("constraint", REQUIRED, "C"),
    _option("core-spec", REQUIRED, "S"),
    _option("cores-per-socket", REQUIRED),
    _option("cpu-freq", REQUIRED),
    _option("cpus-per-gpu", REQUIRED),
    _option("cpus-per-task", REQUIRED, "c"),
    _option("deadline", REQUIRED),
    _option("delay-boot", REQUIRED),
    _option("dependency", REQUIRED, "d"),
    _option("distribution", REQUIRED, "m"),
    _option("error", REQUIRED, "e"),
    _option("exclude", REQUIRED, "x"),
    _option("exclusive", OPTIONAL),
    _option("export", REQUIRED),
    _option("export-file", REQUIRED),
    _option("extra-node-info", REQUIRED, "B"),
    _option("get-user-env", OPTIONAL),
    _option("gid", REQUIRED),
    _option("gpu-bind", REQUIRED),
    _option("gpu-freq", REQUIRED),
    _option("gpus", REQUIRED, "G"),
    _option("gpus-per-node", REQUIRED),
    _option("gpus-per-socket", REQUIRED),
    _option("gpus-per-task", REQUIRED),
    _option("gres", REQUIRED),
    _option("gres-flags", REQUIRED),
    _option("help", NO_ARGUMENT, "h", early=True),
    _option("hint", REQUIRED),
    _option("hold", NO_ARGUMENT, "H"),
    _option("ignore-pbs", NO_ARGUMENT),
    _option("input", REQUIRED, "i"),
    _option("job-name", REQUIRED, "J"),
    _option("kill-on-invalid-dep", REQUIRED),
    _option("licenses", REQUIRED, "L"),
    _option("mail-type", REQUIRED),
    _option("mail-user", REQUIRED),
    _option("mcs-label", REQUIRED),
    _option("mem", REQUIRED),
    _option("mem-bind", REQUIRED),
    _option("mem-per-cpu", REQUIRED),
    _option("mem-per-gpu", REQUIRED),
    _option("mincpus", REQUIRED),
    _option("network", REQUIRED),
    _option("nice", OPTIONAL),
    _option("no-kill", OPTIONAL, "k"),
    _option("no-requeue", NO_ARGUMENT),
    _option("nodefile", REQUIRED, "F"),
    _option("nodelist", REQUIRED, "w"),
    _option("nodes", REQUIRED, "N"),
    _option("ntasks", REQUIRED, "n"),
    _option("ntasks-per-core", REQUIRED),
    _option("ntasks-per-gpu", REQUIRED),
    _option("ntasks-per-node", REQUIRED),
    _option("ntasks-per-socket", REQUIRED),
    _option("ntasks-per-tres", REQUIRED),
    _option("open-mode", REQUIRED),
    _option("output", REQUIRED, "o"),
    _option("overcommit", NO_ARGUMENT, "O"),
    _option("oversubscribe", NO_ARGUMENT, "s"),
    _option("parsable", NO_ARGUMENT),
    _option("partition", REQUIRED, "p"),
    _option("power", REQUIRED),
    _option("prefer", REQUIRED),
    _option("priority", REQUIRED),
    _option("profile", REQUIRED),
    _option("propagate", OPTIONAL),
    _option("qos", REQUIRED, "q"),
    _option("quiet", NO_ARGUMENT, "Q", early=True),
    _option("reboot", NO_ARGUMENT),
    _option("requeue", NO_ARGUMENT),
    _option("reservation", REQUIRED),
    _option("signal", REQUIRED),
    _option("sockets-per-node", REQUIRED),
    _option("spread-job", NO_ARGUMENT),
    _option("switches", REQUIRED),
    _option("tasks-per-node", REQUIRED, same_as="ntasks-per-node"),
    _option("test-only", NO_ARGUMENT),
    _option("thread-spec", REQUIRED),
    _option("threads-per-core", REQUIRED),
    _option("time", REQUIRED, "t"),
    _option("time-min", REQUIRED),
    _option("tmp", REQUIRED),
    _option("uid", REQUIRED),
    _option("use-min-nodes", NO_ARGUMENT),
    _option("verbose", NO_ARGUMENT, "v", early=True),
    _option("version", NO_ARGUMENT, "V", early=True),
    _option("usage", NO_ARGUMENT, early=True),
    _option("wait", NO_ARGUMENT, "W"),
    _option("wait-all-nodes", REQUIRED),
    _option("wckey", REQUIRED),
    _option("wrap", REQUIRED, early=True),
)
BY_NAME = {option.name: option for option in OPTIONS}
BY_SHORT = {option.short: option for option in OPTIONS if option.short}


@dataclass(frozen=True)
class Removed:
    """An option older sbatch versions had and 22.05 does not: the first release without it
    (from the option tables of each release's sources) and what to write instead, if anything."""

    since: str
    instead: str = ""


REMOVED_OPTIONS: Mapping[str, Removed] = {
    # BlueGene and Cray-XT options, gone with those systems' support.
    **dict.fromkeys(
        (
            "blrts-image",
            "cnload-image",
            "conn-type",
            "geometry",
            "ioload-image",
            "linux-image",
            "mloader-image",
            "no-rotate",
            "ramdisk-image",
        ),
        Removed("18.08"),
    ),
    "checkpoint": Removed("20.02"),
    "checkpoint-dir": Removed("19.05"),
    "immediate": Removed("19.05"),
    "jobid": Removed("19.05"),
    "mem_bind": Removed("19.05", "--mem-bind"),
    "mincores": Removed("19.05", "--cores-per-socket"),
    "minsockets": Removed("19.05", "--sockets-per-node"),
    "minthreads": Removed("19.05", "--threads-per-core"),
    "share": Removed("19.05", "--oversubscribe"),
    "workdir": Removed("19.05", "--chdir"),
    "x11": Removed("19.05"),
}


def option_named(key: str) -> Option:
    return BY_NAME[key]


def is_command_line_only(key: str) -> bool:
    return BY_NAME[key].command_line_only
