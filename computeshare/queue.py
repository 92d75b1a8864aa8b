"""Handing work to Celery after a commit, without turning a broker outage into a 500.

A request that committed its rows has been accepted: if Redis cannot take the wake-up message
afterwards, answering 500 would make the client send the same thing again. So the message is
sent after the commit, a broker error is logged, and a periodic task finds the work from the
database instead (each caller names which one in `recovered_by`)."""

import logging
from typing import Any, Protocol

from django.db import transaction
from kombu.exceptions import OperationalError as BrokerUnavailable

logger = logging.getLogger(__name__)


class _Task(Protocol):
    name: str

    def delay(self, *args: Any) -> Any: ...


def enqueue_after_commit(task: _Task, *args: Any, recovered_by: str) -> None:
    """Sends `task(*args)` once the current transaction commits (at once outside one)."""

    def send() -> None:
        try:
            task.delay(*args)
        except BrokerUnavailable as error:
            logger.warning(
                "the broker did not take %s%r (%s): %s", task.name, args, error, recovered_by
            )

    transaction.on_commit(send)
