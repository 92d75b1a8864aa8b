"""Settings of the processes `make loadtest` starts (gunicorn, the Celery worker, beat): the
test settings (real PostgreSQL, Redis and the Slurm test cluster on loopback), with what a
deployment sets: persistent database connections and the caches between requests, which the
test settings turn off."""

from computeshare.settings.test import *  # noqa: F403
from computeshare.settings.test import DATABASES

DATABASES["default"]["CONN_MAX_AGE"] = 60
API_TOKEN_CACHE_SECONDS = 60
OFFER_LIST_COUNT_CACHE_SECONDS = 5
DEBUG = False
