"""Figures for jobs on the Slurm test cluster over SSH, printed in one run.

    make bench        (or: .venv/bin/python bench/jobs.py [--jobs 200] [--active 500])

It needs the test cluster (`scripts/testcluster up`), PostgreSQL and Redis. It migrates a
scratch database `computeshare_bench_jobs` (DATABASE_URL's server), uses Redis database 11
(BENCH_JOBS_REDIS_URL), drops the database at the end (unless --keep), and prints:

1. submitting 200 tiny jobs (`true`, 1 CPU, 1 minute), side by side: sbatch in a loop on the
   login node (the physical limit, timed there; the median of 3 rounds, alternating with the
   bridge's `SlurmBackend.submit`), a naive loop opening a paramiko connection
   per job, one OpenSSH process per job (a sample), one command per job on a kept connection,
   and the bridge: `SlurmBackend.submit` with the jobs arriving together, and
   `cluster_jobs_submit` with as many queued job rows. The aims: the bridge at least 0.5 of
   plain sbatch's rate and at least 5 times the naive loop's;
2. the SSH commands of one poll cycle (`cluster_poll`) with 1 and with 500 active jobs (the
   aim: the same number);
3. the peak memory of a Celery worker (solo pool) polling those 500 jobs 10 times (the aim:
   under 300 MiB);
4. how long after a job's end its charge is in the ledger, with the poll sent every 2 s as
   beat would (the aim: within the poll interval plus 5 s).

The tiny jobs pend behind a blocker job holding the cluster's 2 CPUs (for about a minute; its
time limit is 6), so that they neither run nor load the 2-core machine the bench runs on; each
phase cancels its jobs (its own ids only: other people's tests share the cluster) and waits
for the queue to drain before the next. An idle controller answers sbatch faster (about 5 ms
here) than one that is also starting jobs (about 14 ms), so the bridge's ratio to plain sbatch
measured here is the strict one. Other people's jobs make the figures noisy: the run prints
how many there were.

Benchmarks print figures; they never pass or fail.
"""

import argparse
import sys
import time
import uuid
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
# The repository first, as in the other benches: the apps before the bench's modules.
sys.path[:0] = [str(REPOSITORY), str(BENCH)]

from bench_jobs_cluster import (  # noqa: E402
    TEST_CLUSTER,
    BenchJobs,
    Counts,
    Way,
    bridge_submit,
    command_per_job,
    naive_paramiko,
    openssh_per_job,
    plain_sbatch,
    shared_script,
)
from bench_jobs_following import (  # noqa: E402
    Latency,
    Memory,
    PollFigures,
    charge_latency,
    job_directories,
    polls_with,
    scene,
    scheduler_ids,
    service_submit,
    settle_all,
    worker_memory,
)
from bench_jobs_support import (  # noqa: E402
    WorkerProcess,
    drop_database,
    load_average,
    prepare_django,
    worker_start,
)

MEMORY_AIM_MIB = 300
LATENCY_SLACK_SECONDS = 5


def median_round(rounds: list[Way]) -> Way:
    """The median round (by time), noting the spread of all of them."""
    ordered = sorted(rounds, key=lambda way: way.seconds)
    median = ordered[len(ordered) // 2]
    if len(ordered) > 1:
        median.note = (
            f"median of {len(ordered)} rounds: {ordered[0].milliseconds_per_job:.1f}"
            f"-{ordered[-1].milliseconds_per_job:.1f} ms/job"
        )
    return median


def print_submission(
    ways: list[Way],
    plain: Way,
    naive: Way,
    bridge: Way,
    service: Way,
    accepting: float,
    bridge_counts: Counts,
) -> None:
    print(f"1. Submitting {bridge.jobs} tiny jobs (`true`, 1 CPU, 1 min), each way in turn")
    print(f"   {'way':<62}{'jobs':>6}{'jobs/s':>9}{'ms/job':>9}{'cmds':>6}{'conns':>6}")
    for way in ways:
        print(
            f"   {way.label:<62}{way.jobs:>6}{way.per_second:>9.1f}"
            f"{way.milliseconds_per_job:>9.1f}{way.commands:>6}{way.connections:>6}"
            + (f"  {way.note}" if way.note else "")
        )
    print(
        f"   (SlurmBackend.submit: writing the files over SFTP "
        f"{1000 * bridge_counts.sftp_seconds / bridge.jobs:.1f} ms a job, the one command "
        f"running every sbatch {1000 * bridge_counts.command_seconds / bridge.jobs:.1f} ms a job)"
    )
    print(
        f"   (accepting the {service.jobs} rows with job_submit took "
        f"{1000 * accepting / service.jobs:.1f} ms a job, before any of this)"
    )
    for label, way in (("SlurmBackend.submit", bridge), ("cluster_jobs_submit", service)):
        to_plain = way.per_second / plain.per_second
        to_naive = way.per_second / naive.per_second
        print(
            f"   {label:<20} / plain sbatch {to_plain:5.2f} (aim >= 0.5: "
            f"{'met' if to_plain >= 0.5 else 'NOT met'});  / naive loop {to_naive:5.1f} "
            f"(aim >= 5: {'met' if to_naive >= 5 else 'NOT met'})"
        )
    print()


def print_polls(polls: list[PollFigures]) -> None:
    print("2. One poll cycle (cluster_poll): what it sends over SSH")
    print(
        f"   {'active jobs':>11}  {'cycle':<7}{'commands':>9}{'sftp':>6}{'conns':>6}{'ms':>8}  sent"
    )
    for poll in polls:
        counts = poll.counts
        print(
            f"   {poll.active_jobs:>11}  {poll.cycle:<7}{len(counts.commands):>9}"
            f"{counts.sftp_uses:>6}{counts.connections:>6}{1000 * poll.seconds:>8.0f}"
            f"  {', '.join(counts.commands)}"
        )
    fewest, most = polls[0], polls[-1]
    same = all(
        (len(poll.counts.commands), poll.counts.sftp_uses)
        == (len(fewest.counts.commands), fewest.counts.sftp_uses)
        for poll in polls
    )
    print(
        f"   the same with {fewest.active_jobs} and {most.active_jobs} active jobs: "
        f"{'yes' if same else 'NO'}"
    )
    print()


def print_memory(memory: Memory) -> None:
    peak_mib = memory.peak_kib / 1024
    print(
        f"3. A Celery worker (solo pool) following {memory.active_jobs} active jobs, "
        f"{memory.polls} polls"
    )
    print(f"   resident when idle, started           {memory.idle_kib / 1024:8.1f} MiB")
    print(
        f"   peak resident (VmHWM) after the polls {peak_mib:8.1f} MiB "
        f"(aim < {MEMORY_AIM_MIB}: {'met' if peak_mib < MEMORY_AIM_MIB else 'NOT met'})"
    )
    print(f"   one poll, sent to recorded            {1000 * memory.seconds_per_poll:8.0f} ms")
    print()


def print_latency(latency: Latency) -> None:
    aim = latency.poll_interval + LATENCY_SLACK_SECONDS
    end = latency.end.timestamp()
    print(
        f"4. From a job's end to its charge (poll sent every {latency.poll_interval:g} s; "
        f"job {latency.scheduler_job_id}, {latency.state})"
    )
    print(f"   left squeue after sacct's End          {latency.left_queue - end:6.1f} s")
    print(
        f"   charge transaction written after End   "
        f"{latency.charge_created.timestamp() - end:6.1f} s"
    )
    print(
        f"   charge seen by the bench after End     {latency.seconds:6.1f} s "
        f"(aim <= {aim:g}: {'met' if latency.seconds <= aim else 'NOT met'}; End is whole "
        "seconds, so up to 1 s high)"
    )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per submission way")
    parser.add_argument("--rounds", type=int, default=3, help="of plain sbatch and the bridge")
    parser.add_argument("--openssh-jobs", type=int, default=20, help="the OpenSSH sample")
    parser.add_argument("--active", type=int, default=500, help="active jobs of the big poll")
    parser.add_argument("--polls", type=int, default=10, help="polls of the worker")
    parser.add_argument("--poll-interval", type=float, default=2.0)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    arguments = parser.parse_args()
    begun = time.perf_counter()
    prepare_django()
    from django.conf import settings

    from scheduler_bridge.slurm.pool import default_pool
    from scheduler_bridge.slurm.ssh import SSHConnection

    ssh_settings = TEST_CLUSTER.ssh_settings()
    # The bench's own connection: cancelling, watching the queue, cleaning up. Never counted.
    jobs = BenchJobs(SSHConnection(ssh_settings), f"run-{uuid.uuid4().hex[:12]}")
    others = [name for name, _ in jobs.queued().values() if name not in jobs.names]
    print(
        f"Slurm test cluster {TEST_CLUSTER.host}:{TEST_CLUSTER.port}; "
        f"{len(others)} other job(s) in its queue at the start; {load_average()}"
    )
    worker: WorkerProcess | None = None
    places = []
    try:
        blocker, state = jobs.blocker()
        print(f"blocker job {blocker} holding both CPUs: {state}")
        print()
        # As a worker's pool would have it: opened before, reused by every batch.
        pooled = default_pool.connection(ssh_settings)
        script_path = shared_script(pooled, jobs.run_name)

        ways: list[Way] = []

        def measured(way: Way, ids: list[str]) -> Way:
            jobs.cancel(ids)
            ways.append(way)
            return way

        # The two ways of the main ratio, in alternation and by the median round: a busy
        # moment of the shared cluster then weighs on both rather than on one.
        plains: list[Way] = []
        bridges: list[tuple[Way, Counts]] = []
        for _ in range(arguments.rounds):
            plain_way, plain_ids = plain_sbatch(pooled, jobs, script_path, arguments.jobs)
            jobs.cancel(plain_ids)
            plains.append(plain_way)
            bridge_way, bridge_ids, bridge_counts = bridge_submit(
                pooled, jobs, arguments.jobs, settings.JOBS_SUBMIT_BATCH_SIZE
            )
            jobs.cancel(bridge_ids)
            bridges.append((bridge_way, bridge_counts))
        plain = median_round(plains)
        ways.append(plain)
        naive = measured(*naive_paramiko(ssh_settings, jobs, arguments.jobs))
        if arguments.openssh_jobs:
            measured(*openssh_per_job(jobs, script_path, arguments.openssh_jobs))
        measured(*command_per_job(pooled, jobs, script_path, arguments.jobs))
        bridge = median_round([way for way, _ in bridges])
        bridge_counts = next(counts for way, counts in bridges if way is bridge)
        ways.append(bridge)
        places.append(submitting := scene("submit"))
        service_way, service_ids, accepting = service_submit(submitting, jobs, arguments.jobs)
        service = measured(service_way, service_ids)
        print_submission(ways, plain, naive, bridge, service, accepting, bridge_counts)

        places.append(following := scene("follow"))
        polls = polls_with(following, jobs, 1) + polls_with(following, jobs, arguments.active)
        print_polls(polls)

        worker = worker_start()
        print_memory(worker_memory(worker, following, arguments.polls))

        # The pending jobs first: cancelled together with the blocker, some would start.
        jobs.cancel(scheduler_ids(following))
        jobs.cancel([blocker])
        settling = settle_all(places)
        print(
            f"   (then ending the {settling.jobs} cancelled jobs, each confirmed by sacct and "
            f"recorded: {settling.seconds:.1f} s, {settling.cycles} poll cycles of every "
            f"cluster, {settling.commands} commands)"
        )
        print()

        places.append(charged := scene("charge"))
        print_latency(charge_latency(charged, jobs, arguments.poll_interval))
    finally:
        if worker is not None:
            worker.stop()
        jobs.cancel_everything()
        jobs.remove_files([directory for place in places for directory in job_directories(place)])
        jobs.connection.close()
        default_pool.close_all()
        if not arguments.keep:
            drop_database()
    print(f"{len(others)} other job(s) were in the queue at the start; {load_average()}")
    print(f"(the whole run took {time.perf_counter() - begun:,.0f} s)")


if __name__ == "__main__":
    main()
