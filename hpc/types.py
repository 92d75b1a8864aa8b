"""What the platform asks of a scheduler and what it gets back, whichever scheduler it is."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO, Literal, Protocol

from hpc.sizes import JobSize

Stream = Literal["stdout", "stderr"]

# The API's job states. `queued` and `submitted` are the platform's own (before the scheduler
# has the job, and after sbatch answered but before the first poll saw it).
PENDING = "pending"
RUNNING = "running"
COMPLETING = "completing"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
TIMEOUT = "timeout"
OUT_OF_MEMORY = "out_of_memory"
NODE_FAIL = "node_fail"
PREEMPTED = "preempted"
UNDETERMINED = "undetermined"
# Ends of one run that are never a job's last: the job itself asked for them (`scontrol
# requeue`, a resize), so the run is charged, and a next run follows under the same id.
REQUEUED = "requeued"
RESIZED = "resized"

# A job's ends: the one table of them (the platform's `JobState`s are these same strings).
ENDED_STATES = frozenset(
    {COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED}
)
# What a run of accounting can end in: a job's ends, and the ends of a run that another follows.
RUN_ENDED_STATES = ENDED_STATES | {REQUEUED, RESIZED}
# Ends that are the cluster owner's doing: such a run is recorded but never charged.
OWNER_CAUSED_STATES = frozenset({NODE_FAIL, PREEMPTED})


# Every name the platform gives on a cluster starts with this: its jobs are "cs-<job uuid>" (how
# a job is found again by name, and told from the jobs a team's own jobs submit), the teams'
# Slurm accounts "cs-<16 hex digits of the organization>".
PLATFORM_PREFIX = "cs-"
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PLATFORM_JOB_NAME = re.compile(re.escape(PLATFORM_PREFIX) + f"({_UUID})")


def platform_job_name(job_uuid: object) -> str:
    """The scheduler job name of the platform's job `job_uuid`."""
    return f"{PLATFORM_PREFIX}{job_uuid}"


def platform_job_uuid(name: str) -> str | None:
    """The job UUID in a scheduler job name the platform gave, or None for any other name."""
    match = _PLATFORM_JOB_NAME.fullmatch(name)
    return match.group(1) if match else None


_ENVIRONMENT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables that steer the scheduler itself rather than the job (its options, configuration
# and output formats): the platform sets those, never the job.
SCHEDULER_ENVIRONMENT_PREFIXES = (
    "SBATCH_",
    "SLURM_",
    "SALLOC_",
    "SRUN_",
    "SQUEUE_",
    "SACCT_",
    "SCANCEL_",
)


def environment_name_problem(name: str) -> str | None:
    """Why `name` cannot be one of a job's environment variables, or None."""
    if not _ENVIRONMENT_NAME.fullmatch(name):
        return f"`{name}` is not a valid name: letters, digits and _, not starting with a digit."
    if name.upper().startswith(SCHEDULER_ENVIRONMENT_PREFIXES):
        return f"`{name}` is the scheduler's: the platform sets it."
    return None


@dataclass(frozen=True)
class Tenant:
    """The Unix account a team's work runs as on a cluster: one of the owner's pool accounts,
    leased to one team at a time. The platform's service user acts as it through `sudo -n -u`
    and never runs a team's code itself."""

    user: str
    home: str  # its home on the login node, absolute: every job directory of the team is in it


@dataclass(frozen=True)
class InputFile:
    """A file the job finds in its folder when it starts: `name` is its path there (checked by
    the API: relative, plain parts), `open` opens its content for reading in chunks."""

    name: str
    size: int
    open: Callable[[], BinaryIO]


@dataclass(frozen=True)
class ResultFile:
    """A regular file the job left in its folder: its path there, size and modification time.
    With a `problem`, something there that is not read (a link, a FIFO, a file with other hard
    links: `hpc.job_folder`), listed so that its owner learns why it is missing."""

    name: str
    size: int
    modified_at: datetime | None
    problem: str | None = None


@dataclass(frozen=True)
class JobOptions:
    """The sbatch options a job asks for beyond its sizes: read from its script's `#SBATCH`
    lines (or given by the platform), checked by the platform, and written by it as sbatch
    options. Empty and None leave Slurm's default."""

    time_min_minutes: int | None = None  # --time-min
    ntasks_per_node: int | None = None
    mem_per_node: int | None = None  # --mem, in MiB (0: all of each node's memory)
    mem_per_gpu: int | None = None  # MiB
    # How the job's GPUs are asked for, when not as a total (`JobSpec.gpus`, --gpus): per
    # node or per task; with the GPUs' type when one is named.
    gpus_per_node: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str = ""
    cpus_per_gpu: int | None = None
    # Names in the job's directory (sbatch's patterns %j %A %a %N... kept for Slurm to fill),
    # or /dev/null. `output` empty: the platform's own (`output_file_name`); `error` empty:
    # the platform's own, or the output's file when `output` is given (sbatch writes both
    # there); `input` empty: none.
    output: str = ""
    error: str = ""
    input: str = ""
    open_mode: str = ""  # "append" or "truncate"
    signal: str = ""  # [{R|B}:]<signal>[@<seconds>]
    constraint: str = ""  # node features, checked against the partition's
    hint: str = ""
    comment: str = ""
    exclusive: bool = False  # whole nodes, priced as such
    dependency: str = ""  # in Slurm's job ids, built by the platform from the team's jobs
    nice: int | None = None  # never below 0


@dataclass(frozen=True)
class JobSpec:
    """One submission: every resource is an sbatch command-line option the platform builds;
    nothing of the user's reaches an `#SBATCH` line (the script's own are neutralised)."""

    name: str  # the scheduler job name, `platform_job_name`: how a job is found again
    script: str  # starts with "#!"; written to `directory/job.sh`
    directory: str  # per-job directory, relative to the tenant's home (or the local root)
    partition: str
    time_limit_minutes: int
    account: str | None = None
    nodes: int = 1
    ntasks: int = 1
    cpus_per_task: int = 1
    gpus: int = 0
    array: str | None = None  # "0-99", "1,3,5", "0-999%20"
    # Memory per allocated CPU in MiB (`--mem-per-cpu`); None leaves the partition's default.
    mem_per_cpu: int | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    # Who the job runs as: a leased pool account on a Slurm cluster (`directory` is then
    # relative to its home); None on the local backend.
    tenant: Tenant | None = None
    # Written into `directory` before sbatch, as the tenant, with the script.
    input_files: tuple[InputFile, ...] = ()
    # The QOS the job runs under (`--qos`): the market's low-priority, preemptable one on
    # preemptible capacity; None leaves the association's default.
    qos: str | None = None
    # The reservation that holds a reserved allocation's block (`--reservation`), or None.
    reservation: str | None = None
    # Whether Slurm may requeue the job (`--requeue`, `--no-requeue`): on preemptible capacity
    # a preempted run goes back to the queue. None leaves the cluster's default (JobRequeue).
    requeue: bool | None = None
    options: JobOptions = field(default_factory=JobOptions)

    @property
    def size(self) -> JobSize:
        """Its sizes as the one size type (`hpc.sizes`), held to the same limits."""
        return JobSize.of(self)


def platform_reservation_name(allocation_uuid: object) -> str:
    """The name of the reservation that holds reserved allocation `allocation_uuid`'s block:
    it says, on the cluster, which allocation it is."""
    return f"{PLATFORM_PREFIX}allocation-{allocation_uuid}"


def platform_reservation_allocation(name: str) -> str | None:
    """The allocation UUID in a reservation name the platform gave, or None for any other."""
    match = _PLATFORM_RESERVATION_NAME.fullmatch(name)
    return match.group(1) if match else None


_PLATFORM_RESERVATION_NAME = re.compile(re.escape(PLATFORM_PREFIX) + f"allocation-({_UUID})")


@dataclass(frozen=True)
class ReservationSpec:
    """A block of whole cores (or GPUs) held for one team for a window: an advance reservation
    that only the team's tenant may run in, so that neither the owner's users nor other teams
    can take those cores meanwhile."""

    name: str  # `platform_reservation_name`
    partition: str
    start: datetime  # aware
    end: datetime  # aware
    users: tuple[str, ...]  # the team's tenant (on the local backend, nobody)
    # What it holds: `cpus` cores, or `nodes` whole nodes (a GPU block: Slurm reserves CPUs,
    # nodes and licenses, not GPUs, so GPUs are reserved with the nodes that carry them).
    cpus: int = 0
    nodes: int = 0


@dataclass(frozen=True)
class Reservation:
    """A reservation as the scheduler holds it now."""

    name: str
    partition: str
    start: datetime
    end: datetime
    users: tuple[str, ...]
    cpus: int  # the cores it holds (every core of its nodes, for a reservation of nodes)
    node_count: int
    nodes: str = ""  # the nodes it holds cores on, as the scheduler writes them
    state: str = ""  # "ACTIVE" once its window has started, "INACTIVE" before


@dataclass(frozen=True)
class SubmitResult:
    name: str
    scheduler_job_id: str | None  # the job id (for arrays the array's id), None when refused
    error: str | None = None  # the scheduler's reason for refusing it
    is_transient: bool = False  # a refusal that may pass on retry (controller down, ...)


@dataclass(frozen=True)
class QueueEntry:
    """One line of the queue: a job, or one task of an array (arrays are listed per task)."""

    job_id: str  # "123", or "123_4" for task 4 of array 123
    array_job_id: str  # "123" (the job id itself when not an array)
    array_task_id: int | None
    name: str
    state: str  # the API state (`PENDING`, `RUNNING`, ...), mapped from the scheduler's
    scheduler_state: str  # as the scheduler printed it, for the record
    reason: str  # why it pends ("Resources", "Priority", ...), "" when none
    # A pending array whose tasks have not been split out yet: one line for many tasks,
    # `array_task_id` None and `pending_tasks` the expression ("5-19").
    pending_tasks: str | None = None
    user: str = ""  # the Unix user the job runs as
    partition: str = ""
    cpus: int = 0  # CPUs allocated (asked for, while it pends)
    start_time: datetime | None = None  # when its current run started; None until it runs
    # A component of a heterogeneous job (`123+1`): `array_job_id` is the leader's id ("123").
    het_offset: int | None = None


@dataclass(frozen=True)
class RunRecord:
    """One run of a job or array task as accounting recorded it. A requeued job has one record
    per run; the key of a run is (raw_job_id, submit_time)."""

    job_id: str  # "123" or "123_4"
    raw_job_id: str  # the scheduler's own id of this task ("JobIDRaw")
    array_job_id: str
    array_task_id: int | None
    name: str
    state: str  # API state
    scheduler_state: str  # e.g. "CANCELLED by 1000", "REQUEUED"
    exit_code: int | None
    submit_time: datetime
    start_time: datetime | None
    end_time: datetime | None
    elapsed_seconds: int
    allocated_cpus: int
    allocated_gpus: int
    cpu_seconds: float  # total CPU time (user + system) of this run's steps
    time_limit_minutes: int | None = None
    reason: str = ""
    user: str = ""  # the Unix user the run ran as
    partition: str = ""
    # What the job asked for: the size of a job that has not been allocated anything yet.
    requested_cpus: int = 0
    requested_gpus: int = 0
    # A component of a heterogeneous job (`123+1`, its own raw id): `array_job_id` is the
    # leader's id ("123"), the id the whole job is cancelled and looked up by.
    het_offset: int | None = None
    # False while slurmdbd has only the start or end events of the job, not its own record:
    # it then names the job "allocation" and has no time limit, so nothing of it but its id
    # and times can be believed yet.
    has_own_record: bool = True
    # The largest resident set of any task of the run's steps (MaxRSS), in bytes: None when
    # accounting has none (no step recorded, or read without steps).
    max_rss_bytes: int | None = None

    @property
    def is_ended(self) -> bool:
        return self.state in RUN_ENDED_STATES

    @property
    def has_run(self) -> bool:
        """Whether the run started on the cluster. Accounting counts whole seconds: a task of a
        fraction of a second ran with an elapsed time of 0 (sacct prints its Start equal to its
        End, as for array tasks 800_0 and 800_1 in recorded/sacct_max_rss_with_steps.txt), so
        the elapsed time alone cannot tell. A run cancelled before it started has no start
        (sacct's `None`, the local backend's None) or nothing allocated to it."""
        if self.start_time is None:
            return False
        return (
            self.elapsed_seconds > 0
            or self.allocated_cpus > 0
            or self.allocated_gpus > 0
            or self.cpu_seconds > 0
        )

    @property
    def counted_seconds(self) -> int:
        """The run's elapsed time as efficiency counts it: at least one second for a run that
        ran (accounting's whole seconds would make a short task's cores x elapsed zero, and its
        efficiency unknown), none for one that never started. Charging uses `elapsed_seconds`."""
        if self.has_run:
            return max(self.elapsed_seconds, 1)
        return self.elapsed_seconds


class Backend(Protocol):
    """The interface both schedulers implement. Every call has a deadline; a transient failure
    (connection lost, controller down, timeout) raises a `BridgeError` whose `is_transient` is
    true, and the caller cannot tell whether a submission went through: it must `find` the
    names before it submits them again."""

    def submit(self, specs: Sequence[JobSpec]) -> list[SubmitResult]:
        """Writes each script into its directory and submits every spec, sharing remote
        commands between them; one result per spec, in order."""
        ...

    def find(self, names: Sequence[str], users: Sequence[str]) -> dict[str, str]:
        """The scheduler job id of every given name that the scheduler knows among the jobs of
        `users` (queued, running or ended in the last days)."""
        ...

    def queue(self, users: Sequence[str]) -> list[QueueEntry]:
        """Every job of `users` (the cluster's leased tenants) that the scheduler still holds,
        in one command; nothing, without a command, for no users."""
        ...

    def runs(self, job_ids: Sequence[str]) -> list[RunRecord]:
        """Accounting records of the given job ids (array ids include all their tasks, a
        heterogeneous job's leader id all its components), every run of every requeued or
        resized job included, each with its own steps. Queries in chunks."""
        ...

    def runs_of_users(
        self, users: Sequence[str], start: datetime, end: datetime
    ) -> list[RunRecord]:
        """Accounting records (without steps) of every run of `users` that was in the system at
        some time between `start` and `end`, whoever submitted it: how jobs that a team's job
        submitted itself are found, and what the nightly reconciliation compares."""
        ...

    def cancel(self, tenant: Tenant | None, job_ids: Sequence[str]) -> None:
        """Asks the scheduler, as `tenant`, to cancel these jobs of it (an array id cancels
        every task). Ids that have already ended are not an error."""
        ...

    def output_tail(
        self,
        tenant: Tenant | None,
        directory: str,
        stream: Stream,
        array_task_id: int | None,
        tail_bytes: int,
        name: str | None = None,
    ) -> bytes:
        """The last `tail_bytes` of a job's (or array task's) stdout or stderr, read as
        `tenant`; b"" before the file exists. `name` is the file's name in the directory when
        the job's script named it (`*` standing for a part not known, such as the node's name:
        the newest file that matches), else `output_file_name`'s."""
        ...

    def result_files(self, tenant: Tenant | None, directory: str) -> list[ResultFile]:
        """Every regular file in the job's directory and its subfolders (the platform's script
        and environment files left out), read as `tenant` without following a link; links,
        FIFOs and the like listed with their `problem`."""
        ...

    def result_fetch(
        self,
        tenant: Tenant | None,
        directory: str,
        names: Sequence[str],
        save: Callable[[str, BinaryIO], None],
    ) -> dict[str, str]:
        """Opens each named result file as `tenant`, without following a link, and hands it to
        `save`, which reads it in chunks; one session for the lot. Returns the names not read,
        each with the reason (gone, or no longer a regular file since the listing)."""
        ...

    def reservation_create(self, spec: ReservationSpec) -> Reservation:
        """Has the scheduler hold `spec`'s block for its users from its start to its end.
        Raises `ReservationRefused` (permanent, with the scheduler's words) when it will not:
        the cores are already reserved or busy, or the platform may not make reservations."""
        ...

    def reservation_update(self, spec: ReservationSpec) -> Reservation:
        """Brings the existing reservation `spec.name` back to `spec` (users, end, size).
        `ReservationRefused` when the scheduler will not."""
        ...

    def reservation_delete(self, name: str) -> None:
        """Removes the platform's reservation `name`; one already gone is not an error."""
        ...

    def reservations(self) -> list[Reservation]:
        """Every reservation the scheduler holds whose name is the platform's
        (`platform_reservation_name`), in one command."""
        ...

    def expected_start(self, spec: JobSpec) -> datetime | None:
        """When the scheduler expects the spec would start if submitted now, without submitting
        it (`sbatch --test-only`); None when the scheduler gives no estimate."""
        ...

    def close(self) -> None: ...


def output_file_name(stream: Stream, array_task_id: int | None) -> str:
    """Where a job's output goes inside its directory: `stdout.txt`, or `stdout-4.txt` for task 4
    of an array. The backends set these paths; the user cannot."""
    return f"{stream}.txt" if array_task_id is None else f"{stream}-{array_task_id}.txt"
