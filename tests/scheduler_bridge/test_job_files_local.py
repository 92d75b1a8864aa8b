"""Job files through the services on the `local` backend: inputs staged into the job's folder
(nested ones too) and then removed from storage, results collected up to the limit (then
`truncated`), a failed collection tried again with backoff, results expiring, and a deleted
job's files leaving storage."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import timezone

from scheduler_bridge import services
from scheduler_bridge.job_files import InputUpload, job_files_storage
from scheduler_bridge.models import Job, JobFile, JobState
from scheduler_bridge.selectors import jobs as job_selectors
from scheduler_bridge.services import files
from scheduler_bridge.tasks import job_results_collect_task
from tests.conftest import client_for
from tests.factories import MembershipFactory
from tests.scheduler_bridge.test_job_files_api import _results
from tests.scheduler_bridge.test_jobs_local import _submit, local_allocation  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "#!/bin/bash\ncat data/a.txt b.txt > out.txt\necho done\n"


def _uploads() -> list[InputUpload]:
    return [
        InputUpload("data/a.txt", SimpleUploadedFile("a", b"A" * 100)),
        InputUpload("b.txt", SimpleUploadedFile("b", b"B" * 10)),
    ]


def _stored_files() -> list[Path]:
    root = Path(job_files_storage().location)
    return [path for path in root.rglob("*") if path.is_file()] if root.exists() else []


def test_inputs_are_staged_and_results_collected_up_to_the_limit(
    local_allocation,  # noqa: F811
    settings,
):
    job = services.job_submit(
        actor=MembershipFactory(organization=local_allocation.organization, role="member"),
        allocation=local_allocation,
        request=services.JobRequest(name="files", script=SCRIPT, time_limit_minutes=5),
        input_files=_uploads(),
    )
    folder = Path(settings.LOCAL_CLUSTER_ROOT) / job.directory

    services.cluster_jobs_submit(cluster_id=job.cluster_id)  # or the session's worker did
    deadline = time.monotonic() + 30
    while (
        not (folder / "stdout.txt").exists() or b"done" not in (folder / "stdout.txt").read_bytes()
    ):
        assert time.monotonic() < deadline, "the local job did not run"
        time.sleep(0.2)
    assert (folder / "data" / "a.txt").read_bytes() == b"A" * 100
    assert (folder / "out.txt").read_bytes() == b"A" * 100 + b"B" * 10
    # Staged: the stored copies are gone, the record stays.
    assert set(JobFile.objects.filter(job=job).values_list("name", "stored")) == {
        ("data/a.txt", ""),
        ("b.txt", ""),
    }

    # Ended (marked here rather than by a poll, so that no worker's collection races this one).
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, ended_at=timezone.now())
    # By name: b.txt 10, data/a.txt 100, out.txt 110 (past 115 in all: left), stderr.txt 0,
    # stdout.txt 5.
    settings.JOB_RESULT_TOTAL_MAX_BYTES = 115
    collected = files.job_results_collect(job_id=job.pk)

    assert collected is not None and collected.truncated
    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.READY and job.results_truncated
    results = {row.name: row for row in JobFile.objects.filter(job=job, kind="result")}
    assert sorted(results) == ["b.txt", "data/a.txt", "stderr.txt", "stdout.txt"]
    storage = job_files_storage()
    with storage.open(results["data/a.txt"].stored) as stored:
        assert stored.read() == b"A" * 100
    assert files.job_results_collect(job_id=job.pk) is None  # collected once

    # Past the retention period: removed, the listing says so.
    Job.objects.filter(pk=job.pk).update(ended_at=timezone.now() - timedelta(days=31))
    assert files.jobs_results_expire() == 1
    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.EXPIRED
    assert not any(str(job.uuid) in str(path) for path in _stored_files())


def test_a_failed_collection_waits_its_backoff_then_gives_up(local_allocation):  # noqa: F811
    job = _submit(local_allocation)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.COMPLETED,
        ended_at=timezone.now(),
        scheduler_job_id="999999",
        results_state=Job.ResultsState.COLLECTING,
        results_claimed_at=timezone.now(),
        results_attempts=1,
    )

    files.job_results_retry_or_fail(job_id=job.pk, reason="cluster down", transient=True)
    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.WAITING and job.results_detail == "cluster down"
    assert job.pk not in job_selectors.jobs_results_to_collect()  # within its 10 s backoff
    Job.objects.filter(pk=job.pk).update(results_claimed_at=timezone.now() - timedelta(seconds=11))
    assert job.pk in job_selectors.jobs_results_to_collect()

    Job.objects.filter(pk=job.pk).update(
        results_state=Job.ResultsState.COLLECTING, results_attempts=files.RESULT_ATTEMPTS_MAX
    )
    files.job_results_retry_or_fail(job_id=job.pk, reason="still down", transient=True)
    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.FAILED and job.results_detail == "still down"


def test_a_deleted_jobs_stored_files_leave_storage(local_allocation):  # noqa: F811
    job = _submit(local_allocation)
    _results(job, {"out/a.txt": b"a", "stdout.txt": b"hi\n"})
    stored = list(JobFile.objects.filter(job=job).values_list("stored", flat=True))
    storage = job_files_storage()
    assert len(stored) == 2 and all(storage.exists(name) for name in stored)

    JobFile.objects.filter(job=job).delete()

    assert not any(storage.exists(name) for name in stored)


HOSTILE_NAMES_SCRIPT = """#!/bin/bash
echo kept > kept.txt
printf 'x' > "$(printf 'bad\\377name.txt')"
printf 'y' > "$(printf 'line\\nbreak.txt')"
printf 'z' > "$(printf 'right\\342\\200\\256to-left.txt')"
ln -s /etc/passwd link.txt
mkfifo pipe
"""


def _run_to_end(job: Job, folder: Path, marker: str) -> None:
    services.cluster_jobs_submit(cluster_id=job.cluster_id)
    deadline = time.monotonic() + 30
    while not (folder / marker).exists():
        assert time.monotonic() < deadline, "the local job did not run"
        time.sleep(0.2)
    time.sleep(0.5)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, ended_at=timezone.now())


def test_names_that_cannot_be_served_and_links_are_skipped_with_a_reason_the_rest_served(
    local_allocation,  # noqa: F811
    settings,
):
    # Given a job that leaves a name that is not UTF-8, one with a line break, one with a
    # direction override, a link and a FIFO beside a plain file
    job = _submit(local_allocation, script=HOSTILE_NAMES_SCRIPT)
    _run_to_end(job, Path(settings.LOCAL_CLUSTER_ROOT) / job.directory, "pipe")

    collected = files.job_results_collect(job_id=job.pk)

    assert collected == files.Collected(files=3, bytes=5, truncated=False)
    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.READY and job.results_detail == ""
    assert sorted(JobFile.objects.filter(job=job, kind="result").values_list("name", "size")) == [
        ("kept.txt", 5),
        ("stderr.txt", 0),
        ("stdout.txt", 0),
    ]
    not_served = "so it cannot be served"
    assert job.results_skipped == [
        {
            "name": "bad\\xffname.txt",
            "reason": "its name is not UTF-8, so it cannot be named in a link or a download",
        },
        {
            "name": "line\\nbreak.txt",
            "reason": f"its name holds a control character (a line break, a tab...), {not_served}",
        },
        {"name": "link.txt", "reason": "a symbolic link: links are not followed"},
        {"name": "pipe", "reason": "not a regular file (a FIFO, a socket or a device)"},
        {
            "name": "right\\u202eto-left.txt",
            "reason": f"its name holds a control character (a line break, a tab...), {not_served}",
        },
    ]

    # The API lists what was served and what was skipped; the job's page shows both.
    client = client_for(job.submitted_by)
    listing = client.get(f"/api/v1/jobs/{job.uuid}/files/")
    assert listing.status_code == 200
    assert [row["name"] for row in listing.json()["results"]] == [
        "kept.txt",
        "stderr.txt",
        "stdout.txt",
    ]
    assert listing.json()["skipped"] == job.results_skipped
    download = client.get(f"/api/v1/jobs/{job.uuid}/files/kept.txt")
    assert download.status_code == 200 and b"".join(download.streaming_content) == b"kept\n"
    page = Client()
    page.force_login(job.submitted_by)
    response = page.get(f"/jobs/{job.uuid}/files/")
    assert response.status_code == 200
    assert "line\\nbreak.txt" in response.content.decode()


def test_a_collection_whose_worker_keeps_dying_is_given_up_after_the_last_try(
    local_allocation,  # noqa: F811
):
    job = _submit(local_allocation)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.COMPLETED,
        ended_at=timezone.now(),
        scheduler_job_id="999999",
        results_state=Job.ResultsState.COLLECTING,
        results_claimed_at=timezone.now() - timedelta(hours=1),
        results_attempts=files.RESULT_ATTEMPTS_MAX,
    )

    assert files.job_results_collect(job_id=job.pk) is None

    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.FAILED
    assert (
        job.results_detail == f"the collection did not finish in {files.RESULT_ATTEMPTS_MAX} tries"
    )
    assert job.results_attempts == files.RESULT_ATTEMPTS_MAX
    assert not JobFile.objects.filter(job=job, kind="result").exists()


def test_an_unexpected_error_in_a_collection_counts_as_a_try_and_is_recorded(
    local_allocation,  # noqa: F811
    monkeypatch,
):
    job = _submit(local_allocation)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.COMPLETED, ended_at=timezone.now(), scheduler_job_id="999999"
    )

    def broken(**kwargs: object) -> None:
        # What a name the storage could not encode did on main: an error no handler expected
        files._claim(job.pk)
        raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    monkeypatch.setattr(services, "job_results_collect", broken)
    assert job_results_collect_task(job.pk) is None

    job.refresh_from_db()
    assert job.results_state == Job.ResultsState.WAITING
    assert job.results_attempts == 1
    assert job.results_detail.startswith("UnicodeEncodeError: 'utf-8' codec can't encode")
