"""The lockout page's way in for an account's owner: ask for a one-time link by mail, then log
in with it (organizations.services.login_unlock)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views import View

from computeshare.forms import StyledFormMixin
from organizations import services


class UnlockRequestForm(forms.Form):
    username = forms.CharField(max_length=150)


class UnlockPasswordForm(StyledFormMixin, forms.Form):
    password = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password"})
    )


class LoginUnlockRequestView(View):
    def post(self, request: HttpRequest) -> HttpResponse:
        form = UnlockRequestForm(request.POST)
        if form.is_valid():
            services.login_unlock_request(username=form.cleaned_data["username"])
        return render(
            request,
            "registration/login_unlock_sent.html",
            {"minutes": settings.LOGIN_UNLOCK_SECONDS // 60},
            status=200 if form.is_valid() else 400,
        )


class LoginUnlockView(View):
    template = "registration/login_unlock.html"

    def get(self, request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
        user = services.login_unlock_user(uidb64, token)
        return self._page(request, user, UnlockPasswordForm() if user else None)

    def post(self, request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
        user = services.login_unlock_user(uidb64, token)
        if user is None:
            return self._page(request, None, None)
        form = UnlockPasswordForm(request.POST)
        if form.is_valid():
            authenticated = services.login_unlock_authenticate(
                request, user=user, token=token, password=form.cleaned_data["password"]
            )
            if authenticated is not None:
                login(request, authenticated)
                return redirect(settings.LOGIN_REDIRECT_URL)
            form.add_error("password", "That is not the password of this account.")
            if services.login_unlock_user(uidb64, token) is None:
                return self._page(request, None, None, status=400)
        return self._page(request, user, form, status=400)

    def _page(
        self, request: HttpRequest, user: Any, form: Any, status: int | None = None
    ) -> HttpResponse:
        return render(
            request,
            self.template,
            {"unlock_user": user, "form": form},
            status=status or (200 if form is not None else 400),
        )
