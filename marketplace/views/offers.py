"""The market's offer pages: browsing offers, one offer (its buy-now and bid forms are
posted to marketplace/views/orders.py), the price history, and an owner's offers.

Like the API, they find every object through a selector scoped to the user (what the
user may not see is a 404) and let the services decide."""

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views import View

from billing import selectors as billing_selectors
from computeshare.authentication import request_user
from computeshare.errors import Conflict, NotFound, PermissionDenied
from computeshare.models import User
from marketplace import selectors, services
from marketplace.charts import price_chart
from marketplace.forms.market import (
    UTC,
    BidForm,
    BuyNowForm,
    OfferBrowseFilter,
    OfferCreateForm,
    PriceHistoryForm,
)
from marketplace.models import Capacity, Cluster, Offer
from marketplace.views.navigation import PAGE_SIZE, next_url, page_query
from marketplace.views.offer_fragments import LISTED_FIELDS, offer_listings
from marketplace.views.refusals import SHOWN_ON_FORM, form_add_refusal
from organizations import selectors as organization_selectors
from organizations.models import Membership, Organization

# --- Browsing offers ---------------------------------------------------------------------------


class OfferListView(View):
    """Public: visitors browse the market before they sign up. Each offer's row and card come
    from the cache when nothing they show has changed (marketplace/views/offer_fragments.py)."""

    template_name = "marketplace/market/offer_list.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        data = request.GET.copy()
        # Open offers unless the user picks another status; "any status" sends an empty value.
        data.setdefault("status", Offer.Status.OPEN)
        filters = OfferBrowseFilter(
            data, queryset=selectors.offer_list(), clusters=selectors.cluster_choices()
        )
        # The window filters come from `datetime-local` inputs, read as UTC.
        with timezone.override(UTC):
            is_valid = filters.is_valid()
            offers = filters.qs if is_valid else selectors.offer_list().none()
        # Only what the rows and cards draw is read of the offers, partitions and clusters.
        page = Paginator(offers.only(*LISTED_FIELDS), PAGE_SIZE).get_page(request.GET.get("page"))
        # One track record per cluster on the page, read together.
        records = selectors.track_records({offer.cluster_id for offer in page})
        context = {
            "form": filters.form,
            "page": page,
            "listings": offer_listings(page, records),
            "query": page_query(request),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context, status=200 if is_valid else 400)


# --- One offer, and its cancellation by its owners ---------------------------------------------


def buying_organizations(
    user: User, offer: Offer, administered: list[Organization] | None = None
) -> list[Organization]:
    """The organizations the user can buy and bid for on this offer: those it administers,
    but the owner's (the service refuses an organization buying its own capacity)."""
    if administered is None:
        administered = organization_selectors.organizations_administered_by(user)
    return [
        organization
        for organization in administered
        if organization.pk != offer.cluster.organization_id
    ]


def price_history_url(offer: Offer) -> str:
    query = urlencode(
        {
            "cluster": str(offer.cluster.uuid),
            "partition": offer.partition.name,
            "resource": offer.resource,
        }
    )
    return f"{reverse('price-history')}?{query}"


def offer_page(
    request: HttpRequest,
    offer: Offer,
    *,
    bid_form: BidForm | None = None,
    buy_form: BuyNowForm | None = None,
    status: int = 200,
) -> HttpResponse:
    if not request.user.is_authenticated:
        return visitor_offer_page(request, offer)
    user = request.user
    owner = organization_selectors.membership_in(user, offer.cluster.organization_id)
    administered = organization_selectors.organizations_administered_by(user)
    buyers = buying_organizations(user, offer, administered)
    administered_ids = {organization.pk for organization in administered}
    now = timezone.now()
    accepts_orders = offer.accepts_orders_at(now)
    if bid_form is None:
        bid_form = BidForm(organizations=buyers)
    if buy_form is None and offer.buy_now_price is not None:
        buy_form = BuyNowForm(organizations=buyers)
    bids = list(selectors.bid_list_for_user(user, offer=offer))
    withdrawable_bids = {
        bid.pk
        for bid in bids
        if bid.organization_id in administered_ids
        and services.bid_is_withdrawable(bid=bid, offer=offer, now=now)
    }
    is_owner_admin = owner is not None and owner.is_admin
    context = {
        "offer": offer,
        "cluster": offer.cluster,
        "partition": offer.partition,
        **offer_tenants(user, offer),
        "accepts_orders": accepts_orders,
        "window_starts_later": offer.window_start > now,
        "is_owner": owner is not None,
        "can_cancel": is_owner_admin and services.offer_is_cancellable(offer=offer),
        "buyers": buyers,
        # For the live preview of the hold an order places (static/js/market.js).
        "wallets": offer_wallets(buyers),
        "bid_form": bid_form,
        "buy_form": buy_form,
        # A refused order is still said when the refusal was that orders are over.
        "order_forms": [form for form in (bid_form, buy_form) if form is not None],
        "bids": bids,
        "withdrawable_bids": withdrawable_bids,
        "track_record": selectors.track_record(offer.cluster),
        "price_history_url": price_history_url(offer),
        "currency": settings.PLATFORM_CURRENCY,
    }
    return render(request, "marketplace/market/offer_detail.html", context, status=status)


def offer_wallets(buyers: list[Organization]) -> dict[str, dict[str, str]]:
    """Each buying organization's available balance, read together (one query)."""
    wallets = billing_selectors.wallet_list(organization.pk for organization in buyers)
    return {
        str(organization.uuid): {
            "name": organization.name,
            "available": str(wallets[organization.pk].available),
        }
        for organization in buyers
    }


def visitor_offer_page(request: HttpRequest, offer: Offer) -> HttpResponse:
    """The offer as a visitor sees it: everything public, and a log-in link that comes back
    here in place of the forms."""
    tenants = None
    if offer.cluster.runs_jobs_as_tenants:
        tenants = {
            "total": offer.tenant_accounts_total,  # type: ignore[attr-defined]
            "free": offer.tenant_accounts_free,  # type: ignore[attr-defined]
        }
    login = f"{reverse('login')}?{urlencode({'next': request.get_full_path()})}"
    context = {
        "offer": offer,
        "cluster": offer.cluster,
        "partition": offer.partition,
        "tenants": tenants,
        "tenants_exhausted": False,
        "accepts_orders": offer.accepts_orders_at(timezone.now()),
        "window_starts_later": offer.window_start > timezone.now(),
        "is_visitor": True,
        "login_url": login,
        "order_forms": [],
        "bids": [],
        "track_record": selectors.track_record(offer.cluster),
        "price_history_url": price_history_url(offer),
        "currency": settings.PLATFORM_CURRENCY,
    }
    return render(request, "marketplace/market/offer_detail.html", context)


def offer_tenants(user: User, offer: Offer) -> dict[str, Any]:
    """How many teams the offer's cluster serves at once and how many more it can take now
    (`selectors.offer_get` counts them), and whether the viewer's organizations would be
    refused a purchase or a win there: none of them holds an account of the cluster and none
    is free. None of this on a cluster whose jobs do not run as tenant accounts."""
    if not offer.cluster.runs_jobs_as_tenants:
        return {"tenants": None, "tenants_exhausted": False}
    free = offer.tenant_accounts_free  # type: ignore[attr-defined]
    tenants = {"total": offer.tenant_accounts_total, "free": free}  # type: ignore[attr-defined]
    exhausted = False
    if free == 0:
        viewers = organization_selectors.organization_ids_of(user) - {offer.cluster.organization_id}
        exhausted = bool(viewers) and not selectors.tenant_lease_organization_ids(
            offer.cluster, viewers
        )
    return {"tenants": tenants, "tenants_exhausted": exhausted}


def offer_url(offer: Offer) -> str:
    return reverse("offer-detail", args=[offer.uuid])


class OfferDetailView(View):
    """Public; the bid and buy forms only for those signed in."""

    def get(self, request: HttpRequest, offer_id: str) -> HttpResponse:
        return offer_page(request, selectors.offer_get(offer_id))


class OfferCancelView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, offer_id: str) -> HttpResponse:
        offer = selectors.offer_get(offer_id)
        actor = organization_selectors.membership_in(
            request_user(request), offer.cluster.organization_id
        )
        if actor is None:
            raise PermissionDenied("Only the cluster's owners can cancel its offers.")
        try:
            services.offer_cancel(actor=actor, offer=offer)
        except Conflict as error:
            messages.error(request, error.detail)
        else:
            messages.success(request, f"The offer of {offer} is cancelled.")
        return HttpResponseRedirect(next_url(request, offer_url(offer)))


# --- Price history -----------------------------------------------------------------------------

HISTORY_LIMIT = 200


class PriceHistoryView(View):
    """Public, as docs/design.md has it (Market rules): every clearing is recorded and its price
    history public."""

    template_name = "marketplace/market/price_history.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        form = PriceHistoryForm(request.GET, clusters=selectors.cluster_list())
        history: list[Offer] = []
        cluster: Cluster | None = None
        if form.is_valid():
            data = form.cleaned_data
            if data["cluster"] is not None:
                try:
                    cluster = selectors.cluster_get(data["cluster"])
                except NotFound:
                    form.add_error("cluster", "No such cluster.")
        if form.is_valid():
            offers = selectors.price_history(
                cluster=cluster,
                partition=form.cleaned_data["partition"] or None,
                resource=form.cleaned_data["resource"] or None,
                capacity=form.cleaned_data["capacity"] or Capacity.PREEMPTIBLE,
            )
            # The latest points, shown oldest first.
            history = list(offers.reverse()[:HISTORY_LIMIT])[::-1]
        context = {
            "form": form,
            "cluster": cluster,
            "partition": form.cleaned_data.get("partition") if form.is_valid() else "",
            "resource": form.cleaned_data.get("resource") if form.is_valid() else "",
            "capacity": (form.cleaned_data.get("capacity") if form.is_valid() else "")
            or Capacity.PREEMPTIBLE,
            "history": history,
            "chart": price_chart(history),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context, status=200 if form.is_valid() else 400)


# --- An owner's offers -------------------------------------------------------------------------


class OrganizationOffersView(LoginRequiredMixin, View):
    template_name = "marketplace/market/organization_offers.html"

    def _render(
        self,
        request: HttpRequest,
        membership: Membership,
        form: OfferCreateForm | None = None,
        status: int = 200,
    ) -> HttpResponse:
        organization = membership.organization
        clusters = self._online_clusters(organization)
        offers = selectors.offer_list_for_organization(organization)
        page = Paginator(offers, PAGE_SIZE).get_page(request.GET.get("page"))
        context = {
            "membership": membership,
            "organization": organization,
            "form": form or OfferCreateForm(clusters=clusters),
            "has_clusters": bool(clusters),
            "offers": page,
            "now": timezone.now(),
            "query": page_query(request),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context, status=status)

    @staticmethod
    def _online_clusters(organization: Organization) -> list[Cluster]:
        return list(selectors.cluster_list_for_organization(organization, online_only=True))

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        return self._render(request, membership)

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        form = OfferCreateForm(
            request.POST, clusters=self._online_clusters(membership.organization)
        )
        status = 400
        if form.is_valid():
            data = dict(form.cleaned_data)
            try:
                cluster = selectors.cluster_get(data.pop("cluster"))
            except NotFound:
                form.add_error("cluster", "No such cluster.")
            else:
                try:
                    offer = services.offer_create(actor=membership, cluster=cluster, **data)
                except SHOWN_ON_FORM as error:
                    form_add_refusal(form, error)
                    status = error.status_code
                else:
                    messages.success(
                        request,
                        f"Listed {offer.quantity} {offer.get_resource_display().lower()} on "
                        f"{cluster.name}/{offer.partition.name}; the auction closes "
                        f"{offer.auction_closes_at:%Y-%m-%d %H:%M} UTC.",
                    )
                    return HttpResponseRedirect(request.path)
        return self._render(request, membership, form, status=status)
