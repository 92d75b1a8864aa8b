"""The page of the signed-in user's API tokens: make one (its key shown on the answer and never
again), see when each was last used, revoke."""

from typing import Any, cast

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views import View

from computeshare import selectors, services
from computeshare.errors import ApplicationError
from computeshare.forms import form_add_service_error
from computeshare.models import User
from organizations.forms.organizations import ApiTokenForm


class ApiTokenListView(LoginRequiredMixin, View):
    template_name = "organizations/api_tokens.html"

    def _render(
        self, request: HttpRequest, form: ApiTokenForm, status: int = 200, **context: Any
    ) -> HttpResponse:
        context |= {
            "form": form,
            "tokens": selectors.api_token_list_for_user(cast(User, request.user)),
            "token_limit": settings.API_TOKENS_PER_USER_MAX,
            "api_base": request.build_absolute_uri("/api/v1/"),
        }
        response = render(request, self.template_name, context, status=status)
        # A new key is on this page: no cache may keep it.
        add_never_cache_headers(response)
        return response

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._render(request, ApiTokenForm())

    def post(self, request: HttpRequest) -> HttpResponse:
        form = ApiTokenForm(request.POST)
        if form.is_valid():
            try:
                token, key = services.api_token_create(
                    user=cast(User, request.user),
                    name=form.cleaned_data["name"],
                    expires_in_days=form.cleaned_data["expires_in_days"],
                )
            except ApplicationError as error:
                form_add_service_error(form, error)
            else:
                # Rendered here, not redirected through a message: the key must not be stored
                # in the session.
                return self._render(request, ApiTokenForm(), created=token, key=key)
        return self._render(request, form, status=400)


class ApiTokenRevokeView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, token_id: str) -> HttpResponse:
        token = selectors.api_token_get_for_user(cast(User, request.user), token_id)
        services.api_token_revoke(token=token)
        messages.success(request, f"The token {token.name} was revoked; it no longer works.")
        return redirect("api-tokens")
