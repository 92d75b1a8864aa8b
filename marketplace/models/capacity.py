"""What the market records about a cluster's capacity and conduct, apart from `Partition` (which
verification rewrites): idle time sampled with the poll, kept as one row per partition and hour;
the times the cluster could not be reached; hardware that changed between verifications; and
runs that the owner's side ended. The track record and the offers suggested from idle time are
computed from these rows, never from anything the owner types in."""

from django.db import models
from django.db.models import F, Q

from computeshare.models import BaseModel


class PartitionIdleHour(models.Model):
    """The idle CPUs and GPUs of one partition over one hour (UTC), summed over the samples
    taken in that hour: the mean is `idle_* / samples`. One row per partition and hour keeps
    four weeks of a partition in 672 rows, however often the poll samples."""

    partition = models.ForeignKey(
        "marketplace.Partition", on_delete=models.CASCADE, related_name="idle_hours"
    )
    hour = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    idle_cpus = models.PositiveBigIntegerField(default=0)
    idle_gpus = models.PositiveBigIntegerField(default=0)
    # The fewest idle in any one sample of the hour: a partition idle on average may still have
    # been full for a moment.
    min_idle_cpus = models.PositiveIntegerField()
    min_idle_gpus = models.PositiveIntegerField()
    # What the partition had at the hour's last sample, to read the idle figures against.
    cpus = models.PositiveIntegerField()
    gpus = models.PositiveIntegerField()

    class Meta:
        ordering = ["partition", "hour"]
        constraints = [
            models.UniqueConstraint(fields=["partition", "hour"], name="partition_idle_one_hour"),
            models.CheckConstraint(condition=Q(samples__gt=0), name="partition_idle_sampled"),
        ]

    def __str__(self) -> str:
        return f"{self.partition_id} idle at {self.hour:%Y-%m-%dT%H}"


class ClusterOutage(BaseModel):
    """A time the platform could not reach the cluster over SSH (a poll or a verification
    failed to connect), from the first failure to the next success. At most one is open
    (`ended_at` null) per cluster."""

    cluster = models.ForeignKey(
        "marketplace.Cluster", on_delete=models.CASCADE, related_name="outages"
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # What noticed it first (`poll`, `verification`) and why.
    source = models.CharField(max_length=16)
    detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster"], condition=Q(ended_at__isnull=True), name="cluster_one_outage"
            ),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")),
                name="cluster_outage_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} unreachable from {self.started_at:%Y-%m-%dT%H:%M}"


class HardwareChange(BaseModel):
    """A partition whose verified nodes, CPUs or GPUs differ from the verification before: what
    was sold against the old figures may no longer be there."""

    cluster = models.ForeignKey(
        "marketplace.Cluster", on_delete=models.CASCADE, related_name="hardware_changes"
    )
    partition = models.CharField(max_length=64)
    # {"nodes", "cpus", "gpus"} before and after; `after` is empty for a partition gone.
    before = models.JSONField()
    after = models.JSONField()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["cluster", "created_at"], name="hardware_change_cluster")]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.partition} changed"


class OwnerSideRunEnd(BaseModel):
    """A run of a team's job that the owner's side ended (Slurm's `NODE_FAIL`, `PREEMPTED`,
    `BOOT_FAIL`), recorded by settlement with the run itself; keyed like the run, so each is
    counted once."""

    cluster = models.ForeignKey(
        "marketplace.Cluster", on_delete=models.CASCADE, related_name="owner_side_run_ends"
    )
    raw_job_id = models.CharField(max_length=32)
    submit_time = models.DateTimeField()
    # Slurm's own word for it (the job's state as sacct printed it, first word).
    scheduler_state = models.CharField(max_length=32)
    ended_at = models.DateTimeField()

    class Meta:
        ordering = ["-ended_at", "-id"]
        indexes = [models.Index(fields=["cluster", "ended_at"], name="owner_side_run_end_cluster")]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "raw_job_id", "submit_time"], name="owner_side_run_end_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.raw_job_id} on {self.cluster_id}: {self.scheduler_state}"
