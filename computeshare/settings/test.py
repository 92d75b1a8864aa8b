"""The test run: real PostgreSQL and Redis on this machine unless the environment says otherwise."""

from computeshare.settings.base import *  # noqa: F403
from computeshare.settings.base import env

DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/computeshare"),
}
DATABASES["default"]["CONN_MAX_AGE"] = 0
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/15")
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
}
EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.locmem.EmailBackend")
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"login": "10000/min"}}  # noqa: F405
