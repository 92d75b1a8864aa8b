"""When a team's lease of a tenant account ends: once it has neither an open allocation nor an
unfinished job on the cluster. The market's services then scrub the account before any other
team gets it (`marketplace.services.tenant_lease_scrub`)."""

from __future__ import annotations

from django.db import transaction

from marketplace.models import TenantLease
from marketplace.services import tenant_lease_end_start
from scheduler_bridge.selectors.jobs import tenant_leases_idle


@transaction.atomic
def tenant_lease_end_if_idle(*, lease_id: int) -> bool:
    """Ends the lease if, under its lock, it is still idle (a purchase of the team in between
    finds the lease active and keeps it). The scrub follows after the commit."""
    lease = TenantLease.objects.select_for_update().filter(pk=lease_id).first()
    if lease is None or not tenant_leases_idle(TenantLease.objects.filter(pk=lease_id)).exists():
        return False
    return tenant_lease_end_start(lease_id=lease.pk)
