"""The web pages of the market: browsing offers, an offer with its buy-now and bid forms, the
price history, a team's allocations and bids, and an owner's clusters (verified live) and
offers.

Like the API, they find every object through a selector scoped to the user (what the user may
not see is a 404), let the services decide, and show a service's refusal beside the field it
concerns, or on top of the form with the figures that explain it (a 402 names the balance or
the budget it ran into). A refusal by role (403) is left to the error page."""

from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Page, Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views import View
from django.views.decorators.cache import never_cache

from billing import selectors as billing_selectors
from computeshare.authentication import request_user
from computeshare.errors import (
    ApplicationError,
    Conflict,
    NotFound,
    PaymentRequired,
    PermissionDenied,
    Throttled,
    ValidationFailed,
)
from computeshare.figures import amount_text, price_text
from computeshare.forms import form_add_service_error
from computeshare.models import User
from marketplace import errors, selectors, services
from marketplace.charts import price_chart
from marketplace.forms.market import (
    UTC,
    BidForm,
    BuyNowForm,
    ClusterRegisterForm,
    OfferBrowseFilter,
    OfferCreateForm,
    PriceHistoryForm,
)
from marketplace.models import Capacity, Cluster, Offer
from organizations import selectors as organization_selectors
from organizations.models import Membership, Organization

PAGE_SIZE = 50
HISTORY_LIMIT = 200
CENT = Decimal("0.01")


# --- Showing refusals --------------------------------------------------------------------------

# Refusals that are not input errors but concern one field all the same.
FIELD_OF_REFUSAL = {
    "insufficient_quantity": "quantity",
    "max_per_buyer_exceeded": "quantity",
    "cluster_not_online": "cluster",
}
# What a page catches and shows on the form; any other refusal (by role: 403) reaches the
# error page through the middleware.
SHOWN_ON_FORM = (ValidationFailed, Conflict, PaymentRequired, errors.ClusterUnreachable)


def refusal_text(error: ApplicationError) -> str:
    """The service's sentence, with the figures from `extra` that let the user act on it."""
    extra = error.extra
    try:
        if error.code == "insufficient_funds":
            currency = extra["currency"]
            return (
                f"{error.detail} Available: {amount_text(extra['available'])} {currency}; "
                f"this needs {amount_text(extra['required'])} {currency}."
            )
        if error.code == "budget_exceeded":
            currency = extra["currency"]
            return (
                f"{error.detail} Monthly limit: {amount_text(extra['monthly_limit'])} {currency}; "
                f"committed and spent: {amount_text(extra['committed_and_spent'])} {currency}; "
                f"this needs {amount_text(extra['requested'])} {currency}."
            )
        if error.code == "insufficient_quantity":
            return f"Only {extra['remaining']} units are left for sale."
        if error.code in ("reservation_refused", "cluster_unreachable"):
            return f"{error.detail} The cluster said: {extra['reason']}"
        if error.code == "tenant_accounts_exhausted":
            return (
                f"{error.detail} This cluster serves up to {extra['tenant_accounts']} teams at "
                f"once and {extra['free']} accounts are free now: try again when one frees."
            )
        if error.code == "partition_capacity_exceeded":
            shown = [
                f"{hour['start'][:13].replace('T', ' ')}:00 ({hour['sold']} of "
                f"{hour['capacity']} sold, this asks {hour['asked']})"
                for hour in extra["hours"][:6]
            ]
            more = extra["hour_count"] - len(shown)
            return f"{error.detail} Hours that clash (UTC): {'; '.join(shown)}" + (
                f"; and {more} more." if more > 0 else "."
            )
        if error.code == "max_per_buyer_exceeded":
            return (
                f"{error.detail} The cap is {extra['max_per_buyer']} units; your organization "
                f"has {extra['already']} already."
            )
    except KeyError:
        pass
    return error.detail


def form_add_refusal(form: forms.Form, error: ApplicationError) -> None:
    if isinstance(error, ValidationFailed):
        form_add_service_error(form, error)
        return
    field = FIELD_OF_REFUSAL.get(error.code)
    form.add_error(field if field in form.fields else None, refusal_text(error))


def next_url(request: HttpRequest, default: str) -> str:
    """Where a small POST form sends the user back: its `next` when it is on this site."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def page_query(request: HttpRequest, page_parameter: str = "page") -> str:
    """The query string without the page number, for the pager's links."""
    query = request.GET.copy()
    query.pop(page_parameter, None)
    return query.urlencode()


# --- Browsing offers ---------------------------------------------------------------------------


class OfferListView(View):
    """Public: visitors browse the market before they sign up."""

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
        page = Paginator(offers, PAGE_SIZE).get_page(request.GET.get("page"))
        context = {
            "form": filters.form,
            "page": page,
            # One track record per cluster on the page, read together.
            "track_records": selectors.track_records({offer.cluster_id for offer in page}),
            "query": page_query(request),
            "currency": settings.PLATFORM_CURRENCY,
        }
        return render(request, self.template_name, context, status=200 if is_valid else 400)


# --- One offer: buy now, bid, withdraw, cancel -------------------------------------------------


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


# --- An owner's clusters -----------------------------------------------------------------------


def cluster_card_contexts(clusters: list[Cluster]) -> list[dict[str, Any]]:
    """What each cluster's card shows besides the cluster: its latest verification, with its
    steps, and its pool of tenant accounts, the quarantined ones also apart (the card names
    them on top of the table, for the owners to see). Read for all the clusters at once: the
    same few queries for one card or a page of them."""
    verifications = selectors.cluster_verifications_latest(clusters)
    pools = selectors.tenant_accounts_by_cluster(clusters)
    return [
        {
            "cluster": cluster,
            "verification": verifications.get(cluster.pk),
            "tenant_accounts": pools[cluster.pk],
            "quarantined": [
                account
                for account in pools[cluster.pk]
                if account.status == account.Status.QUARANTINED
            ],
            # A scrub the owners asked for runs in a worker: the card follows it until it ends.
            "is_scrubbing": any(
                account.lease_status == "ending"  # type: ignore[attr-defined]
                for account in pools[cluster.pk]
            ),
        }
        for cluster in clusters
    ]


def cluster_card(
    request: HttpRequest,
    cluster: Cluster,
    membership: Membership,
    status: int = 200,
    notice: tuple[str, str] | None = None,
    verify_notice: str = "",
) -> HttpResponse:
    """One cluster's card, also the fragment the page polls while a verification or a scrub
    runs. `notice` is (level, sentence) for what the owner just did to a tenant account;
    `verify_notice` why a verification was not started."""
    context = {
        **cluster_card_contexts([cluster])[0],
        "membership": membership,
        "notice": notice,
        "verify_notice": verify_notice,
    }
    return render(request, "marketplace/market/_cluster.html", context, status=status)


class OrganizationClustersView(LoginRequiredMixin, View):
    template_name = "marketplace/market/clusters.html"

    def _render(
        self,
        request: HttpRequest,
        membership: Membership,
        form: ClusterRegisterForm | None = None,
        status: int = 200,
    ) -> HttpResponse:
        clusters = list(selectors.cluster_list_for_organization(membership.organization))
        context = {
            "membership": membership,
            "organization": membership.organization,
            "clusters": cluster_card_contexts(clusters),
            "form": form or ClusterRegisterForm(),
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        return self._render(request, membership)

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        form = ClusterRegisterForm(request.POST)
        if form.is_valid():
            try:
                cluster = services.cluster_create(actor=membership, **form.cleaned_data)
            except ValidationFailed as error:
                form_add_service_error(form, error)
            else:
                messages.success(
                    request,
                    f"{cluster.name} is registered with host key {cluster.host_key_fingerprint}. "
                    "Verify it to read its partitions.",
                )
                return HttpResponseRedirect(request.path)
        return self._render(request, membership, form, status=400)


def owner_membership(request: HttpRequest, cluster: Cluster) -> Membership:
    """The user's membership of the cluster's organization. The cluster itself is public, but
    its connection, its verifications and their errors are the owners' only: a 404 to anyone
    else."""
    membership = organization_selectors.membership_in(
        request_user(request), cluster.organization_id
    )
    if membership is None:
        raise NotFound("No such cluster.")
    return membership


class ClusterVerifyView(LoginRequiredMixin, View):
    """Starts a verification in a worker. From the page (htmx) it answers with the cluster's
    card, which polls its progress; without JavaScript it goes back to the clusters page."""

    def post(self, request: HttpRequest, cluster_id: str) -> HttpResponse:
        cluster = selectors.cluster_get(cluster_id)
        membership = owner_membership(request, cluster)
        try:
            services.cluster_verification_start(actor=membership, cluster=cluster)
        except (Throttled, Conflict) as error:
            if getattr(request, "htmx", False):
                return cluster_card(request, cluster, membership, verify_notice=error.detail)
            messages.error(request, error.detail)
            return HttpResponseRedirect(
                reverse("organization-clusters", args=[cluster.organization.uuid])
            )
        if getattr(request, "htmx", False):
            return cluster_card(request, cluster, membership)
        messages.info(request, f"Verifying {cluster.name}…")
        return HttpResponseRedirect(
            reverse("organization-clusters", args=[cluster.organization.uuid])
        )


@method_decorator(never_cache, name="dispatch")
class ClusterVerificationView(LoginRequiredMixin, View):
    """The cluster's card with its latest verification, polled every second while it runs."""

    def get(self, request: HttpRequest, cluster_id: str) -> HttpResponse:
        cluster = selectors.cluster_get(cluster_id)
        return cluster_card(request, cluster, owner_membership(request, cluster))


class TenantAccountScrubView(LoginRequiredMixin, View):
    """An admin of the owners asks for a quarantined tenant account to be scrubbed again. From
    the page (htmx) it answers with the cluster's card, which follows the scrub; without
    JavaScript it goes back to the clusters page."""

    def post(self, request: HttpRequest, cluster_id: str, username: str) -> HttpResponse:
        cluster = selectors.cluster_get(cluster_id)
        membership = owner_membership(request, cluster)
        account = selectors.tenant_account_get(cluster, username)
        try:
            account = services.tenant_account_rescrub(actor=membership, account=account)
        except Conflict as error:
            notice = ("danger", f"{username}: {error.detail}")
        else:
            if account.status == account.Status.AVAILABLE:
                sentence = f"{username} is back in the pool: no team's lease was on it."
            else:
                sentence = (
                    f"{username} is being scrubbed again; it returns to the pool if nothing "
                    "is left, and stays quarantined with the reason otherwise."
                )
            notice = ("success", sentence)
        if getattr(request, "htmx", False):
            return cluster_card(request, cluster, membership, notice=notice)
        level, sentence = notice
        messages.add_message(
            request, messages.ERROR if level == "danger" else messages.SUCCESS, sentence
        )
        return HttpResponseRedirect(
            reverse("organization-clusters", args=[cluster.organization.uuid])
        )


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
