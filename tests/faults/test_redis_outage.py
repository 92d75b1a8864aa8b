"""Redis (the broker and the cache) stopped for 30 s while jobs are submitted through the API and
Stripe's webhooks arrive, on a real gunicorn, Celery worker and beat, and the Slurm test cluster.

What "accepted" means: a job answered 201 is in PostgreSQL and must reach the cluster and be
charged once after Redis returns (the broker only wakes a worker up; beat's poll submits every
queued job whose message was lost); a webhook answered 2xx must be applied exactly once; one
answered otherwise is one Stripe sends again, and the test sends it again after the outage.
No request may be answered 500.

The Redis is a private one, without persistence: stopping it loses every message in it, the
worst a Redis restart can do. Nothing of the shared Redis or PostgreSQL is touched."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from billing.models import TopUp, Transaction
from billing.selectors import ledger_verify, wallet_get
from marketplace.models import Allocation, Cluster
from scheduler_bridge.models import ENDED_STATES, Job, JobRun, JobState, JobTask
from tests.billing.test_webhook import WEBHOOK, payment_event, signature
from tests.conftest import wait_for
from tests.factories import (
    MembershipFactory,
    allocation_bought,
    funded_organization,
    token_for,
)
from tests.faults.instances import Beat, Gunicorn, PrivateRedis, worker_start_on
from tests.scheduler_bridge.faults import ClusterShell
from tests.workers import WorkerProcess, database_url, worker_environment

pytestmark = [pytest.mark.slurm, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

OUTAGE_SECONDS = 30
JOBS_DURING_OUTAGE = 4
TOP_UPS = 5
TOP_UP_AMOUNT = Decimal("25.00")
SLEEP_1 = "#!/bin/bash\nsleep 1\n"


@dataclass
class Stack:
    redis: PrivateRedis
    web: Gunicorn
    worker: WorkerProcess
    beat: Beat

    def logs(self) -> str:
        return (
            f"--- gunicorn\n{self.web.log()[-4000:]}\n--- worker\n{self.worker.log()[-4000:]}\n"
            f"--- beat\n{self.beat.log()[-2000:]}"
        )


@dataclass
class Market:
    cluster: Cluster
    allocation: Allocation
    token: str
    top_ups: list[TopUp]
    shell: ClusterShell


@pytest.fixture
def market(testcluster) -> Iterator[Market]:
    from tests.factories import cluster_on_testcluster

    # One tenant account of its own, the fixed pool's last but one: concurrent tests lease the
    # first ones, and every job a leased account runs is metered as its team's.
    tenant = testcluster.tenant_pool("fixed").tenants[-2]
    cluster = cluster_on_testcluster(
        testcluster, pool="fixed", tenants=[(tenant.user, tenant.home)]
    )
    team = funded_organization("0", name="Outage Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=40, price="3.00"
    )
    top_ups = [
        TopUp.objects.create(
            organization=team,
            created_by=member,
            amount=TOP_UP_AMOUNT,
            currency=settings.PLATFORM_CURRENCY,
            payment_intent=f"pi_outage_{uuid.uuid4().hex[:16]}",
            client_secret="secret",
        )
        for _ in range(TOP_UPS)
    ]
    shell = ClusterShell(testcluster.ssh_settings())
    yield Market(cluster, allocation, token_for(member), top_ups, shell)
    shell.cancel_named([job.scheduler_name for job in Job.objects.filter(cluster=cluster)])


@pytest.fixture
def stack(market: Market, tmp_path: Path) -> Iterator[Stack]:
    """gunicorn, a Celery worker and beat on the private Redis and the test database."""
    redis = PrivateRedis(tmp_path)
    redis.start()
    environment = worker_environment(
        database=database_url(connection.settings_dict),
        redis=redis.url(),
        STRIPE_WEBHOOK_SECRET=settings.STRIPE_WEBHOOK_SECRET,
        # Beat's poll every 2 s (10 s in production), short leases and deadlines.
        JOBS_POLL_INTERVAL_SECONDS="2",
        JOBS_SUBMIT_LEASE_SECONDS="20",
        JOBS_POLL_LEASE_SECONDS="20",
        JOBS_COMMAND_TIMEOUT_SECONDS="15",
        JOBS_TENANT_RUNS_READ_SECONDS="3",
        JOBS_RUN_RECORD_GRACE_SECONDS="5",
    )
    started: list[object] = []
    try:
        # All three start together: each takes a while to import Django and Celery.
        web = Gunicorn(environment, tmp_path / "gunicorn.log")
        started.append(web)
        beat = Beat(environment, tmp_path)
        started.append(beat)
        worker = worker_start_on(
            redis.url(), name="outage", log_path=tmp_path / "worker.log", environment=environment
        )
        started.append(worker)
        web.wait_ready()
        yield Stack(redis, web, worker, beat)
    finally:
        # Told to stop together, then waited for: each takes seconds to shut down.
        for process in started:
            if process.process.poll() is None:  # type: ignore[attr-defined]
                process.process.terminate()  # type: ignore[attr-defined]
        for process in reversed(started):
            process.stop()  # type: ignore[attr-defined]
        redis.stop()


def job_post(stack: Stack, market: Market, number: int) -> tuple[int, dict[str, object]]:
    body = {
        "allocation": str(market.allocation.uuid),
        "name": f"outage {number}",
        "script": SLEEP_1,
        "time_limit_minutes": 1,
    }
    status, answer = stack.web.request(
        "POST",
        "/api/v1/jobs/",
        json.dumps(body).encode(),
        {"Authorization": f"Token {market.token}", "Content-Type": "application/json"},
    )
    return status, json.loads(answer)


def webhook_post(stack: Stack, payload: bytes) -> tuple[int, bytes]:
    return stack.web.request(
        "POST",
        WEBHOOK,
        payload,
        {"Content-Type": "application/json", "Stripe-Signature": signature(payload)},
    )


def test_redis_stopped_30_seconds_loses_no_job_and_no_payment(stack: Stack, market: Market):
    # Given the whole stack up, and a first top-up's event applied before the outage.
    events = [payment_event(top_up) for top_up in market.top_ups]
    assert webhook_post(stack, events[0])[0] == 200

    # When Redis stops for 30 s, and meanwhile jobs are posted and events delivered (the first
    # one again, as Stripe does when it did not hear our answer).
    stack.redis.stop()
    stopped_at = time.monotonic()
    job_answers: list[tuple[int, dict[str, object]]] = []
    webhook_answers: dict[int, list[int]] = {index: [] for index in range(TOP_UPS)}
    deliveries = [1, 2, 0, 3, 4]
    health, _ = stack.web.request("GET", "/healthz")
    for step in range(max(JOBS_DURING_OUTAGE, len(deliveries))):
        if step < JOBS_DURING_OUTAGE:
            job_answers.append(job_post(stack, market, step))
        if step < len(deliveries):
            index = deliveries[step]
            webhook_answers[index].append(webhook_post(stack, events[index])[0])
        time.sleep(max(0.0, stopped_at + (step + 1) * 5 - time.monotonic()))
    time.sleep(max(0.0, stopped_at + OUTAGE_SECONDS - time.monotonic()))
    outage = time.monotonic() - stopped_at
    stack.redis.start()
    # Stripe delivers again whatever was not answered 2xx.
    for index, statuses in webhook_answers.items():
        if statuses and not 200 <= statuses[-1] < 300:
            statuses.append(webhook_post(stack, events[index])[0])

    # Then no request was answered 500: a job is accepted (201) or clearly refused (503)...
    assert outage >= OUTAGE_SECONDS
    assert health == 503
    statuses = [status for status, _ in job_answers]
    assert all(status in (201, 503) for status in statuses), (job_answers, stack.logs())
    for status, answer in job_answers:
        if status == 503:
            assert set(answer) == {"detail", "code", "extra"}
    accepted = [str(answer["id"]) for status, answer in job_answers if status == 201]
    refused = len(job_answers) - len(accepted)
    submitted = Job.objects.filter(cluster=market.cluster, origin=Job.Origin.PLATFORM)
    assert submitted.count() == len(accepted)

    # ... every accepted job reaches the cluster once Redis is back, runs, and is charged once.
    def all_charged() -> bool:
        jobs = Job.objects.filter(uuid__in=accepted)
        return all(job.state in ENDED_STATES for job in jobs) and JobRun.objects.filter(
            task__job__uuid__in=accepted
        ).count() == len(accepted)

    try:
        wait_for(all_charged, timeout=150, interval=1)
    except BaseException:
        print(stack.logs())
        raise
    jobs = list(Job.objects.filter(uuid__in=accepted))
    assert [job.state for job in jobs] == [JobState.COMPLETED] * len(accepted)
    names = [job.scheduler_name for job in jobs]
    on_cluster = market.shell.job_ids_by_name(names)
    assert {name: len(ids) for name, ids in on_cluster.items()} == {name: 1 for name in names}
    for job in jobs:
        assert Transaction.objects.filter(kind="charge", reference=job.uuid).count() == 1
    assert not JobTask.objects.filter(job__in=jobs, is_released=False).exists()

    # ... and every event answered 2xx was applied once; none is left unprocessed.
    for index, top_up in enumerate(market.top_ups):
        top_up.refresh_from_db()
        applied = index == 0 or any(200 <= status < 300 for status in webhook_answers[index])
        assert top_up.status == ("succeeded" if applied else "pending")
        assert Transaction.objects.filter(kind="top_up", reference=top_up.uuid).count() == int(
            applied
        )
    credited = sum(
        top_up.amount for top_up in market.top_ups if top_up.status == TopUp.Status.SUCCEEDED
    )
    charged = sum(job.cost for job in jobs)
    assert credited == TOP_UP_AMOUNT * TOP_UPS
    assert wallet_get(market.allocation.organization).available == credited
    assert charged > 0
    assert ledger_verify() == []
    print(f"outage {outage:.1f} s; jobs: {len(accepted)} accepted, {refused} refused (503)")
