"""Batch scripts that cover every rule of sbatch's reading of `#SBATCH` lines (issue 28, item
1), each with what sbatch 22.05 reads of it: the options as `sbatch -v` prints them ("defined
options"), or its refusal. The reader's tests hold the platform's reader to these
(test_directives.py), and the test cluster holds them to sbatch itself
(test_directives_sbatch.py), so that neither the reader nor this corpus can drift from sbatch.

`processors` is what `sbatch --test-only` says the job would use on the test cluster's 2-CPU
node ("using N processors"), None when it asks for more than that node has. Cases marked
`platform_only` are refused by the platform although sbatch takes them (`#PBS` lines, which
sbatch is told to ignore; heterogeneous jobs; no time limit)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from hpc.slurm import directives
from hpc.slurm.directives import DirectiveRefused, ScriptReading


@dataclass(frozen=True)
class Case:
    name: str
    script: str
    options: dict[str, str] = field(default_factory=dict)
    processors: int | None = None
    # A refusal: (kind, line, the words of sbatch's message the reader's reason carries).
    refusal: tuple[str, int, str] | None = None
    platform_only: bool = False


# The options compared with sbatch's: what is asked (time, CPUs, tasks, nodes, memory, array)
# and the names and paths the job keeps.
COMPARED = (
    "time",
    "time-min",
    "cpus-per-task",
    "ntasks",
    "ntasks-per-node",
    "nodes",
    "mem",
    "mem-per-cpu",
    "mem-per-gpu",
    "gpus",
    "gpus-per-node",
    "gpus-per-task",
    "array",
    "job-name",
    "output",
    "error",
    "input",
)

CORPUS: tuple[Case, ...] = (
    # --- Where directives are read ---------------------------------------------------------
    Case(
        "a line that starts with #SBATCH is read",
        "#!/bin/bash\n#SBATCH --time=5\necho hi\n",
        {"time": "00:05:00"},
        processors=1,
    ),
    Case(
        "an indented #SBATCH, a lower-case one and '# SBATCH' are comments",
        "#!/bin/bash\n  #SBATCH --time=99\n#sbatch --time=98\n# SBATCH --time=97\n#SBATCH -c 2\n",
        {"cpus-per-task": "2"},
        processors=2,
    ),
    Case(
        "reading stops at the first command",
        "#!/bin/bash\n\n# a comment\n#SBATCH --time=7\nmodule load python\n#SBATCH --time=99\n",
        {"time": "00:07:00"},
        processors=1,
    ),
    Case(
        "blank lines and comments between directives are passed over",
        "#!/bin/bash\n#SBATCH -c 1\n\n   \n# why two\n#SBATCH --ntasks=2\n",
        {"cpus-per-task": "1", "ntasks": "2"},
        processors=2,
    ),
    Case(
        "the old #SLURM word is read too",
        "#!/bin/bash\n#SLURM --time=3\n",
        {"time": "00:03:00"},
        processors=1,
    ),
    Case(
        "#SBATCH glued to its option is read",
        "#!/bin/bash\n#SBATCH--time=4\n",
        {"time": "00:04:00"},
        processors=1,
    ),
    # --- Cutting a line into options -------------------------------------------------------
    Case(
        "an unquoted # ends the directive",
        "#!/bin/bash\n#SBATCH --time=6 # --ntasks=2 would be a comment\n",
        {"time": "00:06:00"},
        processors=1,
    ),
    Case(
        "a quoted or escaped # is kept",
        "#!/bin/bash\n#SBATCH -J 'run #1' -o out\\#2.txt\n",
        {"job-name": "run #1", "output": "out#2.txt"},
        processors=1,
    ),
    Case(
        "quotes group a value with blanks",
        "#!/bin/bash\n#SBATCH --job-name=\"my big run\" --comment 'a b'\n",
        {"job-name": "my big run"},
        processors=1,
    ),
    Case(
        "several options on one line",
        "#!/bin/bash\n#SBATCH -n 2 -t 1:00:00 -J x -o out.txt --mem=100\n",
        {"ntasks": "2", "time": "01:00:00", "job-name": "x", "output": "out.txt", "mem": "100"},
        processors=2,
    ),
    # --- Short and long options ------------------------------------------------------------
    Case(
        "short options with their value attached or apart",
        "#!/bin/bash\n#SBATCH -c2 -n 1 -t10\n",
        {"cpus-per-task": "2", "ntasks": "1", "time": "00:10:00"},
        processors=2,
    ),
    Case(
        "short options clustered",
        "#!/bin/bash\n#SBATCH -Hc2\n",
        {"cpus-per-task": "2"},
        processors=2,
    ),
    Case(
        "long options with = or a blank",
        "#!/bin/bash\n#SBATCH --cpus-per-task 2\n#SBATCH --time=15\n",
        {"cpus-per-task": "2", "time": "00:15:00"},
        processors=2,
    ),
    Case(
        "a long option by a prefix of its name",
        "#!/bin/bash\n#SBATCH --out=log.txt --cpus-per-t=2 --job-n=x\n",
        {"output": "log.txt", "cpus-per-task": "2", "job-name": "x"},
        processors=2,
    ),
    Case(
        "--tasks is a prefix of --tasks-per-node alone",
        "#!/bin/bash\n#SBATCH --tasks=2\n",
        {"ntasks-per-node": "2"},
        processors=2,
    ),
    Case(
        "the last value of an option wins",
        "#!/bin/bash\n#SBATCH --time=10\n#SBATCH -t 20\n#SBATCH -c 1 --cpus-per-task=2\n",
        {"time": "00:20:00", "cpus-per-task": "2"},
        processors=2,
    ),
    # --- Times -------------------------------------------------------------------------------
    Case("a time in minutes", "#!/bin/bash\n#SBATCH -t 10\n", {"time": "00:10:00"}, 1),
    Case("minutes:seconds", "#!/bin/bash\n#SBATCH -t 3:00\n", {"time": "00:03:00"}, 1),
    Case(
        "seconds round up to a minute",
        "#!/bin/bash\n#SBATCH -t 1:30\n",
        {"time": "00:02:00"},
        processors=1,
    ),
    Case("hours:minutes:seconds", "#!/bin/bash\n#SBATCH -t 1:30:00\n", {"time": "01:30:00"}, 1),
    Case("days-hours", "#!/bin/bash\n#SBATCH -t 2-0\n", {"time": "2-00:00:00"}, 1),
    Case(
        "days-hours:minutes:seconds",
        "#!/bin/bash\n#SBATCH -t 0-02:00:00\n",
        {"time": "02:00:00"},
        processors=1,
    ),
    Case(
        "days-hours:minutes and a minimum time",
        "#!/bin/bash\n#SBATCH -t 1-2:30 --time-min=45\n",
        {"time": "1-02:30:00", "time-min": "00:45:00"},
        processors=1,
    ),
    # --- Memory --------------------------------------------------------------------------------
    Case("memory in MiB by default", "#!/bin/bash\n#SBATCH --mem=1500\n", {"mem": "1500"}, 1),
    Case("memory in G", "#!/bin/bash\n#SBATCH --mem=2G\n", {"mem": "2G"}, 1),
    Case(
        "memory per CPU with a B",
        "#!/bin/bash\n#SBATCH --mem-per-cpu=512MB\n",
        {"mem-per-cpu": "512"},
        1,
    ),
    Case(
        "kibibytes round up to a MiB",
        "#!/bin/bash\n#SBATCH --mem-per-cpu=1025K\n",
        {"mem-per-cpu": "2"},
        processors=1,
    ),
    Case(
        "memory per node in T, more than the node has",
        "#!/bin/bash\n#SBATCH --mem=1T\n",
        {"mem": "1T"},
    ),
    # --- Tasks, nodes, arrays ------------------------------------------------------------------
    Case(
        "tasks per node times nodes",
        "#!/bin/bash\n#SBATCH -N 1 --ntasks-per-node=2\n",
        {"nodes": "1", "ntasks-per-node": "2"},
        processors=2,
    ),
    Case(
        "two nodes, more than the test cluster has",
        "#!/bin/bash\n#SBATCH --nodes=2 --ntasks=2\n",
        {"nodes": "2", "ntasks": "2"},
    ),
    Case(
        "an array with a throttle",
        "#!/bin/bash\n#SBATCH --array=1,6-7,12%2 -c 2 -t 5\n",
        {"array": "1,6-7,12%2", "cpus-per-task": "2", "time": "00:05:00"},
        processors=2,
    ),
    Case(
        "output, error and input with patterns",
        "#!/bin/bash\n#SBATCH -o %x-%A_%a.out -e logs/%j.err -i data.txt -a 0-3\n",
        {"output": "%x-%A_%a.out", "error": "%j.err", "input": "data.txt", "array": "0-3"},
        processors=1,
    ),
    # --- Refused as sbatch refuses ----------------------------------------------------------------
    Case(
        "an unknown option",
        "#!/bin/bash\n#SBATCH --time=5\n#SBATCH --walltime=10\n",
        refusal=("unknown", 3, "unrecognized option '--walltime=10'"),
    ),
    Case(
        "an unknown short option",
        "#!/bin/bash\n#SBATCH -y\n",
        refusal=("unknown", 2, "invalid option -- 'y'"),
    ),
    Case(
        "an option sbatch no longer has",
        "#!/bin/bash\n#SBATCH --workdir=/scratch/run\n",
        refusal=("removed", 2, "unrecognized option '--workdir=/scratch/run'"),
    ),
    Case(
        "--mem with --mem-per-cpu",
        "#!/bin/bash\n#SBATCH --mem=1G\n#SBATCH --mem-per-cpu=100\n",
        refusal=("conflict", 3, "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive."),
    ),
    Case(
        "a script without #!",
        "#SBATCH --time=5\necho hi\n",
        refusal=("not_batch_script", 1, "This does not look like a batch script."),
    ),
    Case(
        "DOS line breaks",
        "#!/bin/bash\r\n#SBATCH --time=5\r\necho hi\r\n",
        refusal=("dos_line_breaks", 1, "Batch script contains DOS line breaks (\\r\\n)"),
    ),
    Case(
        "an ambiguous prefix",
        "#!/bin/bash\n#SBATCH --mem-per=100\n",
        refusal=(
            "invalid",
            2,
            "option '--mem-per=100' is ambiguous; possibilities: '--mem-per-cpu' '--mem-per-gpu'",
        ),
    ),
    Case(
        "a prefix of two options is ambiguous, even of --time and --time-min",
        "#!/bin/bash\n#SBATCH --ti=5\n",
        refusal=(
            "invalid",
            2,
            "option '--ti=5' is ambiguous; possibilities: '--time' '--time-min'",
        ),
    ),
    Case(
        "a long option without its value",
        "#!/bin/bash\n#SBATCH --time\n",
        refusal=("invalid", 2, "option '--time' requires an argument"),
    ),
    Case(
        "a short option without its value",
        "#!/bin/bash\n#SBATCH -c\n",
        refusal=("invalid", 2, "option requires an argument -- 'c'"),
    ),
    Case(
        "a value for an option that takes none",
        "#!/bin/bash\n#SBATCH --requeue=yes\n",
        refusal=("invalid", 2, "option '--requeue' doesn't allow an argument"),
    ),
    Case(
        "a word that is not an option",
        "#!/bin/bash\n#SBATCH --time=5 walltime\n",
        refusal=("invalid", 2, "Invalid directive found in batch script: walltime"),
    ),
    Case(
        "a time sbatch cannot read",
        "#!/bin/bash\n#SBATCH --time=1:2:3:4\n",
        refusal=("invalid", 2, "Invalid --time specification"),
    ),
    Case(
        "a memory size sbatch cannot read",
        "#!/bin/bash\n#SBATCH --mem=1.5G\n",
        refusal=("invalid", 2, "Invalid --mem specification"),
    ),
    Case(
        "a count that is not a number",
        "#!/bin/bash\n#SBATCH --ntasks=four\n",
        refusal=("invalid", 2, 'Invalid numeric value "four" for --ntasks.'),
    ),
    Case(
        "an unmatched quote",
        '#!/bin/bash\n#SBATCH -J "half\n',
        refusal=("invalid", 2, 'Unmatched `"` in [ "half]'),
    ),
    # --- Refused by the platform alone ------------------------------------------------------------
    Case(
        "#PBS lines",
        "#!/bin/bash\n#PBS -l walltime=01:00:00\n",
        refusal=("other_directives", 2, "#PBS"),
        platform_only=True,
    ),
    Case(
        "#BSUB lines",
        "#!/bin/bash\n#BSUB -W 60\n",
        refusal=("other_directives", 2, "#BSUB"),
        platform_only=True,
    ),
    Case(
        "a heterogeneous job",
        "#!/bin/bash\n#SBATCH -c 1\n#SBATCH hetjob\n#SBATCH -c 2\n",
        refusal=("not_supported", 3, "heterogeneous"),
        platform_only=True,
    ),
)


def mins2time_str(minutes: int | None) -> str:
    """sbatch's way of printing minutes (parse_time.c)."""
    if minutes is None:
        return "UNLIMITED"
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours:02d}:{mins:02d}:00"


def mbytes_to_str(mib: int) -> str:
    """sbatch's way of printing MiB (proc_args.c)."""
    units = "MGTP"
    index = 0
    while index < 3 and mib and mib % 1024 == 0:
        mib //= 1024
        index += 1
    return str(mib) if index == 0 else f"{mib}{units[index]}"


def reader_view(reading: ScriptReading) -> dict[str, str]:
    """What the platform's reader reads of a script, printed as `sbatch -v` prints it, for the
    options compared."""
    view: dict[str, str] = {}
    for key in COMPARED:
        directive = reading.last(key)
        if directive is None:
            continue
        value = directive.value or ""
        line = directive.line
        if key in ("time", "time-min"):
            view[key] = mins2time_str(directives.time_minutes(value, option=f"--{key}", line=line))
        elif key in ("mem", "mem-per-cpu", "mem-per-gpu"):
            view[key] = mbytes_to_str(directives.megabytes(value, option=f"--{key}", line=line))
        elif key in ("cpus-per-task", "ntasks", "ntasks-per-node"):
            view[key] = str(directives.whole_number(value, option=f"--{key}", line=line))
        elif key == "nodes":
            low, high = directives.node_count(value, line=line)
            view[key] = str(low) if low == high else f"{low}-{high}"
        elif key in ("output", "error", "input"):
            view[key] = posixpath.basename(value)
        else:
            view[key] = value
    return view


def reader_refusal(script: str) -> DirectiveRefused | None:
    """The reader's refusal of a script, reading its values as the corpus's options do."""
    try:
        reader_view(directives.read_directives(script))
        directives.mutually_exclusive_memory(directives.read_directives(script))
    except DirectiveRefused as refusal:
        return refusal
    return None
