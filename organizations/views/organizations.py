"""The web pages of identity and organizations. They call the same services and selectors as
the API; an error raised by a service is shown beside the field it concerns."""

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views import View
from django.views.generic import FormView, TemplateView

from computeshare.errors import ApplicationError, Conflict, ValidationFailed
from computeshare.forms import form_add_service_error
from computeshare.models import User
from organizations import selectors, services
from organizations.forms.organizations import OrganizationForm, SignUpForm


class HomeView(TemplateView):
    template_name = "home.html"

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated:
            return redirect("dashboard")
        return super().get(request, *args, **kwargs)


class SignUpView(FormView):
    template_name = "registration/signup.html"
    form_class = SignUpForm

    def form_valid(self, form: SignUpForm) -> HttpResponse:
        user = form.save()
        login(self.request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(self.request, f"Welcome to ComputeShare, {user.username}.")
        return redirect("dashboard")


class OrganizationListView(LoginRequiredMixin, TemplateView):
    """The signed-in user's organizations, with their role in each: what the navigation's
    "Organizations" opens (the dashboard is one organization's figures, not this list)."""

    template_name = "organizations/organization_list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = cast(User, self.request.user)  # LoginRequiredMixin
        context["organizations"] = selectors.organization_list_for_user(user)
        return context


class OrganizationCreateView(LoginRequiredMixin, FormView):
    template_name = "organizations/organization_create.html"
    form_class = OrganizationForm

    def form_valid(self, form: OrganizationForm) -> HttpResponse:
        try:
            membership = services.organization_create(
                creator=cast(User, self.request.user), name=form.cleaned_data["name"]
            )
        except ApplicationError as error:
            form_add_service_error(form, error)
            return self.form_invalid(form)
        messages.success(
            self.request, f"{membership.organization.name} is ready. You are its admin."
        )
        return redirect("organization-detail", organization_id=membership.organization.uuid)


class OrganizationInvitationCancelView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, organization_id: str, invitation_id: str) -> HttpResponse:
        actor = selectors.membership_get_for_user(cast(User, request.user), organization_id)
        invitation = selectors.invitation_get_for_organization(actor.organization, invitation_id)
        try:
            services.invitation_cancel(actor=actor, invitation=invitation)
        except Conflict as error:
            messages.error(request, error.detail)
        else:
            messages.success(request, f"The invitation of {invitation.username} is cancelled.")
        return redirect("organization-detail", organization_id=actor.organization.uuid)


class OrganizationMemberRemoveView(LoginRequiredMixin, View):
    """Leaving (`me`) or, for admins, removing a member."""

    def post(self, request: HttpRequest, organization_id: str, member_id: str) -> HttpResponse:
        actor = selectors.membership_get_for_user(cast(User, request.user), organization_id)
        membership = selectors.membership_get_in_organization(actor, member_id)
        organization = actor.organization
        try:
            services.membership_remove(actor=actor, membership=membership)
        except Conflict as error:
            messages.error(request, error.detail)
            return redirect("organization-detail", organization_id=organization.uuid)
        if membership.pk == actor.pk:
            messages.success(request, f"You left {organization.name}.")
            return redirect("dashboard")
        messages.success(request, f"{membership.user.username} is no longer a member.")
        return redirect("organization-detail", organization_id=organization.uuid)


class OrganizationMemberRoleView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, organization_id: str, member_id: str) -> HttpResponse:
        actor = selectors.membership_get_for_user(cast(User, request.user), organization_id)
        membership = selectors.membership_get_in_organization(actor, member_id)
        try:
            membership = services.membership_role_change(
                actor=actor, membership=membership, role=request.POST.get("role", "")
            )
        except (ValidationFailed, Conflict) as error:
            messages.error(request, error.detail)
        else:
            messages.success(
                request,
                f"{membership.user.username} is now {membership.get_role_display().lower()}.",
            )
        return redirect("organization-detail", organization_id=actor.organization.uuid)


class InvitationListView(LoginRequiredMixin, TemplateView):
    """The signed-in user's pending invitations, to accept or decline."""

    template_name = "organizations/invitations.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = cast(User, self.request.user)  # LoginRequiredMixin
        context["invitations"] = selectors.invitation_list_pending_for_user(user)
        return context


class InvitationAnswerView(LoginRequiredMixin, View):
    accept = True

    def post(self, request: HttpRequest, invitation_id: str) -> HttpResponse:
        user = cast(User, request.user)  # LoginRequiredMixin
        invitation = selectors.invitation_get_for_invitee(user, invitation_id)
        organization = invitation.organization
        try:
            if self.accept:
                services.invitation_accept(user=user, invitation=invitation)
            else:
                services.invitation_decline(user=user, invitation=invitation)
        except Conflict as error:
            messages.error(request, error.detail)
            return redirect("invitations")
        if self.accept:
            messages.success(request, f"You joined {organization.name}.")
            return redirect("organization-detail", organization_id=organization.uuid)
        messages.success(request, f"You declined the invitation to {organization.name}.")
        return redirect("invitations")
