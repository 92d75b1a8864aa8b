"""An owner's clusters: registering one, verifying it live (the card polls the
verification while it runs), and scrubbing a quarantined tenant account again."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache

from computeshare.authentication import request_user
from computeshare.errors import Conflict, NotFound, Throttled, ValidationFailed
from computeshare.forms import form_add_service_error
from marketplace import selectors, services
from marketplace.forms.market import ClusterRegisterForm
from marketplace.models import Cluster
from organizations import selectors as organization_selectors
from organizations.models import Membership


def cluster_card_contexts(clusters: list[Cluster]) -> list[dict[str, Any]]:
    """What each cluster's card shows besides the cluster: its latest verification, with its
    steps, and its pool of tenant accounts, the quarantined ones also apart (the card names
    them on top of the table, for the owners to see). Read for all the clusters at once: the
    same few queries for one card or a page of them (and one more for each cluster verified
    within the last minute)."""
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
