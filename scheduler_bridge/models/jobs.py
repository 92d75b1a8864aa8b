"""A job (one submission), its tasks (one for a plain job, one per index for an array), the
runs accounting recorded for each task (a requeued task runs more than once, and each run is
charged once), its files, and its state history."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from billing.models import ZERO, money_field
from computeshare.fields import EncryptedJSONField
from computeshare.models import BaseModel
from computeshare.numbers import MICRO_UNIT
from hpc.sizes import JobSize
from hpc.types import JobOptions, platform_job_name
from marketplace.models import Allocation, Cluster, TenantLease, units_field
from organizations.models import Organization
from scheduler_bridge.job_reasons import reason_text
from scheduler_bridge.models.states import (
    ENDED_STATES,
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    RunState,
)

SECONDS_PER_HOUR = Decimal(3600)


def money_of(units: Decimal, unit_price: Decimal) -> Decimal:
    """The price of `units`, to the ledger's micro-unit (half up)."""
    return (units * unit_price).quantize(MICRO_UNIT, rounding=ROUND_HALF_UP)


def metered_units(count: int, elapsed_seconds: int) -> Decimal:
    """What a run of `count` cores (or GPUs) for `elapsed_seconds` uses, in core-hours (or
    GPU-hours) to the micro-unit: what settlement charges before the cap of the reservation."""
    return (Decimal(count) * Decimal(elapsed_seconds) / SECONDS_PER_HOUR).quantize(
        MICRO_UNIT, rounding=ROUND_HALF_UP
    )


# A collection of a job's results that a worker took and never finished (it crashed) is taken
# again after this.
COLLECT_CLAIM_SECONDS = 900


def results_backoff(attempts: int) -> timedelta:
    """How long after its last try a failed collection waits: 10 s, doubling, at most 30 min."""
    return timedelta(seconds=min(1800, 10 * 2 ** max(0, attempts - 1)))


def _state_check(name: str) -> models.CheckConstraint:
    return models.CheckConstraint(condition=Q(state__in=JobState.values), name=name)


class Progress(BaseModel):
    """What a job and each of its tasks have in common: a state on the cluster, times, the
    units reserved and what the runs used and cost, summed as they are settled."""

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED)
    state_reason = models.CharField(max_length=500, blank=True)
    scheduler_job_id = models.CharField(max_length=32, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    reserved_units = units_field()
    units = units_field(default=ZERO)
    cost = money_field(default=ZERO)
    elapsed_seconds = models.PositiveBigIntegerField(default=0)
    cpu_seconds = models.DecimalField(max_digits=20, decimal_places=3, default=ZERO)
    # Core-seconds (or GPU-seconds) allocated over the runs: the denominator of efficiency
    # (a run shorter than accounting's whole second counts one: `RunRecord.counted_seconds`).
    allocated_core_seconds = models.PositiveBigIntegerField(default=0)
    # The largest resident set (MaxRSS) any step of the runs reached, in bytes; None until a
    # run with steps was settled.
    max_rss_bytes = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def is_ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def state_reason_text(self) -> str:
        """The reason in words, never Slurm's code: "Exited with code 3"."""
        return reason_text(self.state_reason, self.exit_code)

    @property
    def efficiency(self) -> Decimal | None:
        """CPU time over cores x elapsed, 0 to 1, once ended."""
        if not self.is_ended or not self.allocated_core_seconds:
            return None
        ratio = self.cpu_seconds / Decimal(self.allocated_core_seconds)
        return min(Decimal(1), ratio.quantize(Decimal("0.0001")))


class Job(Progress):
    """One submission against an allocation. At submission it reserves
    `cores (or GPUs) x time limit x tasks` units of the allocation, the most it can use; as its
    tasks end they are charged what they used and the rest of the reservation is released.

    A job the team's own jobs submitted on the cluster (`origin` tenant) is found by the poll
    among its tenant's runs and recorded here too: it reserves what it can use when found, and
    is charged like any other."""

    class Origin(models.TextChoices):
        PLATFORM = "platform", "Submitted through the platform"
        TENANT = "tenant", "Submitted on the cluster by the team's jobs"

    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="jobs")
    # Copied from the allocation: jobs are listed per organization and polled per cluster.
    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="jobs")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="jobs")
    # The tenant account the job runs as (None on the local backend of the demo).
    lease = models.ForeignKey(
        TenantLease, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.PLATFORM)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="jobs",
    )
    # Where the job runs, as Slurm says: the allocation's partition for the platform's jobs.
    partition_name = models.CharField(max_length=64, blank=True)
    name = models.CharField(max_length=200)
    script = models.TextField()
    time_limit_minutes = models.PositiveIntegerField()
    nodes = models.PositiveIntegerField(default=1)
    ntasks = models.PositiveIntegerField(default=1)
    cpus_per_task = models.PositiveIntegerField(default=1)
    gpus = models.PositiveIntegerField(default=0)
    # Memory per allocated CPU in MiB (sbatch --mem-per-cpu); None: the partition's default.
    mem_per_cpu = models.PositiveIntegerField(null=True, blank=True)
    # The ready template the job was started from (`job_templates`), "" for none: the form
    # started from that template again offers the sizes this job's use suggests.
    template = models.CharField(max_length=32, blank=True)
    array = models.CharField(max_length=200, blank=True)
    task_count = models.PositiveIntegerField(default=1)
    environment = models.JSONField(default=dict, blank=True)
    # Variables the job gets like `environment` but nobody is shown again: encrypted at rest
    # (FIELD_ENCRYPTION_KEY), only their names are shown (API, pages, admin).
    secret_environment = EncryptedJSONField(default=dict, blank=True)
    # The Slurm account the job runs under (the team's own on a managed cluster).
    account = models.CharField(max_length=64, blank=True)
    # The QOS it runs under on preemptible capacity (the market's, which the owner's own QOS
    # preempts; "" for the association's default, the team's own QOS in managed mode), and
    # the reservation that holds a reserved allocation's block ("" on preemptible capacity).
    qos = models.CharField(max_length=64, blank=True)
    reservation = models.CharField(max_length=64, blank=True)
    # What its script's #SBATCH lines asked for and what became of each: the
    # `job_requests.DirectiveReport` (honoured; overridden, and why; where each value the job
    # runs with came from).
    directives = models.JSONField(default=dict, blank=True)
    # The sbatch options it runs with beyond its sizes (`hpc.types.JobOptions`, its
    # `dependency` as the team's jobs it names until its submission writes their Slurm ids),
    # `requeue`, and for an exclusive job the CPUs and GPUs of a node (`node_cpus`,
    # `node_gpus`) it reserved whole.
    options = models.JSONField(default=dict, blank=True)

    submitted_at = models.DateTimeField(null=True, blank=True)

    # Submission bookkeeping: a worker claims the job until `submit_lease_until`; a job with
    # attempts behind it is looked up by name before it is submitted again.
    submit_attempts = models.PositiveSmallIntegerField(default=0)
    submit_lease_until = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Why the platform cancelled the job itself (its allocation's window closed, it used up its
    # reservation): what its end says, rather than Slurm's last reason.
    cancel_reason = models.CharField(max_length=200, blank=True)
    # When the poll last saw the job in the queue or in accounting: a job missing from both
    # for long becomes `undetermined`.
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class ResultsState(models.TextChoices):
        WAITING = "waiting", "Waiting for the job to end"
        COLLECTING = "collecting", "Being fetched from the cluster"
        READY = "ready", "Ready"
        FAILED = "failed", "Could not be fetched"
        EXPIRED = "expired", "Removed after the retention period"
        NOT_KEPT = "not_kept", "Not kept (a job the team's jobs submitted)"

    # The files the job wrote in its folder, fetched into platform storage once it ended.
    results_state = models.CharField(
        max_length=16, choices=ResultsState.choices, default=ResultsState.WAITING
    )
    results_truncated = models.BooleanField(default=False)
    results_detail = models.CharField(max_length=500, blank=True)
    # What was in the folder but not fetched, each {"name", "reason"} (a link, a FIFO, a name
    # that cannot be served: `services.files`), at most RESULTS_SKIPPED_SHOWN of them.
    results_skipped = models.JSONField(default=list, blank=True)
    # When a worker last took the collection, and how many times: a crashed worker's is taken
    # again after a while, a failed one is tried again with backoff, then marked `failed`.
    results_claimed_at = models.DateTimeField(null=True, blank=True)
    results_attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["organization", "-created_at"], name="job_org_created"),
            models.Index(fields=["allocation", "state"], name="job_allocation_state"),
            models.Index(
                fields=["cluster", "state"],
                name="job_cluster_unfinished",
                condition=Q(
                    state__in=[
                        JobState.QUEUED,
                        JobState.SUBMITTED,
                        JobState.PENDING,
                        JobState.RUNNING,
                        JobState.COMPLETING,
                        JobState.UNDETERMINED,
                    ]
                ),
            ),
        ]
        constraints = [
            _state_check("job_state_valid"),
            models.CheckConstraint(
                condition=Q(
                    results_state__in=[
                        "waiting",
                        "collecting",
                        "ready",
                        "failed",
                        "expired",
                        "not_kept",
                    ]
                ),
                name="job_results_state_valid",
            ),
            models.CheckConstraint(
                condition=Q(time_limit_minutes__gt=0, nodes__gt=0, ntasks__gt=0)
                & Q(cpus_per_task__gt=0, task_count__gt=0),
                name="job_sizes_positive",
            ),
            models.CheckConstraint(
                condition=Q(reserved_units__gte=0)
                & Q(units__gte=0, units__lte=F("reserved_units")),
                name="job_units_within_reservation",
            ),
            models.CheckConstraint(
                condition=Q(origin="tenant") | Q(submitted_by__isnull=False),
                name="job_platform_jobs_have_a_submitter",
            ),
            models.UniqueConstraint(
                fields=["cluster", "scheduler_job_id"],
                condition=Q(origin="tenant"),
                name="job_tenant_job_found_once",
            ),
        ]

    TRANSITIONS: ClassVar[dict[str, set[str]]] = JOB_TRANSITIONS
    # The collection of the job's files (`services/files.py`): taken by a worker, taken again
    # when its worker died (collecting -> collecting), put back to wait after a transient
    # failure; a job that never ran is `ready` with nothing, a tenant's job keeps nothing.
    RESULTS_STATE_TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        ResultsState.WAITING: {
            ResultsState.COLLECTING,
            ResultsState.READY,
            ResultsState.FAILED,
            ResultsState.NOT_KEPT,
        },
        ResultsState.COLLECTING: {
            ResultsState.COLLECTING,
            ResultsState.WAITING,
            ResultsState.READY,
            ResultsState.FAILED,
        },
        ResultsState.READY: {ResultsState.EXPIRED},
        ResultsState.FAILED: set(),
        ResultsState.EXPIRED: set(),
        ResultsState.NOT_KEPT: set(),
    }

    def __str__(self) -> str:
        return f"{self.name} ({self.uuid})"

    @property
    def scheduler_name(self) -> str:
        """The Slurm job name of the platform's jobs: carries the job's UUID, so the job can be
        found again by name."""
        return platform_job_name(self.uuid)

    @property
    def is_from_tenant(self) -> bool:
        return self.origin == self.Origin.TENANT

    @property
    def directory(self) -> str:
        """The job's own directory on the cluster, relative to the home of the tenant account it
        runs as (on the local backend, to the job files' root)."""
        return f"computeshare-jobs/{self.uuid}"

    @property
    def is_array(self) -> bool:
        return bool(self.array)

    @property
    def job_options(self) -> JobOptions:
        """Its sbatch options beyond its sizes (the dependency aside: see `options`)."""
        stored = self.options or {}
        names = {name for name in JobOptions.__dataclass_fields__ if name != "dependency"}
        return JobOptions(**{name: value for name, value in stored.items() if name in names})

    @property
    def size(self) -> JobSize:
        """Its size as it was priced (`job_units`)."""
        options = self.options or {}
        return JobSize.of(
            self,
            cpus_per_gpu=options.get("cpus_per_gpu"),
            exclusive=bool(options.get("exclusive")),
            node_cpus=int(options.get("node_cpus") or 0),
            node_gpus=int(options.get("node_gpus") or 0),
        )

    @property
    def secret_environment_names(self) -> list[str]:
        return sorted(self.secret_environment or {})

    def secret_values_forget(self) -> None:
        """Keeps the secret variables' names only: called once the job has left the queue (on
        the cluster Slurm keeps its environment; a job that never got there needs none)."""
        self.secret_environment = dict.fromkeys(self.secret_environment or {}, "")

    def are_results_due(self, now: datetime) -> bool:
        """Whether the job's results may be collected now: waiting and past the backoff of its
        last failed try, or taken by a collector that has not finished in
        COLLECT_CLAIM_SECONDS (it crashed)."""
        claimed = self.results_claimed_at
        if self.results_state == self.ResultsState.WAITING:
            return claimed is None or claimed + results_backoff(self.results_attempts) <= now
        if self.results_state == self.ResultsState.COLLECTING:
            return claimed is None or claimed + timedelta(seconds=COLLECT_CLAIM_SECONDS) <= now
        return False

    @property
    def estimated_max_cost(self) -> Decimal:
        """The most the job can cost: what it reserved at the allocation's unit price."""
        return money_of(self.reserved_units, self.allocation.unit_price)


# A job's files are final in these states: fetched, or known never to come.
RESULTS_FINAL = frozenset(
    {
        Job.ResultsState.READY,
        Job.ResultsState.FAILED,
        Job.ResultsState.EXPIRED,
        Job.ResultsState.NOT_KEPT,
    }
)


class JobFile(BaseModel):
    """One file of a job: an input it was given (staged into its folder on the cluster before
    sbatch) or a result it wrote there (fetched after it ended). `stored` is the file's name
    in platform storage, empty once removed (an input after staging, a result after the
    retention period); name and size stay, for the record."""

    class Kind(models.TextChoices):
        INPUT = "input", "Input"
        RESULT = "result", "Result"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="files")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    # The path in the job's folder, `/`-separated.
    name = models.CharField(max_length=1024)
    size = models.PositiveBigIntegerField()
    modified_at = models.DateTimeField(null=True, blank=True)
    stored = models.CharField(max_length=1024, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["job", "kind", "name"], name="job_file_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} of {self.job_id}"


class JobTask(Progress):
    """What the scheduler runs: the job itself, or one index of an array (`array_task_id` is
    None for a plain job). Each task reserves its share of the job's units and settles alone."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="tasks")
    array_task_id = models.PositiveIntegerField(null=True, blank=True)
    # Set once what the task did not use has gone back to the allocation.
    is_released = models.BooleanField(default=False)
    # When the run the poll last saw running began: a later start means the job was requeued
    # (or resized), and the runs before are settled while it goes on.
    run_started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "array_task_id"]
        constraints = [
            _state_check("job_task_state_valid"),
            models.UniqueConstraint(fields=["job", "array_task_id"], name="job_task_unique_index"),
            models.UniqueConstraint(
                fields=["job"],
                condition=Q(array_task_id__isnull=True),
                name="job_task_one_plain_task",
            ),
            models.CheckConstraint(
                condition=Q(units__gte=0, units__lte=F("reserved_units")),
                name="job_task_units_within_reservation",
            ),
        ]

    TRANSITIONS: ClassVar[dict[str, set[str]]] = TASK_TRANSITIONS

    def __str__(self) -> str:
        if self.array_task_id is None:
            return str(self.job)
        return f"{self.job} task {self.array_task_id}"


class JobRun(BaseModel):
    """One run of a task as Slurm's accounting recorded it, and what it was charged. The
    unique key (cluster, raw job id, submit time) is what makes each run charged exactly once,
    however often the poll, a retry or the reconciliation sees it."""

    class Source(models.TextChoices):
        POLL = "poll", "Poll"
        RECONCILIATION = "reconciliation", "Nightly reconciliation"

    task = models.ForeignKey(JobTask, on_delete=models.PROTECT, related_name="runs")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="job_runs")
    raw_job_id = models.CharField(max_length=32)
    submit_time = models.DateTimeField()
    state = models.CharField(max_length=16, choices=RunState.choices)
    scheduler_state = models.CharField(max_length=64)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    elapsed_seconds = models.PositiveBigIntegerField()
    allocated_cpus = models.PositiveIntegerField()
    allocated_gpus = models.PositiveIntegerField()
    cpu_seconds = models.DecimalField(max_digits=20, decimal_places=3)
    # The largest MaxRSS of the run's steps, in bytes (None when accounting had none).
    max_rss_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    # What accounting says was used, and what was charged: capped at what the task reserved,
    # zero when the owner's side ended it.
    metered_units = units_field()
    units = units_field()
    cost = money_field()
    is_owner_caused = models.BooleanField(default=False)
    charge = models.OneToOneField(
        "billing.Transaction",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="job_run",
    )
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.POLL)

    class Meta:
        ordering = ["task", "submit_time"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=RunState.values), name="job_run_state_valid"
            ),
            models.UniqueConstraint(
                fields=["cluster", "raw_job_id", "submit_time"], name="job_run_charged_once"
            ),
            models.CheckConstraint(
                condition=Q(units__gte=0, units__lte=F("metered_units")),
                name="job_run_units_within_metered",
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.raw_job_id}@{self.submit_time:%Y-%m-%dT%H:%M:%S} of {self.task}"


class JobEvent(models.Model):
    """The job's state history, for its page."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    state = models.CharField(max_length=16, choices=JobState.choices)
    reason = models.CharField(max_length=500, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"], name="job_event_job_at")]

    def __str__(self) -> str:
        return f"{self.job_id} {self.state} at {self.at:%Y-%m-%dT%H:%M:%S}"
