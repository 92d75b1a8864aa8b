"""Right-sizing advice, memory requests, templates and the efficiency report through the API
and the pages, on runs settled by the settlement service as the poll would hand them over
(the real cluster's figures are checked in test_sizing_integration.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from billing.selectors import ledger_verify
from hpc.slurm.accounting import parse_memory_size
from hpc.slurm.jobs import sbatch_arguments
from hpc.types import JobSpec, RunRecord
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobTask
from tests.conftest import client_for
from tests.factories import MembershipFactory, PartitionFactory, allocation_bought

pytestmark = pytest.mark.django_db

SUBMIT = datetime(2026, 11, 26, 1, 0, 0, tzinfo=UTC)


def run_record(*, cpus: int, elapsed: int, cpu_seconds: float, max_rss: int | None = None):
    return RunRecord(
        job_id="41",
        raw_job_id="41",
        array_job_id="41",
        array_task_id=None,
        name="cs-x",
        state="completed",
        scheduler_state="COMPLETED",
        exit_code=0,
        submit_time=SUBMIT,
        start_time=SUBMIT,
        end_time=SUBMIT,
        elapsed_seconds=elapsed,
        allocated_cpus=cpus,
        allocated_gpus=0,
        cpu_seconds=cpu_seconds,
        time_limit_minutes=600,
        max_rss_bytes=max_rss,
    )


def ended_job(*, cpus=8, minutes=600, elapsed=720, cpu_seconds=792.0, mem=None, max_rss=None):
    """A job of the issue's example: 8 cores for a 600-minute limit at 0.21 a core-hour, run
    for 12 minutes using 1.1 cores on average, settled by the settlement service."""
    allocation = allocation_bought(
        partition=PartitionFactory(cpus=8, gpus=0), quantity=100, price="0.21"
    )
    member = MembershipFactory(organization=allocation.organization, role="member")
    job = services.job_submit(
        actor=member,
        allocation=allocation,
        request=services.JobRequest(
            name="sim",
            script="#!/bin/bash\ntrue\n",
            time_limit_minutes=minutes,
            cpus_per_task=cpus,
            mem_per_cpu=mem,
        ),
    )
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id="41")
    record = run_record(cpus=cpus, elapsed=elapsed, cpu_seconds=cpu_seconds, max_rss=max_rss)
    task = JobTask.objects.get(job=job)
    services.job_task_settle(task_id=task.pk, runs=[record], final=record)
    services.job_state_refresh(job_id=job.pk)
    return Job.objects.get(pk=job.pk), member.user


def test_the_issue_example_gets_its_figures_from_the_price_rules():
    job, member = ended_job()

    detail = client_for(member).get(f"/api/v1/jobs/{job.uuid}/").json()

    # 8 cores x 12 min x 0.21 = 0.336 charged; 2 cores would have been 0.084.
    assert detail["cost"] == "0.336000"
    assert detail["sizing_advice"] == {
        "cores": {
            "asked": 8,
            "used": "1.10",
            "suggested_cpus_per_task": 2,
            "suggested": 2,
            "cost": "0.336000",
            "cost_if_suggested": "0.084000",
            "text": "Asked for 8 cores, used 1.1 on average: ask for 2, this run would have "
            "cost 0.084 instead of 0.336 USD.",
        },
        "time": {
            "limit_minutes": 600,
            "longest_run_seconds": 720,
            "suggested_limit_minutes": 20,
            "reserved_units": "80",
            "reserved_units_if_suggested": "2.666667",
            "reservation_ratio": "30.0",
            "text": "Ran 12 minutes of a 600-minute limit: a 20-minute limit reserves 30 times "
            "less (2.666667 units instead of 80) and may start sooner.",
        },
        "memory": None,
        "currency": "USD",
        "suggested_sizes": {"cpus_per_task": 2, "time_limit_minutes": 20},
    }
    assert ledger_verify() == []


def test_memory_asked_is_compared_with_max_rss_and_a_fitting_job_is_told_so():
    job, member = ended_job(
        cpus=2, minutes=20, elapsed=720, cpu_seconds=1400.0, mem=1024, max_rss=300 * 1024**2
    )

    advice = client_for(member).get(f"/api/v1/jobs/{job.uuid}/").json()["sizing_advice"]

    assert advice["cores"]["suggested"] is None
    assert advice["cores"]["text"] == "Asked for 2 cores, used 1.94 on average: the size fits."
    assert advice["time"]["text"] == "Ran 12 minutes of a 20-minute limit: the limit fits."
    # 300 MiB x 1.25 over 2 CPUs = 187.5, in whole 16 MiB: 192 per CPU.
    assert advice["memory"] == {
        "asked_mib": 2048,
        "max_rss_mib": "300.00",
        "suggested_mem_per_cpu": 192,
        "text": "Asked for 2048 MiB a task, used at most 300 MiB (MaxRSS): ask for 192 MiB per "
        "CPU; memory is not priced, but a smaller request fits on more nodes and may start "
        "sooner.",
    }
    assert advice["suggested_sizes"] == {"mem_per_cpu": 192}


def test_a_job_not_ended_has_no_advice_and_mem_per_cpu_is_optional():
    allocation = allocation_bought(partition=PartitionFactory(cpus=8), quantity=100)
    member = MembershipFactory(organization=allocation.organization, role="member").user
    client = client_for(member)
    body = {
        "allocation": str(allocation.uuid),
        "name": "plain",
        "script": "#!/bin/bash\ntrue\n",
        "time_limit_minutes": 5,
    }

    plain = client.post("/api/v1/jobs/", body, format="json").json()
    sized = client.post(
        "/api/v1/jobs/", {**body, "mem_per_cpu": 256, "template": "openmp"}, format="json"
    ).json()

    assert (plain["mem_per_cpu"], plain["template"], plain["sizing_advice"]) == (None, "", None)
    assert (sized["mem_per_cpu"], sized["template"]) == (256, "openmp")


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mem_per_cpu": 0}, "mem_per_cpu"),
        ({"mem_per_cpu": "lots"}, "mem_per_cpu"),
        ({"mem_per_cpu": 2 * 1024 * 1024}, "mem_per_cpu"),
        ({"mem_per_cpu": 1.5}, "mem_per_cpu"),
        ({"template": "no-such-template"}, "template"),
    ],
)
def test_a_bad_memory_request_or_template_is_refused_and_writes_nothing(changes, field):
    allocation = allocation_bought(partition=PartitionFactory(cpus=8), quantity=100)
    member = MembershipFactory(organization=allocation.organization, role="member").user
    body = {
        "allocation": str(allocation.uuid),
        "name": "bad",
        "script": "#!/bin/bash\ntrue\n",
        "time_limit_minutes": 5,
        **changes,
    }

    answer = client_for(member).post("/api/v1/jobs/", body, format="json")

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert list(answer.json()["extra"]["fields"]) == [field]
    assert Job.objects.count() == 0
    allocation.refresh_from_db()
    assert allocation.reserved == 0


def test_memory_a_node_does_not_have_is_refused():
    partition = PartitionFactory(cpus=8, memory_per_node_mb=4000)
    allocation = allocation_bought(partition=partition, quantity=100)
    member = MembershipFactory(organization=allocation.organization, role="member").user
    body = {
        "allocation": str(allocation.uuid),
        "name": "big",
        "script": "#!/bin/bash\ntrue\n",
        "time_limit_minutes": 5,
        "cpus_per_task": 2,
    }

    refused = client_for(member).post("/api/v1/jobs/", {**body, "mem_per_cpu": 2001}, format="json")
    accepted = client_for(member).post(
        "/api/v1/jobs/", {**body, "mem_per_cpu": 2000}, format="json"
    )

    assert refused.status_code == 400
    assert refused.json()["extra"]["fields"] == {
        "mem_per_cpu": [
            "mem_per_cpu x cpus_per_task is 4002 MiB; the partition's smallest node has 4000 MiB."
        ]
    }
    assert accepted.status_code == 201
    assert Job.objects.count() == 1


def test_mem_per_cpu_goes_to_sbatch_in_mebibytes():
    spec = JobSpec(
        name="cs-x",
        script="#!/bin/bash\n",
        directory="d",
        partition="debug",
        time_limit_minutes=5,
        mem_per_cpu=300,
    )
    assert "--mem-per-cpu=300M" in sbatch_arguments(spec, "/home/t/d")
    without = JobSpec(
        name="cs-x", script="#!/bin/bash\n", directory="d", partition="debug", time_limit_minutes=5
    )
    assert not any(arg.startswith("--mem") for arg in sbatch_arguments(without, "/home/t/d"))


@pytest.mark.parametrize(
    ("text", "size"),
    [("10968K", 10968 * 1024), ("12.50M", 13107200), ("0", 0), ("2G", 2 * 1024**3), ("", None)],
)
def test_max_rss_as_sacct_prints_it(text, size):
    assert parse_memory_size(text) == size


def test_templates_are_listed_and_a_gpu_template_says_it_needs_gpus(api_client, user):
    assert api_client.get("/api/v1/job-templates/").status_code == 401

    answer = client_for(user).get("/api/v1/job-templates/").json()

    assert answer["count"] == 5
    by_id = {row["id"]: row for row in answer["results"]}
    assert list(by_id) == ["python-sweep", "openmp", "mpi-srun", "checkpoint", "gpu"]
    assert "trap" in by_id["checkpoint"]["script"] and "SIGTERM" in by_id["checkpoint"]["technique"]
    assert by_id["openmp"]["cpus_per_task"] == 2 and by_id["openmp"]["needs_gpus"] is False
    assert by_id["mpi-srun"]["ntasks"] == 2 and "srun" in by_id["mpi-srun"]["script"]
    assert by_id["python-sweep"]["array"] == "0-9%2"
    assert by_id["gpu"]["gpus"] == 1 and by_id["gpu"]["needs_gpus"] is True
    assert all(row["technique"].endswith(".") for row in answer["results"])


def test_the_monthly_efficiency_report_counts_idle_cores_and_unused_reservations(api_client):
    job, member = ended_job()
    Job.objects.filter(pk=job.pk).update(ended_at=datetime(2026, 11, 26, 1, 12, tzinfo=UTC))
    client = client_for(member)
    url = f"/api/v1/organizations/{job.organization.uuid}/efficiency/"

    report = client.get(url, {"month": "2026-11"}).json()

    # 8 cores x 720 s = 1.6 core-hours, 792 s used: 1.38 idle, 86.25 % of the 0.336 paid.
    assert report == {
        "organization": str(job.organization.uuid),
        "month": "2026-11",
        "currency": "USD",
        "jobs_count": 1,
        "core_hours": "1.6",
        "used_core_hours": "0.22",
        "idle_core_hours": "1.38",
        "efficiency": "0.1375",
        "cost": "0.336000",
        "idle_cost": "0.289800",
        "reserved_units": "80",
        "unused_reserved_units": "78.4",
        "unused_reserved_value": "16.464000",
        "worst_jobs": [
            {
                "job": str(job.uuid),
                "name": "sim",
                "idle_core_hours": "1.38",
                "idle_cost": "0.289800",
                "unused_reserved_units": "78.4",
                "unused_reserved_value": "16.464000",
            }
        ],
    }
    assert client.get(url, {"month": "2026-10"}).json()["jobs_count"] == 0
    assert api_client.get(url).status_code == 401
    bad = client.get(url, {"month": "2026-13"})
    assert (bad.status_code, bad.json()["code"]) == (400, "invalid")
    outsider = MembershipFactory().user
    assert client_for(outsider).get(url).status_code == 404


def test_the_pages_show_the_advice_copy_a_job_and_start_from_a_template(client):
    job, member = ended_job()
    client.force_login(member)

    page = client.get(f"/jobs/{job.uuid}/").content.decode()
    assert "Asked for 8 cores, used 1.1 on average: ask for 2" in page
    assert "a 20-minute limit reserves 30 times less" in page

    copy = client.get(f"/jobs/{job.uuid}/resubmit/?sized=1")
    assert copy.status_code == 302
    form = client.get(copy["Location"]).content.decode()
    assert 'name="cpus_per_task" value="2"' in form
    assert 'name="time_limit_minutes" value="20"' in form

    submit_url = f"/allocations/{job.allocation.uuid}/jobs/new/"
    sweep = client.get(submit_url, {"template": "python-sweep"}).content.decode()
    # Its sizes are its script's #SBATCH lines, which fill the fields as any script's do.
    assert "#SBATCH --array=0-9%2" in sweep and "SLURM_ARRAY_TASK_ID" in sweep
    gpu = client.get(submit_url, {"template": "gpu"}).content.decode()
    assert "needs GPUs" in gpu
    assert client.get(submit_url, {"template": "nope"}).status_code == 404
    report = client.get(f"/organizations/{job.organization.uuid}/efficiency/?month=2026-11")
    assert report.status_code == 200
    text = report.content.decode()
    assert 'data-field="idle-core-hours">1.38<' in text and f"/jobs/{job.uuid}/" in text


def test_the_gpu_template_on_a_partition_without_gpus_is_refused_on_gpus():
    allocation = allocation_bought(partition=PartitionFactory(cpus=8, gpus=0), quantity=100)
    member = MembershipFactory(organization=allocation.organization, role="member").user
    client = client_for(member)
    [gpu] = [
        row for row in client.get("/api/v1/job-templates/").json()["results"] if row["id"] == "gpu"
    ]
    fields = ("name", "script", "time_limit_minutes", "cpus_per_task", "ntasks", "nodes", "gpus")

    answer = client.post(
        "/api/v1/jobs/",
        {
            "allocation": str(allocation.uuid),
            "template": "gpu",
            **{key: gpu[key] for key in fields},
        },
        format="json",
    )

    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"] == {"gpus": ["The partition has 0 GPUs."]}
    assert Job.objects.count() == 0


def test_a_run_shorter_than_a_second_still_gets_advice():
    """sacct counts whole seconds: an array task of a fraction of a second ran 0 of them."""
    job, member = ended_job(cpus=1, minutes=5, elapsed=0, cpu_seconds=0.017)

    advice = client_for(member).get(f"/api/v1/jobs/{job.uuid}/").json()["sizing_advice"]

    assert advice["cores"]["text"] == "Asked for 1 core, used 0.02 on average: the size fits."
    assert advice["time"]["text"] == (
        "Ran 0 seconds of a 5-minute limit: a 1-minute limit reserves 5 times less "
        "(0.016667 units instead of 0.083334) and may start sooner."
    )
