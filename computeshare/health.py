"""`GET /healthz`: answers 200 when the database and the task broker answer, 503 otherwise."""

import logging

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from computeshare.celery import app as celery_app

logger = logging.getLogger(__name__)

BROKER_TIMEOUT_SECONDS = 2.0


def _database_status() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:
        logger.warning("health: database is not answering: %s", error)
        return "unavailable"
    return "ok"


def _broker_status() -> str:
    try:
        with celery_app.connection_for_write(url=settings.CELERY_BROKER_URL) as broker:
            broker.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)
    except Exception as error:
        logger.warning("health: broker is not answering: %s", error)
        return "unavailable"
    return "ok"


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    parts = {"database": _database_status(), "broker": _broker_status()}
    healthy = all(state == "ok" for state in parts.values())
    return JsonResponse(parts, status=200 if healthy else 503)
