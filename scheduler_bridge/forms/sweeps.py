"""The sweep form: a script, a table of parameters (pasted or a CSV file), the sizes of each
task, how many run at once, and what a task's result is. It parses what the browser sends;
the services decide (the table's rules, the script's, the allocation's)."""

from __future__ import annotations

from typing import Any

from django import forms

from computeshare.forms import StyledFormMixin
from hpc import sizes
from scheduler_bridge.forms.sizes import size_field
from scheduler_bridge.models import Sweep
from scheduler_bridge.services import SweepRequest

SAMPLE_SWEEP_SCRIPT = """#!/usr/bin/env python3
#SBATCH --time=10
#SBATCH --cpus-per-task=1
# Runs once per row of the table: the row's values are variables named after the columns
# (and the arguments, in column order). The last line printed is the row's result.
import os

x = float(os.environ["x"])
y = float(os.environ["y"])
print(x * y)
"""
SAMPLE_TABLE = "x,y\n1,2\n2,3\n3,5\n"


class SweepSubmitForm(StyledFormMixin, forms.Form):
    name = forms.CharField(label="Name", max_length=200, initial="sweep")
    script = forms.CharField(
        label="Script",
        strip=False,
        initial=SAMPLE_SWEEP_SCRIPT,
        help_text="Any interpreter line (<code>#!/usr/bin/env python3</code>, "
        "<code>#!/bin/bash</code>). Its <code>#SBATCH</code> lines give each task's sizes "
        "(the fields below win over them); the sweep sets the array and the output itself. "
        "Each task runs it in its row's own folder.",
        widget=forms.Textarea(
            attrs={
                "rows": 12,
                "spellcheck": "false",
                "autocomplete": "off",
                "autocapitalize": "off",
                "wrap": "off",
                "class": "font-monospace",
            }
        ),
    )
    table = forms.CharField(
        label="Parameters (CSV)",
        required=False,
        strip=False,
        initial=SAMPLE_TABLE,
        help_text="A header of column names, then one row per task, separated by commas, "
        "tabs or semicolons: a range pasted from a spreadsheet reads as it is. Each column "
        "becomes a variable of its task (letters, digits and <code>_</code>).",
        widget=forms.Textarea(
            attrs={"rows": 8, "spellcheck": "false", "wrap": "off", "class": "font-monospace"}
        ),
    )
    table_file = forms.FileField(
        label="…or a CSV file",
        required=False,
        help_text="Instead of the table above: a CSV (or tab-separated) file saved from a "
        "spreadsheet (UTF-8).",
        widget=forms.ClearableFileInput(
            attrs={"accept": ".csv,.tsv,.txt,text/csv,text/tab-separated-values,text/plain"}
        ),
    )
    time_limit_minutes = size_field(
        sizes.TIME_LIMIT_MINUTES,
        "Time limit per task (minutes)",
        placeholder="the script's --time",
    )
    cpus_per_task = size_field(sizes.CPUS_PER_TASK, "CPUs per task", placeholder="1")
    concurrency = size_field(sizes.ARRAY_THROTTLE, "At most at once", initial=10)
    result_source = forms.ChoiceField(
        label="A task's result",
        choices=[
            (Sweep.ResultSource.STDOUT, "The last line it prints"),
            (Sweep.ResultSource.FILE, "A file it writes"),
        ],
        initial=Sweep.ResultSource.STDOUT,
    )
    result_file = forms.CharField(
        label="Result file",
        required=False,
        max_length=1000,
        help_text="For a file result: its path in the task's folder, such as "
        "<code>result.txt</code>.",
        widget=forms.TextInput(attrs={"placeholder": "result.txt", "spellcheck": "false"}),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload = data.get("table_file")
        table = (data.get("table") or "").replace("\r\n", "\n")
        # The sample table is the field's initial value: an uploaded file replaces it.
        if upload is not None and table.strip() and table != SAMPLE_TABLE:
            self.add_error("table_file", "Give the table or a CSV file, not both.")
        return data

    def sweep_request(self, table: str) -> SweepRequest:
        data = self.cleaned_data
        is_file = data["result_source"] == Sweep.ResultSource.FILE
        return SweepRequest(
            name=data["name"],
            # A browser sends a text area's lines with CR LF: the page's, not the script's.
            script=data["script"].replace("\r\n", "\n"),
            table=table,
            time_limit_minutes=data.get("time_limit_minutes"),
            cpus_per_task=data.get("cpus_per_task"),
            concurrency=data["concurrency"],
            result_source=data["result_source"],
            result_file=data["result_file"].strip() if is_file else "",
        )
