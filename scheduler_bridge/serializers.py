"""Input and output shapes of the job endpoints (API.md, Jobs). They translate; the services
decide."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.serializers import Money
from computeshare.numbers import WholeNumber
from marketplace.serializers_market import Units, units_text
from scheduler_bridge.models import Job, JobFile, JobState, JobTask


class JobCreateSerializer(serializers.Serializer):
    allocation = serializers.UUIDField()
    name = serializers.CharField(max_length=200)
    script = serializers.CharField(trim_whitespace=False)
    time_limit_minutes = WholeNumber(min_value=1, max_value=525600)
    cpus_per_task = WholeNumber(min_value=1, max_value=100000, default=1)
    ntasks = WholeNumber(min_value=1, max_value=100000, default=1)
    nodes = WholeNumber(min_value=1, max_value=10000, default=1)
    gpus = WholeNumber(min_value=0, max_value=10000, default=0)
    array = serializers.CharField(max_length=200, required=False, allow_null=True)
    environment = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
    )
    secret_environment = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=dict,
        write_only=True,
        help_text="Write-only: variables the job gets like `environment` (same name rules, no "
        "name in both), kept encrypted and never shown again; the job shows their names in "
        "`secret_environment_names`.",
    )


class UsageSerializer(serializers.Serializer):
    units = Units()
    elapsed_seconds = serializers.IntegerField()
    cpu_seconds = serializers.DecimalField(max_digits=20, decimal_places=3)


class EfficiencySerializer(serializers.Serializer):
    cpu = serializers.DecimalField(
        max_digits=5,
        decimal_places=4,
        allow_null=True,
        help_text="Total CPU time over allocated cores x elapsed, 0 to 1, once ended.",
    )


def _usage(row: Job | JobTask) -> dict[str, Any]:
    return {
        "units": row.units,
        "elapsed_seconds": row.elapsed_seconds,
        "cpu_seconds": row.cpu_seconds,
    }


class JobTaskSerializer(serializers.Serializer):
    index = serializers.IntegerField(source="array_task_id")
    scheduler_job_id = serializers.CharField()
    state = serializers.ChoiceField(choices=JobState.choices)
    state_reason = serializers.CharField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    reserved_units = Units()
    usage = serializers.SerializerMethodField()
    cost = Money()

    @extend_schema_field(UsageSerializer)
    def get_usage(self, task: JobTask) -> dict[str, Any]:
        return UsageSerializer(_usage(task)).data


class JobEventSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=JobState.choices)
    reason = serializers.CharField()
    at = serializers.DateTimeField()


def partition_of(job: Job) -> str:
    """Where the job runs, as Slurm says; the allocation's partition for a job recorded before
    jobs kept it (the platform submits its jobs there)."""
    return job.partition_name or job.allocation.partition.name


ORIGIN_HELP = (
    "`platform`: submitted through the platform. `tenant`: submitted on the cluster by one of "
    "the team's own jobs (sbatch from inside a job), found by the platform under the team's "
    "tenant account and charged to the team's allocation like any other job; its Slurm id is "
    "`scheduler_job_id`."
)


class JobSerializer(serializers.Serializer):
    """A job as listed; the detail adds its tasks and history."""

    id = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    origin = serializers.ChoiceField(choices=Job.Origin.choices, help_text=ORIGIN_HELP)
    allocation = serializers.UUIDField(source="allocation.uuid")
    organization = serializers.UUIDField(source="organization.uuid")
    cluster = serializers.UUIDField(source="cluster.uuid")
    cluster_name = serializers.CharField(source="cluster.name")
    partition = serializers.SerializerMethodField(help_text="The partition the job runs in.")
    state = serializers.ChoiceField(choices=JobState.choices)
    state_reason = serializers.CharField()
    scheduler_job_id = serializers.CharField()
    array = serializers.CharField(allow_null=True)
    task_count = serializers.IntegerField()
    time_limit_minutes = serializers.IntegerField()
    cpus_per_task = serializers.IntegerField()
    ntasks = serializers.IntegerField()
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    submitted_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    cancel_requested = serializers.SerializerMethodField()
    reserved_units = Units()
    estimated_max_cost = Money()
    usage = serializers.SerializerMethodField()
    cost = Money()
    currency = serializers.SerializerMethodField()
    efficiency = serializers.SerializerMethodField()

    def to_representation(self, job: Job) -> dict[str, Any]:
        data = super().to_representation(job)
        data["array"] = job.array or None
        return data

    def get_partition(self, job: Job) -> str:
        return partition_of(job)

    def get_cancel_requested(self, job: Job) -> bool:
        return job.cancel_requested_at is not None

    @extend_schema_field(UsageSerializer)
    def get_usage(self, job: Job) -> dict[str, Any]:
        return UsageSerializer(_usage(job)).data

    def get_currency(self, job: Job) -> str:
        return str(settings.PLATFORM_CURRENCY)

    @extend_schema_field(EfficiencySerializer)
    def get_efficiency(self, job: Job) -> dict[str, Any]:
        return EfficiencySerializer({"cpu": job.efficiency}).data


class JobInputFileSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="Its path in the job's folder.")
    size = serializers.IntegerField(help_text="Bytes.")


class JobResultFileSerializer(JobInputFileSerializer):
    modified_at = serializers.DateTimeField(allow_null=True)


class JobDetailSerializer(JobSerializer):
    input_files = serializers.SerializerMethodField(
        help_text="The files the job was given, staged into its folder before it started."
    )
    results_state = serializers.ChoiceField(
        choices=Job.ResultsState.choices,
        help_text="Where its result files are: `waiting` until it ends, `collecting`, `ready` "
        "(GET /jobs/{id}/files/), `failed`, `expired`, or `not_kept` for a job of `origin` "
        "`tenant`.",
    )
    tasks = serializers.SerializerMethodField(help_text="Per array task; empty for a plain job.")
    history = JobEventSerializer(source="events", many=True)
    environment = serializers.DictField(child=serializers.CharField())
    secret_environment_names = serializers.ListField(
        child=serializers.CharField(),
        help_text="The names of the job's secret variables; their values are never shown.",
    )
    script = serializers.CharField(
        allow_null=True,
        help_text="Null for a job of `origin` `tenant`: the platform never had its script.",
    )

    def to_representation(self, job: Job) -> dict[str, Any]:
        data = super().to_representation(job)
        if job.is_from_tenant:
            data["script"] = None
        return data

    @extend_schema_field(JobInputFileSerializer(many=True))
    def get_input_files(self, job: Job) -> list[dict[str, Any]]:
        files = job.files.filter(kind=JobFile.Kind.INPUT).order_by("name")
        return JobInputFileSerializer(files, many=True).data

    @extend_schema_field(JobTaskSerializer(many=True))
    def get_tasks(self, job: Job) -> list[dict[str, Any]]:
        if not job.is_array:
            return []
        return JobTaskSerializer(job.tasks.all(), many=True).data


class JobFilterSerializer(serializers.Serializer):
    state = serializers.ListField(
        child=serializers.ChoiceField(choices=JobState.choices), required=False
    )
    allocation = serializers.UUIDField(required=False)
    organization = serializers.UUIDField(required=False)


class JobOutputQuerySerializer(serializers.Serializer):
    stream = serializers.ChoiceField(choices=["stdout", "stderr"], default="stdout")
    tail_bytes = WholeNumber(min_value=1, default=65536)
    task = WholeNumber(min_value=0, required=False)

    def validate_tail_bytes(self, value: int) -> int:
        limit = settings.JOBS_OUTPUT_MAX_TAIL_BYTES
        if value > limit:
            raise serializers.ValidationError(f"At most {limit} bytes.")
        return value


class UsageRowSerializer(serializers.Serializer):
    job = serializers.UUIDField(source="uuid")
    name = serializers.CharField()
    cluster = serializers.CharField(source="cluster.name")
    partition = serializers.SerializerMethodField()
    state = serializers.ChoiceField(choices=JobState.choices)
    units = Units()
    cost = Money()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    origin = serializers.ChoiceField(choices=Job.Origin.choices, help_text=ORIGIN_HELP)
    scheduler_job_id = serializers.CharField(help_text="The job's id on the cluster (Slurm's).")

    def get_partition(self, job: Job) -> str:
        return partition_of(job)


# The columns of the first version first, so that a script reading them by position still can.
USAGE_CSV_COLUMNS = [
    "job",
    "name",
    "cluster",
    "partition",
    "state",
    "units",
    "cost",
    "started_at",
    "ended_at",
    "origin",
    "scheduler_job_id",
]


def usage_csv_row(job: Job) -> list[str]:
    return [
        str(job.uuid),
        job.name,
        job.cluster.name,
        partition_of(job),
        job.state,
        units_text(job.units) or "0",
        f"{job.cost:.6f}",
        job.started_at.isoformat() if job.started_at else "",
        job.ended_at.isoformat() if job.ended_at else "",
        job.origin,
        job.scheduler_job_id,
    ]


class JobQuoteSerializer(serializers.Serializer):
    reserved_units = Units(help_text="What the job would reserve of the allocation.")
    estimated_max_cost = Money(help_text="The most it can cost: its units at the unit price.")
    currency = serializers.CharField()
    allocation_remaining_after = Units(
        help_text="The allocation's unreserved units once this job reserved its own."
    )
    budget_remaining_after = Money(
        allow_null=True,
        help_text="What is left of this month's budget after the job; null without a budget. "
        "A job draws on its allocation's hold, which its purchase already counted against "
        "the budget: the job itself commits nothing new.",
    )
    wallet_balance = Money(help_text="The wallet's available balance.")
    expected_start = serializers.DateTimeField(
        allow_null=True, help_text="When Slurm expects the job would start if submitted now."
    )
    expected_start_source = serializers.ChoiceField(choices=["slurm", "unavailable"])
    expected_start_detail = serializers.CharField(
        help_text="Why there is no estimate, when there is none; empty otherwise."
    )
