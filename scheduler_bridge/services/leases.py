"""When a team's lease of a tenant account ends: once it has neither an open allocation nor an
unfinished job on the cluster. The market's services then scrub the account before any other
team gets it (`marketplace.services.tenant_lease_scrub`)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from marketplace.models import Allocation, TenantLease
from marketplace.services import tenant_lease_end_start
from scheduler_bridge.models import ACTIVE_STATES, Job, JobState


def _idle(leases: QuerySet[TenantLease]) -> QuerySet[TenantLease]:
    open_allocations = Allocation.objects.filter(
        cluster=OuterRef("cluster"),
        organization=OuterRef("organization"),
        closed_at__isnull=True,
    )
    unfinished_jobs = Job.objects.filter(
        lease=OuterRef("pk"), state__in=[JobState.QUEUED, *ACTIVE_STATES]
    )
    return leases.filter(status=TenantLease.Status.ACTIVE).filter(
        ~Exists(open_allocations), ~Exists(unfinished_jobs)
    )


def tenant_leases_to_end() -> list[int]:
    """The active leases whose team has neither an open allocation (one whose window has not
    been closed) nor an unfinished job on the lease's cluster."""
    return list(_idle(TenantLease.objects.all()).order_by("pk").values_list("pk", flat=True))


@transaction.atomic
def tenant_lease_end_if_idle(*, lease_id: int) -> bool:
    """Ends the lease if, under its lock, it is still idle (a purchase of the team in between
    finds the lease active and keeps it). The scrub follows after the commit."""
    lease = TenantLease.objects.select_for_update().filter(pk=lease_id).first()
    if lease is None or not _idle(TenantLease.objects.filter(pk=lease_id)).exists():
        return False
    return tenant_lease_end_start(lease_id=lease.pk)
