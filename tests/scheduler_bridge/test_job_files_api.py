"""Input files on POST /jobs/ without a cluster: accepted files are stored under their names,
refused ones (path escapes, oversize, too many) answer the contract's codes and write nothing:
no job row, no hold, no file in storage. Result files served from storage: one by one and as
a streamed tar.gz."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from scheduler_bridge.job_files import input_name_problem, job_files_storage, stored_name
from scheduler_bridge.models import Job, JobFile, JobState
from tests.conftest import client_for
from tests.factories import PartitionFactory, allocation_bought

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\ncat data/in.txt\n"


@pytest.fixture(autouse=True)
def storage_root(settings, tmp_path) -> Path:
    settings.JOB_FILES_ROOT = tmp_path / "job-files"
    return settings.JOB_FILES_ROOT


@pytest.fixture
def allocation(team):
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )


def multipart(fields: dict[str, str], files: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body written by hand: Django's test client keeps only a file's
    base name, and the names themselves are what is tested here."""
    boundary = uuid.uuid4().hex
    parts = []
    for key, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n'.encode()
            + value.encode()
            + b"\r\n"
        )
    for name, content in files:
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="input_files"; '
            f'filename="{name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
            + content
            + b"\r\n"
        )
    return b"".join(
        parts
    ) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def _fields(allocation, **changes) -> dict[str, str]:
    return {
        "allocation": str(allocation.uuid),
        "name": "with inputs",
        "script": SCRIPT,
        "time_limit_minutes": "10",
        **changes,
    }


def post_files(client, allocation, files, **changes):
    body, content_type = multipart(_fields(allocation, **changes), files)
    return client.generic("POST", "/api/v1/jobs/", body, content_type=content_type)


def _nothing_written(allocation, storage_root: Path) -> None:
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    assert Job.objects.count() == 0 and JobFile.objects.count() == 0
    assert not storage_root.exists() or not any(p.is_file() for p in storage_root.rglob("*"))


def test_input_files_are_stored_under_their_paths_and_listed_on_the_job(
    team, allocation, storage_root
):
    files = [("data/in.txt", b"hello\n"), ("params.json", b'{"a": 1}'), ("a/b/c/d.bin", b"\0" * 3)]
    answer = post_files(
        client_for(team.member), allocation, files, environment=json.dumps({"GREETING": "hi"})
    )

    assert answer.status_code == 201, answer.json()
    job = answer.json()
    assert job["input_files"] == [
        {"name": "a/b/c/d.bin", "size": 3},
        {"name": "data/in.txt", "size": 6},
        {"name": "params.json", "size": 8},
    ]
    assert job["environment"] == {"GREETING": "hi"}
    assert job["results_state"] == "waiting"
    for name, content in files:
        assert (storage_root / stored_name(job["id"], "input", name)).read_bytes() == content


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "/etc/passwd",
        "a/../../b",
        "a/./b",
        "a//b",
        "name\\with\\backslash",
        "with space",
        "a/b/c/d/e",  # five levels
        "job.sh",
        "stdout-3.txt",
        "stderr.txt",
        "a" * 256,  # one part past a file system's 255 bytes (issue 29: was a 500)
        "data/" + "b" * 300 + ".csv",
    ],
)
def test_a_name_that_breaks_a_rule_is_refused_and_nothing_is_written(
    team, allocation, storage_root, name
):
    answer = post_files(client_for(team.member), allocation, [("ok.txt", b"ok"), (name, b"x")])

    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "input_file_name_invalid"
    assert answer.json()["extra"]["name"] == name
    _nothing_written(allocation, storage_root)


@pytest.mark.parametrize("name", ["a\x00b", "a\nb", "a\rb"])
def test_control_characters_in_a_name_are_refused(name):
    assert input_name_problem(name) is not None


def test_the_same_name_twice_or_a_file_that_is_also_a_folder_is_refused(
    team, allocation, storage_root
):
    client = client_for(team.member)
    for files in ([("a.txt", b"1"), ("a.txt", b"2")], [("a", b"1"), ("a/b", b"2")]):
        answer = post_files(client, allocation, files)
        assert answer.status_code == 400 and answer.json()["code"] == "input_file_name_invalid"
    _nothing_written(allocation, storage_root)


def test_oversize_files_are_refused_with_413_and_nothing_is_written(
    team, allocation, storage_root, settings
):
    settings.JOB_INPUT_FILE_MAX_BYTES = 1000
    settings.JOB_INPUT_TOTAL_MAX_BYTES = 1500
    client = client_for(team.member)

    one_too_large = post_files(
        client, allocation, [("ok.txt", b"x" * 10), ("big.bin", b"x" * 1001)]
    )
    assert one_too_large.status_code == 413
    assert one_too_large.json()["code"] == "input_files_too_large"
    assert one_too_large.json()["extra"] == {"limit_bytes": 1000, "name": "big.bin"}

    together = post_files(client, allocation, [("a.bin", b"x" * 800), ("b.bin", b"x" * 800)])
    assert together.status_code == 413
    assert together.json()["extra"] == {"limit_bytes": 1500}
    _nothing_written(allocation, storage_root)


def test_too_many_files_are_refused_and_nothing_is_written(
    team, allocation, storage_root, settings
):
    settings.JOB_INPUT_FILES_MAX = 3
    files = [(f"f{index}.txt", b"x") for index in range(4)]

    answer = post_files(client_for(team.member), allocation, files)

    assert answer.status_code == 400
    assert answer.json()["code"] == "too_many_input_files"
    assert answer.json()["extra"] == {"limit": 3}
    _nothing_written(allocation, storage_root)


def test_a_refusal_after_the_files_were_read_writes_nothing_either(team, allocation, storage_root):
    """The files are fine, the job is not (it asks for more than the allocation has): 402,
    and the files go nowhere."""
    answer = post_files(
        client_for(team.member), allocation, [("in.txt", b"x")], time_limit_minutes="100000"
    )

    assert answer.status_code in (400, 402)
    _nothing_written(allocation, storage_root)


def test_a_form_with_bad_variables_is_refused(team, allocation, storage_root):
    answer = post_files(client_for(team.member), allocation, [], environment="{not json")

    assert answer.status_code == 400 and answer.json()["code"] == "invalid"
    assert "environment" in answer.json()["extra"]["fields"]
    _nothing_written(allocation, storage_root)


# --- Result files served from storage ---------------------------------------------------------


def _results(job: Job, files: dict[str, bytes]) -> None:
    storage = job_files_storage()
    for name, content in files.items():
        stored = storage.save(stored_name(job.uuid, "result", name), io.BytesIO(content))
        JobFile.objects.create(
            job=job,
            kind=JobFile.Kind.RESULT,
            name=name,
            size=len(content),
            modified_at=datetime(2026, 1, 1, tzinfo=UTC),
            stored=stored,
        )
    Job.objects.filter(pk=job.pk).update(
        state=JobState.COMPLETED, results_state=Job.ResultsState.READY
    )


def _streamed(response) -> bytes:
    return b"".join(response.streaming_content)


def test_results_are_listed_downloaded_and_archived_byte_for_byte(team, allocation, user):
    answer = client_for(team.member).post(
        "/api/v1/jobs/",
        {
            "allocation": str(allocation.uuid),
            "name": "r",
            "script": SCRIPT,
            "time_limit_minutes": 5,
        },
        format="json",
    )
    job = Job.objects.get(uuid=answer.json()["id"])
    files = {
        "stdout.txt": b"out\n",
        "out/result.bin": bytes(range(256)) * 4096,  # 1 MiB, across chunks
        "out/deep/x.txt": b"x",
    }
    _results(job, files)
    client = client_for(team.member)

    listing = client.get(f"/api/v1/jobs/{job.uuid}/files/").json()
    assert listing["state"] == "ready" and listing["truncated"] is False
    assert [(row["name"], row["size"]) for row in listing["results"]] == sorted(
        (name, len(content)) for name, content in files.items()
    )
    for name, content in files.items():
        response = client.get(f"/api/v1/jobs/{job.uuid}/files/{name}")
        assert response.status_code == 200
        assert response["Content-Length"] == str(len(content))
        assert "attachment" in response["Content-Disposition"]
        assert _streamed(response) == content

    archive = client.get(f"/api/v1/jobs/{job.uuid}/files.tar.gz")
    assert archive.status_code == 200 and archive["Content-Type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(_streamed(archive)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == sorted(files)
        for name, content in files.items():
            member = tar.extractfile(name)
            assert member is not None and member.read() == content

    # A NUL (%00) no stored name can hold: PostgreSQL refuses it in a comparison, a 500 before.
    for missing in ("nope.txt", "../stdout.txt", "out/../stdout.txt", "job.sh", "out%00.txt"):
        assert client.get(f"/api/v1/jobs/{job.uuid}/files/{missing}").status_code == 404
    # Outside the job's organization: 404, never 403.
    assert client_for(user).get(f"/api/v1/jobs/{job.uuid}/files/").status_code == 404
    assert client_for(user).get(f"/api/v1/jobs/{job.uuid}/files/stdout.txt").status_code == 404
    assert client_for(user).get(f"/api/v1/jobs/{job.uuid}/files.tar.gz").status_code == 404


def test_before_the_job_ends_the_listing_is_empty_and_says_so(team, allocation):
    client = client_for(team.member)
    answer = client.post(
        "/api/v1/jobs/",
        {
            "allocation": str(allocation.uuid),
            "name": "r",
            "script": SCRIPT,
            "time_limit_minutes": 5,
        },
        format="json",
    )

    listing = client.get(f"/api/v1/jobs/{answer.json()['id']}/files/").json()

    assert listing["count"] == 0 and listing["state"] == "waiting"


def test_an_idempotent_retry_with_other_files_is_refused_and_the_same_files_replay(
    team, allocation, storage_root
):
    """The key's fingerprint holds each file's name and size: the same upload sent again
    answers the first job; other files under the same key are another request (409)."""
    client = client_for(team.member)

    def send(files):
        body, content_type = multipart(_fields(allocation), files)
        return client.generic(
            "POST", "/api/v1/jobs/", body, content_type=content_type, HTTP_IDEMPOTENCY_KEY="k1"
        )

    first = send([("in.txt", b"abc")])
    again = send([("in.txt", b"abc")])
    other = send([("in.txt", b"abcd")])

    assert first.status_code == 201 and again.json()["id"] == first.json()["id"]
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    assert Job.objects.count() == 1
