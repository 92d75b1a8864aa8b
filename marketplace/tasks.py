"""Celery tasks of the marketplace: each takes ids, loads fresh rows and calls one idempotent
service."""

import datetime

from celery import shared_task

from hpc.errors import BridgeError
from marketplace import notices, selectors, services, webhook_events


@shared_task(time_limit=120, soft_time_limit=100)
def cluster_verification_run_task(verification_id: int) -> str | None:
    verification = services.cluster_verification_run(verification_id=verification_id)
    return verification.status if verification else None


@shared_task(time_limit=300, soft_time_limit=280)
def auction_clear_task(offer_id: int) -> bool:
    return services.auction_clear(offer_id=offer_id).cleared


@shared_task(time_limit=60, soft_time_limit=50)
def auctions_clear_due_task() -> int:
    """Periodic: clears every offer whose auction has closed, one task (and one transaction)
    per offer, so that one large auction does not hold up the others."""
    due = selectors.auctions_due()
    for offer_id in due:
        auction_clear_task.delay(offer_id)
    return len(due)


@shared_task(time_limit=300, soft_time_limit=280)
def allocations_close_due_task() -> int:
    """Periodic: closes the allocations whose window has ended and releases their holds."""
    return sum(services.allocation_close(allocation_id=pk) for pk in selectors.allocations_due())


@shared_task(time_limit=300, soft_time_limit=280)
def allocation_webhook_events_task() -> int:
    """Periodic: `allocation.starting` and `allocation.ending` webhook events that are due, and
    the members' notifications of the same."""
    notices.allocation_notices_due()
    return webhook_events.allocation_events_due()


@shared_task(time_limit=60, soft_time_limit=50)
def reservations_check_task() -> int:
    """Periodic: compares every cluster's reservations with its reserved allocations, one task
    per cluster (`reservations_check`)."""
    clusters = services.reserved_clusters()
    for cluster_id in clusters:
        reservations_check_cluster_task.delay(cluster_id)
    return len(clusters)


@shared_task(time_limit=300, soft_time_limit=280)
def reservations_check_cluster_task(cluster_id: int) -> int:
    report = services.reservations_check(cluster_id=cluster_id)
    return len(report.repaired) + len(report.removed)


@shared_task(bind=True, max_retries=8, time_limit=300, soft_time_limit=280)
def slurm_accounts_sync_task(self, cluster_id: int, account_ids: list[int] | None = None) -> int:  # type: ignore[no-untyped-def]
    try:
        return services.slurm_accounts_sync(cluster_id=cluster_id, account_ids=account_ids)
    except BridgeError as error:
        if error.is_transient:
            raise self.retry(exc=error, countdown=min(600, 15 * 2**self.request.retries)) from error
        raise


@shared_task(time_limit=60, soft_time_limit=50)
def slurm_accounts_reconcile_task() -> int:
    """Periodic: puts every managed cluster's account limits back to what the platform wants
    (a missed sync, a change by hand on the cluster)."""
    clusters = services.slurm_account_clusters_to_reconcile()
    for cluster_id in clusters:
        slurm_accounts_sync_task.delay(cluster_id)
    return len(clusters)


@shared_task(time_limit=60, soft_time_limit=50)
def tenant_leases_scrub_again_task() -> int:
    """Periodic: scrubs the leases left `ending` with no scrub under way (their scrub's message
    lost, or its retries given up): the account goes back to the pool only through a scrub."""
    lease_ids = selectors.tenant_leases_to_scrub_again(quiet_for=datetime.timedelta(minutes=10))
    for lease_id in lease_ids:
        tenant_lease_scrub_task.delay(lease_id)
    return len(lease_ids)


@shared_task(bind=True, max_retries=20, time_limit=300, soft_time_limit=280)
def tenant_lease_scrub_task(self, lease_id: int) -> str:  # type: ignore[no-untyped-def]
    """Scrubs the account of an ending lease; a cluster that cannot be reached is tried again
    (the account stays out of the pool meanwhile)."""
    try:
        return services.tenant_lease_scrub(lease_id=lease_id).status
    except BridgeError as error:
        if error.is_transient:
            raise self.retry(exc=error, countdown=min(600, 10 * 2**self.request.retries)) from error
        raise
