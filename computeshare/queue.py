"""Handing work to Celery after a commit, without turning a broker outage into a 500.

A request that committed its rows has been accepted: if Redis cannot take the wake-up message
afterwards, answering 500 would make the client send the same thing again. So the message is
sent after the commit, a broker error is logged, and a periodic task finds the work from the
database instead (each caller names which one in `recovered_by`).

Services name the task ("scheduler_bridge.tasks.cluster_jobs_submit_task") rather than import
it: each app's tasks call its services, so a service importing its tasks back would close an
import circle. The name is looked up in Celery's registry when the message is sent, which keeps
`task_always_eager` working; `tests/test_architecture.py` checks that every name is a task."""

import logging
from importlib import import_module
from typing import Any

from django.core.cache import cache
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnavailable

from computeshare.celery import app as celery_app

logger = logging.getLogger(__name__)


def enqueue_after_commit(
    task_name: str, *args: Any, recovered_by: str, countdown: float | None = None
) -> None:
    """Sends the task `task_name(*args)` once the current transaction commits (at once outside
    one), after `countdown` seconds when given."""
    transaction.on_commit(lambda: _send(task_name, args, recovered_by, countdown))


def _send(
    task_name: str, args: tuple[Any, ...], recovered_by: str, countdown: float | None = None
) -> bool:
    """Sends the message; False (and a warning) when the broker does not take it."""
    task = _task(task_name)
    try:
        if countdown is None:
            task.delay(*args)
        else:
            task.apply_async(args, countdown=max(0.0, countdown))
    except BrokerUnavailable as error:
        logger.warning(
            "the broker did not take %s%r (%s): %s", task_name, args, error, recovered_by
        )
        return False
    return True


def enqueue_once_after_commit(
    task_name: str, *args: Any, recovered_by: str, pending_seconds: float
) -> None:
    """`enqueue_after_commit` for a task that does all the work waiting for its arguments when
    it starts (the submission of every queued job of a cluster): sent unless such a message is
    waiting already, as a mark in the shared cache says for up to `pending_seconds`; the task
    removes the mark as it starts (`enqueued_once_started`), before it reads its work.

    So a message is skipped only while the one waiting has not started: that one reads after
    this commit and does this work too. A mark outlives its message only if the message was
    lost (or purged); until the mark expires the work is then left to `recovered_by`. With
    `pending_seconds` 0 (a cache that is not shared between the processes) every commit sends
    its message."""
    mark = _pending_mark(task_name, args)

    def send() -> None:
        if pending_seconds > 0:
            try:
                if not cache.add(mark, 1, timeout=max(1, round(pending_seconds))):
                    return  # a message is waiting for a worker; it reads after this commit
            except Exception:  # the cache unreachable: sent, as without the marks
                logger.warning(
                    "The mark of %s%r could not be written.", task_name, args, exc_info=True
                )
        if not _send(task_name, args, recovered_by) and pending_seconds > 0:
            _mark_remove(mark)

    transaction.on_commit(send)


def enqueued_once_started(task_name: str, *args: Any) -> None:
    """Called by a task sent by `enqueue_once_after_commit` first thing: the next commit sends
    a message again."""
    _mark_remove(_pending_mark(task_name, args))


def _pending_mark(task_name: str, args: tuple[Any, ...]) -> str:
    return f"enqueued:{task_name}:{':'.join(map(str, args))}"


def _mark_remove(mark: str) -> None:
    try:
        cache.delete(mark)
    except Exception:  # it expires by itself; until then the work waits for the sweep
        logger.warning("The mark %s could not be removed.", mark, exc_info=True)


def _task(task_name: str) -> Any:
    """The task of this name in the project's app. Not Celery's `current_app`: that one is
    per thread, and in a thread that did not set it (a server's, the races tests') it is an
    unconfigured default app. Its module is imported first when the app does not have it: a
    process that never imported the app's tasks module (the web server, a command, a bench)
    has not registered its shared tasks, and the message of a committed request raised
    NotRegistered there (a 500)."""
    if task_name not in celery_app.tasks:
        import_module(task_name.rpartition(".")[0])
    return celery_app.tasks[task_name]
