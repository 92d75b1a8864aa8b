"""An organization's webhook pages, for its admins: the endpoints, a new one (its secret shown
on the answer and never again), one endpoint's settings and delivery log, with redelivery,
a new secret and removal. Every write goes through the webhooks services."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views import View

from computeshare.authentication import request_user
from computeshare.errors import ApplicationError
from computeshare.forms import form_add_service_error
from organizations import selectors as organization_selectors
from organizations.forms.webhooks import WebhookEndpointForm
from organizations.models import Membership
from webhooks import selectors as webhook_selectors
from webhooks import services as webhook_services
from webhooks.models import WebhookEndpoint

DELIVERIES_SHOWN = 50


def _never_cached(response: HttpResponse) -> HttpResponse:
    # A new secret may be on the page: no cache may keep it.
    add_never_cache_headers(response)
    return response


class WebhookListView(LoginRequiredMixin, View):
    template_name = "organizations/webhooks.html"

    def _render(
        self,
        request: HttpRequest,
        membership: Membership,
        form: WebhookEndpointForm,
        status: int = 200,
        **context: Any,
    ) -> HttpResponse:
        context |= {
            "membership": membership,
            "organization": membership.organization,
            "endpoints": webhook_selectors.endpoint_list(membership.organization),
            "form": form,
        }
        return _never_cached(render(request, self.template_name, context, status=status))

    def get(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        return self._render(request, membership, WebhookEndpointForm(initial={"enabled": True}))

    def post(self, request: HttpRequest, organization_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        form = WebhookEndpointForm(request.POST)
        if form.is_valid():
            try:
                endpoint = webhook_services.endpoint_create(
                    organization=membership.organization, **form.cleaned_data
                )
            except ApplicationError as error:
                form_add_service_error(form, error)
            else:
                # Rendered here, not redirected through a message: the secret must not be
                # stored in the session.
                return self._render(
                    request,
                    membership,
                    WebhookEndpointForm(initial={"enabled": True}),
                    created=endpoint,
                    secret=endpoint.secret,
                )
        return self._render(request, membership, form, status=400)


class WebhookDetailView(LoginRequiredMixin, View):
    template_name = "organizations/webhook_detail.html"

    def _render(
        self,
        request: HttpRequest,
        membership: Membership,
        endpoint: WebhookEndpoint,
        form: WebhookEndpointForm | None = None,
        status: int = 200,
        **context: Any,
    ) -> HttpResponse:
        if form is None:
            form = WebhookEndpointForm(
                initial={
                    "url": endpoint.url,
                    "description": endpoint.description,
                    "events": endpoint.events,
                    "enabled": endpoint.is_enabled,
                }
            )
        context |= {
            "membership": membership,
            "organization": membership.organization,
            "endpoint": endpoint,
            "form": form,
            "deliveries": webhook_selectors.delivery_list(endpoint)[:DELIVERIES_SHOWN],
            "deliveries_shown": DELIVERIES_SHOWN,
        }
        return _never_cached(render(request, self.template_name, context, status=status))

    def get(self, request: HttpRequest, organization_id: str, endpoint_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        return self._render(request, membership, endpoint)

    def post(self, request: HttpRequest, organization_id: str, endpoint_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        form = WebhookEndpointForm(request.POST)
        if form.is_valid():
            try:
                webhook_services.endpoint_update(endpoint=endpoint, **form.cleaned_data)
            except ApplicationError as error:
                form_add_service_error(form, error)
            else:
                messages.success(request, "The endpoint was saved.")
                return redirect("organization-webhook", organization_id, endpoint_id)
        return self._render(request, membership, endpoint, form, status=400)


class WebhookRotateSecretView(WebhookDetailView):
    def get(self, request: HttpRequest, organization_id: str, endpoint_id: str) -> HttpResponse:
        return redirect("organization-webhook", organization_id, endpoint_id)

    def post(self, request: HttpRequest, organization_id: str, endpoint_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        endpoint = webhook_services.endpoint_secret_rotate(endpoint=endpoint)
        return self._render(request, membership, endpoint, secret=endpoint.secret)


class WebhookRemoveView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, organization_id: str, endpoint_id: str) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        webhook_services.endpoint_delete(endpoint=endpoint)
        messages.success(request, f"The endpoint {endpoint.url} was removed.")
        return redirect("organization-webhooks", organization_id)


class WebhookRedeliverView(LoginRequiredMixin, View):
    def post(
        self, request: HttpRequest, organization_id: str, endpoint_id: str, delivery_id: str
    ) -> HttpResponse:
        membership = organization_selectors.membership_get_admin(
            request_user(request), organization_id
        )
        endpoint = webhook_selectors.endpoint_get(membership.organization, endpoint_id)
        delivery = webhook_selectors.delivery_get(endpoint, delivery_id)
        webhook_services.delivery_redeliver(delivery=delivery)
        messages.success(request, f"{delivery.event.public_id} will be sent again.")
        return redirect("organization-webhook", organization_id, endpoint_id)
