#!/usr/bin/env python
import os
import sys


def main() -> None:
    # Production unless told otherwise: it refuses to start without its secrets and with the
    # demo's. The demo (scripts/demo) and the tests name their settings themselves.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "computeshare.settings.production")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    # Loaded here, so that a refusal is the one thing said: Django's own command line swallows
    # it while setting up and, for commands that run checks, fails later on something else.
    try:
        settings.INSTALLED_APPS  # noqa: B018
    except ImproperlyConfigured as refusal:
        sys.exit(f"django.core.exceptions.ImproperlyConfigured: {refusal}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
