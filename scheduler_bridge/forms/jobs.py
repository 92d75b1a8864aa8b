"""Forms of the job pages. They parse what the browser sends into the types the services take
(sizes as integers, the environment's `NAME=value` lines as a dict); the services decide what
is allowed (sizes that fit the partition, valid names, the script's #SBATCH lines) and the views put
their refusals beside these fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms

from computeshare.forms import StyledFormMixin
from computeshare.moments import month_start
from hpc import sizes
from hpc.arrays import InvalidArray, parse_array
from scheduler_bridge.forms.sizes import size_field
from scheduler_bridge.models import JobState
from scheduler_bridge.services import JobRequest

SAMPLE_SCRIPT = """#!/bin/bash
#SBATCH --job-name=hello
#SBATCH --time=10
#SBATCH --cpus-per-task=1
set -euo pipefail

echo "Hello from $(hostname)"
echo "Running with ${SLURM_CPUS_PER_TASK:-1} CPUs per task"
sleep 5
echo "Done"
"""


# The fields a script's #SBATCH lines can fill (the page's script fills them as it is typed).
SCRIPT_FILLED_FIELDS = ("name", *sizes.LIMITS, "array")


class JobSizesForm(StyledFormMixin, forms.Form):
    """What a job asks of the partition: the fields the cost estimate is computed from. Each
    may be left empty: the script's #SBATCH line gives it then, else the default (the
    placeholder). `script_fields` names the fields the page filled from the script as it was
    typed: those are the script's, not the request's."""

    time_limit_minutes = size_field(
        sizes.TIME_LIMIT_MINUTES, "Time limit (minutes)", placeholder="--time"
    )
    cpus_per_task = size_field(sizes.CPUS_PER_TASK, "CPUs per task", placeholder="1")
    ntasks = size_field(sizes.NTASKS, "Tasks (ntasks)", placeholder="1")
    nodes = size_field(sizes.NODES, "Nodes", placeholder="1")
    gpus = size_field(sizes.GPUS, "GPUs", placeholder="0")
    script_fields = forms.CharField(required=False, widget=forms.HiddenInput)
    mem_per_cpu = size_field(
        sizes.MEM_PER_CPU,
        "Memory per CPU (MiB)",
        placeholder="default",
        help_text="Optional: sbatch's <code>--mem-per-cpu</code>. Empty: the partition's "
        "default. The job's page compares it with what the job used (MaxRSS).",
    )
    array = forms.CharField(
        label="Array",
        max_length=200,
        required=False,
        help_text="Optional: run the script once per index, such as <code>0-99</code>, "
        "<code>1,3,5</code> or <code>0-999%20</code> (at most 20 at once). Every task "
        "reserves the sizes above.",
        widget=forms.TextInput(attrs={"placeholder": "none", "spellcheck": "false"}),
    )

    def __init__(self, *args: Any, has_gpus: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # GPUs are asked for only where there are any; elsewhere the field is not shown and a
        # job asks for none.
        if not has_gpus:
            del self.fields["gpus"]

    def clean_array(self) -> str | None:
        expression: str = self.cleaned_data["array"].strip()
        if not expression:
            return None
        try:
            parse_array(expression)
        except InvalidArray as error:
            raise forms.ValidationError(str(error)) from error
        return expression

    def clean_script_fields(self) -> list[str]:
        names = self.cleaned_data["script_fields"].split(",")
        return [name for name in names if name in SCRIPT_FILLED_FIELDS]

    def task_count(self) -> int:
        """How many tasks the job runs, counted by the parser the submission uses; call after
        `is_valid()`."""
        expression = self.cleaned_data.get("array")
        return len(parse_array(expression).indices) if expression else 1

    def job_request(self, script: str = "") -> JobRequest:
        """What the form asks for, as the services take it; call after `is_valid()`. A field
        left empty, or filled from the script, is not the request's: the script's or the
        default applies."""
        data = dict(self.cleaned_data)
        for name in data.get("script_fields") or []:
            data[name] = None
        if "gpus" not in self.fields:
            data["gpus"] = None
        return JobRequest(
            name=(data.get("name") or "").strip() or None,
            script=data.get("script") or script,
            time_limit_minutes=data.get("time_limit_minutes"),
            cpus_per_task=data.get("cpus_per_task"),
            ntasks=data.get("ntasks"),
            nodes=data.get("nodes"),
            gpus=data.get("gpus"),
            array=data.get("array"),
            environment=data.get("environment") or {},
            secret_environment=data.get("secret_environment") or {},
            mem_per_cpu=data.get("mem_per_cpu"),
            template=data.get("template") or "",
        )


def parse_environment(text: str) -> dict[str, str]:
    """`NAME=value` lines into a dict. Blank lines and lines starting with `#` are skipped; the
    value is everything after the first `=`, kept as typed (spaces, quotes and `$` included:
    the job receives it as data). Raises `ValidationError` naming each bad line."""
    environment: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals or not name:
            problems.append(f"Line {number}: write NAME=value.")
        elif name in environment:
            problems.append(f"Line {number}: {name} is set twice.")
        else:
            environment[name] = value
    if problems:
        raise forms.ValidationError(problems)
    return environment


class SecretTextarea(forms.Textarea):
    """A textarea that never shows its value again, like a password input: a form drawn again
    after a refusal does not carry the secrets back to the page."""

    def format_value(self, value: Any) -> str | None:
        return None


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (Django's FileField takes one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[Any]:
        files = data if isinstance(data, list | tuple) else [data] if data else []
        return [super(MultipleFileField, self).clean(file, initial) for file in files]


class JobSubmitForm(JobSizesForm):
    name = forms.CharField(
        label="Name",
        max_length=200,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "--job-name"}),
    )
    script = forms.CharField(
        label="Script",
        strip=False,
        initial=SAMPLE_SCRIPT,
        help_text="Starts with an interpreter line such as <code>#!/bin/bash</code>. Its "
        "<code>#SBATCH</code> lines are read as sbatch reads them and fill the fields below as "
        "you type; a field you type in wins over the script's line, as sbatch's command line "
        "does.",
        widget=forms.Textarea(
            attrs={
                "rows": 14,
                "spellcheck": "false",
                "autocomplete": "off",
                "autocapitalize": "off",
                "wrap": "off",
                "class": "font-monospace",
                "data-script-editor": "",
            }
        ),
    )
    environment = forms.CharField(
        label="Environment",
        required=False,
        strip=False,
        help_text="Optional: one <code>NAME=value</code> a line.",
        widget=forms.Textarea(
            attrs={
                "rows": 3,
                "spellcheck": "false",
                "class": "font-monospace",
                "placeholder": "INPUT=data/run1.csv",
            }
        ),
    )

    secret_environment = forms.CharField(
        label="Secret variables",
        required=False,
        strip=False,
        help_text="Optional: one <code>NAME=value</code> a line, such as an API key. The job "
        "gets them like the environment; they are kept encrypted and never shown again (the "
        "job's page shows their names). Type them again if the form is refused.",
        widget=SecretTextarea(
            attrs={
                "rows": 2,
                "spellcheck": "false",
                "autocomplete": "off",
                "class": "font-monospace",
                "placeholder": "API_TOKEN=...",
            }
        ),
    )

    template = forms.CharField(required=False, max_length=32, widget=forms.HiddenInput)

    input_files = MultipleFileField(
        label="Input files",
        required=False,
        help_text="Optional: files the job finds in its folder (its working directory) when it "
        "starts, under their own names. For folders, use the API or the command-line client.",
    )

    field_order = [
        "name",
        "script",
        "time_limit_minutes",
        "cpus_per_task",
        "ntasks",
        "nodes",
        "gpus",
        "mem_per_cpu",
        "array",
        "environment",
        "secret_environment",
        "input_files",
    ]

    def clean_script(self) -> str:
        # A browser sends a text area's lines with CR LF whatever the user typed (the HTML
        # form encoding): those line breaks are the page's, not the script's.
        script: str = self.cleaned_data["script"]
        return script.replace("\r\n", "\n")

    def clean_environment(self) -> dict[str, str]:
        return parse_environment(self.cleaned_data["environment"])

    def clean_secret_environment(self) -> dict[str, str]:
        return parse_environment(self.cleaned_data["secret_environment"])


class JobFilterForm(StyledFormMixin, forms.Form):
    """The jobs list's filters: the API's (`organization`, `state`, `allocation`)."""

    organization = forms.UUIDField(label="Organization", required=False)
    state = forms.ChoiceField(
        label="State", choices=[("", "Any state"), *JobState.choices], required=False
    )
    allocation = forms.UUIDField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, organizations: Any = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["organization"].widget = forms.Select(
            attrs={"class": "form-select"},
            choices=[("", "All your organizations")]
            + [(str(organization.uuid), organization.name) for organization in organizations],
        )


class MonthForm(StyledFormMixin, forms.Form):
    """The month of a report, as the API takes it (`YYYY-MM`, UTC)."""

    month = forms.RegexField(
        label="Month",
        regex=r"^[0-9]{4}-(0[1-9]|1[0-2])$",
        required=False,
        error_messages={"invalid": "A month as YYYY-MM, such as 2026-11."},
        widget=forms.TextInput(attrs={"type": "month"}),
    )

    def clean_month(self) -> datetime | None:
        text: str = self.cleaned_data["month"]
        if not text:
            return None
        year, month = (int(part) for part in text.split("-"))
        try:
            return month_start(year, month)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
