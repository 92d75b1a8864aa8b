"""Production, and the default of every process that serves or works (manage.py, wsgi.py,
celery.py): every secret must come from the environment. The process refuses to start without
SECRET_KEY, FIELD_ENCRYPTION_KEY, ALLOWED_HOSTS, DATABASE_URL and REDIS_URL, and with any
secret of the demo or the tests (insecure.py)."""

from django.core.exceptions import ImproperlyConfigured
from whitenoise.compress import Compressor  # type: ignore[import-untyped]

from computeshare.settings.base import *  # noqa: F403
from computeshare.settings.base import env
from computeshare.settings.insecure import KNOWN_SECRETS

REQUIRED = ("SECRET_KEY", "FIELD_ENCRYPTION_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL")
_missing = [name for name in REQUIRED if not env.str(name, default="").strip()]
if _missing:
    raise ImproperlyConfigured(
        "computeshare.settings.production (the default settings) needs environment variables "
        f"that are not set: {', '.join(_missing)} (.env.example explains each). To try "
        "ComputeShare on this machine, run `make demo` (it uses computeshare.settings.local); "
        "the tests run with `make test` (computeshare.settings.test)."
    )
for _name, _known in KNOWN_SECRETS.items():
    _values = {value.strip() for value in env.str(_name, default="").split(",")}
    if _values & _known:
        raise ImproperlyConfigured(
            f"{_name} is one of the demo's or the tests' secrets, which are public in the "
            "repository (computeshare/settings/insecure.py). Set a secret of your own."
        )

DEBUG = False
SECRET_KEY = env("SECRET_KEY")
FIELD_ENCRYPTION_KEY = env("FIELD_ENCRYPTION_KEY")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
DATABASES = {"default": env.db("DATABASE_URL")}
# The cache every process shares: the log-in throttling and DRF's throttles count
# in it, so it is Redis, never a process's own memory.
REDIS_URL = env("REDIS_URL")
CACHES = {
    "default": {"BACKEND": "computeshare.cache.RedisCache", "LOCATION": REDIS_URL},
    "logins": {
        "BACKEND": "computeshare.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "logins",
    },
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
# The health check is probed over plain HTTP from inside the deployment.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# Source maps are read by a developer's tools, never by a page: served as they are rather than
# compressed twice (brotli at its best quality took most of collectstatic's three minutes on
# a 2-core machine, for 12 MB of maps).
WHITENOISE_SKIP_COMPRESS_EXTENSIONS = (*Compressor.SKIP_COMPRESS_EXTENSIONS, "map")
EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")
# Jobs run on owners' clusters only, never as processes of the platform's own machine.
LOCAL_BACKEND_ALLOWED = False
