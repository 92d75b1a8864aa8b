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

from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnavailable

from computeshare.celery import app as celery_app

logger = logging.getLogger(__name__)


def enqueue_after_commit(
    task_name: str, *args: Any, recovered_by: str, countdown: float | None = None
) -> None:
    """Sends the task `task_name(*args)` once the current transaction commits (at once outside
    one), after `countdown` seconds when given."""

    def send() -> None:
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

    transaction.on_commit(send)


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
