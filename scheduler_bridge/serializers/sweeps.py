"""Input and output shapes of the sweep endpoints. They translate; the services decide."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.serializers import Money
from hpc import sizes
from marketplace.serializers.fields import Units
from scheduler_bridge.models import Job, JobState, Sweep, SweepRow
from scheduler_bridge.serializers.sizes import optional_size, size_field

TABLE_HELP = (
    "CSV: a header of column names, then one row per task, the values separated by commas, "
    "tabs (a range copied from a spreadsheet) or semicolons, as the header's own separator "
    "says; a value holding one goes in double quotes. Each column becomes an environment "
    "variable of its task (letters, digits and _, not starting with a digit, not SLURM_...), "
    "and the row's values are also the script's arguments, in column order. At most "
    "SWEEP_MAX_ROWS rows. Refused with 400 `sweep_table_empty`, `sweep_header_invalid`, "
    "`sweep_row_ragged`, `sweep_too_many_rows`, `sweep_value_invalid` or "
    "`sweep_table_too_large`."
)


class SweepCreateSerializer(serializers.Serializer):
    allocation = serializers.UUIDField()
    name = serializers.CharField(max_length=200)
    script = serializers.CharField(
        trim_whitespace=False,
        help_text="The team's script, starting with `#!` (bash, python3, ...). Its `#SBATCH` "
        "lines give each task's sizes as a job's do (the fields below win over them); the "
        "sweep sets the array, the output and the dependency itself, and overrides the "
        "script's with a warning. Each task runs it in its row's own folder (`row-<n>` of the "
        "job's folder).",
    )
    table = serializers.CharField(
        trim_whitespace=False, required=False, allow_blank=True, help_text=TABLE_HELP
    )
    time_limit_minutes = optional_size(
        sizes.TIME_LIMIT_MINUTES,
        "Per task; left out, the script's --time (400 when neither gives one).",
    )
    cpus_per_task = optional_size(
        sizes.CPUS_PER_TASK, "Per task; left out, the script's --cpus-per-task, else 1."
    )
    concurrency = size_field(
        sizes.ARRAY_THROTTLE,
        "At most this many tasks run at once (the array's `%N`).",
        default=10,
    )
    result_source = serializers.ChoiceField(
        choices=Sweep.ResultSource.choices,
        default=Sweep.ResultSource.STDOUT,
        help_text="`stdout`: a task's result is the last line of its stdout. `file`: the file "
        "`result_file` that it writes in its folder.",
    )
    result_file = serializers.CharField(
        required=False,
        default="",
        allow_blank=True,
        max_length=1000,
        help_text="For `file`: its path in the task's folder (relative, plain parts).",
    )


class SweepMultipartSchema(SweepCreateSerializer):
    table_file = serializers.FileField(
        required=False,
        help_text="The table as a file (CSV, or tab- or semicolon-separated), instead of `table`.",
    )


class SweepJobSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="job.uuid")
    attempt = serializers.IntegerField(help_text="1 for the sweep's first job, then each retry.")
    state = serializers.ChoiceField(source="job.state", choices=JobState.choices)
    task_count = serializers.IntegerField(source="job.task_count")
    array = serializers.CharField(source="job.array")
    reserved_units = Units(source="job.reserved_units")
    cost = Money(source="job.cost")
    results_state = serializers.ChoiceField(
        source="job.results_state", choices=Job.ResultsState.choices
    )


class SweepSerializer(serializers.Serializer):
    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    allocation = serializers.UUIDField(source="allocation.uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    state = serializers.ChoiceField(
        choices=Sweep.State.choices,
        help_text="`running` until every row's task has ended and its result is gathered; "
        "`ended` then (and `running` again after a retry of its failed rows).",
    )
    columns = serializers.ListField(child=serializers.CharField())
    concurrency = serializers.IntegerField()
    time_limit_minutes = serializers.IntegerField()
    cpus_per_task = serializers.IntegerField()
    result_source = serializers.ChoiceField(choices=Sweep.ResultSource.choices)
    result_file = serializers.CharField()
    created_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


class SweepRowSerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="The row's place in the table, from 0.")
    parameters = serializers.SerializerMethodField(help_text="Column name to value.")
    state = serializers.ChoiceField(
        source="task.state", choices=JobState.choices, help_text="Its last task's state."
    )
    exit_code = serializers.IntegerField(source="task.exit_code", allow_null=True)
    job = serializers.UUIDField(source="task.job.uuid", help_text="The job that ran it last.")
    attempts = serializers.IntegerField()
    cost = Money(source="task.cost", help_text="What its last task was charged.")
    result_state = serializers.ChoiceField(
        choices=SweepRow.ResultState.choices,
        help_text="`pending` until its job's files are fetched; `ok`; `missing` (the task "
        "completed without writing it); `failed` (the task did not complete).",
    )
    result = serializers.CharField(help_text="Empty unless gathered.")
    result_detail = serializers.CharField(help_text="Why a result is missing, failed or cut.")

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_parameters(self, row: SweepRow) -> dict[str, str]:
        return dict(zip(self.context["columns"], row.values, strict=True))


class SweepDetailSerializer(SweepSerializer):
    script = serializers.CharField()
    jobs = SweepJobSerializer(source="sweep_jobs.all", many=True)
    counts = serializers.SerializerMethodField(
        help_text="How many rows are in each task state and each result state."
    )
    currency = serializers.SerializerMethodField()
    rows = serializers.SerializerMethodField(help_text="Every row, in table order.")

    def get_currency(self, sweep: Sweep) -> str:
        return str(settings.PLATFORM_CURRENCY)

    @extend_schema_field(
        serializers.DictField(child=serializers.DictField(child=serializers.IntegerField()))
    )
    def get_counts(self, sweep: Sweep) -> dict[str, dict[str, int]]:
        states: dict[str, int] = {}
        results: dict[str, int] = {}
        for row in self.context["rows"]:
            states[row.task.state] = states.get(row.task.state, 0) + 1
            results[row.result_state] = results.get(row.result_state, 0) + 1
        return {"states": states, "results": results}

    @extend_schema_field(SweepRowSerializer(many=True))
    def get_rows(self, sweep: Sweep) -> list[dict[str, Any]]:
        return SweepRowSerializer(
            self.context["rows"], many=True, context={"columns": sweep.columns}
        ).data  # type: ignore[return-value]  # many=True gives a ReturnList; the stubs say ReturnDict


class SweepResultsSerializer(serializers.Serializer):
    sweep = serializers.UUIDField()
    state = serializers.ChoiceField(choices=Sweep.State.choices)
    columns = serializers.ListField(child=serializers.CharField())
    count = serializers.IntegerField()
    rows = SweepRowSerializer(many=True)


def sweep_results_csv_header(columns: list[str]) -> list[str]:
    return ["row", *columns, "result", "result_state", "task_state", "exit_code", "detail"]


def sweep_results_csv_row(row: SweepRow) -> list[str]:
    return [
        str(row.index),
        *row.values,
        row.result,
        row.result_state,
        row.task.state,
        "" if row.task.exit_code is None else str(row.task.exit_code),
        row.result_detail,
    ]
