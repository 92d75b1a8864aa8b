"""`computeshare jobs ...`: submit a script (with input files), quote it, follow it to its end,
read its output as it grows, cancel it, and list and download the files it wrote.

The commands live by what they do: `submission` (submit, quote), `following` (list, show,
wait, output, cancel) and `files` (files, download); this module gathers them in one group."""

from __future__ import annotations

import click

from computeshare_cli.jobs import files, following, submission


@click.group()
def jobs() -> None:
    """Submit, follow and collect jobs."""


for command in (
    submission.jobs_submit,
    submission.jobs_quote,
    following.jobs_list,
    following.jobs_show,
    following.jobs_wait,
    following.jobs_output,
    following.jobs_cancel,
    files.jobs_files,
    files.jobs_download,
):
    jobs.add_command(command)
