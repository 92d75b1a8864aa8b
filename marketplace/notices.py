"""The market's notifications (bids and auctions, allocation windows), recorded
in the caller's transaction through the notifications app's entry points (an auction's read
after its commit, one per organization)."""

import functools
import hashlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from marketplace.auction import BidRow
from marketplace.models import Allocation, Bid, Offer
from notifications import selectors as notification_selectors
from notifications.services import (
    NotificationEvent,
    notifications_record,
    notifications_record_after_commit_from,
    price_text,
)

# As the webhooks': a window that opened (or ends) longer ago than this is not told any more.
ALLOCATION_NOTICES_LOOKBACK = timedelta(days=1)


def auction_cleared(offer: Offer) -> None:
    """After the clearing of `offer` commits, each bidding organization's admins learn its
    outcome once, over all its bids (won some units: `auction_won`; won none: `bid_outbid`),
    and the owner's admins that the auction cleared (`auction_cleared_events`).

    The clearing's transaction writes one row naming the offer: a notice per bid, recorded
    under the offer's lock, took 20 of a 100,000-bid clearing's 24 s (and a team with 984 bids
    was told 984 times), and even the events of a 1,000-team clearing, written out, were a
    third of it."""
    notifications_record_after_commit_from(
        "marketplace.notices.auction_cleared_events", offer=offer.pk
    )


def auction_cleared_events(*, offer: int) -> list[NotificationEvent]:
    """The notices of a cleared auction, read from its committed result: the offer's clearing
    price, units sold and bid count, and the bids it settled, won, partly won or lost (a bid
    withdrawn before is not one of them)."""
    cleared = Offer.objects.select_related("cluster").get(pk=offer)
    rows = (
        Bid.objects.filter(
            offer=cleared,
            status__in=[Bid.Status.WON, Bid.Status.PARTIALLY_WON, Bid.Status.LOST],
        )
        .order_by("-price", "created_at", "pk")
        .values_list(*BidRow._fields, "quantity_won")
    )
    bids: list[BidRow] = []
    fills: dict[Hashable, int] = {}
    for *fields, won in rows:
        bids.append(bid := BidRow(*fields))
        if won:
            fills[bid.pk] = won
    price = cleared.clearing_price
    link = reverse("offer-detail", args=[cleared.uuid])
    window = f"{cleared.window_start:%Y-%m-%d} to {cleared.window_end:%Y-%m-%d}"
    where = f"{cleared.cluster.name} ({cleared.resource}, {window})"
    events = [
        NotificationEvent(
            kind="auction_cleared",
            key=f"auction_cleared:offer:{cleared.uuid}",
            title=f"Your auction on {cleared.cluster.name} cleared",
            body=f"{where}: {sum(fills.values())} of {cleared.quantity} units sold at "
            f"{price_text(price)} per unit, from {len(bids)} bids.",
            link=link,
            organization_id=cleared.cluster.organization_id,
            admins_only=True,
        )
    ]
    by_organization: dict[int, list[BidRow]] = {}
    for bid in bids:
        by_organization.setdefault(bid.organization_id, []).append(bid)
    # Bids' prices repeat (cents between the reserve and the top): each is written out once.
    money = functools.lru_cache(maxsize=None)(price_text)
    for organization_id, organization_bids in by_organization.items():
        kind, title, body = _auction_outcome(
            cleared.cluster.name, where, organization_bids, fills, price, money
        )
        events.append(
            NotificationEvent(
                kind=kind,
                key=f"{kind}:offer:{cleared.uuid}:organization:{organization_id}",
                title=title,
                body=body,
                link=link,
                organization_id=organization_id,
                admins_only=True,
            )
        )
    return events


def _auction_outcome(
    cluster: str,
    where: str,
    bids: Sequence[BidRow],
    fills: Mapping[Hashable, int],
    price: Decimal | None,
    money_text: Callable[[Decimal | None], str] = price_text,
) -> tuple[str, str, str]:
    """(kind, title, body) of one organization's notice over its bids."""
    won = sum(fills.get(bid.pk, 0) for bid in bids)
    asked = sum(bid.quantity for bid in bids)
    if len(bids) == 1:
        bid_price, quantity = bids[0].price, bids[0].quantity
        if won:
            title = (
                f"You won {won} units on {cluster}"
                if won == quantity
                else f"You won {won} of the {quantity} units you bid for on {cluster}"
            )
            body = (
                f"{where}: clearing price {money_text(price)} per unit "
                f"(you bid {money_text(bid_price)})."
            )
            return "auction_won", title, body
        body = (
            f"{where}: you bid {money_text(bid_price)} for {quantity} units; the auction cleared "
            f"at {money_text(price)} per unit. The bid's hold is released."
        )
        return "bid_outbid", f"Your bid on {cluster} lost", body
    lowest = min(bid.price for bid in bids)
    highest = max(bid.price for bid in bids)
    prices = (
        money_text(lowest)
        if lowest == highest
        else f"{money_text(lowest)} to {money_text(highest)}"
    )
    if won:
        winning = sum(1 for bid in bids if fills.get(bid.pk, 0))
        title = (
            f"You won {won} units on {cluster} over {len(bids)} bids"
            if won == asked
            else f"You won {won} of the {asked} units you bid for on {cluster} "
            f"over {len(bids)} bids"
        )
        body = (
            f"{where}: clearing price {money_text(price)} per unit (you bid {prices}); "
            f"{winning} of your {len(bids)} bids won units"
        )
        body += "." if winning == len(bids) else ", the others' holds are released."
        return "auction_won", title, body
    body = (
        f"{where}: you bid {prices} for {asked} units over {len(bids)} bids; the auction cleared "
        f"at {money_text(price)} per unit. The bids' holds are released."
    )
    return "bid_outbid", f"Your {len(bids)} bids on {cluster} lost", body


@transaction.atomic
def allocation_notices_due(now: datetime | None = None) -> int:
    """`allocation_starting` for each allocation whose window opened, `allocation_ending` for
    each whose window ends within WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS, to every member of its
    organization, once per allocation (the notifications' unique key). Run every minute."""
    now = now or timezone.now()
    lead = timedelta(seconds=settings.WEBHOOK_ALLOCATION_ENDING_LEAD_SECONDS)
    since = now - ALLOCATION_NOTICES_LOOKBACK
    events: list[NotificationEvent] = []
    for kind, window in (
        ("allocation_starting", {"window_start__lte": now, "window_start__gt": since}),
        ("allocation_ending", {"window_end__lte": now + lead, "window_end__gt": since}),
    ):
        allocations = list(
            Allocation.objects.filter(**window)
            .select_related("cluster", "organization")
            .order_by("pk")
        )
        told = notification_selectors.keys_recorded(
            [f"{kind}:allocation:{allocation.uuid}" for allocation in allocations]
        )
        for allocation in allocations:
            key = f"{kind}:allocation:{allocation.uuid}"
            if key in told:
                continue
            what = f"{allocation.quantity} {allocation.resource} units on {allocation.cluster.name}"
            if kind == "allocation_starting":
                title = f"Your allocation on {allocation.cluster.name} has started"
                body = f"{what}: jobs can run until {allocation.window_end:%Y-%m-%d %H:%M} UTC."
            else:
                title = f"Your allocation on {allocation.cluster.name} ends soon"
                body = f"{what}: its window ends at {allocation.window_end:%Y-%m-%d %H:%M} UTC."
            events.append(
                NotificationEvent(
                    kind=kind,
                    key=key,
                    title=title,
                    body=body,
                    link=reverse("organization-detail", args=[allocation.organization.uuid]),
                    organization_id=allocation.organization_id,
                )
            )
    return notifications_record(events)


def reservation_problem(allocation: Allocation, problem: str) -> None:
    """The team and the owners' admins learn, once per problem, that the reservation holding a
    reserved block drifted on the cluster and could not be put back (`reservations_check`)."""
    where = f"{allocation.block} reserved on {allocation.cluster.name}/{allocation.partition.name}"
    title = f"The reservation of your block on {allocation.cluster.name} needs attention"
    digest = hashlib.sha256(problem.encode()).hexdigest()[:16]
    key = f"reservation_problem:allocation:{allocation.uuid}:{digest}"
    events = [
        NotificationEvent(
            kind="reservation_problem",
            key=f"{key}:{organization_id}",
            title=title,
            body=f"{where}: {problem}",
            link=link,
            organization_id=organization_id,
            admins_only=admins_only,
        )
        for organization_id, admins_only, link in (
            (
                allocation.organization_id,
                False,
                reverse("organization-detail", args=[allocation.organization.uuid]),
            ),
            (
                allocation.cluster.organization_id,
                True,
                reverse("organization-detail", args=[allocation.cluster.organization.uuid]),
            ),
        )
    ]
    notifications_record(events)
