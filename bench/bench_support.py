"""What the benches share: a scratch database of their own (created, migrated and emptied;
dropped at the end) on the test settings, the machine's load, and the figures of the issue's
table, which every bench records (`record_figure`) and `bench/summary.py` prints at the end of
`make bench`."""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# BENCH_DATABASE names another scratch database, so that two people's runs do not share one.
DATABASE = os.environ.get("BENCH_DATABASE", "computeshare_bench")
FIGURES = Path(
    os.environ.get(
        "BENCH_FIGURES", Path(__file__).resolve().parent.parent / "var" / "bench" / "figures.jsonl"
    )
)


@dataclass(frozen=True)
class Figure:
    """One row of the table: `key` is stable (it orders the summary and names what is missing),
    `value` and `aim` are as printed ("0.83 of sbatch", ">= 0.8"), `met` says whether the value
    reaches the aim."""

    key: str
    label: str
    value: str
    aim: str
    met: bool


def record_figure(key: str, label: str, value: str, aim: str, met: bool) -> None:
    """Appends one figure to the run's file and prints it where it was measured."""
    figure = Figure(key, label, value, aim, met)
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as figures:
        figures.write(json.dumps(asdict(figure)) + "\n")
    print(f"  -> {label}: {value} (aim {aim}): {'met' if met else 'NOT met'}")


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
