import os

from celery import Celery

# Production unless told otherwise: it refuses to start without its secrets and with the
# demo's. The demo (scripts/demo) and the tests name their settings themselves.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "computeshare.settings.production")

app = Celery("computeshare")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
