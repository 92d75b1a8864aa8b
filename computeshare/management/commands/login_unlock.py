"""`manage.py login_unlock NAME` lifts a name's lock for everyone; `--address ADDRESS` an
address's (with NAME, that name's from that address too); `--everyone` every count."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from computeshare.login_throttling import unlock


class Command(BaseCommand):
    help = "Lifts the log-in locks of a user name, a client address, or everyone."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", nargs="?")
        parser.add_argument("--address")
        parser.add_argument("--everyone", action="store_true")

    def handle(
        self, *args: Any, username: str | None, address: str | None, everyone: bool, **_: Any
    ) -> None:
        if everyone == bool(username or address):
            raise CommandError("Give a user name and/or --address, or --everyone alone.")
        unlock(username=username, address=address)
        self.stdout.write("Unlocked.")
