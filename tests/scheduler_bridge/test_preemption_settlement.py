"""A run that the owner's own jobs preempted (issue 27), without a cluster: settled as
accounting reports it, it is not charged, the next run is; the job's API and page count the
preemptions and list every run; the submitter is told and the `job.preempted` webhook is sent,
once per run however often accounting is read. The real preemption on the Slurm test cluster is
in test_capacity_journeys.py."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from hpc.types import RunRecord
from marketplace.models import Allocation, Cluster
from notifications.models import Notification
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobRun, JobState
from tests.conftest import client_for
from tests.factories import PartitionFactory, allocation_bought
from webhooks import services as webhooks
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\ntrap 'echo checkpoint; exit 0' TERM\nsleep 600\n"


@pytest.fixture
def allocation(team):
    partition = PartitionFactory(cpus=2, nodes=1, gpus=0)
    Cluster.objects.filter(pk=partition.cluster_id).update(
        market_qos="computeshare-market", preemption_grace_seconds=120
    )
    return allocation_bought(team.organization, partition=partition, quantity=10, price="1.00")


def run(job: Job, state: str, scheduler_state: str, *, started, seconds: int) -> RunRecord:
    return RunRecord(
        job_id=job.scheduler_job_id,
        raw_job_id=job.scheduler_job_id,
        array_job_id=job.scheduler_job_id,
        array_task_id=None,
        name=job.scheduler_name,
        state=state,
        scheduler_state=scheduler_state,
        exit_code=0,
        submit_time=started,
        start_time=started,
        end_time=started + timedelta(seconds=seconds),
        elapsed_seconds=seconds,
        allocated_cpus=2,
        allocated_gpus=0,
        cpu_seconds=seconds * 2.0,
        time_limit_minutes=60,
    )


def submitted(team, allocation) -> Job:
    answer = client_for(team.member).post(
        "/api/v1/jobs/",
        {
            "allocation": str(allocation.uuid),
            "name": "long",
            "script": SCRIPT,
            "time_limit_minutes": 60,
            "cpus_per_task": 2,
        },
        format="json",
    )
    assert answer.status_code == 201, answer.content
    job = Job.objects.get(uuid=answer.json()["id"])
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_job_id="4711")
    job.tasks.update(state=JobState.RUNNING, scheduler_job_id="4711")
    job.refresh_from_db()
    return job


def test_a_preempted_run_is_not_charged_and_the_next_one_is(team, allocation):
    webhooks.endpoint_create(
        organization=team.organization, url="https://hooks.example.org/x", events=["job.preempted"]
    )
    job = submitted(team, allocation)
    task = job.tasks.get()
    started = timezone.now() - timedelta(hours=1)
    preempted = run(job, "preempted", "PREEMPTED", started=started, seconds=900)
    # Requeued: a new submit time, the same id.
    second = run(
        job, "completed", "COMPLETED", started=started + timedelta(minutes=20), seconds=1800
    )

    services.job_task_settle(task_id=task.pk, runs=[preempted], final=None)
    services.job_task_settle(task_id=task.pk, runs=[preempted, second], final=second)
    services.job_task_settle(task_id=task.pk, runs=[preempted, second], final=second)
    services.job_state_refresh(job_id=job.pk)

    runs = list(JobRun.objects.filter(task__job=job).order_by("submit_time"))
    assert [(r.state, r.units, r.cost, r.is_owner_caused) for r in runs] == [
        ("preempted", Decimal(0), Decimal(0), True),
        # 2 cores x 30 minutes at 1.00 a core-hour.
        ("completed", Decimal(1), Decimal("1.000000"), False),
    ]
    allocation.refresh_from_db()
    assert (allocation.used, allocation.reserved) == (Decimal(1), Decimal(0))
    detail = client_for(team.member).get(f"/api/v1/jobs/{job.uuid}/").json()
    assert detail["preemptions"] == 1
    assert detail["capacity"] == "preemptible"
    assert [(r["state"], r["charged"], r["units"], r["cost"]) for r in detail["runs"]] == [
        ("preempted", False, "0", "0.000000"),
        ("completed", True, "1", "1.000000"),
    ]
    told = Notification.objects.filter(kind="job_preempted")
    assert [(n.user_id, n.title) for n in told] == [(job.submitted_by_id, "Job long was preempted")]
    assert "not charged" in told.get().body and "120 s" in told.get().body
    events = WebhookEvent.objects.filter(type="job.preempted")
    assert events.count() == 1
    data = events.get().data
    assert (data["id"], data["scheduler_job_id"], data["charged"], data["grace_seconds"]) == (
        str(job.uuid),
        "4711",
        False,
        120,
    )


def test_the_job_page_says_it_was_preempted_and_lists_its_runs(team, allocation, client):
    job = submitted(team, allocation)
    task = job.tasks.get()
    started = timezone.now() - timedelta(hours=1)
    preempted = run(job, "preempted", "PREEMPTED", started=started, seconds=600)
    second = run(job, "completed", "COMPLETED", started=started + timedelta(minutes=15), seconds=60)
    services.job_task_settle(task_id=task.pk, runs=[preempted, second], final=second)
    services.job_state_refresh(job_id=job.pk)
    client.force_login(team.member)

    page = client.get(f"/jobs/{job.uuid}/").content.decode()

    assert "Preempted 1 time:" in page
    assert "SIGTERM 120 s before it was stopped" in page
    assert "not charged" in page
    assert 'id="job-runs"' in page
    assert 'QOS <span class="font-monospace">computeshare-market</span>' in page


def test_a_job_bigger_than_its_reserved_block_is_refused(team, settings, tmp_path):
    settings.LOCAL_CLUSTER_ROOT = str(tmp_path)
    from marketplace import services as market
    from tests.factories import ClusterFactory, MembershipFactory, OfferFactory

    cluster = ClusterFactory(backend=Cluster.Backend.LOCAL, ssh_host="", ssh_user="")
    partition = PartitionFactory(cluster=cluster, name="local", cpus=2, nodes=1, gpus=0)
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    offer = OfferFactory(
        partition=partition,
        capacity="reserved",
        quantity=2,
        buy_now_price=Decimal("1.00"),
        auction_closes_at=start,
        window_start=start,
        window_end=start + timedelta(hours=3),
    )
    from billing import services as billing

    billing.wallet_adjust(organization=team.organization, amount="10", memo="Test", actor=None)
    admin = MembershipFactory(organization=team.organization, role="admin")
    allocation = market.offer_buy(actor=admin, offer=offer, quantity=1)
    Allocation.objects.filter(pk=allocation.pk).update(
        window_start=timezone.now() - timedelta(minutes=1)
    )

    answer = client_for(team.member).post(
        "/api/v1/jobs/",
        {
            "allocation": str(allocation.uuid),
            "name": "too big",
            "script": "#!/bin/bash\ntrue\n",
            "time_limit_minutes": 10,
            "cpus_per_task": 2,
        },
        format="json",
    )

    assert answer.status_code == 400, answer.content
    assert answer.json()["extra"]["fields"]["cpus_per_task"] == [
        "ntasks x cpus_per_task is 2; the reserved block holds 1 core."
    ]
    assert not Job.objects.exists()
