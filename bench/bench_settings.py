"""Settings of the server bench/marketplace.py starts: the test settings, with a URLconf that
adds a bare Django view beside the API (bench_urls), so that both are served by one server.

BENCH_CONN_MAX_AGE chooses between a database connection per request (0, as the test settings)
and persistent connections (as a deployment sets CONN_MAX_AGE)."""

import os

from computeshare.settings.test import *  # noqa: F403
from computeshare.settings.test import DATABASES

# The caches between requests as deployed (the test settings turn them off).
API_TOKEN_CACHE_SECONDS = 60
OFFER_LIST_COUNT_CACHE_SECONDS = 5
JOBS_SUBMIT_WAKE_SECONDS = 10.0

ROOT_URLCONF = "bench_urls"
DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("BENCH_CONN_MAX_AGE", "0"))
