"""The market's notifications (bids and auctions, allocation windows, invitations), recorded
in the caller's transaction through the notifications app's one entry point."""

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from marketplace.models import Allocation, Bid, Invitation, Offer
from notifications import selectors as notification_selectors
from notifications.services import NotificationEvent, money_text, notifications_record

# As the webhooks': a window that opened (or ends) longer ago than this is not told any more.
ALLOCATION_NOTICES_LOOKBACK = timedelta(days=1)


def auction_cleared(
    offer: Offer, rows: Sequence[tuple[Any, ...]], fills: Mapping[int, int], price: Decimal | None
) -> None:
    """Each bid's organization's admins learn its outcome (won, partly won, or lost:
    `auction_won` or `bid_outbid`), and the owner's admins that the auction cleared. `rows`
    are the clearing's bid rows (pk, price, quantity, ..., organization last)."""
    link = reverse("offer-detail", args=[offer.uuid])
    window = f"{offer.window_start:%Y-%m-%d} to {offer.window_end:%Y-%m-%d}"
    where = f"{offer.cluster.name} ({offer.resource}, {window})"
    uuids = dict(Bid.objects.filter(pk__in=[row[0] for row in rows]).values_list("pk", "uuid"))
    events = [
        NotificationEvent(
            kind="auction_cleared",
            key=f"auction_cleared:offer:{offer.uuid}",
            title=f"Your auction on {offer.cluster.name} cleared",
            body=f"{where}: {sum(fills.values())} of {offer.quantity} units sold at "
            f"{money_text(price)} per unit, from {len(rows)} bids.",
            link=link,
            organization_id=offer.cluster.organization_id,
            admins_only=True,
        )
    ]
    for row in rows:
        won = fills.get(row[0], 0)
        if won:
            title = (
                f"You won {won} units on {offer.cluster.name}"
                if won == row[2]
                else f"You won {won} of the {row[2]} units you bid for on {offer.cluster.name}"
            )
            kind = "auction_won"
            body = (
                f"{where}: clearing price {money_text(price)} per unit "
                f"(you bid {money_text(row[1])})."
            )
        else:
            kind = "bid_outbid"
            title = f"Your bid on {offer.cluster.name} lost"
            body = (
                f"{where}: you bid {money_text(row[1])} for {row[2]} units; the auction cleared at "
                f"{money_text(price)} per unit. The bid's hold is released."
            )
        events.append(
            NotificationEvent(
                kind=kind,
                key=f"{kind}:bid:{uuids[row[0]]}",
                title=title,
                body=body,
                link=link,
                organization_id=row[-1],
                admins_only=True,
            )
        )
    notifications_record(events)


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


def invitation_created(invitation: Invitation) -> None:
    """The invitee (only an existing user who can accept) sees the invitation under the bell;
    its mail is marketplace's own (`invitation_notify`, which honours the mail preference)."""
    if invitation.invitee_id is None:
        return
    inviter = invitation.invited_by.username if invitation.invited_by else "an admin"
    notifications_record(
        [
            NotificationEvent(
                kind="invitation",
                key=f"invitation:{invitation.uuid}",
                title=f"You are invited to join {invitation.organization.name}",
                body=f"As {invitation.role}, by {inviter}.",
                link=reverse("invitations"),
                user_ids=[invitation.invitee_id],
                is_mailed_here=False,
            )
        ]
    )
