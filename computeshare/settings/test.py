"""The test run: real PostgreSQL and Redis on this machine unless the environment says otherwise.

`make test` runs the suite as five pytest processes side by side (scripts/pytest-processes),
named by COMPUTESHARE_TEST_PROCESS: each takes a test database, a Redis database and a job-files
folder of its own. The Celery workers and servers a test starts are given the ones chosen
(tests/workers.py), not the name."""

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from computeshare.settings.base import *  # noqa: F403
from computeshare.settings.base import BASE_DIR, env
from computeshare.settings.insecure import (
    TEST_STRIPE_PUBLISHABLE_KEY,
    TEST_STRIPE_SECRET_KEY,
    TEST_STRIPE_WEBHOOK_SECRET,
)

# The process's name in a run of five ("cluster" and "cluster-b", one per Slurm test cluster,
# "others", "pages", "platform"); empty when pytest runs alone.
TEST_PROCESS = os.environ.get("COMPUTESHARE_TEST_PROCESS", "")
# Each process's offset below the Redis database of the environment (see below).
_PROCESSES = {"": 0, "cluster": 0, "others": 1, "pages": 2, "cluster-b": 3, "platform": 4}
if TEST_PROCESS not in _PROCESSES:
    raise ValueError(
        "COMPUTESHARE_TEST_PROCESS is cluster, cluster-b, others, pages, platform or unset, "
        f"not {TEST_PROCESS!r}"
    )
_PROCESS_INDEX = _PROCESSES[TEST_PROCESS]

DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/computeshare"),
}
DATABASES["default"]["CONN_MAX_AGE"] = 0
if TEST_PROCESS:
    _DATABASE_SUFFIX = TEST_PROCESS.replace("-", "_")
    DATABASES["default"]["TEST"] = {
        "NAME": f"test_{DATABASES['default']['NAME']}_{_DATABASE_SUFFIX}"
    }
# The tests edit tokens' rows and offers directly and count each endpoint's queries: no caches
# between requests, except in the tests of those caches, which turn them on.
API_TOKEN_CACHE_SECONDS = 0
OFFER_LIST_COUNT_CACHE_SECONDS = 0
# Every accepted job sends its submission message, as without Redis: a mark left by a message
# a test purged (or by the last run, on a cluster of the same id) would hold up the next
# test's job until the poll. The marks' own tests turn them on.
JOBS_SUBMIT_WAKE_SECONDS = 0.0


def _redis_of_this_process(url: str) -> str:
    """The Redis database below `url`'s for the other processes (15, then 14, 13, 12 and 11), so
    that no two processes count each other's log-ins or take each other's tasks."""
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) - _PROCESS_INDEX
    if database < 0:
        raise ValueError(f"no Redis database left below {url} for test process {TEST_PROCESS}")
    return urlunsplit(parts._replace(path=f"/{database}"))


REDIS_URL = _redis_of_this_process(env("REDIS_URL", default="redis://127.0.0.1:6379/15"))
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
# base.py picks the demo's filesystem transport when the environment names no Redis, and a
# transport set by name wins over the URL's scheme: the tests' broker is the URL's.
CELERY_BROKER_TRANSPORT = None
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CACHES = {
    "default": {"BACKEND": "computeshare.cache.RedisCache", "LOCATION": REDIS_URL},
    "logins": {
        "BACKEND": "computeshare.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "logins",
    },
}
EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.locmem.EmailBackend")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Never Stripe itself: the tests point these at the local Stripe server they start
# (tests/localstripe.py); until then a loopback port that refuses connections.
STRIPE_API_BASE = env("STRIPE_API_BASE", default="http://127.0.0.1:9")
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", default=TEST_STRIPE_SECRET_KEY)
STRIPE_PUBLISHABLE_KEY = env("STRIPE_PUBLISHABLE_KEY", default=TEST_STRIPE_PUBLISHABLE_KEY)
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", default=TEST_STRIPE_WEBHOOK_SECRET)
STRIPE_JS_URL = env("STRIPE_JS_URL", default="http://127.0.0.1:9/js.stripe.com/v3/")
# Local jobs run sandboxed, or fail: scripts/test-services installs bubblewrap, and a test
# run that silently fell back to unsandboxed jobs would prove nothing about the sandbox.
LOCAL_BACKEND_SANDBOX = "required"
# The test cluster (and the demo's) listens on loopback, which the outbound rules deny unless
# allowed: here only loopback, never the private network.
CLUSTER_ALLOWED_NETWORKS = env.list("CLUSTER_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])
# Jobs' files of the test run, apart from a developer's own (the Celery workers of the tests are
# given this process's folder).
_JOB_FILES_OF_THIS_PROCESS = BASE_DIR / "var" / "test-job-files" / (TEST_PROCESS or "main")
JOB_FILES_ROOT = Path(env("JOB_FILES_ROOT", default=str(_JOB_FILES_OF_THIS_PROCESS)))
# Webhook receivers on loopback (the tests' receivers, a demo's): allowed here only.
WEBHOOK_ALLOWED_NETWORKS = env.list("WEBHOOK_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])
# Retries within a second and a short time-out, so that the webhook tests wait seconds.
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=5.0)
WEBHOOK_RETRY_BASE_SECONDS = env.float("WEBHOOK_RETRY_BASE_SECONDS", default=0.2)
WEBHOOK_RETRY_MAX_INTERVAL_SECONDS = env.float("WEBHOOK_RETRY_MAX_INTERVAL_SECONDS", default=1.0)

# Factories make clusters online on paper only, so the poll samples idle time (one sinfo per
# online cluster) only where a test turns it on: 0 is off.
IDLE_SAMPLE_SECONDS = env.float("IDLE_SAMPLE_SECONDS", default=0.0)
