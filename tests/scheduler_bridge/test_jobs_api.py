"""The job endpoints without a cluster: what is accepted, what is refused (and that a refusal
changes nothing), who sees what, and cancelling a job that never reached the cluster."""

import csv
import io
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from marketplace.models import Allocation, TenantLease
from organizations.models import Membership
from scheduler_bridge.models import Job, JobEvent, JobRun, JobState, JobTask
from tests.conftest import client_for
from tests.factories import PartitionFactory, allocation_bought

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\necho hello\n"


@pytest.fixture
def allocation(team):
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )


def _body(allocation, **changes):
    return {
        "allocation": str(allocation.uuid),
        "name": "hello",
        "script": SCRIPT,
        "time_limit_minutes": 60,
        **changes,
    }


def _nothing_changed(allocation):
    allocation.refresh_from_db()
    assert allocation.reserved == 0 and allocation.used == 0
    assert Job.objects.count() == 0 and JobTask.objects.count() == 0


def test_a_member_submits_a_job_that_reserves_cores_times_time_limit(
    team, allocation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        answer = client_for(team.member).post(
            "/api/v1/jobs/",
            _body(allocation, cpus_per_task=2, ntasks=2, time_limit_minutes=90),
            format="json",
        )

    assert answer.status_code == 201, answer.json()
    job = answer.json()
    assert job["state"] == "queued"
    assert job["reserved_units"] == "6"  # 4 cores x 1.5 h
    assert job["estimated_max_cost"] == "12.000000"  # x 2.00
    assert job["usage"] == {"units": "0", "elapsed_seconds": 0, "cpu_seconds": "0.000"}
    assert job["efficiency"] == {"cpu": None}
    assert job["tasks"] == [] and job["array"] is None
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("6")
    assert len(callbacks) == 1  # the submission task, after the commit
    assert list(JobEvent.objects.values_list("state", flat=True)) == ["queued"]


def test_an_array_reserves_for_every_task(team, allocation):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, array="0-19%4", time_limit_minutes=30), format="json"
    )

    assert answer.status_code == 201, answer.json()
    assert answer.json()["reserved_units"] == "10"  # 20 tasks x 1 core x 0.5 h
    assert [task["index"] for task in answer.json()["tasks"]] == list(range(20))
    assert JobTask.objects.filter(reserved_units=Decimal("0.5")).count() == 20


@pytest.mark.parametrize(
    ("script", "code", "line", "reason"),
    [
        # sbatch reads PBS and LSF directives too, unless told not to (it is: --ignore-pbs):
        # the platform refuses them rather than leave them unread.
        (
            "#!/bin/bash\n#PBS -l walltime=99:00:00\n",
            "sbatch_directive_not_allowed",
            2,
            "#PBS lines are options of another scheduler; write them as #SBATCH options "
            "(sbatch here is given --ignore-pbs and would not read them).",
        ),
        (
            "#!/bin/bash\n#BSUB -W 9999\n",
            "sbatch_directive_not_allowed",
            2,
            "#BSUB lines are options of another scheduler; write them as #SBATCH options "
            "(sbatch here is given --ignore-pbs and would not read them).",
        ),
        (
            "#!/bin/bash\n#SBATCH -c 1\n#SBATCH --walltime=9\n",
            "sbatch_directive_unknown",
            3,
            "unrecognized option '--walltime=9'",
        ),
        (
            "#!/bin/bash\n#SBATCH --workdir=/tmp\n",
            "sbatch_directive_removed",
            2,
            "unrecognized option '--workdir=/tmp': sbatch no longer has --workdir (gone since "
            "Slurm 19.05); write --chdir instead",
        ),
        (
            "#!/bin/bash\n#SBATCH --time=1:2:3:4\n",
            "sbatch_directive_invalid",
            2,
            "Invalid --time specification",
        ),
        (
            "#!/bin/bash\n#SBATCH --mem=1G\n#SBATCH --mem-per-cpu=100\n",
            "sbatch_directive_conflict",
            3,
            "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.",
        ),
        (
            "echo no interpreter\n",
            "script_not_a_batch_script",
            1,
            "This does not look like a batch script.  The first line must start with #! "
            "followed by the path to an interpreter. For instance: #!/bin/sh",
        ),
        (
            "#!/bin/bash\r\n#SBATCH -c 1\r\n",
            "script_dos_line_breaks",
            1,
            "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line "
            "breaks (\\n).",
        ),
        (
            "#!/bin/bash\n#SBATCH hetjob\n",
            "sbatch_directive_not_supported",
            2,
            "`hetjob` starts a component of a heterogeneous job; the platform runs one job of "
            "one component.",
        ),
    ],
)
def test_a_script_sbatch_would_refuse_is_refused_with_its_code_line_and_reason(
    team, allocation, script, code, line, reason
):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, script=script), format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == code
    assert answer.json()["extra"]["line"] == line
    assert answer.json()["extra"]["reason"] == reason
    assert answer.json()["detail"] == f"Line {line}: {reason}"
    _nothing_changed(allocation)


def test_sbatch_lines_that_sbatch_does_not_read_are_the_scripts_own_comments(team, allocation):
    script = "#!/bin/bash\n  #SBATCH --account=other\n#sbatch --mem=1T\necho hi\n#SBATCH -N 9\n"
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, script=script), format="json"
    )

    assert answer.status_code == 201, answer.json()
    assert answer.json()["directives"]["honoured"] == []
    assert answer.json()["directives"]["overridden"] == []
    assert answer.json()["nodes"] == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"time_limit_minutes": 0}, "time_limit_minutes"),
        ({"cpus_per_task": 9}, "cpus_per_task"),
        ({"ntasks": 3, "cpus_per_task": 3}, "cpus_per_task"),
        ({"nodes": 3, "ntasks": 3}, "nodes"),
        ({"nodes": 2, "ntasks": 1}, "nodes"),
        ({"gpus": 1}, "gpus"),
        ({"array": "5-1"}, "array"),
        ({"array": "0-2000"}, "array"),
        ({"array": "a-b"}, "array"),
        ({"environment": {"1BAD": "x"}}, "environment"),
        ({"environment": {"SBATCH_ACCOUNT": "other"}}, "environment"),
        ({"environment": {"SLURM_JOB_ID": "1"}}, "environment"),
        ({"environment": {"OK": "a\x00b"}}, "environment"),
        ({"name": "line\nbreak"}, "name"),
        ({"time_limit_minutes": 60 * 24 * 31}, "time_limit_minutes"),
    ],
)
def test_invalid_fields_are_refused_and_change_nothing(team, allocation, changes, field):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, **changes), format="json"
    )

    assert answer.status_code == 400, answer.json()
    assert answer.json()["code"] == "invalid"
    # A nested field's messages are under its path (`environment.OK`)
    assert {key.split(".")[0] for key in answer.json()["extra"]["fields"]} == {field}
    _nothing_changed(allocation)


def test_a_job_larger_than_the_allocation_is_refused_with_402(team, allocation):
    client = client_for(team.member)
    assert (
        client.post(
            "/api/v1/jobs/",
            _body(allocation, time_limit_minutes=60 * 12, cpus_per_task=8),
            format="json",
        ).status_code
        == 201
    )  # 96 units

    answer = client.post("/api/v1/jobs/", _body(allocation, cpus_per_task=5), format="json")

    assert answer.status_code == 402
    assert answer.json()["code"] == "allocation_exhausted"
    assert answer.json()["extra"] == {"requested_units": "5.000000", "unreserved_units": "4.000000"}
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("96") and Job.objects.count() == 1


def test_someone_elses_allocation_is_refused_and_nothing_is_created(team, allocation):
    answer = client_for(team.outsider).post("/api/v1/jobs/", _body(allocation), format="json")

    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"] == {"allocation": ["No such allocation."]}
    _nothing_changed(allocation)


def test_an_allocation_whose_window_has_not_started_is_409(team, allocation):
    Allocation.objects.filter(pk=allocation.pk).update(
        window_start=allocation.window_end.replace(year=allocation.window_end.year + 1),
        window_end=allocation.window_end.replace(year=allocation.window_end.year + 2),
    )

    answer = client_for(team.member).post("/api/v1/jobs/", _body(allocation), format="json")

    assert answer.status_code == 409
    assert answer.json()["code"] == "allocation_not_active"
    _nothing_changed(allocation)


def test_the_idempotency_key_replays_the_first_answer(team, allocation):
    client = client_for(team.member)
    first = client.post(
        "/api/v1/jobs/", _body(allocation), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    again = client.post(
        "/api/v1/jobs/", _body(allocation), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )
    other = client.post(
        "/api/v1/jobs/", _body(allocation, name="other"), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )

    assert (first.status_code, again.status_code) == (201, 201)
    assert first.json()["id"] == again.json()["id"]
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    assert Job.objects.count() == 1
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal(1)


def test_members_see_their_organizations_jobs_and_nobody_else_does(team, allocation):
    job_id = (
        client_for(team.member).post("/api/v1/jobs/", _body(allocation), format="json").json()["id"]
    )

    for user in (team.admin, team.member):
        listed = client_for(user).get("/api/v1/jobs/").json()
        assert [job["id"] for job in listed["results"]] == [job_id]
        assert client_for(user).get(f"/api/v1/jobs/{job_id}/").status_code == 200
    outsider = client_for(team.outsider)
    assert outsider.get("/api/v1/jobs/").json()["count"] == 0
    for path in ("", "output/"):
        answer = outsider.get(f"/api/v1/jobs/{job_id}/{path}")
        assert answer.status_code == 404 and answer.json()["code"] == "not_found"
    answer = outsider.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert answer.status_code == 404
    assert Job.objects.get().state == JobState.QUEUED


def test_the_list_filters_by_state_allocation_and_organization(team, allocation):
    client = client_for(team.member)
    first = client.post("/api/v1/jobs/", _body(allocation), format="json").json()["id"]
    second = client.post("/api/v1/jobs/", _body(allocation), format="json").json()["id"]
    client.post(f"/api/v1/jobs/{first}/cancel/")

    def listed(query):
        return [job["id"] for job in client.get(f"/api/v1/jobs/?{query}").json()["results"]]

    assert listed("state=cancelled") == [first]
    assert listed("state=queued&state=cancelled") == [second, first]
    assert listed(f"allocation={allocation.uuid}") == [second, first]
    assert listed(f"organization={team.organization.uuid}") == [second, first]
    assert client.get("/api/v1/jobs/?state=sleeping").status_code == 400


def test_cancelling_a_queued_job_ends_it_at_once_and_releases_its_reservation(team, allocation):
    client = client_for(team.member)
    job_id = client.post("/api/v1/jobs/", _body(allocation, cpus_per_task=4), format="json").json()[
        "id"
    ]

    answer = client.post(f"/api/v1/jobs/{job_id}/cancel/")

    assert answer.status_code == 202
    assert answer.json()["state"] == "cancelled"
    assert [event["state"] for event in answer.json()["history"]] == ["queued", "cancelled"]
    allocation.refresh_from_db()
    assert allocation.reserved == 0 and allocation.used == 0
    again = client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "job_already_ended"


def test_output_of_a_job_not_yet_on_the_cluster_is_empty_text(team, allocation):
    job_id = (
        client_for(team.member).post("/api/v1/jobs/", _body(allocation), format="json").json()["id"]
    )

    answer = client_for(team.member).get(f"/api/v1/jobs/{job_id}/output/?stream=stderr")

    assert answer.status_code == 200
    assert answer["Content-Type"] == "text/plain; charset=utf-8"
    assert answer.content == b""
    too_much = client_for(team.member).get(f"/api/v1/jobs/{job_id}/output/?tail_bytes=99999999")
    assert too_much.status_code == 400


@pytest.mark.parametrize("changes", [{}, {"array": "0-4", "environment": {"A": "1"}}])
def test_the_answer_to_a_submission_is_the_jobs_detail_as_read_back(team, allocation, changes):
    """The 201 is built from the rows the submission wrote and locked, not read back: it must
    be exactly what GET /jobs/{id} answers."""
    client = client_for(team.member)

    created = client.post("/api/v1/jobs/", _body(allocation, **changes), format="json")

    assert created.status_code == 201, created.json()
    assert client.get(f"/api/v1/jobs/{created.json()['id']}/").json() == created.json()


def test_a_submission_reads_what_it_checks_and_writes_its_rows_once(team, allocation):
    """A team's job once its tenant lease is there: the allocation read twice (visible to the
    member, then locked), the membership, the lease, the allocation's reservation, the job,
    its task and first event, then its tasks and history for the answer. No lock on the
    team's row (only a first lease takes it), no read of runs a queued job cannot have."""
    client = client_for(team.member)
    client.post("/api/v1/jobs/", _body(allocation), format="json")

    with CaptureQueriesContext(connection) as queries:
        assert client.post("/api/v1/jobs/", _body(allocation), format="json").status_code == 201

    statements = [query["sql"] for query in queries.captured_queries]
    team_locks = [
        sql
        for sql in statements
        if sql.startswith('SELECT "marketplace_organization"') and "FOR UPDATE" in sql
    ]
    assert not team_locks
    assert not [sql for sql in statements if "scheduler_bridge_jobrun" in sql]
    assert len(statements) <= 14, "\n".join(statements)


def _statement_kind(sql):
    """`SELECT marketplace_allocation`, `INSERT scheduler_bridge_job`, ...; None for the
    transaction's own statements (savepoints in a test)."""
    verb = sql.split(None, 1)[0]
    if verb in ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK"):
        return None
    # A SELECT's own table is its last FROM's (a subquery in its columns comes before it).
    table = sql.split('"', 2)[1] if verb in ("UPDATE", "INSERT") else sql.rsplit(' FROM "')[-1]
    locked = " FOR UPDATE" if "FOR UPDATE" in sql else ""
    return f"{verb} {table.split(chr(34))[0]}{locked}"


def test_a_submission_is_one_read_before_its_transaction_and_its_writes(team, allocation):
    """Issue 33: with the API token cached (as deployed), a POST /jobs/ of a team that holds
    its tenant lease reads the allocation with the member's row in one query, then, in its
    transaction, locks the allocation's own row (reading the team's lease with it), and writes
    the reservation, the job, its task and its first event. The answer reads nothing back."""
    client = client_for(team.member)
    assert client.post("/api/v1/jobs/", _body(allocation), format="json").status_code == 201
    assert TenantLease.objects.filter(organization=team.organization).count() == 1

    with CaptureQueriesContext(connection) as queries:
        answer = client.post("/api/v1/jobs/", _body(allocation), format="json")

    assert answer.status_code == 201, answer.json()
    statements = [query["sql"] for query in queries.captured_queries]
    # The token's read and its time of last use (the test settings cache no token).
    token = [sql for sql in statements if "computeshare_apitoken" in sql]
    assert len(token) == 1
    kinds = [_statement_kind(sql) for sql in statements if sql not in token]
    assert [kind for kind in kinds if kind] == [
        "SELECT marketplace_allocation",
        "SELECT marketplace_allocation FOR UPDATE",
        "UPDATE marketplace_allocation",
        "INSERT scheduler_bridge_job",
        "INSERT scheduler_bridge_jobtask",
        "INSERT scheduler_bridge_jobevent",
    ], "\n".join(statements)
    assert answer.json()["history"][0]["state"] == "queued"
    lease = TenantLease.objects.get(organization=team.organization)
    assert Job.objects.filter(lease=lease).count() == 2


SUBMIT_TASK = "scheduler_bridge.tasks.cluster_jobs_submit_task"


def _messages_waiting(queue):
    from computeshare.celery import app

    with app.connection_for_write() as broker:
        return broker.default_channel.client.llen(queue)


def _accepted(client, allocation, capture):
    """A job accepted, and what its commit does after it done."""
    with capture(execute=True):
        answer = client.post(
            "/api/v1/jobs/", _body(allocation, time_limit_minutes=1), format="json"
        )
    assert answer.status_code == 201, answer.json()


def test_jobs_accepted_while_a_submission_message_waits_send_no_other(
    team, allocation, settings, django_capture_on_commit_callbacks
):
    """With JOBS_SUBMIT_WAKE_SECONDS (Redis), the jobs accepted while the cluster's submission
    message waits for a worker send none of their own: that message submits every queued job
    of the cluster when it runs. Once a worker has taken it, the next job sends one again."""
    from computeshare.queue import enqueued_once_started
    from tests.workers import tasks_routed_to

    settings.JOBS_SUBMIT_WAKE_SECONDS = 10.0
    client = client_for(team.member)
    enqueued_once_started(SUBMIT_TASK, allocation.cluster_id)  # no mark of an earlier run
    with tasks_routed_to(f"wake-{uuid.uuid4().hex[:8]}") as queue:
        for _ in range(3):
            _accepted(client, allocation, django_capture_on_commit_callbacks)
        waiting_after_three = _messages_waiting(queue)
        # What the task does first when a worker takes the message.
        enqueued_once_started(SUBMIT_TASK, allocation.cluster_id)
        _accepted(client, allocation, django_capture_on_commit_callbacks)
        waiting_after_four = _messages_waiting(queue)
        enqueued_once_started(SUBMIT_TASK, allocation.cluster_id)

    assert waiting_after_three == 1
    assert waiting_after_four == 2
    assert Job.objects.filter(state=JobState.QUEUED).count() == 4


def test_without_a_shared_cache_every_accepted_job_sends_its_message(
    team, allocation, settings, django_capture_on_commit_callbacks
):
    from tests.workers import tasks_routed_to

    settings.JOBS_SUBMIT_WAKE_SECONDS = 0.0
    client = client_for(team.member)
    with tasks_routed_to(f"wake-{uuid.uuid4().hex[:8]}") as queue:
        for _ in range(3):
            _accepted(client, allocation, django_capture_on_commit_callbacks)
        waiting = _messages_waiting(queue)

    assert waiting == 3


def test_the_list_makes_the_same_queries_for_1_and_30_jobs(team, allocation):
    client = client_for(team.member)
    client.post("/api/v1/jobs/", _body(allocation), format="json")
    with CaptureQueriesContext(connection) as one:
        assert client.get("/api/v1/jobs/").status_code == 200
    for _ in range(29):
        client.post("/api/v1/jobs/", _body(allocation), format="json")
    with CaptureQueriesContext(connection) as thirty:
        assert len(client.get("/api/v1/jobs/").json()["results"]) == 30

    assert len(thirty) == len(one)


def _ran(allocation, member, name, *, elapsed, started=True):
    """A job that ran and was settled as accounting reported it (`started` False: one
    cancelled while it pended, which accounting records with no start and nothing allocated)."""
    from datetime import UTC, datetime

    from hpc.types import RunRecord
    from scheduler_bridge import services

    job = services.job_submit(
        actor=Membership.objects.get(organization=allocation.organization, user=member),
        allocation=allocation,
        request=services.JobRequest(name=name, script=SCRIPT, time_limit_minutes=60),
    )
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id=str(job.pk))
    moment = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    run = RunRecord(
        job_id=str(job.pk),
        raw_job_id=str(job.pk),
        array_job_id=str(job.pk),
        array_task_id=None,
        name=job.scheduler_name,
        state="completed" if started else "cancelled",
        scheduler_state="COMPLETED" if started else "CANCELLED by 1000",
        exit_code=0,
        submit_time=moment,
        start_time=moment if started else None,
        end_time=moment,
        elapsed_seconds=elapsed,
        allocated_cpus=1 if started else 0,
        allocated_gpus=0,
        cpu_seconds=elapsed / 2 if started else 0.0,
    )
    services.job_task_settle(task_id=job.tasks.get().pk, runs=[run], final=run)
    return services.job_state_refresh(job_id=job.pk)


def test_the_usage_report_lists_each_job_that_ran_with_its_cost_as_json_and_csv(team, allocation):
    first = _ran(allocation, team.member, "first", elapsed=1800)
    second = _ran(allocation, team.member, "second, with a comma", elapsed=900)
    client_for(team.member).post("/api/v1/jobs/", _body(allocation), format="json")  # queued

    answer = client_for(team.member).get(f"/api/v1/organizations/{team.organization.uuid}/usage/")

    assert answer.status_code == 200
    rows = answer.json()["results"]
    assert [(row["name"], row["units"], row["cost"]) for row in rows] == [
        ("first", "0.5", "1.000000"),
        ("second, with a comma", "0.25", "0.500000"),
    ]
    csv_answer = client_for(team.member).get(
        f"/api/v1/organizations/{team.organization.uuid}/usage/?format=csv"
    )
    assert csv_answer.status_code == 200
    assert csv_answer["Content-Type"] == "text/csv; charset=utf-8"
    lines = csv_answer.content.decode().splitlines()
    assert lines[0] == (
        "job,name,cluster,partition,state,units,cost,started_at,ended_at,origin,scheduler_job_id"
    )
    assert lines[1].startswith(f"{first.uuid},first,{allocation.cluster.name},debug,completed,0.5,")
    assert lines[2].startswith(f'{second.uuid},"second, with a comma",')
    assert len(lines) == 3
    outsider = client_for(team.outsider).get(
        f"/api/v1/organizations/{team.organization.uuid}/usage/"
    )
    assert outsider.status_code == 404


# --- Where a job comes from, and where it runs ------------------------------------------------


def run_record(
    scheduler_job_id: str,
    *,
    lease: TenantLease,
    name: str,
    partition: str,
    submitted,
    elapsed: int,
    state: str = "completed",
    scheduler_state: str = "COMPLETED",
    requeued_after: int = 0,
):
    """One run of a job as Slurm's accounting records it: submitted `requeued_after` seconds
    after `submitted` (a run after a requeue), by the lease's tenant."""
    from hpc.types import RunRecord

    start = submitted + timedelta(seconds=requeued_after)
    return RunRecord(
        job_id=scheduler_job_id,
        raw_job_id=scheduler_job_id,
        array_job_id=scheduler_job_id,
        array_task_id=None,
        name=name,
        state=state,
        scheduler_state=scheduler_state,
        exit_code=0,
        submit_time=start,
        start_time=start,
        end_time=start + timedelta(seconds=elapsed),
        elapsed_seconds=elapsed,
        allocated_cpus=1,
        allocated_gpus=0,
        cpu_seconds=elapsed / 2,
        time_limit_minutes=60,
        user=lease.account.username,
        partition=partition,
    )


def tenant_job_ran(
    allocation: Allocation,
    scheduler_job_id: str = "9001",
    *,
    name: str = "inner-step",
    elapsed: int = 1800,
    requeued: bool = False,
) -> Job:
    """A job that one of the team's jobs submitted on the cluster (sbatch as the team's
    tenant), recorded as the poll records one it finds under the team's lease
    (`services.tenant_jobs`: reserving 1 core x its 60-minute limit), then settled as
    accounting reported it; `requeued`: it requeued itself once, and both runs are charged."""
    from django.db.models import F

    from scheduler_bridge import services

    lease = TenantLease.objects.select_related("account").get(
        organization=allocation.organization,
        cluster=allocation.cluster,
        status=TenantLease.Status.ACTIVE,
    )
    submitted = lease.created_at + timedelta(seconds=1)
    job = Job.objects.create(
        allocation=allocation,
        organization=allocation.organization,
        cluster=allocation.cluster,
        lease=lease,
        origin=Job.Origin.TENANT,
        name=name,
        script="",
        time_limit_minutes=60,
        partition_name=allocation.partition.name,
        reserved_units=Decimal(1),
        state=JobState.SUBMITTED,
        scheduler_job_id=scheduler_job_id,
        submitted_at=submitted,
    )
    JobEvent.objects.create(job=job, state=JobState.SUBMITTED, at=submitted)
    task = JobTask.objects.create(
        job=job,
        reserved_units=Decimal(1),
        state=JobState.SUBMITTED,
        scheduler_job_id=scheduler_job_id,
    )
    Allocation.objects.filter(pk=allocation.pk).update(reserved=F("reserved") + 1)
    common = {
        "lease": lease,
        "name": name,
        "partition": allocation.partition.name,
        "submitted": submitted,
    }
    runs = [run_record(scheduler_job_id, elapsed=elapsed, **common)]
    if requeued:
        runs = [
            run_record(
                scheduler_job_id,
                elapsed=600,
                state="requeued",
                scheduler_state="REQUEUED",
                **common,
            ),
            run_record(scheduler_job_id, elapsed=elapsed, requeued_after=900, **common),
        ]
    services.job_task_settle(task_id=task.pk, runs=runs, final=runs[-1])
    return services.job_state_refresh(job_id=job.pk)


def test_a_platform_job_says_where_it_comes_from_and_where_it_runs(team, allocation):
    client = client_for(team.member)
    created = client.post("/api/v1/jobs/", _body(allocation), format="json").json()

    detail = client.get(f"/api/v1/jobs/{created['id']}/").json()
    listed = client.get("/api/v1/jobs/").json()["results"]

    for job in (created, detail, listed[0]):
        assert (job["origin"], job["partition"]) == ("platform", "debug")
    assert detail["script"] == SCRIPT


def test_a_job_submitted_by_one_of_the_teams_jobs_is_listed_as_such(team, allocation):
    job = tenant_job_ran(allocation, "9001", name="inner-step", elapsed=1800)
    client = client_for(team.member)

    detail = client.get(f"/api/v1/jobs/{job.uuid}/").json()
    listed = client.get("/api/v1/jobs/").json()["results"]

    assert (
        detail["origin"],
        detail["name"],
        detail["partition"],
        detail["scheduler_job_id"],
        detail["state"],
    ) == ("tenant", "inner-step", "debug", "9001", "completed")
    # The platform never had its script: there is none to show.
    assert detail["script"] is None
    assert detail["usage"]["units"] == "0.5"  # 1 core x 30 min
    assert detail["cost"] == "1.000000"  # x 2.00
    assert [(row["id"], row["origin"], row["partition"]) for row in listed] == [
        (str(job.uuid), "tenant", "debug")
    ]


def test_the_output_of_a_job_submitted_on_the_cluster_is_not_kept(team, allocation):
    job = tenant_job_ran(allocation)
    client = client_for(team.member)

    answer = client.get(f"/api/v1/jobs/{job.uuid}/output/")
    # The state is said before the query is read (house order: 409 before 400).
    with_a_bad_query = client.get(f"/api/v1/jobs/{job.uuid}/output/?tail_bytes=-1")

    assert answer.status_code == 409
    assert answer.json()["code"] == "output_not_kept"
    assert answer.json()["detail"].startswith("This job was submitted on the cluster by one of")
    assert with_a_bad_query.status_code == 409
    assert client_for(team.outsider).get(f"/api/v1/jobs/{job.uuid}/output/").status_code == 404


def test_a_job_that_ran_for_under_a_second_costs_nothing_and_is_still_a_row_of_the_usage(
    team, allocation
):
    """Accounting counts whole seconds: a job of a fraction of one is metered 0 units. It ran,
    so it is a row of the usage report (JSON and CSV) with its start; a job cancelled while it
    pended never ran, and is not."""
    quick = _ran(allocation, team.member, "quick", elapsed=0)
    _ran(allocation, team.member, "never-ran", elapsed=0, started=False)
    path = f"/api/v1/organizations/{team.organization.uuid}/usage/"

    rows = client_for(team.member).get(path).json()["results"]
    table = list(
        csv.DictReader(io.StringIO(client_for(team.member).get(f"{path}?format=csv").text))
    )

    assert [(row["name"], row["units"], row["cost"]) for row in rows] == [
        ("quick", "0", "0.000000")
    ]
    assert [
        (row["job"], row["name"], row["units"], row["cost"], row["started_at"][:19])
        for row in table
    ] == [(str(quick.uuid), "quick", "0", "0.000000", "2026-11-20T12:00:00")]


def test_the_usage_report_lists_the_runs_the_platform_did_not_submit_with_their_slurm_id(
    team, allocation
):
    mine = _ran(allocation, team.member, "submitted", elapsed=900)
    theirs = tenant_job_ran(allocation, "9001", name="inner-step", elapsed=1800)
    path = f"/api/v1/organizations/{team.organization.uuid}/usage/"

    rows = client_for(team.member).get(path).json()["results"]
    table = list(
        csv.DictReader(io.StringIO(client_for(team.member).get(f"{path}?format=csv").text))
    )

    assert [
        (row["job"], row["name"], row["origin"], row["scheduler_job_id"], row["units"])
        for row in rows
    ] == [
        (str(mine.uuid), "submitted", "platform", mine.scheduler_job_id, "0.25"),
        (str(theirs.uuid), "inner-step", "tenant", "9001", "0.5"),
    ]
    assert [
        (row["job"], row["partition"], row["origin"], row["scheduler_job_id"], row["cost"])
        for row in table
    ] == [
        (str(mine.uuid), "debug", "platform", mine.scheduler_job_id, "0.500000"),
        (str(theirs.uuid), "debug", "tenant", "9001", "1.000000"),
    ]


def test_a_job_that_requeued_itself_is_charged_for_every_run(team, allocation):
    job = tenant_job_ran(allocation, "9002", elapsed=1800, requeued=True)

    answer = client_for(team.member).get(f"/api/v1/jobs/{job.uuid}/").json()

    runs = JobRun.objects.filter(task__job=job).order_by("submit_time")
    assert [(run.state, run.units) for run in runs] == [
        ("requeued", Decimal("0.166667")),
        ("completed", Decimal("0.5")),
    ]
    assert answer["usage"]["units"] == "0.666667"
