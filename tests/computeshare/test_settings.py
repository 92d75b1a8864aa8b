"""Production settings: they refuse to start without their secrets, and pass `check --deploy`."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

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
    assert "Set the SECRET_KEY environment variable" in result.stderr


def test_production_refuses_to_start_without_field_encryption_key():
    environment = production_environment()
    del environment["FIELD_ENCRYPTION_KEY"]

    result = manage("check", **environment)

    assert result.returncode != 0
    assert "Set the FIELD_ENCRYPTION_KEY environment variable" in result.stderr


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
        "from scheduler_bridge.backends.local import LocalBackendRefused\n"
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
