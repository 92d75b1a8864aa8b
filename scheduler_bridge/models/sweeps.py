"""Parameter sweeps: a team's script run once per row of a table, as array jobs."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models
from django.db.models import Q

from computeshare.models import BaseModel
from marketplace.models import Allocation
from organizations.models import Organization
from scheduler_bridge.models.jobs import Job, JobTask


class Sweep(BaseModel):
    """A parameter sweep: a team's script run once per row of a table, as one Slurm array job
    (the rows after a "retry failed" as one more). The table is kept here, row by row, with
    each row's current task and its gathered result; the jobs do the reserving, running and
    charging as any array does."""

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        ENDED = "ended", "Ended, results gathered"

    class ResultSource(models.TextChoices):
        FILE = "file", "A file the task writes in its folder"
        STDOUT = "stdout", "The last line of the task's stdout"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="sweeps")
    allocation = models.ForeignKey(Allocation, on_delete=models.PROTECT, related_name="sweeps")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="sweeps"
    )
    name = models.CharField(max_length=200)
    # The team's own script; each task's job runs it through the array's wrapper.
    script = models.TextField()
    columns = models.JSONField()
    concurrency = models.PositiveIntegerField()
    time_limit_minutes = models.PositiveIntegerField()
    cpus_per_task = models.PositiveIntegerField(default=1)
    result_source = models.CharField(max_length=8, choices=ResultSource.choices)
    # The result file's path in the row's folder (for `file`).
    result_file = models.CharField(max_length=1024, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.RUNNING)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"], name="sweep_org_created")]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["running", "ended"]), name="sweep_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(result_source="stdout") | ~Q(result_file=""),
                name="sweep_file_result_named",
            ),
            models.CheckConstraint(
                condition=Q(concurrency__gt=0), name="sweep_concurrency_positive"
            ),
        ]

    # A sweep runs until every row's task has ended and its result is gathered; a retry of its
    # failed rows makes it run again.
    TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        State.RUNNING: {State.ENDED},
        State.ENDED: {State.RUNNING},
    }

    def __str__(self) -> str:
        return f"sweep {self.name} ({self.uuid})"


class SweepJob(BaseModel):
    """One array job of a sweep: its first (attempt 1), then one per "retry failed"."""

    sweep = models.ForeignKey(Sweep, on_delete=models.PROTECT, related_name="sweep_jobs")
    job = models.OneToOneField(Job, on_delete=models.PROTECT, related_name="sweep_job")
    attempt = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["sweep", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "attempt"], name="sweep_job_attempt_unique")
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of {self.sweep_id}"


class SweepRow(BaseModel):
    """One row of a sweep's table: its values (in the sweep's column order), the task that ran
    it last, and the result gathered from that task once its job's files were fetched.
    A row is never dropped: a missing or failed result is marked as such."""

    class ResultState(models.TextChoices):
        PENDING = "pending", "Not gathered yet"
        OK = "ok", "Gathered"
        MISSING = "missing", "The task completed without the result"
        FAILED = "failed", "The task did not complete"

    # Gathered once from the row's task; a failed row becomes pending again when retried.
    RESULT_STATE_TRANSITIONS: ClassVar[dict[str, set[str]]] = {
        ResultState.PENDING: {ResultState.OK, ResultState.MISSING, ResultState.FAILED},
        ResultState.FAILED: {ResultState.PENDING},
    }

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="rows")
    index = models.PositiveIntegerField()
    values = models.JSONField()
    task = models.ForeignKey(JobTask, on_delete=models.PROTECT, related_name="sweep_rows")
    attempts = models.PositiveSmallIntegerField(default=1)
    result_state = models.CharField(
        max_length=8, choices=ResultState.choices, default=ResultState.PENDING
    )
    result = models.TextField(blank=True)
    result_detail = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["sweep", "index"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "index"], name="sweep_row_index_unique"),
            models.CheckConstraint(
                condition=Q(result_state__in=["pending", "ok", "missing", "failed"]),
                name="sweep_row_result_state_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"row {self.index} of {self.sweep_id}"
