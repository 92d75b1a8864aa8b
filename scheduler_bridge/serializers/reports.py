"""What a team's jobs used and cost over a month: the efficiency report, the usage rows (JSON
and CSV), and the month a report is asked for (docs/api.md: jobs). They translate; the
selectors compute."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rest_framework import serializers

from billing.serializers import Money
from computeshare.moments import month_start
from marketplace.serializers.fields import Units, units_text
from scheduler_bridge.models import Job, JobState
from scheduler_bridge.serializers.jobs import ORIGIN_HELP, partition_of


class EfficiencyJobSerializer(serializers.Serializer):
    job = serializers.UUIDField(source="job.uuid")
    name = serializers.CharField(source="job.name")
    idle_core_hours = Units()
    idle_cost = Money()
    unused_reserved_units = Units()
    unused_reserved_value = Money()


class EfficiencyReportSerializer(serializers.Serializer):
    organization = serializers.UUIDField(source="organization.uuid")
    month = serializers.SerializerMethodField(help_text="YYYY-MM (UTC).")
    currency = serializers.CharField()
    jobs_count = serializers.IntegerField(help_text="Jobs that ended in the month.")
    core_hours = Units(help_text="Allocated core-hours of their runs (CPU allocations).")
    used_core_hours = Units(help_text="Their CPU time (TotalCPU), in hours.")
    idle_core_hours = Units(help_text="Allocated but idle: core_hours - used_core_hours.")
    efficiency = serializers.DecimalField(max_digits=5, decimal_places=4, allow_null=True)
    cost = Money(help_text="What those runs were charged.")
    idle_cost = Money(help_text="The part of `cost` paid for idle cores.")
    reserved_units = Units(help_text="What the jobs reserved of their allocations.")
    unused_reserved_units = Units(
        help_text="Reserved but never used (time limits above the runs, cores never started)."
    )
    unused_reserved_value = Money(
        help_text="Those units at their allocations' prices: not charged, but held from other "
        "jobs while the jobs were queued and running."
    )
    worst_jobs = EfficiencyJobSerializer(many=True)

    def get_month(self, report: Any) -> str:
        return f"{report.month_start:%Y-%m}"


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


class MonthQuerySerializer(serializers.Serializer):
    month = serializers.RegexField(
        r"^[0-9]{4}-(0[1-9]|1[0-2])$",
        required=False,
        help_text="YYYY-MM (UTC); the current month when left out.",
        error_messages={"invalid": "A month as YYYY-MM, such as 2026-11."},
    )

    def validate_month(self, value: str) -> datetime:
        year, month = (int(part) for part in value.split("-"))
        try:
            return month_start(year, month)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None


def month_start_of(moment: datetime) -> datetime:
    """The first instant of the UTC month of `moment`."""
    moment = moment.astimezone(UTC)
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)
