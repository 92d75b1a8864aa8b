"""Housekeeping on deletes, not domain flow: a job's file removed from the database (the job
deleted in the admin, its rows cascading) takes its stored copy with it once the deletion has
committed, so that storage never keeps what nothing points at."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from scheduler_bridge.job_files import job_files_storage
from scheduler_bridge.models import JobFile


@receiver(post_delete, sender=JobFile)
def job_file_stored_copy_remove(sender: Any, instance: JobFile, **kwargs: Any) -> None:
    stored = instance.stored
    if stored:
        transaction.on_commit(lambda: _remove_unless_kept(stored))


def _remove_unless_kept(stored: str) -> None:
    # A collection that ran again replaced its rows by new ones naming the same stored files.
    if not JobFile.objects.filter(stored=stored).exists():
        job_files_storage().delete(stored)
