"""Jobs in the admin, read-only: their state and money change only through the services (the
poll and settlement), never by hand. Operators read them to answer a team's question."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from scheduler_bridge.models import ClusterPoll, Job, JobEvent, JobRun, JobTask


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobTaskInline(admin.TabularInline):
    model = JobTask
    extra = 0
    can_delete = False
    fields = ("array_task_id", "scheduler_job_id", "state", "state_reason", "units", "cost")
    readonly_fields = fields
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ("at", "state", "reason")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "uuid",
        "organization",
        "cluster",
        "state",
        "units",
        "cost",
        "created_at",
    )
    list_filter = ("state", "cluster")
    search_fields = ("uuid", "name", "scheduler_job_id", "organization__name")
    list_select_related = ("organization", "cluster")
    inlines = [JobTaskInline, JobEventInline]
    # The secret variables' values are never shown, to operators neither: only their names.
    exclude = ("secret_environment",)
    readonly_fields = ("secret_environment_names",)

    @admin.display(description="Secret variables (values hidden)")
    def secret_environment_names(self, job: Job) -> str:
        return ", ".join(job.secret_environment_names) or "-"


@admin.register(JobTask)
class JobTaskAdmin(ReadOnlyAdmin):
    list_display = ("__str__", "scheduler_job_id", "state", "units", "cost", "is_released")
    search_fields = ("job__uuid", "scheduler_job_id")
    list_select_related = ("job",)


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = (
        "raw_job_id",
        "submit_time",
        "cluster",
        "state",
        "metered_units",
        "units",
        "cost",
        "source",
    )
    list_filter = ("state", "source", "is_owner_caused")
    search_fields = ("raw_job_id", "task__job__uuid")
    list_select_related = ("cluster",)


@admin.register(ClusterPoll)
class ClusterPollAdmin(ReadOnlyAdmin):
    list_display = (
        "cluster",
        "last_polled_at",
        "consecutive_failures",
        "last_error",
        "last_notice",
        "lease_until",
    )
    list_select_related = ("cluster",)
