"""A job's secret variables (`secret_environment`): kept encrypted at rest, never shown again
(API, pages, admin, the idempotency record), only their names; checked like the environment;
and on the real cluster they reach the job as environment variables while the files that carried
them there are gone once sbatch has read them."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.db import connection
from django.urls import reverse

from computeshare.models import IdempotencyRecord
from marketplace.models import Allocation
from scheduler_bridge.models import Job, JobTask
from scheduler_bridge.services.dispatch import job_mark_submitted
from scheduler_bridge.services.specs import job_spec
from tests.conftest import client_for, tenants_jobs_cancel, wait_for
from tests.factories import (
    MembershipFactory,
    PartitionFactory,
    UserFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
)

SECRET = "s3cr3t-Value-7f1c9a"
OTHER_SECRET = "another-hidden-42"
SCRIPT = "#!/bin/bash\necho hello\n"


@pytest.fixture
def allocation(team: Any) -> Allocation:
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )


def _body(allocation: Allocation, **changes: Any) -> dict[str, Any]:
    return {
        "allocation": str(allocation.uuid),
        "name": "uses a key",
        "script": SCRIPT,
        "time_limit_minutes": 60,
        "environment": {"MODE": "fast"},
        "secret_environment": {"API_TOKEN": SECRET, "DB_PASSWORD": OTHER_SECRET},
        **changes,
    }


def _stored_column(job: Job) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT secret_environment FROM scheduler_bridge_job WHERE id = %s", [job.pk]
        )
        return str(cursor.fetchone()[0])


def _shows_no_secret(text: str) -> None:
    assert SECRET not in text and OTHER_SECRET not in text


@pytest.mark.django_db
def test_secrets_are_stored_encrypted_and_the_api_shows_only_their_names(team, allocation):
    client = client_for(team.member)

    answer = client.post(
        "/api/v1/jobs/", _body(allocation), format="json", HTTP_IDEMPOTENCY_KEY="once"
    )

    assert answer.status_code == 201, answer.json()
    _shows_no_secret(answer.content.decode())
    job_data = answer.json()
    assert job_data["environment"] == {"MODE": "fast"}
    assert job_data["secret_environment_names"] == ["API_TOKEN", "DB_PASSWORD"]
    assert "secret_environment" not in job_data
    job = Job.objects.get()
    # At rest: one Fernet token under FIELD_ENCRYPTION_KEY, no clear text.
    stored = _stored_column(job)
    _shows_no_secret(stored)
    assert "API_TOKEN" not in stored
    keys = [Fernet(key.strip()) for key in settings.FIELD_ENCRYPTION_KEY.split(",")]
    assert any(SECRET.encode() in key.decrypt(stored.encode()) for key in keys[:1])
    # The job reads them back, and its spec gives them to the job like the environment.
    assert job.secret_environment == {"API_TOKEN": SECRET, "DB_PASSWORD": OTHER_SECRET}
    assert job_spec(job).environment == {
        "MODE": "fast",
        "API_TOKEN": SECRET,
        "DB_PASSWORD": OTHER_SECRET,
    }
    # Neither the detail, the list, the replay nor its stored answer shows a value.
    for url in (f"/api/v1/jobs/{job.uuid}/", "/api/v1/jobs/"):
        shown = client.get(url)
        assert shown.status_code == 200
        _shows_no_secret(shown.content.decode())
    assert client.get(f"/api/v1/jobs/{job.uuid}/").json()["secret_environment_names"] == [
        "API_TOKEN",
        "DB_PASSWORD",
    ]
    replay = client.post(
        "/api/v1/jobs/", _body(allocation), format="json", HTTP_IDEMPOTENCY_KEY="once"
    )
    assert replay.status_code == 201 and replay.json()["id"] == job_data["id"]
    _shows_no_secret(replay.content.decode())
    _shows_no_secret(str(IdempotencyRecord.objects.get(key="once").response_body))
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_a_job_that_leaves_the_queue_keeps_only_the_names_of_its_secrets(team, allocation):
    client = client_for(team.member)
    cancelled = client.post("/api/v1/jobs/", _body(allocation), format="json").json()["id"]
    submitted = client.post("/api/v1/jobs/", _body(allocation), format="json").json()["id"]

    assert client.post(f"/api/v1/jobs/{cancelled}/cancel/").status_code == 202
    assert job_mark_submitted(job_id=Job.objects.get(uuid=submitted).pk, scheduler_job_id="77")

    for job_id in (cancelled, submitted):
        job = Job.objects.get(uuid=job_id)
        assert job.secret_environment == {"API_TOKEN": "", "DB_PASSWORD": ""}
        _shows_no_secret(_stored_column(job))
        assert client.get(f"/api/v1/jobs/{job_id}/").json()["secret_environment_names"] == [
            "API_TOKEN",
            "DB_PASSWORD",
        ]


@pytest.mark.django_db
def test_a_job_without_secrets_stores_no_token(team, allocation):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, secret_environment={}), format="json"
    )

    assert answer.status_code == 201
    assert answer.json()["secret_environment_names"] == []
    job = Job.objects.get()
    assert _stored_column(job) == ""
    assert job.secret_environment == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({"1BAD": SECRET}, "`1BAD` is not a valid name"),
        ({"SLURM_JOB_ID": SECRET}, "`SLURM_JOB_ID` is the scheduler's"),
        ({"MODE": SECRET}, "`MODE` is also in the environment"),
        ({"NUL": SECRET + "\x00"}, "Null characters are not allowed."),
        ({"LONG": SECRET * 300}, "The value of `LONG` is longer than 4096."),
    ],
)
def test_secrets_follow_the_environments_rules_and_a_refusal_names_no_value(
    team, allocation, secrets, message
):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, secret_environment=secrets), format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    fields = answer.json()["extra"]["fields"]
    problems = [
        problem
        for field, messages in fields.items()
        if field.startswith("secret_environment")
        for problem in messages
    ]
    assert any(problem.startswith(message) for problem in problems), problems
    _shows_no_secret(answer.content.decode())
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    assert Job.objects.count() == 0 and JobTask.objects.count() == 0


@pytest.mark.django_db
def test_secrets_given_as_something_else_than_text_are_refused(team, allocation):
    answer = client_for(team.member).post(
        "/api/v1/jobs/", _body(allocation, secret_environment={"KEY": {"a": 1}}), format="json"
    )

    assert answer.status_code == 400
    assert "secret_environment.KEY" in answer.json()["extra"]["fields"]
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_the_pages_take_secrets_and_show_only_their_names(client, team, allocation):
    client.force_login(team.member)
    data = {
        "name": "uses a key",
        "script": SCRIPT,
        "time_limit_minutes": "60",
        "cpus_per_task": "1",
        "ntasks": "1",
        "nodes": "1",
        "array": "",
        "environment": "MODE=fast\n",
        "secret_environment": f"API_TOKEN={SECRET}\r\nDB_PASSWORD={OTHER_SECRET}\r\n",
    }

    # A refused form is drawn again without the secrets it was sent.
    refused = client.post(
        reverse("job-submit", args=[allocation.uuid]), {**data, "script": "no interpreter"}
    )
    assert refused.status_code == 400
    _shows_no_secret(refused.content.decode())
    assert Job.objects.count() == 0

    accepted = client.post(reverse("job-submit", args=[allocation.uuid]), data)

    assert accepted.status_code == 302
    job = Job.objects.get()
    assert job.environment == {"MODE": "fast"}
    assert job.secret_environment == {"API_TOKEN": SECRET, "DB_PASSWORD": OTHER_SECRET}
    page = client.get(reverse("job-detail", args=[job.uuid])).content.decode()
    assert "API_TOKEN=" in page and "DB_PASSWORD=" in page and "(hidden)" in page
    _shows_no_secret(page)
    for name in ("job-status", "job-output"):
        fragment = client.get(reverse(name, args=[job.uuid]))
        _shows_no_secret(fragment.content.decode())


@pytest.mark.django_db
def test_the_admin_shows_the_names_of_secrets_and_never_their_values(client, team, allocation):
    client_for(team.member).post("/api/v1/jobs/", _body(allocation), format="json")
    job = Job.objects.get()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))

    change = client.get(f"/admin/scheduler_bridge/job/{job.pk}/change/")
    listing = client.get("/admin/scheduler_bridge/job/")

    assert change.status_code == 200 and listing.status_code == 200
    assert "API_TOKEN, DB_PASSWORD" in change.content.decode()
    _shows_no_secret(change.content.decode())
    _shows_no_secret(listing.content.decode())
    # The encrypted column is no field of the form either (nothing to edit, nothing shown).
    assert 'name="secret_environment"' not in change.content.decode()


# --- On the real cluster -------------------------------------------------------------------------

SECRET_SCRIPT = """#!/bin/bash
printf 'sha256=%s\\n' "$(printf '%s' "$API_TOKEN" | sha256sum | cut -d' ' -f1)"
printf 'length=%s\\n' "${#API_TOKEN}"
printf 'mode=%s\\n' "$MODE"
# The files that carried the variables are removed once they are read.
sleep 3
printf 'files=%s\\n' "$(ls -A | sort | tr '\\n' ' ')"
printf 'mode-of-directory=%s\\n' "$(stat -c %a .)"
"""


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_secret_reaches_the_job_on_the_cluster_and_its_files_do_not_stay(
    testcluster, celery_worker, poller
):
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    team = funded_organization("1000", name="Secret Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=10, price=Decimal("1.00")
    )
    client = client_for(member)
    try:
        answer = client.post(
            "/api/v1/jobs/",
            {
                "allocation": str(allocation.uuid),
                "name": "reads a secret",
                "script": SECRET_SCRIPT,
                "time_limit_minutes": 2,
                "environment": {"MODE": "fast"},
                "secret_environment": {"API_TOKEN": SECRET},
            },
            format="json",
        )
        assert answer.status_code == 201, answer.json()
        job_id = answer.json()["id"]
        job = wait_for(
            lambda: (
                (data := client.get(f"/api/v1/jobs/{job_id}/").json())["state"]
                in ("completed", "failed", "cancelled", "timeout")
                and data
            ),
            timeout=120,
            interval=1,
        )
        assert job["state"] == "completed", job
        stdout = client.get(f"/api/v1/jobs/{job_id}/output/").content.decode()
    finally:
        tenants_jobs_cancel(testcluster)

    assert stdout.splitlines() == [
        f"sha256={hashlib.sha256(SECRET.encode()).hexdigest()}",
        f"length={len(SECRET)}",
        "mode=fast",
        "files=job.sh stderr.txt stdout.txt ",
        "mode-of-directory=700",
    ]
    shown = client.get(f"/api/v1/jobs/{job_id}/")
    _shows_no_secret(shown.content.decode())
    assert shown.json()["secret_environment_names"] == ["API_TOKEN"]
    # Once on the cluster (Slurm keeps the job's environment) the platform keeps the names only.
    assert Job.objects.get(uuid=job_id).secret_environment == {"API_TOKEN": ""}
