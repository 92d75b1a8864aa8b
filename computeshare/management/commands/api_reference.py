"""`manage.py api_reference` writes the reference half of docs/api.md again from the schema and
the error classes (`computeshare.api_reference`); `--check` only says whether it is up to date
(exit 1 when not), as the suite's test does."""

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from computeshare.api_reference import document_update, schema_generate


class Command(BaseCommand):
    help = "Writes docs/api.md's endpoints, shapes and error codes from the running code."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")

    def handle(self, *args: Any, check: bool, **_: Any) -> None:
        path = Path(settings.BASE_DIR) / "docs" / "api.md"
        document = path.read_text()
        updated = document_update(document, schema_generate())
        if updated == document:
            self.stdout.write(f"{path.name} is up to date.")
        elif check:
            raise CommandError(f"{path} is stale: run `manage.py api_reference`.")
        else:
            path.write_text(updated)
            self.stdout.write(f"Wrote {path}.")
