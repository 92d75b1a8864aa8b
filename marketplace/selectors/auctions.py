"""Bids, which only the bidding organization's members see, and the auctions due to clear."""

import datetime
import uuid
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from computeshare.errors import NotFound
from computeshare.ids import id_prefix_q
from computeshare.models import User
from marketplace.models import Bid, Offer
from organizations.models import Membership, Organization


def bid_list_for_user(
    user: User,
    *,
    offer: Offer | None = None,
    organization: Organization | None = None,
    offer_uuid: uuid.UUID | None = None,
    organization_uuid: uuid.UUID | None = None,
    status: str | None = None,
    id_prefix: str | None = None,
) -> QuerySet[Bid]:
    """The bids of the user's organizations, newest first; narrowed to an offer, an
    organization (each by object or by id), a status or the start of the bid's id when
    given."""
    bids = Bid.objects.filter(
        organization__in=Membership.objects.filter(user=user).values("organization")
    )
    if offer is not None:
        bids = bids.filter(offer=offer)
    if offer_uuid is not None:
        bids = bids.filter(offer__uuid=offer_uuid)
    if organization is not None:
        bids = bids.filter(organization=organization)
    if organization_uuid is not None:
        bids = bids.filter(organization__uuid=organization_uuid)
    if status is not None:
        bids = bids.filter(status=status)
    if id_prefix:
        bids = bids.filter(id_prefix_q(id_prefix))
    return bids.select_related(
        "offer__cluster", "offer__partition", "organization", "hold"
    ).order_by("-created_at", "-id")


def bid_get_for_user(user: User, bid_uuid: Any) -> Bid:
    try:
        return bid_list_for_user(user).get(uuid=bid_uuid)
    except (Bid.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such bid.") from error


def auctions_due(now: datetime.datetime | None = None) -> list[int]:
    """The open offers whose auction close time has passed, oldest first."""
    return list(
        Offer.objects.filter(status=Offer.Status.OPEN, auction_closes_at__lte=now or timezone.now())
        .order_by("auction_closes_at", "pk")
        .values_list("pk", flat=True)
    )


def offer_ids_by_uuid(offer_uuids: Iterable[str]) -> dict[int, uuid.UUID]:
    """The offers of these ids that exist: their database ids and their public ids."""
    return dict(Offer.objects.filter(uuid__in=list(offer_uuids)).values_list("pk", "uuid"))


def offer_uuids(offer_ids: Iterable[int]) -> dict[int, uuid.UUID]:
    """The public ids of these offers, by database id."""
    return dict(Offer.objects.filter(pk__in=list(offer_ids)).values_list("pk", "uuid"))
