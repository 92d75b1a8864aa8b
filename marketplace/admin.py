from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from marketplace import services
from marketplace.models import (
    Allocation,
    Bid,
    Cluster,
    Offer,
    Partition,
    SlurmAccount,
    TenantAccount,
    TenantLease,
)


class PartitionInline(admin.TabularInline):
    model = Partition
    extra = 0
    can_delete = False
    readonly_fields = ("name", "nodes", "cpus", "gpus", "max_time_minutes", "is_up")


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    """Operators read clusters and may suspend one; the owners' connection secrets stay out
    of the form (the private key is never shown)."""

    list_display = ("name", "organization", "backend", "status", "account_mode", "verified_at")
    list_filter = ("status", "backend", "account_mode")
    search_fields = ("name", "uuid", "organization__name", "ssh_host")
    exclude = ("ssh_private_key",)
    readonly_fields = [
        field.name for field in Cluster._meta.fields if field.name not in ("ssh_private_key", "id")
    ]
    inlines = [PartitionInline]
    actions = ["suspend", "reinstate"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Suspend the selected clusters (no new offers, hidden from sale)")
    def suspend(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        for cluster in queryset:
            services.cluster_suspend(cluster=cluster, reason=f"Suspended by {request.user}")
        self.message_user(request, f"Suspended {queryset.count()} clusters.")

    @admin.action(description="Lift the suspension (the owners must verify the cluster again)")
    def reinstate(self, request: HttpRequest, queryset: QuerySet[Cluster]) -> None:
        for cluster in queryset:
            services.cluster_reinstate(cluster=cluster)
        self.message_user(request, f"Reinstated {queryset.count()} clusters.")


class ReadOnlyAdmin(admin.ModelAdmin):
    """Market records change only through the services: the admin shows them."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Offer)
class OfferAdmin(ReadOnlyAdmin):
    list_display = (
        "uuid",
        "cluster",
        "partition",
        "resource",
        "quantity",
        "units_sold",
        "reserve_price",
        "status",
        "auction_closes_at",
        "clearing_price",
    )
    list_filter = ("status", "resource")
    search_fields = ("uuid", "cluster__name")
    list_select_related = ("cluster", "partition", "partition__cluster")


@admin.register(Bid)
class BidAdmin(ReadOnlyAdmin):
    list_display = ("uuid", "offer", "organization", "price", "quantity", "status", "quantity_won")
    list_filter = ("status",)
    search_fields = ("uuid", "organization__name", "offer__uuid")
    list_select_related = ("offer", "offer__partition", "offer__partition__cluster", "organization")


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    list_display = (
        "uuid",
        "organization",
        "cluster",
        "partition",
        "quantity",
        "used",
        "reserved",
        "unit_price",
        "window_start",
        "window_end",
        "closed_at",
    )
    search_fields = ("uuid", "organization__name", "cluster__name")
    list_select_related = ("organization", "cluster", "partition", "partition__cluster")


@admin.register(SlurmAccount)
class SlurmAccountAdmin(ReadOnlyAdmin):
    list_display = (
        "name",
        "cluster",
        "organization",
        "wanted_cpu_minutes",
        "applied_cpu_minutes",
        "synced_at",
        "last_error",
    )
    list_select_related = ("cluster", "organization")


@admin.register(TenantAccount)
class TenantAccountAdmin(ReadOnlyAdmin):
    """A cluster's pool: which accounts are free, leased or quarantined (and why)."""

    list_display = ("username", "cluster", "status", "last_scrubbed_at", "status_detail")
    list_filter = ("status",)
    search_fields = ("username", "cluster__name")
    list_select_related = ("cluster",)


@admin.register(TenantLease)
class TenantLeaseAdmin(ReadOnlyAdmin):
    list_display = ("account", "organization", "cluster", "status", "created_at", "ended_at")
    list_filter = ("status",)
    search_fields = ("account__username", "organization__name", "cluster__name")
    list_select_related = ("account", "organization", "cluster")
