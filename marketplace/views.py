"""The web pages of identity and organizations. They call the same services and selectors as
the API; an error raised by a service is shown beside the field it concerns."""

from typing import Any

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views import View
from django.views.generic import FormView, TemplateView

from billing import selectors as billing_selectors
from computeshare.errors import ApplicationError, Conflict, ValidationFailed
from computeshare.forms import form_add_service_error
from marketplace import selectors, services
from marketplace.forms import MemberAddForm, OrganizationForm, SignUpForm


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


class DashboardView(LoginRequiredMixin, TemplateView):
    template_name = "marketplace/dashboard.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["organizations"] = selectors.organization_list_for_user(self.request.user)
        return context


class OrganizationCreateView(LoginRequiredMixin, FormView):
    template_name = "marketplace/organization_create.html"
    form_class = OrganizationForm

    def form_valid(self, form: OrganizationForm) -> HttpResponse:
        try:
            membership = services.organization_create(
                creator=self.request.user, name=form.cleaned_data["name"]
            )
        except ApplicationError as error:
            form_add_service_error(form, error)
            return self.form_invalid(form)
        messages.success(
            self.request, f"{membership.organization.name} is ready. You are its admin."
        )
        return redirect("organization-detail", organization_id=membership.organization.uuid)


class OrganizationDetailView(LoginRequiredMixin, View):
    template_name = "marketplace/organization_detail.html"

    def _render(
        self, request: HttpRequest, organization_id: str, form: MemberAddForm, status: int = 200
    ) -> HttpResponse:
        membership = selectors.membership_get_for_user(request.user, organization_id)
        context = {
            "membership": membership,
            "organization": membership.organization,
            "members": selectors.membership_list(membership.organization),
            "wallet": billing_selectors.wallet_get(membership.organization),
            "budget_alert": billing_selectors.budget_alert_list_open(
                membership.organization
            ).first(),
            "form": form,
        }
        return render(request, self.template_name, context, status=status)

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        return self._render(request, organization_id, MemberAddForm())

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        form = MemberAddForm(request.POST)
        if form.is_valid():
            try:
                actor = selectors.membership_get_for_user(request.user, organization_id)
                membership = services.membership_add(
                    actor=actor,
                    username=form.cleaned_data["username"],
                    role=form.cleaned_data["role"],
                )
            except (ValidationFailed, Conflict) as error:
                form_add_service_error(form, error)
            else:
                messages.success(
                    request,
                    f"{membership.user.username} joined as {membership.get_role_display()}.",
                )
                return HttpResponseRedirect(request.path)
        return self._render(request, organization_id, form, status=400)


class ApiTokenView(LoginRequiredMixin, View):
    template_name = "marketplace/api_token.html"

    def get(self, request: HttpRequest) -> HttpResponse:
        token = services.auth_token_get(user=request.user)
        return render(
            request,
            self.template_name,
            {"token": token, "api_base": request.build_absolute_uri("/api/v1/")},
        )

    def post(self, request: HttpRequest) -> HttpResponse:
        services.token_regenerate(user=request.user)
        messages.success(request, "A new token was made. The old one no longer works.")
        return redirect(reverse("api-token"))
