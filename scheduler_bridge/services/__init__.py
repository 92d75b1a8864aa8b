"""Every write of the jobs app: accepting and cancelling jobs (`submission`), carrying them to
their cluster (`dispatch`, with the spec from `specs`), following them there (`following`,
which holds the allocations' `limits`), settling their usage (`settlement`, and the daily
`reconciliation`), parameter sweeps (`sweeps`)."""

from hpc.sizes import JobSize
from scheduler_bridge.job_requests import JobRequest, job_units
from scheduler_bridge.services.dispatch import (
    cluster_jobs_submit,
    job_mark_submitted,
    jobs_mark_submitted,
)
from scheduler_bridge.services.files import (
    job_results_collect,
    job_results_retry_or_fail,
    jobs_results_expire,
)
from scheduler_bridge.services.following import PollReport, cluster_poll
from scheduler_bridge.services.leases import tenant_lease_end_if_idle
from scheduler_bridge.services.output import job_output, job_output_check_kept, job_stream_files
from scheduler_bridge.services.planning import job_plan, job_request_check, job_request_sized
from scheduler_bridge.services.quotes import Quote, job_quote
from scheduler_bridge.services.reconciliation import cluster_reconcile
from scheduler_bridge.services.settlement import (
    Settlement,
    job_state_from_tasks,
    job_state_refresh,
    job_task_settle,
)
from scheduler_bridge.services.submission import (
    AcceptedJob,
    allocation_check_open,
    job_accept,
    job_cancel,
    job_cancel_remote,
    job_state_record,
    job_submit,
)
from scheduler_bridge.services.sweeps import (
    SweepRequest,
    sweep_results_gather,
    sweep_retry_failed,
    sweep_submit,
)

__all__ = [
    "AcceptedJob",
    "JobRequest",
    "JobSize",
    "PollReport",
    "Quote",
    "Settlement",
    "SweepRequest",
    "allocation_check_open",
    "cluster_jobs_submit",
    "cluster_poll",
    "cluster_reconcile",
    "job_accept",
    "job_cancel",
    "job_cancel_remote",
    "job_mark_submitted",
    "job_output",
    "job_output_check_kept",
    "job_plan",
    "job_quote",
    "job_request_check",
    "job_request_sized",
    "job_results_collect",
    "job_results_retry_or_fail",
    "job_state_from_tasks",
    "job_state_record",
    "job_state_refresh",
    "job_stream_files",
    "job_submit",
    "job_task_settle",
    "job_units",
    "jobs_mark_submitted",
    "jobs_results_expire",
    "sweep_results_gather",
    "sweep_retry_failed",
    "sweep_submit",
    "tenant_lease_end_if_idle",
]
