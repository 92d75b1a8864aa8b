"""Jobs as the platform keeps them: a job (one submission), its tasks (one for a plain job, one
per index for an array), the runs accounting recorded for each task (a requeued task runs more
than once, and each run is charged once), and the job's state history (`jobs`); the states and
their moves (`states`); the poll's record of each cluster (`polls`); parameter sweeps
(`sweeps`)."""

from scheduler_bridge.models.jobs import (
    COLLECT_CLAIM_SECONDS,
    RESULTS_FINAL,
    SECONDS_PER_HOUR,
    Job,
    JobEvent,
    JobFile,
    JobRun,
    JobTask,
    Progress,
    metered_units,
    money_of,
    results_backoff,
)
from scheduler_bridge.models.polls import ClusterPoll
from scheduler_bridge.models.states import (
    ACTIVE_STATES,
    ENDED_STATES,
    JOB_TRANSITIONS,
    TASK_TRANSITIONS,
    JobState,
    RunState,
)
from scheduler_bridge.models.sweeps import Sweep, SweepJob, SweepRow

__all__ = [
    "ACTIVE_STATES",
    "COLLECT_CLAIM_SECONDS",
    "ENDED_STATES",
    "JOB_TRANSITIONS",
    "RESULTS_FINAL",
    "SECONDS_PER_HOUR",
    "TASK_TRANSITIONS",
    "ClusterPoll",
    "Job",
    "JobEvent",
    "JobFile",
    "JobRun",
    "JobState",
    "JobTask",
    "Progress",
    "RunState",
    "Sweep",
    "SweepJob",
    "SweepRow",
    "metered_units",
    "money_of",
    "results_backoff",
]
