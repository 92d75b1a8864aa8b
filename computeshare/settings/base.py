"""Settings shared by every environment; each value a deployment may change comes from the
environment (or a `.env` file beside manage.py), documented in `.env.example`."""

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import environ
from celery.schedules import crontab

from computeshare.settings.insecure import (
    DEVELOPMENT_FIELD_ENCRYPTION_KEY,
    DEVELOPMENT_SECRET_KEY,
)

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

# Only for development and tests: production.py refuses to start without SECRET_KEY.
SECRET_KEY = env("SECRET_KEY", default=DEVELOPMENT_SECRET_KEY)
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "django_htmx",
    "computeshare",
    "webhooks",
    "notifications",
    "organizations",
    "billing",
    "marketplace",
    "scheduler_bridge",
    "portal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "computeshare.middleware.ApplicationErrorMiddleware",
    # Last: it turns the answer to a locked log-in on a page into the page that says so.
    "computeshare.login_throttling.LockoutMiddleware",
]

ROOT_URLCONF = "computeshare.urls"
WSGI_APPLICATION = "computeshare.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "computeshare.User"
# The throttle first: it refuses a locked log-in before any password is checked.
AUTHENTICATION_BACKENDS = [
    "computeshare.login_throttling.ThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "home"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
NODE_MODULES = BASE_DIR / "node_modules"
# The pages' libraries come from npm (package.json) and are served from node_modules as they
# are: nothing vendored into the repository, nothing fetched from a CDN.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/bootstrap", NODE_MODULES / "bootstrap" / "dist"),
    ("vendor/bootstrap-icons", NODE_MODULES / "bootstrap-icons" / "font"),
    ("vendor/htmx", NODE_MODULES / "htmx.org" / "dist"),
    ("vendor/chart.js", NODE_MODULES / "chart.js" / "dist"),
    ("vendor/swagger-ui", NODE_MODULES / "swagger-ui-dist"),
]

# --- Redis, Celery -----------------------------------------------------------------------------
REDIS_URL = env("REDIS_URL", default="")
# Without a broker URL the embedded default uses kombu's filesystem transport, with the atomic
# writes of computeshare/broker.py (ADR 0001): a real worker and beat run beside the web server
# with no Redis to install.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
CELERY_BROKER_FOLDER = Path(env("CELERY_BROKER_FOLDER", default=str(BASE_DIR / "var" / "broker")))
CELERY_BROKER_TRANSPORT: str | None = None  # by the URL's scheme
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object]
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT = "computeshare.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_FOLDER / "queue"),
        "data_folder_out": str(CELERY_BROKER_FOLDER / "queue"),
        "control_folder": str(CELERY_BROKER_FOLDER / "control"),
        "staging_folder": str(CELERY_BROKER_FOLDER / "staging"),
        "claimed_folder": str(CELERY_BROKER_FOLDER / "claimed"),
        "rejected_folder": str(CELERY_BROKER_FOLDER / "rejected"),
    }
else:
    # A task is not acknowledged until it has run, so a worker killed mid-task leaves it for
    # another worker; visibility_timeout must exceed the longest task.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = TIME_ZONE
# Three queues by what a task waits on (docs/scaling.md, "What runs where"): `cluster` on SSH
# round trips to owners' login nodes, `money` on row locks and commits, `io` on other people's
# servers (webhook receivers, mail, result files read off the cluster). A pool per queue keeps one
# slow login node or webhook receiver from holding the processes the ledger needs. Celery's
# default queue is declared too, so that a worker started without -Q (the demo's, the tests')
# still consumes all four; every task has a route (tests/computeshare/test_task_routes.py), so
# nothing is sent to the default queue in production and it stays empty there.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES: dict[str, dict[str, str]] = {
    name: {} for name in ("celery", "cluster", "money", "io")
}
TASK_QUEUE_OF: dict[str, tuple[str, ...]] = {
    # SSH to the clusters: submission, the poll (which also settles the runs it finds ended),
    # remote cancels, verification, tenant leases and their scrubs, reservations, accounts.
    "cluster": (
        "scheduler_bridge.tasks.cluster_jobs_submit_task",
        "scheduler_bridge.tasks.jobs_poll_task",
        "scheduler_bridge.tasks.cluster_poll_task",
        "scheduler_bridge.tasks.job_cancel_remote_task",
        "scheduler_bridge.tasks.jobs_reconcile_task",
        "scheduler_bridge.tasks.tenant_leases_end_task",
        "marketplace.tasks.cluster_verification_run_task",
        "marketplace.tasks.reservations_check_task",
        "marketplace.tasks.reservations_check_cluster_task",
        "marketplace.tasks.slurm_accounts_sync_task",
        "marketplace.tasks.slurm_accounts_reconcile_task",
        "marketplace.tasks.tenant_leases_scrub_again_task",
        "marketplace.tasks.tenant_lease_scrub_task",
    ),
    # The ledger: auctions' clearing and their losing bids' releases, allocations closing,
    # budgets, Stripe's events, payouts, the ledger's own check, top-ups nobody paid.
    "money": (
        "marketplace.tasks.auction_clear_task",
        "marketplace.tasks.auctions_clear_due_task",
        "marketplace.tasks.allocations_close_due_task",
        "billing.tasks.budget_alert_notify_task",
        "billing.tasks.budget_alerts_unmailed_notify_task",
        "billing.tasks.stripe_events_process_task",
        "billing.tasks.payouts_pending_send_task",
        "billing.tasks.ledger_verify_task",
        "billing.tasks.top_ups_expire_task",
        "billing.tasks.hold_release_batch_apply_task",
        "billing.tasks.hold_release_batches_due_task",
    ),
    # Other people's servers and bulk bytes: result files, webhooks, mail, notices.
    "io": (
        "scheduler_bridge.tasks.job_results_collect_task",
        "scheduler_bridge.tasks.job_results_sweep_task",
        "scheduler_bridge.tasks.job_results_expire_task",
        "webhooks.tasks.webhook_deliveries_send_task",
        "webhooks.tasks.webhook_deliveries_due_task",
        "marketplace.tasks.allocation_webhook_events_task",
        "notifications.tasks.notification_emails_send_task",
        "notifications.tasks.notification_emails_due_task",
        "notifications.tasks.notice_batch_record_task",
        "notifications.tasks.notice_batches_due_task",
        "organizations.tasks.invitation_notify_task",
        "organizations.tasks.login_unlock_mail_task",
    ),
}
CELERY_TASK_ROUTES = {
    task: {"queue": queue} for queue, tasks in TASK_QUEUE_OF.items() for task in tasks
}
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    # The webhook processes each event as it arrives; this catches any a crash left behind.
    "stripe-events-process": {
        "task": "billing.tasks.stripe_events_process_task",
        "schedule": 300.0,
    },
    "ledger-verify": {"task": "billing.tasks.ledger_verify_task", "schedule": 3600.0},
    "payouts-pending-send": {
        "task": "billing.tasks.payouts_pending_send_task",
        "schedule": 600.0,
    },
    # A clearing's losing bids are released by a task after its commit; this applies any
    # release whose task was lost, so that each lands within seconds (ADR 0025).
    "hold-release-batches-due": {
        "task": "billing.tasks.hold_release_batches_due_task",
        "schedule": env.float("HOLD_RELEASE_SWEEP_SECONDS", default=5.0),
    },
    # Auctions clear within this many seconds of their close time.
    "auctions-clear-due": {
        "task": "marketplace.tasks.auctions_clear_due_task",
        "schedule": 15.0,
    },
    "allocations-close-due": {
        "task": "marketplace.tasks.allocations_close_due_task",
        "schedule": 60.0,
    },
    "reservations-check": {
        "task": "marketplace.tasks.reservations_check_task",
        "schedule": env.float("RESERVATIONS_CHECK_SECONDS", default=300.0),
    },
    "slurm-accounts-reconcile": {
        "task": "marketplace.tasks.slurm_accounts_reconcile_task",
        "schedule": 900.0,
    },
    # Work handed to the broker after a commit that Redis did not take (computeshare/queue.py).
    "budget-alerts-unmailed": {
        "task": "billing.tasks.budget_alerts_unmailed_notify_task",
        "schedule": 300.0,
    },
    "tenant-leases-scrub-again": {
        "task": "marketplace.tasks.tenant_leases_scrub_again_task",
        "schedule": 300.0,
    },
}

# --- Jobs --------------------------------------------------------------------------------------
# Every cluster with jobs on it is polled this often: one squeue for all of them, then sacct
# for those that left the queue, whose usage is charged in the same cycle.
JOBS_POLL_INTERVAL_SECONDS = env.float("JOBS_POLL_INTERVAL_SECONDS", default=10.0)
# How long a worker holds a batch of jobs it is submitting, and a cluster it is polling. Longer
# than any remote command may take, so that a second worker never submits the same job while
# the first is still waiting for sbatch; a worker that died gives its jobs up after it.
JOBS_SUBMIT_LEASE_SECONDS = env.float("JOBS_SUBMIT_LEASE_SECONDS", default=300.0)
JOBS_POLL_LEASE_SECONDS = env.float("JOBS_POLL_LEASE_SECONDS", default=120.0)
JOBS_SUBMIT_BATCH_SIZE = env.int("JOBS_SUBMIT_BATCH_SIZE", default=200)
# How many sbatch calls of a batch run at once on a login node: two reach the controller about
# 1.6 times as fast as one after the other (bench/jobs.py); 1 submits strictly in order.
JOBS_SUBMIT_LANES = env.int("JOBS_SUBMIT_LANES", default=2)
# An accepted job sends no submission message while one sent for its cluster this long ago or
# less has not reached a worker: that one submits it too (computeshare.queue,
# `enqueue_once_after_commit`). Its mark is in the shared cache, so 0 (every job sends one)
# without Redis. Should a message be lost, the poll submits the job (JOBS_POLL_INTERVAL_SECONDS).
JOBS_SUBMIT_WAKE_SECONDS = env.float("JOBS_SUBMIT_WAKE_SECONDS", default=10.0 if REDIS_URL else 0.0)
# A job gone from the queue that accounting does not know after this long is `undetermined`.
JOBS_MISSING_GRACE_SECONDS = env.float("JOBS_MISSING_GRACE_SECONDS", default=1800.0)
JOBS_RECONCILE_DAYS = env.int("JOBS_RECONCILE_DAYS", default=3)
JOBS_COMMAND_TIMEOUT_SECONDS = env.float("JOBS_COMMAND_TIMEOUT_SECONDS", default=60.0)
JOBS_OUTPUT_MAX_TAIL_BYTES = env.int("JOBS_OUTPUT_MAX_TAIL_BYTES", default=1024 * 1024)
# How often the poll reads the tenants' accounting for jobs the platform did not submit (a job
# of a team's job that started and ended between two polls); those in the queue are seen at
# every poll.
JOBS_TENANT_RUNS_READ_SECONDS = env.float("JOBS_TENANT_RUNS_READ_SECONDS", default=60.0)
# Idle time: with the poll, one sinfo per online cluster this often; each partition keeps one
# row per hour (marketplace.PartitionIdleHour) for this many days.
IDLE_SAMPLE_SECONDS = env.float("IDLE_SAMPLE_SECONDS", default=300.0)
IDLE_HISTORY_DAYS = env.int("IDLE_HISTORY_DAYS", default=35)
# The owners' track record counts what happened over this many days.
TRACK_RECORD_DAYS = env.int("TRACK_RECORD_DAYS", default=90)
# How long after a run ended accounting may still add to it (its batch step's record, the run
# that follows a requeue or a resize): past it, what accounting has is what there is.
JOBS_RUN_RECORD_GRACE_SECONDS = env.float("JOBS_RUN_RECORD_GRACE_SECONDS", default=60.0)
# Where the `local` backend (the demo's cluster) keeps its jobs.
LOCAL_CLUSTER_ROOT = Path(
    env("LOCAL_CLUSTER_ROOT", default=str(BASE_DIR / "var" / "local-cluster"))
)
# Whether this deployment runs local jobs at all: they run as the platform's own processes, so
# production refuses them (production.py).
LOCAL_BACKEND_ALLOWED = True
# Each local job runs sandboxed with bubblewrap (`bwrap`): it sees its own folder and the
# system, read-only, and no network. "auto" uses it where it works and otherwise runs jobs
# unsandboxed (the job pages then say so); "required" fails a job that cannot be sandboxed;
# "off" never sandboxes.
LOCAL_BACKEND_SANDBOX = env("LOCAL_BACKEND_SANDBOX", default="auto")
# The bubblewrap program: a name looked up on PATH, or a path.
LOCAL_BACKEND_BWRAP = env("LOCAL_BACKEND_BWRAP", default="bwrap")
# --- Job input and result files -----------------------------------------------------------
# Where the platform keeps jobs' files: uploaded inputs until they are staged on the cluster
# (so that an accepted job's inputs survive a worker's crash), and results fetched from the
# cluster after the job. A local folder (Django's FileSystemStorage).
JOB_FILES_ROOT = Path(env("JOB_FILES_ROOT", default=str(BASE_DIR / "var" / "job-files")))
# Limits of a job's input files (multipart upload on POST /jobs/): per file, per job, count,
# and how many folders deep a name may go.
JOB_INPUT_FILE_MAX_BYTES = env.int("JOB_INPUT_FILE_MAX_BYTES", default=64 * 1024 * 1024)
JOB_INPUT_TOTAL_MAX_BYTES = env.int("JOB_INPUT_TOTAL_MAX_BYTES", default=256 * 1024 * 1024)
JOB_INPUT_FILES_MAX = env.int("JOB_INPUT_FILES_MAX", default=200)
JOB_INPUT_PATH_DEPTH = env.int("JOB_INPUT_PATH_DEPTH", default=4)
# Django refuses a multipart body with more file parts than this before the API can answer
# `too_many_input_files` with its limit: well above the job's limit.
DATA_UPLOAD_MAX_NUMBER_FILES = max(100, 4 * JOB_INPUT_FILES_MAX)
# What the platform fetches of a job's results at most; past it the listing says `truncated`.
JOB_RESULT_TOTAL_MAX_BYTES = env.int("JOB_RESULT_TOTAL_MAX_BYTES", default=1024 * 1024 * 1024)
# How long result files are kept after the job ended (then removed; the listing says
# `expired`).
JOB_RESULT_RETENTION_DAYS = env.int("JOB_RESULT_RETENTION_DAYS", default=30)
# A parameter sweep runs one array task per row of its table: at most this many rows.
SWEEP_MAX_ROWS = env.int("SWEEP_MAX_ROWS", default=1000)
# A gathered result (a task's result file or last stdout line) is kept up to this many
# characters; a longer one is cut and marked.
SWEEP_RESULT_MAX_CHARS = env.int("SWEEP_RESULT_MAX_CHARS", default=10000)
CELERY_BEAT_SCHEDULE["job-results-collect"] = {
    "task": "scheduler_bridge.tasks.job_results_sweep_task",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["job-results-expire"] = {
    "task": "scheduler_bridge.tasks.job_results_expire_task",
    "schedule": crontab(hour=4, minute=7),
}
CELERY_BEAT_SCHEDULE["jobs-poll"] = {
    "task": "scheduler_bridge.tasks.jobs_poll_task",
    "schedule": JOBS_POLL_INTERVAL_SECONDS,
}
CELERY_BEAT_SCHEDULE["jobs-reconcile"] = {
    "task": "scheduler_bridge.tasks.jobs_reconcile_task",
    "schedule": crontab(hour=3, minute=17),
}
# Leases of tenant accounts end (and the accounts are scrubbed) once their team has neither an
# open allocation nor an unfinished job on the cluster.
CELERY_BEAT_SCHEDULE["tenant-leases-end"] = {
    "task": "scheduler_bridge.tasks.tenant_leases_end_task",
    "schedule": 60.0,
}

if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "computeshare.cache.RedisCache",
            "LOCATION": REDIS_URL,
        },
        "logins": {
            "BACKEND": "computeshare.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "logins",
        },
    }
else:
    # Without Redis (the demo): the failed log-ins in files, so that the demo's gunicorn
    # workers count together (not atomically: good enough for a demo, never for production,
    # which requires REDIS_URL).
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "logins": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(BASE_DIR / "var" / "login-failures"),
        },
    }

# --- Log-in throttling -------------------------------------------------------------------------
# Failed log-ins (the log-in page, the admin's, POST /api/v1/auth/token/) are counted in the cache
# `logins` (its own key prefix in Redis), shared by every process: a name from one address (its
# lock backs off exponentially), a name from everywhere (a ceiling only a distributed guess
# reaches) and an address whatever the names. The owner of a locked name gets in by a one-time
# link by mail. Why and how: computeshare/login_throttling.py. Unlock: `manage.py login_unlock`.
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_BACKOFF_SECONDS = env.int("LOGIN_BACKOFF_SECONDS", default=60)
LOGIN_BACKOFF_MAX_SECONDS = env.int("LOGIN_BACKOFF_MAX_SECONDS", default=86400)
LOGIN_ACCOUNT_FAILURE_LIMIT = env.int("LOGIN_ACCOUNT_FAILURE_LIMIT", default=200)
LOGIN_ACCOUNT_WINDOW_SECONDS = env.int("LOGIN_ACCOUNT_WINDOW_SECONDS", default=3600)
LOGIN_ADDRESS_FAILURE_LIMIT = env.int("LOGIN_ADDRESS_FAILURE_LIMIT", default=50)
LOGIN_COOLOFF_SECONDS = env.int("LOGIN_COOLOFF_SECONDS", default=900)
LOGIN_UNLOCK_SECONDS = env.int("LOGIN_UNLOCK_SECONDS", default=1800)
LOGIN_UNLOCK_TRIES = 3
LOGIN_UNLOCK_MAIL_SECONDS = 300
# How many reverse proxies in front of gunicorn append to X-Forwarded-For (0: none, the client
# is REMOTE_ADDR and the header is ignored). With N, the client is the address the outermost
# trusted proxy appended (the N-th entry from the right); whatever a client wrote to the left
# of it counts for nothing. The log-in throttling and DRF's throttles read it the same way.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)

# --- Secrets at rest ---------------------------------------------------------------------------
# A Fernet key (32 url-safe base64 bytes); several keys separated by commas rotate: the first
# encrypts, all decrypt. The default is for development only; production refuses to start
# without its own.
FIELD_ENCRYPTION_KEY = env("FIELD_ENCRYPTION_KEY", default=DEVELOPMENT_FIELD_ENCRYPTION_KEY)

# --- Owners' clusters --------------------------------------------------------------------------
# Networks (comma-separated CIDRs) where owners' clusters may be even though the outbound rules
# deny them (loopback, private, link-local...: computeshare/outbound.py). Empty: only public
# addresses. Name single hosts (`10.1.2.3/32`) rather than the platform's own network.
CLUSTER_ALLOWED_NETWORKS = env.list("CLUSTER_ALLOWED_NETWORKS", default=[])
# How many verifications an organization may ask for (`count/second|minute|hour|day`), counted
# in the shared cache so that every web process counts together.
CLUSTER_VERIFY_RATE = env("CLUSTER_VERIFY_RATE", default="20/hour")

# --- Webhooks ----------------------------------------------------------------------------------
# An endpoint must answer 2xx within this many seconds (connect, send and read each).
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
# Retries: after BASE seconds, doubling, at most MAX_INTERVAL apart, for WINDOW seconds from
# the first try (three days); then the delivery is failed.
WEBHOOK_RETRY_BASE_SECONDS = env.float("WEBHOOK_RETRY_BASE_SECONDS", default=60.0)
WEBHOOK_RETRY_MAX_INTERVAL_SECONDS = env.float(
    "WEBHOOK_RETRY_MAX_INTERVAL_SECONDS", default=6 * 3600.0
)
WEBHOOK_RETRY_WINDOW_SECONDS = env.float("WEBHOOK_RETRY_WINDOW_SECONDS", default=3 * 86400.0)
# A retry due within this long goes to the broker with a countdown; a later one to the sweep.
WEBHOOK_COUNTDOWN_MAX_SECONDS = env.float("WEBHOOK_COUNTDOWN_MAX_SECONDS", default=300.0)
WEBHOOK_SWEEP_SECONDS = env.float("WEBHOOK_SWEEP_SECONDS", default=30.0)
# Networks (CIDRs) where endpoints may be although the outbound rules deny them; empty: public
# addresses only. Separate from CLUSTER_ALLOWED_NETWORKS.
WEBHOOK_ALLOWED_NETWORKS = env.list("WEBHOOK_ALLOWED_NETWORKS", default=[])
# `allocation.ending` is sent this long before an allocation's window ends.
WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS = env.float(
    "WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS", default=3600.0
)
CELERY_BEAT_SCHEDULE["webhook-deliveries-due"] = {
    "task": "webhooks.tasks.webhook_deliveries_due_task",
    "schedule": WEBHOOK_SWEEP_SECONDS,
}
CELERY_BEAT_SCHEDULE["allocation-webhook-events"] = {
    "task": "marketplace.tasks.allocation_webhook_events_task",
    "schedule": 60.0,
}

# --- Money -------------------------------------------------------------------------------------
PLATFORM_CURRENCY = env("PLATFORM_CURRENCY", default="USD").upper()
PLATFORM_FEE_PERCENT = Decimal(env("PLATFORM_FEE_PERCENT", default="10"))
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", default="")
STRIPE_PUBLISHABLE_KEY = env("STRIPE_PUBLISHABLE_KEY", default="")
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", default="")
# Stripe signs a Connect endpoint's events (the owners' accounts) with that endpoint's secret.
STRIPE_CONNECT_WEBHOOK_SECRET = env("STRIPE_CONNECT_WEBHOOK_SECRET", default="")
STRIPE_API_BASE = env("STRIPE_API_BASE", default="https://api.stripe.com")
# Stripe.js: from Stripe in production, from the local Stripe server in the demo and the tests.
STRIPE_JS_URL = env("STRIPE_JS_URL", default="https://js.stripe.com/v3/")
# Two-decimal currencies only: top-ups are sent to Stripe in cents.
TOP_UP_MINIMUM = Decimal(env("TOP_UP_MINIMUM", default="5.00"))
TOP_UP_MAXIMUM = Decimal(env("TOP_UP_MAXIMUM", default="50000.00"))
# A top-up nobody paid within this many minutes is marked expired (billing.tasks).
TOP_UP_PENDING_EXPIRY_MINUTES = env.int("TOP_UP_PENDING_EXPIRY_MINUTES", default=60)
CELERY_BEAT_SCHEDULE["top-ups-expire"] = {
    "task": "billing.tasks.top_ups_expire_task",
    "schedule": 600.0,
}
# Owners' earnings become payable this long after they were earned: the time a team has to
# dispute the top-up that paid for them. The smallest payout Stripe is asked for.
PAYOUT_HOLDING_PERIOD = timedelta(days=env.int("PAYOUT_HOLDING_DAYS", default=7))
PAYOUT_MINIMUM = Decimal(env("PAYOUT_MINIMUM", default="1.00"))
# How long an invitation into an organization can be accepted.
INVITATION_EXPIRY_DAYS = env.int("INVITATION_EXPIRY_DAYS", default=14)
SITE_URL = env("SITE_URL", default="http://127.0.0.1:8000").rstrip("/")

# --- Notifications -----------------------------------------------------------------------------
# Notifications do not know memberships (imports go one way); this names who tells them the
# users of an organization (all active members, or only its admins).
NOTIFICATIONS_RECIPIENTS = "organizations.selectors.organization_notified_user_ids"
# The functions that may write out a notice batch's events after its change has committed
# (`notifications_record_after_commit_from`): an auction's, one per bidding team, would hold
# the offer's lock while they are written.
NOTICE_SOURCES = ("marketplace.notices.auction_cleared_events",)
# Mails whose task the broker lost are sent by this sweep.
CELERY_BEAT_SCHEDULE["notification-emails-due"] = {
    "task": "notifications.tasks.notification_emails_due_task",
    "schedule": 300.0,
}
# Notices recorded after their change's commit (an auction's) whose task was lost.
CELERY_BEAT_SCHEDULE["notice-batches-due"] = {
    "task": "notifications.tasks.notice_batches_due_task",
    "schedule": 60.0,
}

# --- Mail --------------------------------------------------------------------------------------
EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = env("EMAIL_FILE_PATH", default=str(BASE_DIR / "var" / "mail"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="ComputeShare <noreply@computeshare.local>")

# --- API ---------------------------------------------------------------------------------------
# A user may hold this many live API tokens (neither revoked nor expired) at once.
API_TOKENS_PER_USER_MAX = env.int("API_TOKENS_PER_USER_MAX", default=20)
# A token that authenticated is kept this long in the shared cache (computeshare.token_cache),
# so that the next requests with it query nothing for it; revocation still takes effect at
# once. Off without Redis: a per-process cache could not learn of a revocation elsewhere.
API_TOKEN_CACHE_SECONDS = env.int("API_TOKEN_CACHE_SECONDS", default=60 if REDIS_URL else 0)
# How long a process reuses the count of a filtered offers list that has further pages
# (computeshare.api.LookAheadPaginator); the last page's count, and every `next`, stay exact.
OFFER_LIST_COUNT_CACHE_SECONDS = env.int("OFFER_LIST_COUNT_CACHE_SECONDS", default=5)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "computeshare.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["computeshare.parsers.JSONParser"],
    "DEFAULT_PAGINATION_CLASS": "computeshare.api.Pagination",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "computeshare.api.ContentNegotiation",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "computeshare.api.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.ScopedRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {},
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# gunicorn's own limits (its defaults, which the deployments keep): past them it answers itself.
GUNICORN_REQUEST_LINE_LIMIT = 4094
GUNICORN_HEADER_FIELD_LIMIT = 8190
SPECTACULAR_SETTINGS = {
    "TITLE": "ComputeShare API",
    "DESCRIPTION": (
        "Buy idle HPC time on Slurm clusters and run jobs on it.\n\n"
        "Every error the application answers has the shape `{detail, code, extra}` with a "
        "stable `code`. Two answers come from the web server (gunicorn) before a request "
        "reaches the application, in its own short HTML rather than that shape: **414** "
        "(Request-URI Too Long) for a request line (method, path and query) longer than "
        f"{GUNICORN_REQUEST_LINE_LIMIT} bytes, and **400** for a header line longer than "
        f"{GUNICORN_HEADER_FIELD_LIMIT} bytes or more than 100 headers. Send long filters in "
        "several requests, never in one URL."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # The interactive docs load Swagger UI from our own static files (npm), never from a CDN.
    "SWAGGER_UI_DIST": f"/{STATIC_URL}vendor/swagger-ui",
    "SWAGGER_UI_FAVICON_HREF": f"/{STATIC_URL}favicon.svg",
    # Several models have a `status`; each set of values gets its own name in the schema.
    "ENUM_NAME_OVERRIDES": {
        "CapacityEnum": "marketplace.models.Capacity",
        "ClusterStatusEnum": "marketplace.models.Cluster.Status",
        "OfferStatusEnum": "marketplace.models.Offer.Status",
        "BidStatusEnum": "marketplace.models.Bid.Status",
        "AllocationStatusEnum": "marketplace.models.Allocation.Status",
        "TopUpStatusEnum": "billing.models.TopUp.Status",
        "ApiTokenStatusEnum": "computeshare.models.ApiToken.Status",
        "InvitationStatusEnum": "organizations.models.Invitation.Status",
        "JobResultsStateEnum": "scheduler_bridge.models.Job.ResultsState",
        "StateEnum": "scheduler_bridge.models.JobState",
        "NotificationKindEnum": "notifications.models.Kind",
        "SweepStateEnum": "scheduler_bridge.models.Sweep.State",
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"paramiko": {"level": "WARNING"}},
}
