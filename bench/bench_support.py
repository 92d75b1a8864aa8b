"""What the benches share: a scratch database of their own (created, migrated and emptied;
dropped at the end) on the test settings, and the machine's load."""

import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DATABASE = "computeshare_bench"


def bench_database_url(database: str = DATABASE) -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/computeshare")
    return urlunsplit(urlsplit(base)._replace(path=f"/{database}"))


def _admin_connection() -> Any:
    import psycopg2

    parts = urlsplit(bench_database_url())
    admin = psycopg2.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username,
        password=parts.password,
        dbname="postgres",
    )
    admin.autocommit = True
    return admin


def prepare_django(database: str = DATABASE, *, redis_url: str | None = None) -> None:
    """Creates (when missing), migrates and empties `database`, on the test settings pointed at
    it (and at `redis_url` for the cache and the broker, when given)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "computeshare.settings.test"
    os.environ["DATABASE_URL"] = bench_database_url(database)
    if redis_url:
        os.environ["REDIS_URL"] = os.environ["CELERY_BROKER_URL"] = redis_url
    admin = _admin_connection()
    with admin.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database])
        if cursor.fetchone() is None:
            cursor.execute(f"CREATE DATABASE {database}")
    admin.close()

    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the in-process test client counts the API's queries
    call_command("migrate", verbosity=0)
    # TRUNCATE, which the entries' append-only trigger allows.
    call_command("flush", interactive=False, verbosity=0)


def drop_database(database: str = DATABASE) -> None:
    from django.db import connections

    connections.close_all()
    admin = _admin_connection()
    with admin.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {database}")
    admin.close()


def analyze(*tables: str) -> None:
    """Table statistics as autovacuum would have them after a day of trading, so that the
    planner does not plan a 100,000-row table as an empty one."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute("ANALYZE " + connection.ops.quote_name(table))


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"
