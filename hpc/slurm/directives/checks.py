"""What sbatch refuses of a script as a whole before it reads a single option, and the other
schedulers' directive lines the platform refuses."""

from __future__ import annotations

from hpc.slurm.directives.errors import DirectiveRefused

OTHER_MAGIC_WORDS = ("#PBS", "#BSUB")
# sbatch's translator of #PBS and #BSUB lines gives up after this many lines that do not start
# with `#` (src/sbatch/xlate.c).
OTHER_DIRECTIVES_SCAN_LINES = 100


def script_check(script: str) -> None:
    """Refuses what sbatch refuses before it reads a single option."""
    if not script:
        raise DirectiveRefused("not_batch_script", "Batch script is empty!", line=1)
    if not script.strip():
        raise DirectiveRefused("not_batch_script", "Batch script contains only whitespace!", line=1)
    if not script.startswith("#!"):
        raise DirectiveRefused(
            "not_batch_script",
            "This does not look like a batch script.  The first line must start with #! "
            "followed by the path to an interpreter. For instance: #!/bin/sh",
            line=1,
        )
    if "\x00" in script:
        raise DirectiveRefused(
            "not_batch_script",
            "The Slurm controller does not allow scripts that contain a NULL character '\\0'.",
            line=script.count("\n", 0, script.index("\x00")) + 1,
        )
    if "\r\n" in script:
        raise DirectiveRefused(
            "dos_line_breaks",
            "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
            "breaks (\\n).",
            line=script.count("\n", 0, script.index("\r\n")) + 1,
        )


def other_directives_refuse(script: str) -> None:
    """Refuses `#PBS` and `#BSUB` lines, which the platform does not read (sbatch is given
    `--ignore-pbs`) and would otherwise be lost without a word."""
    commands = 0
    for number, line in enumerate(script.split("\n"), start=1):
        word = next((word for word in OTHER_MAGIC_WORDS if line.startswith(word)), None)
        if word is not None:
            raise DirectiveRefused(
                "other_directives",
                f"{word} lines are options of another scheduler; write them as #SBATCH "
                "options (sbatch here is given --ignore-pbs and would not read them).",
                line=number,
                option=word,
            )
        if not line.startswith("#"):
            commands += 1
            if commands > OTHER_DIRECTIVES_SCAN_LINES:
                return
