"""Input and output shapes of the job endpoints (docs/api.md: jobs). They translate; the services
decide."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.serializers import Money
from computeshare.ids import IdPrefixField
from computeshare.numbers import WholeNumber
from computeshare.output_serializers import OutputSerializer
from hpc import sizes
from marketplace.serializers.fields import Units
from scheduler_bridge.job_templates import SLUG_MAX_LENGTH
from scheduler_bridge.models import Job, JobRun, JobState, JobTask, RunState
from scheduler_bridge.selectors import jobs as selectors
from scheduler_bridge.serializers.advice import SizingAdviceSerializer
from scheduler_bridge.serializers.directives import DirectivesSerializer, directives_data
from scheduler_bridge.serializers.sizes import optional_size, script_or_default_size


class JobCreateSerializer(serializers.Serializer):
    allocation = serializers.UUIDField()
    script = serializers.CharField(
        trim_whitespace=False,
        help_text="The batch script, starting with `#!`. Its `#SBATCH` lines are read as sbatch "
        "22.05 reads them: those that ask for resources become the job's request (each field "
        "below overrides its directive, as sbatch's command line does), those that would reach "
        "outside what the team bought are overridden with a warning (`directives.overridden`), "
        "and a line sbatch would refuse is refused (400, a stable code per rule, with "
        "`extra.line`, `extra.option` and sbatch's `extra.reason`). `#PBS` and `#BSUB` lines "
        "are refused (`sbatch_directive_not_allowed`).",
    )
    name = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        default=None,
        help_text="Optional: the script's --job-name, else `script_name`, else `sbatch`.",
    )
    script_name = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        default="",
        help_text="Optional: the script's file name, the job's name when neither `name` nor "
        "the script's --job-name gives one (as sbatch names a job after its script).",
    )
    time_limit_minutes = script_or_default_size(
        sizes.TIME_LIMIT_MINUTES, "refused (400 on this field): a job has a time limit"
    )
    cpus_per_task = script_or_default_size(sizes.CPUS_PER_TASK, "1")
    ntasks = script_or_default_size(sizes.NTASKS, "1 (one per node when the script gives --nodes)")
    nodes = script_or_default_size(sizes.NODES, "1")
    gpus = script_or_default_size(sizes.GPUS, "0", "--gpus (for the whole job)")
    mem_per_cpu = optional_size(
        sizes.MEM_PER_CPU,
        "Optional: memory per allocated CPU in MiB, passed to sbatch as "
        "--mem-per-cpu; it replaces the script's --mem, --mem-per-cpu or --mem-per-gpu. Left "
        "out (or null), the script's, else the partition's default.",
    )
    template = serializers.CharField(
        max_length=SLUG_MAX_LENGTH,
        required=False,
        allow_blank=True,
        default="",
        help_text="Optional: the id of the ready template the job starts from (GET "
        "/job-templates/). Jobs started from one template offer their measured sizes the "
        "next time the form starts from it.",
    )
    array = serializers.CharField(
        max_length=200,
        required=False,
        allow_null=True,
        default=None,
        help_text="Optional: the script's --array when left out.",
    )
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


class UsageSerializer(OutputSerializer):
    units = Units()
    elapsed_seconds = serializers.IntegerField()
    cpu_seconds = serializers.DecimalField(max_digits=20, decimal_places=3)


class EfficiencySerializer(OutputSerializer):
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


class JobTaskSerializer(OutputSerializer):
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


class JobRunSerializer(OutputSerializer):
    """One run of a task as Slurm's accounting recorded it, and what it was charged."""

    task = serializers.IntegerField(
        source="task.array_task_id", allow_null=True, help_text="The array task; null for a job."
    )
    scheduler_job_id = serializers.CharField(source="raw_job_id")
    state = serializers.CharField(
        help_text="How the run ended: a job's end, `requeued` or `resized` (the job did it, "
        "charged), or `preempted`/`node_fail` (the owner's side: not charged)."
    )
    scheduler_state = serializers.CharField(help_text="As Slurm's accounting wrote it.")
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    elapsed_seconds = serializers.IntegerField()
    allocated_cpus = serializers.IntegerField()
    allocated_gpus = serializers.IntegerField()
    units = Units()
    cost = Money()
    charged = serializers.SerializerMethodField(
        help_text="False for a run the owner's side ended (preempted, node failure)."
    )

    def get_charged(self, run: JobRun) -> bool:
        return not run.is_owner_caused


class JobEventSerializer(OutputSerializer):
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


class JobSerializer(OutputSerializer):
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
    mem_per_cpu = serializers.IntegerField(
        allow_null=True, help_text="MiB per allocated CPU asked for; null: the partition's default."
    )
    capacity = serializers.CharField(
        source="allocation.capacity",
        help_text="The allocation's kind: `preemptible` (the owner's own jobs may take the cores "
        "back: the job gets SIGTERM, then is requeued, and that run is not charged) or "
        "`reserved` (it runs on the team's block).",
    )
    qos = serializers.CharField(
        help_text="The Slurm QOS it runs under (the market's on preemptible capacity); empty "
        "for the account's default."
    )
    reservation = serializers.CharField(
        help_text="The Slurm reservation of its reserved block; empty on preemptible capacity."
    )
    template = serializers.CharField(help_text="The template it started from; empty for none.")
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
    max_rss_bytes = serializers.SerializerMethodField(
        help_text="The largest resident set any step of its runs reached (sacct MaxRSS), in "
        "bytes; null until a run with steps was settled."
    )

    def to_representation(self, job: Job) -> dict[str, Any]:
        data = super().to_representation(job)
        data["array"] = job.array or None
        return data

    def get_partition(self, job: Job) -> str:
        return partition_of(job)

    def get_cancel_requested(self, job: Job) -> bool:
        return job.cancel_requested_at is not None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_max_rss_bytes(self, job: Job) -> int | None:
        return job.max_rss_bytes

    @extend_schema_field(UsageSerializer)
    def get_usage(self, job: Job) -> dict[str, Any]:
        return UsageSerializer(_usage(job)).data

    def get_currency(self, job: Job) -> str:
        return str(settings.PLATFORM_CURRENCY)

    @extend_schema_field(EfficiencySerializer)
    def get_efficiency(self, job: Job) -> dict[str, Any]:
        return EfficiencySerializer({"cpu": job.efficiency}).data


class JobTemplateSerializer(serializers.Serializer):
    id = serializers.CharField(source="slug")
    title = serializers.CharField()
    technique = serializers.CharField()
    name = serializers.CharField()
    script = serializers.CharField()
    time_limit_minutes = serializers.IntegerField(source="size.time_limit_minutes")
    cpus_per_task = serializers.IntegerField(source="size.cpus_per_task")
    ntasks = serializers.IntegerField(source="size.ntasks")
    nodes = serializers.IntegerField(source="size.nodes")
    gpus = serializers.IntegerField(source="size.gpus")
    array = serializers.CharField(allow_null=True)
    environment = serializers.DictField(child=serializers.CharField())
    needs_gpus = serializers.BooleanField(
        help_text="Runs only on a partition with GPUs (elsewhere a job with its sizes is "
        "refused with 400 on `gpus`)."
    )

    def to_representation(self, instance: Any) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["array"] = instance.array or None
        return data


class JobInputFileSerializer(OutputSerializer):
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
    directives = serializers.SerializerMethodField(
        help_text="What became of the script's #SBATCH lines: honoured, overridden (and why), "
        "and where each value the job runs with came from."
    )
    sizing_advice = serializers.SerializerMethodField(
        help_text="Once the job ended: what it asked for, what it used (sacct's TotalCPU, "
        "MaxRSS of its steps, Elapsed against the limit) and what to ask for next time, with "
        "the effect in money and in reservation. Null before it ended or when it never ran."
    )
    runs = serializers.SerializerMethodField(
        help_text="Every ended run of its tasks as accounting recorded it, task by task: more "
        "than one per task when the job requeued or resized itself, or was preempted."
    )
    preemptions = serializers.SerializerMethodField(
        help_text="How many of its runs the owner's own jobs preempted (not charged; Slurm "
        "queued the job again each time)."
    )

    def to_representation(self, job: Job) -> dict[str, Any]:
        data = super().to_representation(job)
        if job.is_from_tenant:
            data["script"] = None
        return data

    @extend_schema_field(DirectivesSerializer)
    def get_directives(self, job: Job) -> dict[str, Any]:
        return directives_data(job.directives)

    def _runs(self, job: Job) -> list[JobRun]:
        # A job the cluster has not run yet has no runs: not read (the answer to a POST).
        if job.state in (JobState.QUEUED, JobState.SUBMITTED):
            return []
        # Read once for `runs` and `preemptions`.
        read: dict[int, list[JobRun]] = self.__dict__.setdefault("_runs_read", {})
        if job.pk not in read:
            read[job.pk] = list(selectors.job_run_list(job))
        return read[job.pk]

    @extend_schema_field(JobRunSerializer(many=True))
    def get_runs(self, job: Job) -> list[dict[str, Any]]:
        runs = self._runs(job)
        if not runs:  # a job not yet run (every answer to a POST): no serializer to build
            return []
        return JobRunSerializer(runs, many=True).data  # type: ignore[return-value]  # many=True gives a ReturnList; the stubs say ReturnDict

    def get_preemptions(self, job: Job) -> int:
        return sum(1 for run in self._runs(job) if run.state == RunState.PREEMPTED)

    @extend_schema_field(SizingAdviceSerializer(allow_null=True))
    def get_sizing_advice(self, job: Job) -> dict[str, Any] | None:
        advice = selectors.job_sizing_advice(job)
        return None if advice is None else SizingAdviceSerializer(advice).data

    @extend_schema_field(JobInputFileSerializer(many=True))
    def get_input_files(self, job: Job) -> list[dict[str, Any]]:
        files = selectors.job_input_file_list(job)
        if not files:
            return []
        return JobInputFileSerializer(files, many=True).data  # type: ignore[return-value]  # many=True gives a ReturnList; the stubs say ReturnDict

    @extend_schema_field(JobTaskSerializer(many=True))
    def get_tasks(self, job: Job) -> list[dict[str, Any]]:
        if not job.is_array:
            return []
        return JobTaskSerializer(job.tasks.all(), many=True).data  # type: ignore[return-value]  # many=True gives a ReturnList; the stubs say ReturnDict


class JobFilterSerializer(serializers.Serializer):
    state = serializers.ListField(
        child=serializers.ChoiceField(choices=JobState.choices), required=False
    )
    allocation = serializers.UUIDField(required=False)
    organization = serializers.UUIDField(required=False)
    id_prefix = IdPrefixField()


class JobOutputQuerySerializer(serializers.Serializer):
    stream = serializers.ChoiceField(choices=["stdout", "stderr"], default="stdout")
    tail_bytes = WholeNumber(min_value=1, default=65536)
    task = WholeNumber(min_value=0, required=False)

    def validate_tail_bytes(self, value: int) -> int:
        limit = settings.JOBS_OUTPUT_MAX_TAIL_BYTES
        if value > limit:
            raise serializers.ValidationError(f"At most {limit} bytes.")
        return value


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
    directives = serializers.SerializerMethodField(
        help_text="What became of the script's #SBATCH lines, as the job would show it."
    )

    @extend_schema_field(DirectivesSerializer)
    def get_directives(self, quote: Any) -> dict[str, Any]:
        return directives_data(quote.directives.as_json())
