"""Celery tasks of the jobs app: each takes ids, loads fresh rows and calls one idempotent
service. Losing a task is harmless: the periodic poll submits what is still queued and follows
what is on the clusters."""

import logging

from celery import shared_task

from computeshare.queue import enqueued_once_started
from hpc.errors import BridgeError
from scheduler_bridge import services
from scheduler_bridge.selectors import jobs as selectors

logger = logging.getLogger(__name__)


@shared_task(time_limit=600, soft_time_limit=570)
def cluster_jobs_submit_task(cluster_id: int) -> int:
    """Enqueued after an accepted job unless one is waiting already: submits every queued job
    of the cluster, together."""
    enqueued_once_started("scheduler_bridge.tasks.cluster_jobs_submit_task", cluster_id)
    return services.cluster_jobs_submit(cluster_id=cluster_id)


@shared_task(time_limit=60, soft_time_limit=50)
def jobs_poll_task() -> int:
    """Periodic: one poll task per cluster that has jobs, so that a slow cluster does not hold
    up the others."""
    clusters = selectors.clusters_to_poll()
    for cluster_id in clusters:
        cluster_poll_task.delay(cluster_id)
    return len(clusters)


@shared_task(time_limit=600, soft_time_limit=570)
def cluster_poll_task(cluster_id: int) -> int | None:
    report = services.cluster_poll(cluster_id=cluster_id)
    return report.runs_settled if report else None


@shared_task(bind=True, max_retries=8, time_limit=120, soft_time_limit=100)
def job_cancel_remote_task(self, job_id: int) -> bool:  # type: ignore[no-untyped-def]
    try:
        return services.job_cancel_remote(job_id=job_id)
    except BridgeError as error:
        if error.is_transient:
            raise self.retry(exc=error, countdown=min(300, 5 * 2**self.request.retries)) from error
        raise


@shared_task(time_limit=3600, soft_time_limit=3500)
def jobs_reconcile_task() -> int:
    """Nightly: charges any ended run in the clusters' accounting that no poll settled."""
    posted = 0
    for cluster_id in selectors.clusters_to_reconcile():
        try:
            posted += services.cluster_reconcile(cluster_id=cluster_id)
        except BridgeError:
            continue  # that cluster is reconciled the next night; the others go on
    return posted


@shared_task(time_limit=120, soft_time_limit=100)
def tenant_leases_end_task() -> int:
    """Periodic: ends the leases of teams that have neither an open allocation nor an
    unfinished job on the cluster; each account is scrubbed before another team gets it."""
    return sum(
        services.tenant_lease_end_if_idle(lease_id=lease_id)
        for lease_id in selectors.tenant_leases_to_end()
    )


@shared_task(time_limit=3600, soft_time_limit=3500)
def job_results_collect_task(job_id: int) -> int | None:
    """Enqueued when a job ends: fetches the files it wrote into platform storage. A failed
    try is taken up again by the sweep, with backoff, then marked `failed`."""
    try:
        collected = services.job_results_collect(job_id=job_id)
    except BridgeError as error:
        services.job_results_retry_or_fail(
            job_id=job_id, reason=str(error), transient=error.is_transient
        )
        # A sweep's rows are marked when their job's files will not come.
        services.sweep_results_gather(job_id=job_id)
        return None
    except OSError as error:  # a file the cluster would not give, the storage full
        services.job_results_retry_or_fail(job_id=job_id, reason=str(error), transient=True)
        services.sweep_results_gather(job_id=job_id)
        return None
    except Exception as error:
        # Whatever else stopped it is tried again within RESULT_ATTEMPTS_MAX, never forever.
        logger.exception("the collection of job %s's results failed", job_id)
        services.job_results_retry_or_fail(
            job_id=job_id, reason=f"{type(error).__name__}: {error}", transient=True
        )
        services.sweep_results_gather(job_id=job_id)
        return None
    # A sweep's job: its rows' results are read from the files just fetched.
    services.sweep_results_gather(job_id=job_id)
    return collected.files if collected else None


@shared_task(time_limit=60, soft_time_limit=50)
def job_results_sweep_task() -> int:
    """Periodic: collects the results of ended jobs whose collection task was lost."""
    jobs = selectors.jobs_results_to_collect()
    for job_id in jobs:
        job_results_collect_task.delay(job_id)
    # Sweep rows whose job's files are final but which were not gathered (the worker stopped
    # in between, or the job never reached the cluster).
    for job_id in selectors.sweep_jobs_to_gather():
        services.sweep_results_gather(job_id=job_id)
    return len(jobs)


@shared_task(time_limit=600, soft_time_limit=570)
def job_results_expire_task() -> int:
    """Nightly: removes result files past their retention period."""
    return services.jobs_results_expire()
