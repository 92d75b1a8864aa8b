"""Production settings: they refuse to start without their secrets, and pass `check --deploy`."""

import os
import runpy
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from computeshare.settings.insecure import DEMO_STRIPE_WEBHOOK_SECRET, KNOWN_SECRETS
from tests.workers import database_url

REPOSITORY = Path(__file__).resolve().parents[2]


def manage(*arguments: str, **environment: str) -> subprocess.CompletedProcess[str]:
    base = {
        key: value
        for key, value in os.environ.items()
        if key
        not in {
            "SECRET_KEY",
            "FIELD_ENCRYPTION_KEY",
            "ALLOWED_HOSTS",
            "DATABASE_URL",
            "DJANGO_ALLOW_ASYNC_UNSAFE",
        }
    }
    return subprocess.run(
        [sys.executable, "manage.py", *arguments],
        cwd=REPOSITORY,
        env={**base, "DJANGO_SETTINGS_MODULE": "computeshare.settings.production", **environment},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def production_environment() -> dict[str, str]:
    return {
        "SECRET_KEY": secrets.token_urlsafe(64),
        "FIELD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "ALLOWED_HOSTS": "computeshare.example.org",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/computeshare",
        "REDIS_URL": "redis://127.0.0.1:6379/15",
    }


def test_production_passes_check_deploy_without_a_warning():
    result = manage("check", "--deploy", "--fail-level", "WARNING", **production_environment())

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_production_refuses_to_start_without_secret_key():
    environment = production_environment()
    del environment["SECRET_KEY"]

    result = manage("check", **environment)

    assert result.returncode != 0
    assert "needs environment variables that are not set: SECRET_KEY " in result.stderr


def test_production_refuses_to_start_without_field_encryption_key():
    environment = production_environment()
    del environment["FIELD_ENCRYPTION_KEY"]

    result = manage("check", **environment)

    assert result.returncode != 0
    assert "needs environment variables that are not set: FIELD_ENCRYPTION_KEY " in result.stderr


def test_production_collects_static_files_for_whitenoise(tmp_path):
    result = manage(
        "collectstatic", "--no-input", **production_environment(), STATIC_ROOT=str(tmp_path)
    )

    assert result.returncode == 0, result.stderr
    manifest = (tmp_path / "staticfiles.json").read_text()
    for path in (
        "vendor/bootstrap/css/bootstrap.min.css",
        "vendor/htmx/htmx.min.js",
        "vendor/chart.js/chart.umd.min.js",
        "css/computeshare.css",
    ):
        assert f'"{path}"' in manifest


def test_production_never_runs_a_job_on_the_local_backend(tmp_path):
    program = (
        "from django.conf import settings\n"
        "from hpc.backends.local import LocalBackendRefused\n"
        "from scheduler_bridge.services.backends import local_backend\n"
        "print(settings.LOCAL_BACKEND_ALLOWED)\n"
        f"settings.LOCAL_CLUSTER_ROOT = {str(tmp_path / 'root')!r}\n"
        "try:\n"
        "    local_backend()\n"
        "except LocalBackendRefused as refusal:\n"
        "    print(type(refusal).__name__, refusal.is_transient)\n"
    )

    result = manage("shell", "--no-imports", "--command", program, **production_environment())

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False", "LocalBackendRefused False"]
    assert not (tmp_path / "root").exists()


# --- safe by default ---------------------------------------------------------------------------

SETTINGS_NAMES = {
    "DJANGO_SETTINGS_MODULE",
    "SECRET_KEY",
    "FIELD_ENCRYPTION_KEY",
    "ALLOWED_HOSTS",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "STRIPE_SECRET_KEY",
    "STRIPE_PUBLISHABLE_KEY",
    "STRIPE_WEBHOOK_SECRET",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
}


def run_unconfigured(*arguments: str, **environment: str) -> subprocess.CompletedProcess[str]:
    """`python <arguments>` in the repository as a fresh checkout runs it: no settings module
    named, none of the settings' variables set except `environment`."""
    base = {key: value for key, value in os.environ.items() if key not in SETTINGS_NAMES}
    return subprocess.run(
        [sys.executable, *arguments],
        cwd=REPOSITORY,
        env={**base, **environment},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def production_settings(monkeypatch: pytest.MonkeyPatch, **environment: str) -> dict[str, Any]:
    """computeshare.settings.production as a process starting with `environment` (and nothing
    else of the settings' variables) would load it, in this process."""
    for name in SETTINGS_NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    return runpy.run_module("computeshare.settings.production")


def test_manage_py_defaults_to_production():
    program = "from django.conf import settings; print(settings.SETTINGS_MODULE, settings.DEBUG)"

    result = run_unconfigured(
        "manage.py", "shell", "--no-imports", "--command", program, **production_environment()
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "computeshare.settings.production False"


def test_the_web_server_and_celery_default_to_production():
    program = (
        "import os\n"
        "import computeshare  # its __init__ loads celery.py, which sets its default\n"
        "celery_default = os.environ.pop('DJANGO_SETTINGS_MODULE')\n"
        "import computeshare.wsgi\n"
        "from django.conf import settings\n"
        "print(celery_default, settings.SETTINGS_MODULE, settings.DEBUG)\n"
    )

    result = run_unconfigured("-c", program, **production_environment())

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "computeshare.settings.production computeshare.settings.production False"
    )


def test_runserver_on_a_fresh_checkout_says_how_to_run_the_demo():
    assert not (REPOSITORY / ".env").exists(), "a .env file would configure this checkout"

    result = run_unconfigured("manage.py", "runserver", "--noreload", "127.0.0.1:9")

    assert result.returncode != 0
    message = result.stderr.strip().splitlines()[-1]
    assert message == (
        "django.core.exceptions.ImproperlyConfigured: computeshare.settings.production (the "
        "default settings) needs environment variables that are not set: SECRET_KEY, "
        "FIELD_ENCRYPTION_KEY, ALLOWED_HOSTS, DATABASE_URL, REDIS_URL (.env.example explains "
        "each). To try ComputeShare on this machine, run `make demo` (it uses "
        "computeshare.settings.local); the tests run with `make test` "
        "(computeshare.settings.test)."
    )


def test_production_refuses_to_start_without_redis(monkeypatch):
    environment = production_environment()
    del environment["REDIS_URL"]

    with pytest.raises(ImproperlyConfigured) as refusal:
        production_settings(monkeypatch, **environment)

    assert "needs environment variables that are not set: REDIS_URL " in str(refusal.value)


def test_production_caches_in_redis(monkeypatch):
    loaded = production_settings(monkeypatch, **production_environment())

    assert {alias: cache["BACKEND"] for alias, cache in loaded["CACHES"].items()} == {
        "default": "computeshare.cache.RedisCache",
        "logins": "computeshare.cache.RedisCache",
    }
    assert loaded["CACHES"]["logins"]["LOCATION"] == production_environment()["REDIS_URL"]


KNOWN = [(name, value) for name, values in KNOWN_SECRETS.items() for value in sorted(values)]


@pytest.mark.parametrize(("name", "value"), KNOWN, ids=[f"{n}={v}" for n, v in KNOWN])
def test_production_refuses_every_secret_of_the_demo_and_the_tests(monkeypatch, name, value):
    environment = {**production_environment(), name: value}
    if name == "FIELD_ENCRYPTION_KEY":  # also when it is only one of the rotated keys
        environment[name] = f"{Fernet.generate_key().decode()},{value}"

    with pytest.raises(ImproperlyConfigured) as refusal:
        production_settings(monkeypatch, **environment)

    assert str(refusal.value) == (
        f"{name} is one of the demo's or the tests' secrets, which are public in the "
        "repository (computeshare/settings/insecure.py). Set a secret of your own."
    )


def test_a_production_process_does_not_start_with_the_demos_webhook_secret():
    environment = {**production_environment(), "STRIPE_WEBHOOK_SECRET": DEMO_STRIPE_WEBHOOK_SECRET}

    result = manage("check", **environment)

    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        "django.core.exceptions.ImproperlyConfigured: STRIPE_WEBHOOK_SECRET is one of the "
        "demo's or the tests' secrets, which are public in the repository "
        "(computeshare/settings/insecure.py). Set a secret of your own."
    )


@pytest.mark.django_db
def test_a_webhook_forged_with_the_demo_secret_credits_nothing_in_production():
    """The demo's webhook secret cannot be production's (above); and a production process with
    its own refuses an event signed with the demo's, before anything is stored."""
    program = (
        "import hashlib, hmac, json, time\n"
        "from django.test import Client\n"
        "from billing.models import StripeEvent\n"
        "event = json.dumps({'id': 'evt_forged', 'object': 'event',\n"
        "    'type': 'payment_intent.succeeded', 'created': int(time.time()),\n"
        "    'data': {'object': {'id': 'pi_forged', 'object': 'payment_intent',\n"
        "        'amount': 100000, 'amount_received': 100000, 'currency': 'usd',\n"
        "        'status': 'succeeded', 'metadata': {}}}}).encode()\n"
        "stamp = int(time.time())\n"
        f"digest = hmac.new({DEMO_STRIPE_WEBHOOK_SECRET!r}.encode(),\n"
        "    f'{stamp}.'.encode() + event, hashlib.sha256).hexdigest()\n"
        "answer = Client().post('/api/v1/billing/stripe/webhook/', event,\n"
        "    content_type='application/json', secure=True,\n"
        "    HTTP_HOST='computeshare.example.org',\n"
        "    HTTP_STRIPE_SIGNATURE=f't={stamp},v1={digest}')\n"
        "print(answer.status_code, answer.json()['code'], StripeEvent.objects.count())\n"
    )
    environment = {
        **production_environment(),
        "DATABASE_URL": database_url(connection.settings_dict),
        "STRIPE_WEBHOOK_SECRET": f"whsec_{secrets.token_urlsafe(24)}",
    }

    result = manage("shell", "--no-imports", "--command", program, **environment)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "400 invalid_signature 0"


@pytest.mark.parametrize(("count", "expected"), [("0", 0), ("2", 2)])
def test_the_trusted_proxy_count_is_one_setting_for_log_ins_and_drf(monkeypatch, count, expected):
    # The log-in throttling reads the client's address through DRF's NUM_PROXIES
    # (computeshare.login_throttling.client_address).
    monkeypatch.setenv("TRUSTED_PROXY_COUNT", count)

    loaded = runpy.run_path(str(REPOSITORY / "computeshare" / "settings" / "base.py"))

    assert loaded["REST_FRAMEWORK"]["NUM_PROXIES"] == expected


def test_the_demo_writes_each_mail_to_a_file_of_its_own_in_var_mail(tmp_path, monkeypatch):
    """Issue 30: the demo's mail is read from var/mail/, one file per message."""
    where = (
        "from django.conf import settings\n"
        "print(settings.EMAIL_BACKEND, settings.EMAIL_FILE_PATH)\n"
    )
    send = (
        "from django.core.mail import send_mail\n"
        "for number in (1, 2):\n"
        "    send_mail(f'Notice {number}', 'Body', None, ['tom@nimbus-research.example'])\n"
    )
    demo = {
        "DJANGO_SETTINGS_MODULE": "computeshare.settings.local",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
    }
    mail = tmp_path / "mail"
    for name in ("EMAIL_BACKEND", "EMAIL_FILE_PATH"):
        monkeypatch.delenv(name, raising=False)

    settings_read = run_unconfigured(
        "manage.py", "shell", "--no-imports", "--command", where, **demo
    )
    sent = run_unconfigured(
        "manage.py", "shell", "--no-imports", "--command", send, **demo, EMAIL_FILE_PATH=str(mail)
    )

    assert settings_read.returncode == 0, settings_read.stderr
    assert settings_read.stdout.splitlines()[-1] == (
        f"computeshare.mail.OneFilePerMessageBackend {REPOSITORY / 'var' / 'mail'}"
    )
    assert sent.returncode == 0, sent.stderr
    files = sorted(mail.iterdir())
    assert len(files) == 2
    assert sorted(
        next(line for line in path.read_text().splitlines() if line.startswith("Subject:"))
        for path in files
    ) == ["Subject: Notice 1", "Subject: Notice 2"]
