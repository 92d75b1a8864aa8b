"""Every status of an offer, a bid, a tenant account and a lease changes through
`computeshare.states` against its model's `TRANSITIONS`: a move the table refuses raises
`TransitionRefused` and changes nothing, in memory or in the database."""

from typing import Any

import pytest

from computeshare.states import TransitionRefused, status_move, status_move_all
from marketplace import errors, services
from marketplace.models import Bid, Offer, TenantAccount, TenantLease
from organizations.models import Membership
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    OrganizationFactory,
    funded_organization,
)

pytestmark = pytest.mark.django_db


def offer_row(offer: Offer) -> tuple[Any, ...]:
    return Offer.objects.filter(pk=offer.pk).values_list("status", "updated_at").get()


def bid_row(bid: Bid) -> tuple[Any, ...]:
    return Bid.objects.filter(pk=bid.pk).values_list("status", "quantity_won", "updated_at").get()


def test_a_cancelled_offer_cannot_be_cleared_and_nothing_changes():
    offer = OfferFactory()
    owner = MembershipFactory(organization=offer.cluster.organization, role=Membership.Role.ADMIN)
    services.offer_cancel(actor=owner, offer=offer)
    offer.refresh_from_db()
    before = offer_row(offer)

    with pytest.raises(TransitionRefused, match="cannot go from 'cancelled' to 'cleared'"):
        status_move(offer, Offer.Status.CLEARED)

    assert offer.status == Offer.Status.CANCELLED
    assert offer_row(offer) == before
    with pytest.raises(TransitionRefused):
        status_move_all(
            Offer.objects.filter(pk=offer.pk),
            Offer.Status.OPEN,
            from_statuses=[Offer.Status.CANCELLED],
        )
    assert offer_row(offer) == before


def test_a_withdrawn_bid_cannot_win_and_nothing_changes():
    offer = OfferFactory()
    buyer = MembershipFactory(organization=funded_organization("100"), role=Membership.Role.ADMIN)
    bid = services.bid_place(actor=buyer, offer=offer, quantity=10, price="1.50")
    services.bid_withdraw(actor=buyer, bid=bid)
    bid.refresh_from_db()
    before = bid_row(bid)

    with pytest.raises(TransitionRefused, match="cannot go from 'withdrawn' to 'won'"):
        status_move(bid, Bid.Status.WON)
    with pytest.raises(TransitionRefused):
        status_move_all(
            Bid.objects.filter(pk=bid.pk), Bid.Status.LOST, from_statuses=[Bid.Status.WITHDRAWN]
        )
    # Without naming a source, the compare-and-set moves only bids still open: none here.
    moved = status_move_all(Bid.objects.filter(pk=bid.pk), Bid.Status.WON, quantity_won=10)

    assert moved == 0
    assert bid.status == Bid.Status.WITHDRAWN
    assert bid_row(bid) == before


def test_a_cancelled_offer_is_not_cancelled_again_through_the_service():
    offer = OfferFactory()
    owner = MembershipFactory(organization=offer.cluster.organization, role=Membership.Role.ADMIN)
    services.offer_cancel(actor=owner, offer=offer)
    before = offer_row(offer)

    # The service's own 409 comes first; the table is the net under it.
    with pytest.raises(errors.OfferNotOpen):
        services.offer_cancel(actor=owner, offer=offer)

    assert offer_row(offer) == before


def test_a_leased_tenant_account_cannot_be_retired_and_a_lease_cannot_restart():
    cluster = ClusterFactory()
    account = TenantAccount.objects.create(
        cluster=cluster, username="tenant01", home="/home/tenant01", status="leased"
    )
    lease = TenantLease.objects.create(
        account=account,
        cluster=cluster,
        organization=OrganizationFactory(),
        status=TenantLease.Status.ENDED,
    )

    with pytest.raises(TransitionRefused):
        status_move(account, TenantAccount.Status.RETIRED)
    with pytest.raises(TransitionRefused):
        status_move(lease, TenantLease.Status.ACTIVE)

    account.refresh_from_db()
    lease.refresh_from_db()
    assert (account.status, lease.status) == (TenantAccount.Status.LEASED, TenantLease.Status.ENDED)
