import os

from django.core.wsgi import get_wsgi_application

# Production unless told otherwise: it refuses to start without its secrets and with the
# demo's. The demo (scripts/demo) and the tests name their settings themselves.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "computeshare.settings.production")

application = get_wsgi_application()
