"""Parts of bench/jobs.py that go through the services and the database: submitting queued job
rows, the commands of a poll cycle with 1 and 500 active jobs, a Celery worker's memory while it
follows them, and how soon a job's charge follows its end."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from bench_jobs_cluster import TEST_CLUSTER, BenchJobs, Counts, Way, counting
from bench_jobs_support import WorkerProcess

from hpc.types import Tenant

PRICE = Decimal("2.00")


@dataclass
class Scene:
    """One cluster row on the real test cluster whose pool is one tenant account of the fixed
    pool, and a team with an allocation on it (which leased that account when it was bought)."""

    cluster: Any
    actor: Any
    allocation: Any
    tenant: Tenant


def scene(label: str, account: Tenant) -> Scene:
    """A scene whose team's jobs run as `account`. Each scene gets an account of its own, which
    no other scene and none of the bench's own jobs use meanwhile: a poll reads the queue and
    accounting by Unix user, and would take another scene's jobs (or the blocker) for jobs the
    team submitted itself."""
    from marketplace.models import TenantLease
    from organizations.models import Membership
    from tests.factories import allocation_bought, cluster_on_testcluster, funded_organization

    cluster = cluster_on_testcluster(
        TEST_CLUSTER,
        pool="fixed",
        name=f"bench-{label}-{uuid.uuid4().hex[:6]}",
        tenants=[(account.user, account.home)],
    )
    partition = cluster.partitions.get()
    team = funded_organization("0", name=f"Bench team {label}")
    allocation = allocation_bought(team, partition=partition, quantity=100, price=PRICE)
    actor = Membership.objects.filter(organization=team).first()
    lease = TenantLease.objects.select_related("account").get(cluster=cluster, organization=team)
    tenant = Tenant(user=lease.account.username, home=lease.account.home)
    if tenant != account:
        raise RuntimeError(f"the team leased {tenant}, not {account}")
    return Scene(cluster, actor, allocation, tenant)


def queue_jobs(
    place: Scene, jobs: BenchJobs, count: int, script: str = "#!/bin/bash\ntrue\n"
) -> list[Any]:
    """`count` jobs accepted by `job_submit` (units reserved, rows `queued`), as the API does.
    Their scheduler names are the run's from now on: cancelled at the end even if their
    submission never told the bench their ids."""
    from django.db import transaction

    from scheduler_bridge.job_requests import JobRequest
    from scheduler_bridge.services.submission import job_submit

    request = JobRequest(name="bench", script=script, time_limit_minutes=1)
    accepted = []
    # Each job is accepted as the API does, 250 to a transaction: thousands of rows (the big
    # poll's) would otherwise spend most of their time waiting for commits.
    for start in range(0, count, 250):
        with transaction.atomic():
            accepted += [
                job_submit(actor=place.actor, allocation=place.allocation, request=request)
                for _ in range(min(250, count - start))
            ]
    jobs.names.update(job.scheduler_name for job in accepted)
    return accepted


def scheduler_ids(place: Scene) -> list[str]:
    from scheduler_bridge.models import Job

    return [
        job_id
        for job_id in Job.objects.filter(cluster=place.cluster).values_list(
            "scheduler_job_id", flat=True
        )
        if job_id
    ]


def job_directories(place: Scene) -> list[str]:
    from scheduler_bridge.models import Job

    return [job.directory for job in Job.objects.filter(cluster=place.cluster).only("uuid")]


def service_submit(place: Scene, jobs: BenchJobs, count: int) -> tuple[Way, list[str], float]:
    """`cluster_jobs_submit` with `count` queued rows: claims, the bridge, and one transaction per
    job to record its id. Returns the way, the ids, and the seconds `job_submit` took for all."""
    from django.conf import settings

    from hpc.pool import default_pool
    from marketplace.services import ssh_settings_for
    from scheduler_bridge.services import cluster_jobs_submit

    begun = time.perf_counter()
    queue_jobs(place, jobs, count)
    accepting = time.perf_counter() - begun
    # The cluster's connection opened beforehand, as a worker's pool keeps it from one batch
    # to the next (and as the library's ways above have theirs): a new connection's key
    # exchange is paid once per worker, not per batch.
    default_pool.connection(ssh_settings_for(place.cluster)).open()
    with counting() as counts:
        begun = time.perf_counter()
        submitted = cluster_jobs_submit(cluster_id=place.cluster.pk)
        seconds = time.perf_counter() - begun
    ids = jobs.add(scheduler_ids(place), place.tenant)
    way = Way(
        f"bridge: cluster_jobs_submit, {count} queued rows of one team",
        submitted, seconds, len(counts.commands), counts.connections, counts.sftp_opened,
        note=f"batches of {settings.JOBS_SUBMIT_BATCH_SIZE}, {settings.JOBS_SUBMIT_LANES} "
        f"lanes; the remote command {1000 * counts.command_seconds / max(1, submitted):.1f} ms "
        "a job, the rest the database's and the worker's",
    )  # fmt: skip
    return way, ids, accepting


@dataclass
class PollFigures:
    active_jobs: int
    cycle: str  # "first" (states change) or "steady"
    counts: Counts
    seconds: float
    backend_calls: list[str] = field(default_factory=list)


def counted_poll(place: Scene, cycle: str) -> PollFigures:
    from scheduler_bridge.services import cluster_poll

    with counting() as counts:
        begun = time.perf_counter()
        report = cluster_poll(cluster_id=place.cluster.pk)
        seconds = time.perf_counter() - begun
    if report is None or report.error:
        raise RuntimeError(f"the poll failed: {report}")
    return PollFigures(report.active_jobs, cycle, counts, seconds, report.backend_calls)


def polls_with(place: Scene, jobs: BenchJobs, active: int) -> list[PollFigures]:
    """Brings the cluster's active jobs up to `active` (queued, submitted, pending behind the
    blocker), then counts what two poll cycles send: the first, which sees every job's state
    change, and a steady one."""
    from scheduler_bridge.services import cluster_jobs_submit

    queue_jobs(place, jobs, active - len(scheduler_ids(place)))
    cluster_jobs_submit(cluster_id=place.cluster.pk)
    jobs.add(scheduler_ids(place), place.tenant)
    return [counted_poll(place, "first"), counted_poll(place, "steady")]


@dataclass
class Settling:
    jobs: int
    ended: int
    seconds: float
    cycles: int
    commands: int


def settle_all(places: list[Scene], timeout: float = 300.0) -> Settling:
    """Polls the clusters in this process until none of their jobs is active (the bench's jobs
    were cancelled: they are confirmed with sacct and recorded as ended), a cycle every half
    second at most: the accounting daemon records a burst of cancellations with some delay."""
    from scheduler_bridge.models import ACTIVE_STATES, Job
    from scheduler_bridge.services import cluster_poll

    clusters = [place.cluster.pk for place in places]
    active = Job.objects.filter(cluster__in=clusters, state__in=ACTIVE_STATES)
    count = active.count()
    with counting() as counts:
        begun = time.perf_counter()
        cycles = 0
        errors: list[str] = []
        while active.exists():
            if time.perf_counter() - begun > timeout:
                stuck = list(active.values_list("scheduler_job_id", "state")[:3])
                raise RuntimeError(
                    f"{active.count()} jobs still active after {timeout:.0f} s (such as "
                    f"{stuck}); the polls' errors: {errors[-3:] or 'none'}"
                )
            if cycles:
                time.sleep(0.5)
            cycles += 1
            for cluster_id in clusters:
                report = cluster_poll(cluster_id=cluster_id)
                if report is not None and report.error:
                    # Other people's fault tests stop sshd or slurmctld for a while: retried.
                    errors.append(report.error)
        seconds = time.perf_counter() - begun
    return Settling(count, count - active.count(), seconds, cycles, len(counts.commands))


@dataclass
class Memory:
    active_jobs: int
    polls: int
    idle_kib: int
    peak_kib: int
    seconds_per_poll: float


def worker_memory(worker: WorkerProcess, place: Scene, polls: int) -> Memory:
    """Sends `cluster_poll_task` `polls` times, one after the other (each waits for the previous
    poll to be recorded), and reads the worker's peak resident memory."""
    from scheduler_bridge.models import ACTIVE_STATES, ClusterPoll, Job
    from scheduler_bridge.tasks import cluster_poll_task

    idle = worker.memory_kib()["VmRSS"]
    begun = time.perf_counter()
    for _ in range(polls):
        last = ClusterPoll.objects.get(cluster=place.cluster).last_polled_at
        cluster_poll_task.delay(place.cluster.pk)
        deadline = time.perf_counter() + 60
        while ClusterPoll.objects.get(cluster=place.cluster).last_polled_at == last:
            if time.perf_counter() > deadline or worker.process.poll() is not None:
                raise RuntimeError(f"the worker did not poll:\n{worker.log()[-3000:]}")
            time.sleep(0.05)
    seconds = time.perf_counter() - begun
    active = Job.objects.filter(cluster=place.cluster, state__in=ACTIVE_STATES).count()
    return Memory(active, polls, idle, worker.memory_kib()["VmHWM"], seconds / polls)


@dataclass
class Latency:
    poll_interval: float
    scheduler_job_id: str
    state: str
    end: datetime  # sacct's End (whole seconds)
    left_queue: float  # when squeue stopped showing it (bench clock, epoch seconds)
    charge_seen: float  # when the bench first saw the charge (epoch seconds)
    charge_created: datetime

    @property
    def seconds(self) -> float:
        """From the job's end to its charge: the end is rounded down to the second, so this is
        at most a second above the truth."""
        return self.charge_seen - self.end.timestamp()


def charge_latency(place: Scene, jobs: BenchJobs, interval: float) -> Latency:
    """Sends `jobs_poll_task` every `interval` seconds (as beat would), submits a 2-second job
    through `job_submit` (the worker submits it), and watches the queue and the ledger."""
    from billing.models import Transaction
    from scheduler_bridge.models import Job
    from scheduler_bridge.tasks import jobs_poll_task

    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            jobs_poll_task.delay()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        [job] = queue_jobs(place, jobs, 1, script="#!/bin/bash\nsleep 2\n")
        deadline = time.time() + 60
        scheduler_job_id = ""
        while not scheduler_job_id:
            if time.time() > deadline:
                raise RuntimeError("the worker did not submit the job within 60 s")
            time.sleep(0.1)
            scheduler_job_id = Job.objects.get(pk=job.pk).scheduler_job_id
        jobs.add([scheduler_job_id], place.tenant)
        left_queue = 0.0
        charge = None
        while charge is None:
            if time.time() > deadline + 60:
                raise RuntimeError("no charge 2 minutes after the job's submission")
            if not left_queue and scheduler_job_id not in jobs.queued():
                left_queue = time.time()
            charge = Transaction.objects.filter(
                kind=Transaction.Kind.CHARGE, reference=job.uuid
            ).first()
            if charge is None:
                time.sleep(0.1)
        charge_seen = time.time()
        left_queue = left_queue or charge_seen
    finally:
        stop.set()
        thread.join()
    answer = jobs.connection.run(
        ["sacct", "--noheader", "--parsable2", "-X", f"--jobs={scheduler_job_id}",
         "--format=End,State"]
    )  # fmt: skip
    end_text, state = answer.stdout.splitlines()[0].split("|")
    # The connection's commands run with TZ=UTC.
    end = datetime.fromisoformat(end_text).replace(tzinfo=UTC)
    return Latency(
        interval, scheduler_job_id, state, end, left_queue, charge_seen, charge.created_at
    )
