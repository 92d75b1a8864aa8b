"""A team's orders from the pages: a bid, a purchase, a withdrawal, and the team's
allocations and bids. A refused order is shown on the offer's page
(marketplace/views/offers.py, `offer_page`)."""

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views import View

from computeshare.authentication import request_user
from computeshare.errors import Conflict
from computeshare.figures import amount_text, price_text
from marketplace import selectors, services
from marketplace.forms.market import BidForm, BuyNowForm
from marketplace.views.navigation import PAGE_SIZE, next_url, page_query
from marketplace.views.offers import buying_organizations, offer_page, offer_url
from marketplace.views.refusals import SHOWN_ON_FORM, form_add_refusal
from organizations import selectors as organization_selectors


class OfferBidView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, offer_id: str) -> HttpResponse:
        offer = selectors.offer_get(offer_id)
        form = BidForm(
            request.POST, organizations=buying_organizations(request_user(request), offer)
        )
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                actor = organization_selectors.membership_for_body(
                    request_user(request), data["organization"]
                )
                bid = services.bid_place(
                    actor=actor,
                    offer=offer,
                    quantity=data["quantity"],
                    price=data["price"],
                    min_quantity=data["min_quantity"],
                )
            except SHOWN_ON_FORM as error:
                form_add_refusal(form, error)
                status = error.status_code
            else:
                messages.success(
                    request,
                    f"Your bid of {bid.quantity} units at {price_text(bid.price)} "
                    f"{settings.PLATFORM_CURRENCY} is placed; "
                    f"{amount_text(bid.hold.amount if bid.hold else 0, settings.PLATFORM_CURRENCY)}"
                    " is held on "
                    f"{actor.organization.name}'s wallet until the auction clears.",
                )
                return HttpResponseRedirect(offer_url(offer) + "#your-bids")
        return offer_page(request, offer, bid_form=form, status=status)


class OfferBuyView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, offer_id: str) -> HttpResponse:
        offer = selectors.offer_get(offer_id)
        form = BuyNowForm(
            request.POST, organizations=buying_organizations(request_user(request), offer)
        )
        status = 400
        if form.is_valid():
            try:
                actor = organization_selectors.membership_for_body(
                    request_user(request), form.cleaned_data["organization"]
                )
                allocation = services.offer_buy(
                    actor=actor, offer=offer, quantity=form.cleaned_data["quantity"]
                )
            except SHOWN_ON_FORM as error:
                form_add_refusal(form, error)
                status = error.status_code
            else:
                what = (
                    f"a block of {allocation.block} {offer.quantity_unit}, held by the cluster "
                    f"for the whole window ({allocation.quantity} "
                    f"{offer.get_resource_display().lower()})"
                    if allocation.is_reserved
                    else f"{allocation.quantity} units"
                )
                messages.success(
                    request,
                    f"{actor.organization.name} bought {what}; "
                    f"{amount_text(allocation.hold.amount)} "
                    f"{settings.PLATFORM_CURRENCY} is held for the window.",
                )
                return HttpResponseRedirect(
                    reverse("organization-allocations", args=[actor.organization.uuid])
                )
        return offer_page(request, offer, buy_form=form, status=status)


class BidWithdrawView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, bid_id: str) -> HttpResponse:
        bid = selectors.bid_get_for_user(request_user(request), bid_id)
        actor = organization_selectors.membership_in(request_user(request), bid.organization_id)
        assert actor is not None  # a bid is visible only to its organization's members
        held = bid.hold.amount if bid.hold is not None else Decimal(0)
        try:
            services.bid_withdraw(actor=actor, bid=bid)
        except Conflict as error:
            messages.error(request, error.detail)
        else:
            messages.success(
                request,
                f"The bid is withdrawn; its hold of {amount_text(held, settings.PLATFORM_CURRENCY)}"
                " is back in the available balance.",
            )
        return HttpResponseRedirect(next_url(request, offer_url(bid.offer)))


# --- A team's allocations and bids -------------------------------------------------------------


class OrganizationAllocationsView(LoginRequiredMixin, View):
    template_name = "marketplace/market/allocations.html"

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        organization = membership.organization
        allocations = selectors.allocation_list_for_user(
            request_user(request), organization=organization
        )
        bids = selectors.bid_list_for_user(request_user(request), organization=organization)
        allocation_page: Page[Any] = Paginator(allocations, PAGE_SIZE).get_page(
            request.GET.get("page")
        )
        bid_page: Page[Any] = Paginator(bids, PAGE_SIZE).get_page(request.GET.get("bids_page"))
        context = {
            "membership": membership,
            "organization": organization,
            "allocations": allocation_page,
            "bids": bid_page,
            "allocation_query": page_query(request, "page"),
            "bid_query": page_query(request, "bids_page"),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context)
