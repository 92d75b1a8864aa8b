"""Clears, now, every auction whose close time has passed (the periodic task does the same)."""

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from marketplace import selectors, services


class Command(BaseCommand):
    help = "Clear every offer whose auction close time has passed (or only the offers named)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("offers", nargs="*", help="offer ids (UUIDs); all due ones if none")

    def handle(self, *args: Any, offers: list[str], **options: Any) -> None:
        if offers:
            try:
                offers = [str(uuid.UUID(offer)) for offer in offers]
            except ValueError as error:
                raise CommandError(f"Offer ids are UUIDs: {error}") from error
            due = list(selectors.offer_ids_by_uuid(offers))
            if len(due) != len(set(offers)):
                self.stderr.write("Some of the offers named do not exist.")
        else:
            due = selectors.auctions_due()
        public_ids = selectors.offer_uuids(due)
        for offer_id in due:
            outcome = services.auction_clear(offer_id=offer_id)
            offer_uuid = public_ids[offer_id]
            if not outcome.cleared:
                self.stdout.write(
                    f"{offer_uuid}: not cleared (still open for bids, or already done)"
                )
            elif outcome.price is None:
                self.stdout.write(f"{offer_uuid}: no sale ({outcome.bids} bids)")
            else:
                self.stdout.write(
                    f"{offer_uuid}: {outcome.units_sold} units to {outcome.winners} winners "
                    f"at {outcome.price} ({outcome.bids} bids)"
                )
