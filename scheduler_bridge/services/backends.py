"""Which scheduler a cluster's jobs go to (the market's `backend_for`, shared with reserved
capacity) and who a job runs as there."""

from __future__ import annotations

from hpc.types import Tenant
from marketplace.services.backends import (
    backend_failed,
    backend_for,
    local_backend,
    local_sandbox,
)
from scheduler_bridge.models import Job

__all__ = ["backend_failed", "backend_for", "job_tenant", "local_backend", "local_sandbox"]


def job_tenant(job: Job) -> Tenant | None:
    """Who the job runs as on its cluster (None on the local backend): its lease's account,
    and the account's home."""
    if job.lease is None:
        return None
    return Tenant(user=job.lease.account.username, home=job.lease.account.home)
