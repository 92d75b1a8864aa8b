"""The daily reconciliation: what a cluster's accounting says ran, against what was charged.
Every ended run that no poll settled (a poll that never came, a job the poll never saw) is
charged as a new ledger entry, never an edit, through the same settlement as the poll's."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from marketplace.models import Cluster
from scheduler_bridge.models import JobRun, JobTask
from scheduler_bridge.services.backends import backend_for
from scheduler_bridge.services.settlement import job_task_settle
from scheduler_bridge.services.tenant_jobs import (
    LeaseWindow,
    lease_of_run,
    lease_windows,
    tenant_jobs_record,
)

logger = logging.getLogger(__name__)


def cluster_reconcile(*, cluster_id: int, days: int | None = None) -> int:
    """Compares the cluster's accounting for the last days with what was charged, and charges
    (as new ledger entries, never edits) every ended run that no poll settled: every run of the
    tenants leased in that time, whoever submitted it (a job the poll never saw is recorded
    first). Returns how many runs it charged."""
    cluster = Cluster.objects.get(pk=cluster_id)
    now = timezone.now()
    since = now - timedelta(days=days or settings.JOBS_RECONCILE_DAYS)
    backend = backend_for(cluster)
    if cluster.backend == Cluster.Backend.LOCAL:
        windows: list[LeaseWindow] = []
        records = backend.runs_of_users([], since, now)
    else:
        windows = lease_windows(cluster, since=since)
        if not windows:
            return 0
        records = backend.runs_of_users(sorted({window.user for window in windows}), since, now)
        records = [record for record in records if lease_of_run(windows, record)]
        tenant_jobs_record(cluster=cluster, records=records, windows=windows, now=now)
    ended = [record for record in records if record.is_ended]
    if not ended:
        return 0
    settled = {
        (raw, submit)
        for raw, submit in JobRun.objects.filter(
            cluster=cluster, raw_job_id__in={record.raw_job_id for record in ended}
        ).values_list("raw_job_id", "submit_time")
    }
    tasks = {
        (task.job.scheduler_job_id, task.array_task_id): task
        for task in JobTask.objects.filter(
            job__cluster=cluster,
            job__scheduler_job_id__in={record.array_job_id for record in ended},
        ).select_related("job")
    }
    posted = 0
    for record in ended:
        task = tasks.get((record.array_job_id, record.array_task_id))
        if task is None or (record.raw_job_id, record.submit_time) in settled:
            continue
        result = job_task_settle(
            task_id=task.pk, runs=[record], final=None, source=JobRun.Source.RECONCILIATION
        )
        posted += result.runs_charged
    if posted:
        logger.warning("reconciliation of cluster %s charged %s missed runs", cluster_id, posted)
    return posted
