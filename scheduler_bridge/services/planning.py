"""A job's request checked against its allocation and planned: its script's `#SBATCH` lines
read in (`job_request_resolve`), its sizes checked against the partition and the window, whole
nodes priced for `--exclusive`, its dependencies held to the team's own jobs, and what it
reserves. Shared by the submission, its quote and sweeps, so that each refuses exactly what
the others refuse."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from django.utils import timezone

from computeshare.errors import FieldErrors
from hpc.arrays import InvalidArray, parse_array
from hpc.slurm.directives import Dependency, DirectiveRefused
from hpc.types import environment_name_problem
from marketplace.models import Allocation, Capacity, Cluster, Resource
from scheduler_bridge import errors
from scheduler_bridge.job_directives import Overridden, PartitionFacts
from scheduler_bridge.job_requests import (
    DirectiveReport,
    JobPlan,
    JobRequest,
    is_platform_job_id,
    job_request_resolve,
    job_units,
)
from scheduler_bridge.job_templates import job_template_get
from scheduler_bridge.models import Job

MAX_SCRIPT_BYTES = 256 * 1024
MAX_ENVIRONMENT_VARIABLES = 100
MAX_ENVIRONMENT_VALUE_LENGTH = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class DirectivesRead:
    """Where a job's directives are read from when not plainly from its script: a sweep's job
    runs the platform's wrapper of the team's script (`directives_from`), and sets some
    options itself (`not_for_this_job`: option to the reason the script's is overridden)."""

    directives_from: str | None = None
    not_for_this_job: dict[str, str] = field(default_factory=dict)


AS_WRITTEN = DirectivesRead()


@dataclass(frozen=True)
class SizedJob:
    """A checked plan, its task indices (`[None]` for a plain job), the units one task and the
    whole job reserve, and the team's jobs its dependency names."""

    plan: JobPlan
    indices: list[int | None]
    task_units: Decimal
    units: Decimal
    dependency: dict[str, Any] | None = None


def job_request_check(
    allocation: Allocation, request: JobRequest, read: DirectivesRead = AS_WRITTEN
) -> tuple[JobPlan, list[int | None]]:
    """Reads the request's script into it and checks it against its allocation's partition;
    returns the plan and the task indices. Raises a `ScriptRefused` error for the script (a
    stable code per rule, with the line and sbatch's reason), or `ValidationFailed` with every
    field's messages at once: first the request's own, then (when those pass) against the
    partition and the allocation's window, its array and its variables."""
    _script_check(request)
    plan = job_plan(allocation, request, read)
    problems = FieldErrors()
    _name_check(plan, problems)
    _sizes_check(plan, request, problems)
    problems.raise_if_any()
    _partition_check(allocation, plan, problems)
    _block_check(allocation, plan, problems)
    indices = _array_check(plan, problems)
    _environment_check(request, problems)
    problems.raise_if_any()
    _backend_check(allocation, plan)
    return plan, indices


def job_plan(
    allocation: Allocation, request: JobRequest, read: DirectivesRead = AS_WRITTEN
) -> JobPlan:
    """The request with its script's directives read in, an exclusive job's nodes priced
    whole; the script's refusals as the API's errors."""
    partition = allocation.partition
    facts = PartitionFacts(name=partition.name, features=tuple(partition.features or ()))
    try:
        plan = job_request_resolve(
            request,
            facts,
            not_for_this_job=read.not_for_this_job,
            directives_from=read.directives_from,
        )
    except DirectiveRefused as refusal:
        raise errors.script_refused(refusal) from None
    if plan.size.exclusive:
        plan = _whole_nodes(allocation, plan)
    if plan.requeue is False and allocation.capacity == Capacity.PREEMPTIBLE:
        plan = _requeued_anyway(plan)
    return plan


_PREEMPTED_RUNS_REQUEUE = (
    "On preemptible capacity a run the owner's jobs preempt goes back to the queue: the "
    "platform requeues the job (a preempted run is not charged)."
)


def _requeued_anyway(plan: JobPlan) -> JobPlan:
    """A script's --no-requeue on preemptible capacity is overridden: a preempted job must
    go back to the queue to get the hours the team bought."""
    report = plan.report
    moved = [each for each in report.honoured if each.option == "--no-requeue"]
    overridden = [
        Overridden(each.option, each.value, each.line, _PREEMPTED_RUNS_REQUEUE) for each in moved
    ]
    report = replace(
        report,
        honoured=tuple(each for each in report.honoured if each not in moved),
        overridden=tuple(sorted([*report.overridden, *overridden], key=lambda each: each.line)),
        effective=tuple(each for each in report.effective if each.field != "requeue"),
    )
    return replace(plan, requeue=None, report=report)


def _script_check(request: JobRequest) -> None:
    problems = FieldErrors()
    if len(request.script.encode()) > MAX_SCRIPT_BYTES:
        problems.add("script", f"At most {MAX_SCRIPT_BYTES} bytes.")
    problems.raise_if_any()


def _name_check(plan: JobPlan, problems: FieldErrors) -> None:
    name = plan.name.strip()
    if not name or _CONTROL.search(plan.name) or len(plan.name) > 200:
        problems.add("name", "From 1 to 200 characters, without control characters.")


def _sizes_check(plan: JobPlan, request: JobRequest, problems: FieldErrors) -> None:
    size = plan.size
    for size_name, messages in size.problems().items():
        for message in messages:
            problems.add(size_name, message)
    time_min = plan.options.time_min_minutes
    if time_min is not None and time_min > size.time_limit_minutes:
        problems.add(
            "time_limit_minutes",
            f"--time-min ({time_min} minutes) is longer than the time limit "
            f"({size.time_limit_minutes}).",
        )
    if request.template and job_template_get(request.template) is None:
        problems.add(
            "template", f"No template `{request.template}`; see GET /api/v1/job-templates/."
        )


def _partition_check(allocation: Allocation, plan: JobPlan, problems: FieldErrors) -> None:
    """The plan against what the partition has and the time left in the window."""
    partition = allocation.partition
    size = plan.size
    if partition.max_time_minutes and size.time_limit_minutes > partition.max_time_minutes:
        problems.add(
            "time_limit_minutes",
            f"The partition allows at most {partition.max_time_minutes} minutes.",
        )
    minutes_left = (allocation.window_end - timezone.now()).total_seconds() / 60
    if size.time_limit_minutes > minutes_left:
        problems.add(
            "time_limit_minutes",
            f"The allocation's window ends in {int(minutes_left)} minutes; the job must fit in it.",
        )
    if size.cores > partition.cpus:
        problems.add(
            "cpus_per_task",
            f"ntasks x cpus_per_task is {size.cores}; the partition has {partition.cpus} CPUs.",
        )
    if size.nodes > partition.nodes:
        problems.add("nodes", f"The partition has {partition.nodes} nodes.")
    if size.nodes > size.ntasks:
        problems.add("nodes", "Cannot exceed ntasks: every node runs a task.")
    _memory_and_gpus_check(allocation, plan, problems)


def _block_check(allocation: Allocation, plan: JobPlan, problems: FieldErrors) -> None:
    """A job on a reserved block runs inside it: it asks for no more cores (GPUs) than the
    block holds, or Slurm would keep it pending for the whole window."""
    if allocation.block is None:
        return
    if allocation.resource == Resource.GPU:
        if plan.size.gpus > allocation.block:
            problems.add("gpus", f"The reserved block holds {allocation.block} GPUs.")
        return
    cores = plan.size.cores
    if cores > allocation.block:
        problems.add(
            "cpus_per_task",
            f"ntasks x cpus_per_task is {cores}; the reserved block holds "
            f"{allocation.block} core{'' if allocation.block == 1 else 's'}.",
        )


def _memory_and_gpus_check(allocation: Allocation, plan: JobPlan, problems: FieldErrors) -> None:
    partition = allocation.partition
    memory = partition.memory_per_node_mb
    size = plan.size
    per_task = (size.mem_per_cpu or 0) * size.cpus_per_task
    if size.mem_per_cpu is not None and memory and per_task > memory:
        problems.add(
            "mem_per_cpu",
            f"mem_per_cpu x cpus_per_task is {per_task} MiB; "
            f"the partition's smallest node has {memory} MiB.",
        )
    per_node = plan.options.mem_per_node
    if per_node is not None and memory and per_node > memory:
        problems.add(
            "mem_per_cpu",
            f"--mem asks for {per_node} MiB a node; the partition's smallest node has "
            f"{memory} MiB.",
        )
    if size.gpus > partition.gpus:
        problems.add("gpus", f"The partition has {partition.gpus} GPUs.")
    if allocation.resource == Resource.GPU and size.gpus < 1:
        problems.add("gpus", "A GPU allocation's jobs ask for at least 1 GPU.")


def _array_check(plan: JobPlan, problems: FieldErrors) -> list[int | None]:
    """The array's task indices, `[None]` for a plain job (or an array that is not valid)."""
    if plan.array is None:
        return [None]
    try:
        return list(parse_array(plan.array).indices)
    except InvalidArray as error:
        problems.add("array", str(error))
        return [None]


def _environment_check(request: JobRequest, problems: FieldErrors) -> None:
    for field_name, variables in (
        ("environment", request.environment),
        ("secret_environment", request.secret_environment),
    ):
        for problem in _environment_problems(variables):
            problems.add(field_name, problem)
    if len(request.environment) + len(request.secret_environment) > MAX_ENVIRONMENT_VARIABLES:
        problems.add(
            "environment", f"At most {MAX_ENVIRONMENT_VARIABLES} variables, secret ones included."
        )
    for variable in sorted(set(request.environment) & set(request.secret_environment)):
        problems.add(
            "secret_environment",
            f"`{variable}` is also in the environment: set it in one of the two.",
        )


def _environment_problems(variables: dict[str, str]) -> list[str]:
    """What is wrong with a job's variables, plain or secret: the same rules for both. A
    message never quotes a value (it may be a secret), only names."""
    problems = []
    for variable, value in variables.items():
        if problem := environment_name_problem(variable):
            problems.append(problem)
        if not isinstance(value, str) or "\x00" in value:
            problems.append(f"The value of `{variable}` must be text without NUL bytes.")
        elif len(value) > MAX_ENVIRONMENT_VALUE_LENGTH:
            problems.append(
                f"The value of `{variable}` is longer than {MAX_ENVIRONMENT_VALUE_LENGTH}."
            )
    return problems


# What the local backend of the demo cannot do, as the options that ask for it.
_LOCAL_CANNOT = (
    ("dependency", "--dependency", "a dependency on other jobs"),
    ("constraint", "--constraint", "node features"),
    ("signal", "--signal", "a signal before the time limit"),
)


def _backend_check(allocation: Allocation, plan: JobPlan) -> None:
    """Refuses, before anything is held, what the demo's local cluster cannot run."""
    if allocation.cluster.backend != Cluster.Backend.LOCAL:
        return
    for effective in plan.report.effective:
        for field_name, option, what in _LOCAL_CANNOT:
            if effective.field == field_name:
                raise errors.SbatchDirectiveNotSupported(
                    f"Line {effective.line}: the local cluster of the demo runs no {what} "
                    f"({option}).",
                    extra={
                        "line": effective.line,
                        "option": option,
                        "reason": f"the local cluster runs no {what}",
                    },
                )


def _whole_nodes(allocation: Allocation, plan: JobPlan) -> JobPlan:
    """An exclusive job takes its nodes whole, and reserves each node's CPUs (or GPUs): what
    the partition's nodes have must be known and alike, and the allocation must be able to
    cover that for the job's time limit (`sbatch_exclusive_not_covered` otherwise)."""
    partition = allocation.partition
    line = next((each.line for each in plan.report.effective if each.field == "exclusive"), None)

    def not_covered(why: str) -> errors.SbatchExclusiveNotCovered:
        return errors.SbatchExclusiveNotCovered(
            f"Line {line}: --exclusive takes whole nodes; {why}",
            extra={"line": line, "option": "--exclusive", "reason": why},
        )

    if not partition.cpus_per_node or partition.nodes_differ:
        raise not_covered(
            f"the nodes of {partition.name} are not known alike, so a whole node cannot be priced."
        )
    if allocation.capacity == Capacity.RESERVED:
        # Reserved capacity holds a block of cores; whole nodes of it come with issue 27.
        raise not_covered("this allocation reserves cores, not whole nodes.")
    size = replace(plan.size, node_cpus=partition.cpus_per_node, node_gpus=partition.gpus_per_node)
    per_task = job_units(resource=allocation.resource, size=size, task_count=1)
    if per_task > allocation.quantity:
        unit = "GPU-hours" if allocation.resource == Resource.GPU else "core-hours"
        raise not_covered(
            f"{size.nodes} whole node(s) of {partition.name} for {size.time_limit_minutes} "
            f"minutes are {per_task.normalize():f} {unit}, more than the allocation's "
            f"{allocation.quantity}."
        )
    return replace(plan, size=size)


def job_request_sized(
    allocation: Allocation, request: JobRequest, read: DirectivesRead = AS_WRITTEN
) -> SizedJob:
    """The request as it will run: its plan, its task indices, the units one task and the
    whole job reserve, and the team's jobs its dependency names; refuses it as a submission
    would (400, 402 `allocation_exhausted`). Shared by the submission and its quote."""
    plan, indices = job_request_check(allocation, request, read)
    task_units = job_units(resource=allocation.resource, size=plan.size, task_count=1)
    units = task_units * len(indices)
    unreserved = allocation.remaining
    if units > unreserved:
        raise errors.AllocationExhausted(
            f"The job reserves {units.normalize():f} units (cores or GPUs x time limit x tasks); "
            f"the allocation has {unreserved.normalize():f} left unreserved.",
            extra={"requested_units": str(units), "unreserved_units": str(unreserved)},
        )
    dependency = (
        dependency_of_team(allocation, plan.dependency, plan.report)
        if plan.dependency is not None
        else None
    )
    return SizedJob(plan, indices, task_units, units, dependency)


_SLURM_ID = re.compile(r"([0-9]+)(?:_([0-9]+))?")


def dependency_of_team(
    allocation: Allocation, dependency: Dependency, report: DirectiveReport
) -> dict[str, Any]:
    """The jobs a dependency names, each one of the team's on the allocation's cluster: by its
    id here (a UUID), or by its Slurm id (an array's task as `id_index`). Returns the
    dependency as the job keeps it until its submission writes it in Slurm's ids; refuses
    (`sbatch_dependency_not_allowed`) any other job and `singleton`."""
    line = next((each.line for each in report.effective if each.field == "dependency"), None)

    def refused(why: str) -> errors.SbatchDependencyNotAllowed:
        return errors.SbatchDependencyNotAllowed(
            f"Line {line}: {why}", extra={"line": line, "option": "--dependency", "reason": why}
        )

    team_jobs = Job.objects.filter(
        organization_id=allocation.organization_id, cluster_id=allocation.cluster_id
    )
    conditions = []
    for condition in dependency.conditions:
        if condition.kind in ("singleton", "afterburstbuffer"):
            raise refused(
                f"`{condition.kind}` is not taken: the platform names each job on the cluster "
                "itself, and has no burst buffers."
            )
        jobs = []
        for reference, minutes in condition.jobs:
            job, task = _team_job(team_jobs, reference)
            if job is None:
                raise refused(
                    f"`{reference}` is not one of the team's jobs on {allocation.cluster.name}."
                )
            if not job.scheduler_job_id and job.is_ended:
                raise refused(f"`{reference}` ended without ever reaching the cluster.")
            jobs.append({"job": str(job.uuid), "task": task, "minutes": minutes})
        conditions.append({"kind": condition.kind, "jobs": jobs})
    return {"any_of": dependency.any_of, "conditions": conditions}


def _team_job(team_jobs: Any, reference: str) -> tuple[Job | None, int | None]:
    if is_platform_job_id(reference):
        return team_jobs.filter(uuid=reference.lower()).first(), None
    match = _SLURM_ID.fullmatch(reference)
    if match is None:
        return None, None
    job = team_jobs.filter(scheduler_job_id=match[1]).order_by("-created_at").first()
    return job, int(match[2]) if match[2] is not None else None
