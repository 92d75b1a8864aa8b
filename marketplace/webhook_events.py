"""The webhook events of the market (auctions cleared, bids outbid, allocation windows),
recorded in the caller's transaction through the webhooks app's one entry point."""

from collections.abc import Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from marketplace.auction import BidRow
from marketplace.models import Allocation, Bid, Offer
from webhooks.services import Event, events_record, organizations_listening

# A window that opened (or will end) longer ago than this is not announced any more: after a
# long outage of beat, or for the allocations that existed before webhooks did.
ALLOCATION_EVENTS_LOOKBACK = timedelta(days=1)


def auction_cleared(
    offer: Offer, rows: Sequence[BidRow], fills: Mapping[Hashable, int], price: Decimal | None
) -> None:
    """`auction.cleared` to the owner and to every bidder, and `bid.outbid` for each bid that
    got fewer units than it asked for (lost, or partly won). `rows` are the clearing's bid rows
    (`BidRow`), `fills` the units each winner got."""
    owner_id = offer.cluster.organization_id
    bidders = {row.organization_id for row in rows}
    cleared = {
        "offer": str(offer.uuid),
        "cluster": str(offer.cluster.uuid),
        "clearing_price": None if price is None else str(price),
        "quantity": offer.quantity,
        "quantity_sold": sum(fills.values()),
        "currency": settings.PLATFORM_CURRENCY,
    }
    events = [
        Event(organization_id, "auction.cleared", f"offer:{offer.uuid}", cleared, once=True)
        for organization_id in organizations_listening({owner_id, *bidders}, "auction.cleared")
    ]
    outbid = [row for row in rows if fills.get(row.pk, 0) < row.quantity]
    listening = organizations_listening({row.organization_id for row in outbid}, "bid.outbid")
    outbid = [row for row in outbid if row.organization_id in listening]
    if outbid:
        uuids = dict(
            Bid.objects.filter(pk__in=[row.pk for row in outbid]).values_list("pk", "uuid")
        )
        events += [
            Event(
                row.organization_id,
                "bid.outbid",
                f"bid:{uuids[row.pk]}",
                {
                    "id": str(uuids[row.pk]),
                    "offer": str(offer.uuid),
                    "status": Bid.Status.PARTIALLY_WON if fills.get(row.pk) else Bid.Status.LOST,
                    "price": str(row.price),
                    "quantity": row.quantity,
                    "quantity_won": fills.get(row.pk, 0),
                    "clearing_price": cleared["clearing_price"],
                    "currency": settings.PLATFORM_CURRENCY,
                },
            )
            for row in outbid
        ]
    events_record(events)


def _allocation_data(allocation: Allocation) -> dict[str, Any]:
    return {
        "id": str(allocation.uuid),
        "offer": str(allocation.offer.uuid),
        "cluster": str(allocation.cluster.uuid),
        "partition": allocation.partition.name,
        "resource": allocation.resource,
        "quantity": allocation.quantity,
        "unit_price": str(allocation.unit_price),
        "window_start": allocation.window_start,
        "window_end": allocation.window_end,
    }


@transaction.atomic
def allocation_events_due(now: datetime | None = None) -> int:
    """`allocation.starting` for each allocation whose window has opened, and
    `allocation.ending` for each whose window ends within WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS
    (or has ended), each once per allocation (the outbox's unique row), for the organizations
    that listen. Run every minute by beat; returns how many deliveries were made."""
    now = now or timezone.now()
    lead = timedelta(seconds=settings.WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS)
    since = now - ALLOCATION_EVENTS_LOOKBACK
    events: list[Event] = []
    for type, window in (
        ("allocation.starting", {"window_start__lte": now, "window_start__gt": since}),
        ("allocation.ending", {"window_end__lte": now + lead, "window_end__gt": since}),
    ):
        candidates = Allocation.objects.filter(**window).values_list("organization_id", flat=True)
        listening = organizations_listening(set(candidates), type)
        if not listening:
            continue
        for allocation in (
            Allocation.objects.filter(organization_id__in=listening, **window)
            .select_related("offer", "cluster", "partition")
            .order_by("pk")
        ):
            events.append(
                Event(
                    allocation.organization_id,
                    type,
                    f"allocation:{allocation.uuid}",
                    _allocation_data(allocation),
                    once=True,
                )
            )
    return events_record(events)
