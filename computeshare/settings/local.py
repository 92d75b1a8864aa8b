"""Development and the embedded demo: SQLite, the filesystem broker, mail as files in var/mail/."""

from computeshare.settings.base import *  # noqa: F403
from computeshare.settings.base import env
from computeshare.settings.insecure import (
    DEMO_STRIPE_PUBLISHABLE_KEY,
    DEMO_STRIPE_SECRET_KEY,
    DEMO_STRIPE_WEBHOOK_SECRET,
)

DEBUG = env.bool("DJANGO_DEBUG", default=True)

# Each mail the demo sends (invitations, budget alerts, job notices) is a file of its own in
# var/mail/ (EMAIL_FILE_PATH, base.py), where it can be read after the fact: on the console it
# was lost among the web server's lines.
EMAIL_BACKEND = env("EMAIL_BACKEND", default="computeshare.mail.OneFilePerMessageBackend")

# The demo's payments go to the local Stripe server that `make demo` starts
# (scripts/localstripe_server.py), never to Stripe.
LOCALSTRIPE_PORT = env.int("LOCALSTRIPE_PORT", default=8420)
STRIPE_API_BASE = env("STRIPE_API_BASE", default=f"http://127.0.0.1:{LOCALSTRIPE_PORT}")
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", default=DEMO_STRIPE_SECRET_KEY)
STRIPE_PUBLISHABLE_KEY = env("STRIPE_PUBLISHABLE_KEY", default=DEMO_STRIPE_PUBLISHABLE_KEY)
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", default=DEMO_STRIPE_WEBHOOK_SECRET)
STRIPE_JS_URL = env("STRIPE_JS_URL", default=f"{STRIPE_API_BASE}/js.stripe.com/v3/")
# The test cluster (and the demo's) listens on loopback, which the outbound rules deny unless
# allowed: here only loopback, never the private network.
CLUSTER_ALLOWED_NETWORKS = env.list("CLUSTER_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])
# Webhook receivers on loopback (the tests' receivers, a demo's): allowed here only.
WEBHOOK_ALLOWED_NETWORKS = env.list("WEBHOOK_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])

# The demo's SQLite file is written by gunicorn's workers, the Celery worker and beat at once:
# write-ahead logging lets readers go on while one writes, a transaction takes the write lock
# when it begins (not halfway, where SQLite could only fail it), and a writer waits its turn
# for up to 20 s instead of failing with "database is locked" after 5.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"].setdefault("OPTIONS", {}).update(  # noqa: F405
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
