"""A batch script's `#SBATCH` lines, read as sbatch itself reads them: pure functions.

The rules are Slurm 22.05.8's, the version the platform's clusters run (Debian 12), taken from
its sources and checked against `sbatch -v --test-only` on the test cluster
(tests/scheduler_bridge/test_directives_sbatch.py):

- The script is refused as sbatch refuses it (`_get_script_buffer` in src/sbatch/sbatch.c):
  empty, only whitespace, no `#!` at its start, a NUL character, a DOS line break.
- Directives are lines that start with `#SBATCH` (or the old `#SLURM`) in the first column
  (`_opt_batch_script` in src/sbatch/opt.c). Reading stops at the first line that is neither
  blank nor a comment: a `#SBATCH` line after the first command is a plain comment.
- A line is cut into arguments as a shell would, roughly (`get_argument`): blanks separate,
  single and double quotes group, a backslash takes the next character as it is, and an
  unquoted `#` ends the line. `hetjob` (or `packjob`) starts a heterogeneous job's component.
- All the arguments of all the lines go through one `getopt_long` with sbatch's option table
  (src/common/slurm_opt.c) in POSIX order: options only, the first other word is an error;
  long options by any unambiguous prefix (`--out` is `--output`, `--tasks` is
  `--tasks-per-node`), with `=value` or the value as the next argument; short options
  clustered (`-Hc2`); the last value of an option wins.
- Options that sbatch reads only from its command line (`--help`, `--verbose`, `--wrap`...)
  are read and ignored in a script, as sbatch ignores them there.

What an honoured option's value means is read with sbatch's own rules (`time_str2mins`,
`str_to_mbytes`, `parse_int`, `verify_node_count`, `get_signal_opts`...), and each refusal
carries sbatch's own words. Which options the platform honours, overrides or refuses is decided
above this library; here is only what sbatch would read.

The package, bottom first: `options` (sbatch's option table), `errors` (the refusal), `libc`
(the C library's readings sbatch relies on), `checks` (the script as a whole), `reading` (the
lines, their arguments and getopt; and the script with its lines neutralised), `values` and
`dependencies` (an option's value). Everything is imported from here."""

from hpc.slurm.directives.checks import script_check
from hpc.slurm.directives.dependencies import (
    DEPENDENCY_KINDS,
    Dependency,
    DependencyCondition,
    dependency,
    dependency_text,
)
from hpc.slurm.directives.errors import DirectiveRefused
from hpc.slurm.directives.options import (
    NO_ARGUMENT,
    OPTIONAL,
    OPTIONS,
    REMOVED_OPTIONS,
    REQUIRED,
    SLURM_VERSION,
    Option,
    Removed,
    is_command_line_only,
    option_named,
)
from hpc.slurm.directives.reading import (
    Directive,
    ScriptReading,
    directive_lines,
    neutralised,
    read_directives,
)
from hpc.slurm.directives.values import (
    HINTS,
    NICE_LIMIT,
    Signal,
    exclusive,
    hint,
    megabytes,
    mutually_exclusive_memory,
    nice,
    node_count,
    open_mode,
    signal,
    time_minutes,
    whole_number,
)

__all__ = [
    "DEPENDENCY_KINDS",
    "HINTS",
    "NICE_LIMIT",
    "NO_ARGUMENT",
    "OPTIONAL",
    "OPTIONS",
    "REMOVED_OPTIONS",
    "REQUIRED",
    "SLURM_VERSION",
    "Dependency",
    "DependencyCondition",
    "Directive",
    "DirectiveRefused",
    "Option",
    "Removed",
    "ScriptReading",
    "Signal",
    "dependency",
    "dependency_text",
    "directive_lines",
    "exclusive",
    "hint",
    "is_command_line_only",
    "megabytes",
    "mutually_exclusive_memory",
    "neutralised",
    "nice",
    "node_count",
    "open_mode",
    "option_named",
    "read_directives",
    "script_check",
    "signal",
    "time_minutes",
    "whole_number",
]
