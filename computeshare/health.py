"""`GET /healthz`: answers 200 when the database and the task broker answer, 503 otherwise;
`GET /status/` says the same to people, on a page of the site (the footer's Status link)."""

import logging

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
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


def _parts() -> dict[str, str]:
    return {"database": _database_status(), "broker": _broker_status()}


def _status_code(parts: dict[str, str]) -> int:
    return 200 if all(state == "ok" for state in parts.values()) else 503


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    parts = _parts()
    return JsonResponse(parts, status=_status_code(parts))


# What each part of /healthz's answer is, in the page's words.
PART_NAMES = {
    "database": ("Database", "accounts, offers, jobs and money"),
    "broker": ("Task queue", "jobs reaching the clusters, auctions clearing, mail"),
}


@never_cache
@require_GET
def status_page(request: HttpRequest) -> HttpResponse:
    """The same checks as /healthz, with the same HTTP status, as a page for people."""
    parts = _parts()
    status = _status_code(parts)
    rows = [
        {
            "key": key,
            "name": PART_NAMES[key][0],
            "serves": PART_NAMES[key][1],
            "is_ok": state == "ok",
        }
        for key, state in parts.items()
    ]
    context = {"rows": rows, "is_healthy": status == 200, "checked_at": timezone.now()}
    return render(request, "status.html", context, status=status)
