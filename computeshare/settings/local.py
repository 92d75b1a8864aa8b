"""Development and the embedded demo: SQLite, the filesystem broker, mail on the console."""

from computeshare.settings.base import *  # noqa: F403
from computeshare.settings.base import env

DEBUG = env.bool("DJANGO_DEBUG", default=True)
