"""The one refusal of the reading, in sbatch's own words."""

from __future__ import annotations


class DirectiveRefused(Exception):
    """The script is refused as sbatch would refuse it (or, for `not_supported`, as the
    platform does). `kind` names the rule: `unknown` (no such option), `removed` (an option
    sbatch no longer has), `invalid` (a value or a word sbatch cannot read), `conflict`
    (options that exclude each other), `not_batch_script` (empty, no `#!`, a NUL),
    `dos_line_breaks`, `other_directives` (`#PBS`, `#BSUB`), `not_supported`. `reason` is
    sbatch's own message; `line` the script's line (1 for the script as a whole); `option` the
    option as written."""

    def __init__(self, kind: str, reason: str, *, line: int, option: str = "") -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.line = line
        self.option = option
