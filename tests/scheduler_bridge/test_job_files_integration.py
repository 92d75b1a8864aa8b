"""Input and result files, and quotes, on the real Slurm test cluster with a real Celery worker:
a job given files (one in a nested folder) reads them in its folder as its tenant and writes
results, which the platform fetches and serves byte for byte, one by one and as a tar.gz; a
quote answers Slurm's own `sbatch --test-only` estimate as the tenant and holds nothing."""

from __future__ import annotations

import io
import os
import tarfile
from datetime import datetime
from decimal import Decimal

import pytest

from billing.selectors import wallet_get
from scheduler_bridge.models import Job, JobFile
from tests.conftest import client_for, wait_for
from tests.factories import (
    MembershipFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
)
from tests.scheduler_bridge.test_job_files_api import multipart

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

ENDED = {"completed", "failed", "cancelled", "timeout", "out_of_memory", "node_fail", "preempted"}

SCRIPT = """#!/bin/bash
set -e
mkdir -p out/deep
# The inputs are in the job's folder, its working directory.
cat data/nested/input.bin params.txt > out/joined.bin
sha256sum data/nested/input.bin | cut -d' ' -f1 > out/deep/sum.txt
echo "read $(wc -c < data/nested/input.bin) bytes"
"""


@pytest.fixture
def team_on_cluster(testcluster, celery_worker, poller):
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    team = funded_organization("1000", name="Files Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=40, price=Decimal("3.00")
    )
    return client_for(member), allocation


def test_a_job_reads_its_input_files_and_its_results_come_back_byte_for_byte(team_on_cluster):
    client, allocation = team_on_cluster
    payload = os.urandom(3 * 1024 * 1024 + 17)
    params = b"alpha=1\n"
    body, content_type = multipart(
        {
            "allocation": str(allocation.uuid),
            "name": "files",
            "script": SCRIPT,
            "time_limit_minutes": "2",
        },
        [("data/nested/input.bin", payload), ("params.txt", params)],
    )
    answer = client.generic("POST", "/api/v1/jobs/", body, content_type=content_type)
    assert answer.status_code == 201, answer.json()
    job_id = answer.json()["id"]

    job = wait_for(
        lambda: (data := client.get(f"/api/v1/jobs/{job_id}/").json())["state"] in ENDED and data,
        timeout=150,
        interval=1,
    )
    assert job["state"] == "completed", job
    # Staged, then removed from platform storage: only the record stays.
    assert set(
        JobFile.objects.filter(job__uuid=job_id, kind="input").values_list("name", "stored")
    ) == {("data/nested/input.bin", ""), ("params.txt", "")}

    listing = wait_for(
        lambda: (
            (data := client.get(f"/api/v1/jobs/{job_id}/files/").json())["state"]
            in ("ready", "failed")
            and data
        ),
        timeout=60,
        interval=0.5,
    )
    assert listing["state"] == "ready", listing
    import hashlib

    expected = {
        "out/joined.bin": payload + params,
        "out/deep/sum.txt": hashlib.sha256(payload).hexdigest().encode() + b"\n",
        "stdout.txt": f"read {len(payload)} bytes\n".encode(),
        "stderr.txt": b"",
        "data/nested/input.bin": payload,
        "params.txt": params,
    }
    assert {row["name"]: row["size"] for row in listing["results"]} == {
        name: len(content) for name, content in expected.items()
    }
    assert all(datetime.fromisoformat(row["modified_at"]) for row in listing["results"])
    for name, content in expected.items():
        response = client.get(f"/api/v1/jobs/{job_id}/files/{name}")
        assert response.status_code == 200
        assert b"".join(response.streaming_content) == content, name

    archive = client.get(f"/api/v1/jobs/{job_id}/files.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(b"".join(archive.streaming_content)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == sorted(expected)
        for name, content in expected.items():
            member = tar.extractfile(name)
            assert member is not None and member.read() == content, name
    assert Job.objects.get(uuid=job_id).results_truncated is False


def test_a_quote_gives_slurms_expected_start_and_holds_nothing(team_on_cluster):
    client, allocation = team_on_cluster
    wallet_before = wallet_get(allocation.organization)
    body = {
        "allocation": str(allocation.uuid),
        "name": "quoted",
        "script": "#!/bin/bash\nsleep 1\n",
        "time_limit_minutes": 30,
        "array": "0-3",
    }

    answer = client.post("/api/v1/jobs/quote/", body, format="json")

    assert answer.status_code == 200, answer.json()
    quote = answer.json()
    assert quote["expected_start_source"] == "slurm", quote
    assert datetime.fromisoformat(quote["expected_start"])
    assert quote["reserved_units"] == "2"  # 4 tasks x 1 core x 0.5 h
    assert quote["estimated_max_cost"] == "6.000000"
    assert quote["allocation_remaining_after"] == "38"
    assert quote["budget_remaining_after"] is None
    assert Decimal(quote["wallet_balance"]) == wallet_before.available
    allocation.refresh_from_db()
    assert allocation.reserved == 0 and Job.objects.count() == 0
    assert wallet_get(allocation.organization) == wallet_before

    # Refused as the submission would be, with the same codes.
    too_big = client.post(
        "/api/v1/jobs/quote/", {**body, "array": "0-99", "time_limit_minutes": 60}, format="json"
    )
    assert too_big.status_code == 402 and too_big.json()["code"] == "allocation_exhausted"
    bad = client.post("/api/v1/jobs/quote/", {**body, "script": "no shebang"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "script_not_a_batch_script"
    # The script's lines are read as the submission reads them: held to the partition...
    directive = client.post(
        "/api/v1/jobs/quote/", {**body, "script": "#!/bin/bash\n#SBATCH -N 9\n"}, format="json"
    )
    assert directive.json()["code"] == "invalid"
    assert directive.json()["extra"]["fields"]["nodes"] == ["The partition has 1 nodes."]
    # ...and refused where sbatch would refuse them.
    unknown = client.post(
        "/api/v1/jobs/quote/",
        {**body, "script": "#!/bin/bash\n#SBATCH --walltime=9\n"},
        format="json",
    )
    assert unknown.json()["code"] == "sbatch_directive_unknown"
