"""A job's quote: what a submission would reserve and cost, what it would leave of the
allocation and the budget, and when Slurm expects it would start, without submitting or
holding anything (POST /jobs/quote/).

The checks are the submission's own (`job_request_sized`), so a quote is refused exactly when
the submission would be. Slurm's estimate comes from `sbatch --test-only` as the team's tenant,
which sees the queue as the job would; when there is no tenant leased yet, or the cluster does
not answer, the quote says so instead of guessing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings

from billing.selectors import budget_status, wallet_get
from computeshare.errors import ValidationFailed
from hpc.errors import BridgeError
from hpc.slurm import directives
from hpc.types import JobSpec, Tenant, platform_job_name
from marketplace.models import Allocation, TenantLease
from organizations.models import Membership
from scheduler_bridge.job_requests import DirectiveReport, JobRequest
from scheduler_bridge.models import money_of
from scheduler_bridge.services.backends import backend_failed, backend_for
from scheduler_bridge.services.planning import SizedJob, job_request_sized
from scheduler_bridge.services.specs import account_for, qos_for, stream_names_filled
from scheduler_bridge.services.submission import allocation_check_open


@dataclass(frozen=True)
class Quote:
    reserved_units: Decimal
    estimated_max_cost: Decimal
    currency: str
    allocation_remaining_after: Decimal
    budget_remaining_after: Decimal | None
    wallet_balance: Decimal
    expected_start: datetime | None
    expected_start_source: str  # "slurm" or "unavailable"
    expected_start_detail: str
    # What became of the script's directives, and where each value came from.
    directives: DirectiveReport


def job_quote(*, actor: Membership, allocation: Allocation, request: JobRequest) -> Quote:
    """Quotes a job as `job_submit` would accept it; reads only (no row, no hold, no lease)."""
    allocation = Allocation.objects.select_related("cluster", "partition").get(pk=allocation.pk)
    if allocation.organization_id != actor.organization_id:
        raise ValidationFailed(fields={"allocation": ["No such allocation."]})
    allocation_check_open(allocation)
    sized = job_request_sized(allocation, request)
    units = sized.units
    unreserved = allocation.remaining
    wallet = wallet_get(actor.organization)
    budget = budget_status(actor.organization, wallet)
    start, source, detail = _expected_start(allocation, sized)
    return Quote(
        reserved_units=units,
        estimated_max_cost=money_of(units, allocation.unit_price),
        currency=str(settings.PLATFORM_CURRENCY),
        allocation_remaining_after=unreserved - units,
        budget_remaining_after=budget.remaining,
        wallet_balance=wallet.available,
        expected_start=start,
        expected_start_source=source,
        expected_start_detail=detail,
        directives=sized.plan.report,
    )


def _expected_start(allocation: Allocation, sized: SizedJob) -> tuple[datetime | None, str, str]:
    """Slurm's estimate as the team's tenant, or why there is none."""
    cluster = allocation.cluster
    tenant = None
    if cluster.runs_jobs_as_tenants:
        lease = (
            TenantLease.objects.select_related("account")
            .filter(
                cluster=cluster,
                organization_id=allocation.organization_id,
                status=TenantLease.Status.ACTIVE,
            )
            .first()
        )
        if lease is None:
            return None, "unavailable", "The team has no account leased on the cluster yet."
        tenant = Tenant(user=lease.account.username, home=lease.account.home)
    plan = sized.plan
    spec = JobSpec(
        name=platform_job_name(f"quote-{uuid.uuid4()}"),
        script=directives.neutralised(plan.script, plan.report.line_notes()),
        directory="computeshare-jobs/quote",
        partition=allocation.partition.name,
        **plan.size.columns(),
        account=account_for(allocation) or None,
        qos=qos_for(allocation) or None,
        reservation=allocation.reservation or None,
        array=plan.array or None,
        tenant=tenant,
        requeue=plan.requeue,
        # Its dependency is left out: the jobs it names may not be on the cluster yet.
        options=stream_names_filled(plan.options, plan.name, tenant),
    )
    try:
        start = backend_for(cluster).expected_start(spec)
    except BridgeError as error:
        backend_failed(cluster, error)
        return None, "unavailable", f"Slurm gave no estimate: {error}"[:500]
    if start is None:
        return None, "unavailable", "This cluster's scheduler gives no estimate."
    return start, "slurm", ""
