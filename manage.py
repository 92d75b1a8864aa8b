#!/usr/bin/env python
import os
import sys


def main() -> None:
    # Production unless told otherwise: it refuses to start without its secrets and with the
    # demo's. The demo (scripts/demo) and the tests name their settings themselves.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "computeshare.settings.production")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
