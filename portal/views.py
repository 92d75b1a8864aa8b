"""The pages that span apps (ADR 0026): the page after log-in, an organization's dashboard, and
the organization's page, its members beside its wallet and budget alert (the members' own pages:
organizations.views)."""

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.views import View

from billing import selectors as billing_selectors
from computeshare.authentication import request_user
from computeshare.errors import Conflict, ValidationFailed
from computeshare.forms import form_add_service_error
from organizations import selectors as organization_selectors
from organizations import services as organization_services
from organizations.forms.organizations import MemberAddForm
from portal.selectors import dashboard_get


class DashboardView(LoginRequiredMixin, View):
    """The user's organizations and the dashboard of one of them (the first by name unless
    another is asked for). Its reads are `portal.selectors.dashboard_get`; the charts' numbers
    travel in the page (json_script) and are drawn by Chart.js, with a table of the same numbers
    beside each."""

    template_name = "portal/dashboard.html"

    def get(self, request: HttpRequest, organization_id: Any = None) -> HttpResponse:
        organizations = list(
            organization_selectors.organization_list_for_user(request_user(request))
        )
        dashboard = None
        # The page's organization switch asks with `?organization=`.
        organization_id = organization_id or request.GET.get("organization") or None
        if organization_id is not None:
            # Someone else's organization is a 404, as everywhere.
            membership = organization_selectors.membership_get_for_user(
                request_user(request), organization_id
            )
            dashboard = dashboard_get(membership)
        elif organizations:
            membership = organization_selectors.membership_get_for_user(
                request_user(request), organizations[0].uuid
            )
            dashboard = dashboard_get(membership)
        context = {"organizations": organizations, "dashboard": dashboard}
        return render(request, self.template_name, context)


class OrganizationDetailView(LoginRequiredMixin, View):
    """The organization's members; its admins invite people here and see the pending
    invitations."""

    template_name = "portal/organization_detail.html"

    def _render(
        self, request: HttpRequest, organization_id: str, form: MemberAddForm, status: int = 200
    ) -> HttpResponse:
        membership = organization_selectors.membership_get_for_user(
            request_user(request), organization_id
        )
        organization = membership.organization
        members = list(organization_selectors.membership_list(organization))
        context = {
            "membership": membership,
            "organization": organization,
            "members": members,
            "is_last_admin": membership.is_admin
            and sum(member.is_admin for member in members) == 1,
            "invitation_expiry_days": settings.INVITATION_EXPIRY_DAYS,
            "invitations": (
                organization_selectors.invitation_list_pending_for_organization(organization)
                if membership.is_admin
                else []
            ),
            "wallet": billing_selectors.wallet_get(organization),
            "budget_alert": billing_selectors.budget_alert_list_open(organization).first(),
            "form": form,
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        return self._render(request, organization_id, MemberAddForm())

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        form = MemberAddForm(request.POST)
        if form.is_valid():
            try:
                actor = organization_selectors.membership_get_for_user(
                    request_user(request), organization_id
                )
                invitation = organization_services.invitation_create(
                    actor=actor,
                    username=form.cleaned_data["username"],
                    role=form.cleaned_data["role"],
                )
            except (ValidationFailed, Conflict) as error:
                form_add_service_error(form, error)
            else:
                # The same words whether or not the name is a user who can join.
                messages.success(
                    request,
                    f"{invitation.username} is invited as {invitation.get_role_display()}. "
                    "They join once they accept.",
                )
                return HttpResponseRedirect(request.path)
        return self._render(request, organization_id, form, status=400)
