"""Jobs' input and result files: kept in platform storage, staged into the job's folder on the
cluster with its script, and fetched back once the job has ended.

Inputs are written to storage in the transaction that accepts the job (and removed again if it
rolls back), so that a job the API accepted has its files until a worker stages them, whatever
crashes meanwhile; they are removed once the job reached the cluster or ended without it.
Results are fetched by a task after the job ended, as the job's tenant, up to
JOB_RESULT_TOTAL_MAX_BYTES, and kept JOB_RESULT_RETENTION_DAYS."""

from __future__ import annotations

import logging
import os
import shutil
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import BinaryIO

from django.conf import settings
from django.core.files import File
from django.db import transaction
from django.utils import timezone

from computeshare.states import status_move, status_move_all
from hpc.errors import BridgeError, JobFileUnsafe
from hpc.types import InputFile, ResultFile
from scheduler_bridge.job_files import InputUpload, job_files_storage, stored_name
from scheduler_bridge.models import ENDED_STATES, Job, JobFile
from scheduler_bridge.services.backends import backend_failed, backend_for, job_tenant

logger = logging.getLogger(__name__)

# The most result files kept of a job (past it, the listing says `truncated`).
RESULT_FILES_MAX = 10000
# Tries of a collection that fails for want of the cluster (backoff up to 30 min: about 4 h),
# or whose worker never finished it.
RESULT_ATTEMPTS_MAX = 14
# The most files a job's listing names as skipped (a link, a FIFO, a name that cannot be served).
RESULTS_SKIPPED_SHOWN = 100
# A result's name is stored in JobFile.name.
RESULT_NAME_MAX = 1024
# Characters no served name may hold: a file name is a URL's last part and a download's
# Content-Disposition, where a line break or a control character cannot go (and a direction
# override would show a name that is not the file's).
_UNSERVABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def job_inputs_store(job: Job, uploads: Sequence[InputUpload]) -> list[JobFile]:
    """Saves a just-accepted job's input files in storage and records them, in the caller's
    transaction, as its last step (every check has passed by then), and returns their rows.
    If a write fails, the files already written are removed and the error rolls the job
    back."""
    if not uploads:
        return []
    storage = job_files_storage()
    written: list[str] = []
    try:
        rows = []
        for upload in uploads:
            upload.upload.seek(0)
            # The upload itself, not a wrapper: a large one is a temporary file, which the
            # storage moves into place (a rename on one file system) instead of copying.
            saved = storage.save(
                stored_name(job.uuid, JobFile.Kind.INPUT, upload.name), upload.upload
            )
            written.append(saved)
            rows.append(
                JobFile(
                    job=job,
                    kind=JobFile.Kind.INPUT,
                    name=upload.name,
                    size=upload.size,
                    stored=saved,
                )
            )
        created = JobFile.objects.bulk_create(rows)
    except BaseException:
        for name in written:
            storage.delete(name)
        _folder_remove(job.uuid, JobFile.Kind.INPUT)
        raise
    return created


def job_input_files(job_ids: Iterable[int]) -> dict[int, tuple[InputFile, ...]]:
    """The input files still to stage of each job, as the backends take them (each opened
    from storage when it is copied)."""
    storage = job_files_storage()
    found: dict[int, list[InputFile]] = {}
    rows = JobFile.objects.filter(job_id__in=list(job_ids), kind=JobFile.Kind.INPUT).exclude(
        stored=""
    )
    for row in rows.order_by("job_id", "name"):
        opener = partial(_open_stored, storage, row.stored)
        found.setdefault(row.job_id, []).append(InputFile(row.name, row.size, opener))
    return {job_id: tuple(files) for job_id, files in found.items()}


def _open_stored(storage: object, name: str) -> BinaryIO:
    return storage.open(name, "rb")  # type: ignore[attr-defined,no-any-return]


def job_inputs_discard(job_ids: Sequence[int]) -> None:
    """Removes the stored inputs of jobs that no longer need them (they reached the cluster,
    or ended without it); their names and sizes stay on record."""
    rows = list(
        JobFile.objects.filter(job_id__in=job_ids, kind=JobFile.Kind.INPUT)
        .exclude(stored="")
        .select_related("job")
    )
    if not rows:
        return
    storage = job_files_storage()
    for row in rows:
        storage.delete(row.stored)
    for job_uuid in {row.job.uuid for row in rows}:
        _folder_remove(job_uuid, JobFile.Kind.INPUT)
    JobFile.objects.filter(pk__in=[row.pk for row in rows]).update(
        stored="", updated_at=timezone.now()
    )


def job_inputs_discard_after_commit(job_ids: Sequence[int]) -> None:
    """`job_inputs_discard` once the transaction that moved the jobs on has committed."""
    ids = list(job_ids)
    if ids:
        transaction.on_commit(lambda: _discard_quietly(ids))


def _discard_quietly(job_ids: list[int]) -> None:
    try:
        job_inputs_discard(job_ids)
    except OSError as error:  # a leftover file is harmless; the job is on its way
        logger.warning("could not remove the stored inputs of jobs %s: %s", job_ids, error)


def _folder_remove(job_uuid: object, kind: str) -> None:
    storage = job_files_storage()
    folder = storage.path(f"{kind}s/{job_uuid}")
    shutil.rmtree(folder, ignore_errors=True)


# --- Results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collected:
    files: int
    bytes: int
    truncated: bool


def job_results_collect_after_commit(job: Job) -> None:
    """Enqueues the collection of an ended job's results once its end is committed."""
    from computeshare.queue import enqueue_after_commit

    enqueue_after_commit(
        "scheduler_bridge.tasks.job_results_collect_task",
        job.pk,
        recovered_by="the periodic sweep collects them",
    )


def _claim(job_id: int) -> Job | None:
    """Takes the job's collection for this worker: an ended job waiting for it (not before its
    backoff after a failed try has passed), or one whose collector has not finished in
    COLLECT_CLAIM_SECONDS (it crashed)."""
    now = timezone.now()
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("cluster", "lease__account")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.state not in ENDED_STATES or not job.are_results_due(now):
            return None
        if job.results_attempts >= RESULT_ATTEMPTS_MAX:
            # Its collectors keep dying (a worker killed, a crash): no more tries.
            status_move(job, Job.ResultsState.FAILED, field="results_state")
            job.results_detail = f"the collection did not finish in {job.results_attempts} tries"
            job.save(update_fields=["results_state", "results_detail", "updated_at"])
            return None
        if job.is_from_tenant:
            status_move(job, Job.ResultsState.NOT_KEPT, field="results_state")
            job.save(update_fields=["results_state", "updated_at"])
            return None
        status_move(job, Job.ResultsState.COLLECTING, field="results_state")
        job.results_claimed_at = now
        job.results_attempts += 1
        job.save(
            update_fields=["results_state", "results_claimed_at", "results_attempts", "updated_at"]
        )
    return job


def result_name_problem(name: str) -> str | None:
    """Why a result named `name` (as `os.fsdecode` gives it) cannot be served, or None: a name
    that is not UTF-8, that holds a control character, or that is too long to keep."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8, so it cannot be named in a link or a download"
    if any(unicodedata.category(character) in _UNSERVABLE_CATEGORIES for character in name):
        return "its name holds a control character (a line break, a tab...), so it cannot be served"
    if len(name) > RESULT_NAME_MAX:
        return f"its name is longer than {RESULT_NAME_MAX} characters"
    return None


def shown_name(name: str) -> str:
    """A file name as a person can read it: bytes that are not UTF-8 as `\\xNN`, control
    characters escaped (`\\n`)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(
        repr(character)[1:-1]
        if unicodedata.category(character) in _UNSERVABLE_CATEGORIES
        else character
        for character in text
    )


def job_results_collect(*, job_id: int) -> Collected | None:
    """Fetches the files an ended job left in its folder into storage, as its tenant: every
    regular file but the platform's script and environment files, by name, within
    JOB_RESULT_TOTAL_MAX_BYTES and RESULT_FILES_MAX (the rest left: `truncated`). What is there
    but is not fetched (links, FIFOs, files the job swapped since the listing, names that
    cannot be served) is recorded in `results_skipped` with the reason, and the rest served.
    Raises the bridge's error when the cluster cannot be read (the task records it:
    `retry_or_fail`)."""
    job = _claim(job_id)
    if job is None:
        return None
    if not job.scheduler_job_id:  # it never reached the cluster: nothing was written
        _results_record(job, [], truncated=False, skipped=[])
        return Collected(0, 0, False)
    backend = backend_for(job.cluster)
    tenant = job_tenant(job)
    try:
        listed = backend.result_files(tenant, job.directory)
        skipped, servable = _servable(listed)
        truncated = len(servable) > RESULT_FILES_MAX
        kept, total = [], 0
        for result in servable[:RESULT_FILES_MAX]:
            if total + result.size > settings.JOB_RESULT_TOTAL_MAX_BYTES:
                truncated = True
                continue
            kept.append(result)
            total += result.size
        storage = job_files_storage()
        _folder_remove(job.uuid, JobFile.Kind.RESULT)
        saved: dict[str, tuple[str, int]] = {}

        def save(name: str, handle: BinaryIO) -> None:
            stored = storage.save(
                stored_name(job.uuid, JobFile.Kind.RESULT, name), File(handle, name=name)
            )
            saved[name] = (stored, storage.size(stored))

        refused = backend.result_fetch(
            tenant, job.directory, [result.name for result in kept], save
        )
    except BridgeError as error:
        if not isinstance(error, JobFileUnsafe):
            backend_failed(job.cluster, error)
        raise
    skipped += sorted(refused.items())
    rows = [
        JobFile(
            job=job,
            kind=JobFile.Kind.RESULT,
            name=result.name,
            size=saved[result.name][1],
            modified_at=result.modified_at,
            stored=saved[result.name][0],
        )
        for result in kept
        if result.name in saved
    ]
    _results_record(job, rows, truncated=truncated, skipped=skipped)
    return Collected(len(rows), sum(row.size for row in rows), truncated)


def _servable(listed: Sequence[ResultFile]) -> tuple[list[tuple[str, str]], list[ResultFile]]:
    """The listing split into what is not fetched, each `(name, reason)`, and what is."""
    skipped: list[tuple[str, str]] = []
    servable: list[ResultFile] = []
    for result in listed:
        problem = result.problem or result_name_problem(result.name)
        if problem is None:
            servable.append(result)
        else:
            skipped.append((result.name, problem))
    return skipped, servable


@transaction.atomic
def _results_record(
    job: Job, rows: list[JobFile], *, truncated: bool, skipped: list[tuple[str, str]]
) -> None:
    JobFile.objects.filter(job=job, kind=JobFile.Kind.RESULT).delete()
    JobFile.objects.bulk_create(rows)
    status_move_all(
        Job.objects.filter(pk=job.pk),
        Job.ResultsState.READY,
        field="results_state",
        results_truncated=truncated,
        results_detail=(
            f"{len(skipped)} files were not fetched (the first {RESULTS_SKIPPED_SHOWN} are listed)"
            if len(skipped) > RESULTS_SKIPPED_SHOWN
            else ""
        ),
        results_skipped=[
            {"name": shown_name(name), "reason": reason}
            for name, reason in skipped[:RESULTS_SKIPPED_SHOWN]
        ],
        updated_at=timezone.now(),
    )


def job_results_retry_or_fail(*, job_id: int, reason: str, transient: bool) -> None:
    """After a failed try: a transient failure (the cluster unreachable) waits for the sweep to
    try again after its backoff, up to RESULT_ATTEMPTS_MAX tries; anything else, or the last
    try, marks the collection `failed` with the reason."""
    job = Job.objects.filter(pk=job_id, results_state=Job.ResultsState.COLLECTING).first()
    if job is None:
        return
    again = transient and job.results_attempts < RESULT_ATTEMPTS_MAX
    status_move_all(
        Job.objects.filter(pk=job_id),
        Job.ResultsState.WAITING if again else Job.ResultsState.FAILED,
        field="results_state",
        from_statuses=[Job.ResultsState.COLLECTING],
        results_detail=reason[:500],
    )


def jobs_results_expire() -> int:
    """Removes the result files of jobs that ended more than JOB_RESULT_RETENTION_DAYS ago;
    their listing then says `expired`."""
    before = timezone.now() - timedelta(days=settings.JOB_RESULT_RETENTION_DAYS)
    jobs = list(
        Job.objects.filter(ended_at__lt=before, results_state=Job.ResultsState.READY).values_list(
            "pk", "uuid"
        )[:1000]
    )
    storage = job_files_storage()
    for job_id, job_uuid in jobs:
        for stored in (
            JobFile.objects.filter(job_id=job_id, kind=JobFile.Kind.RESULT)
            .exclude(stored="")
            .values_list("stored", flat=True)
        ):
            storage.delete(stored)
        _folder_remove(job_uuid, JobFile.Kind.RESULT)
        JobFile.objects.filter(job_id=job_id, kind=JobFile.Kind.RESULT).update(stored="")
        status_move_all(
            Job.objects.filter(pk=job_id), Job.ResultsState.EXPIRED, field="results_state"
        )
    return len(jobs)
