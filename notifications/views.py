"""The notifications pages: the list (with mark read) and the preferences."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View
from django.views.generic import TemplateView

from computeshare.authentication import request_user
from notifications import selectors, services
from notifications.models import Kind


class NotificationListView(LoginRequiredMixin, TemplateView):
    template_name = "notifications/list.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        unread_only = self.request.GET.get("unread") == "1"
        found = selectors.notification_list_for_user(
            request_user(self.request), unread_only=unread_only
        )
        page = Paginator(found, 30).get_page(self.request.GET.get("page"))
        context.update(
            page=page,
            unread_only=unread_only,
            unread_count=selectors.notification_unread_count(request_user(self.request)),
        )
        return context


class NotificationReadView(LoginRequiredMixin, View):
    """Marks one read, then follows its link (or returns to the list)."""

    def post(self, request: HttpRequest, notification_id: str) -> HttpResponse:
        notification = selectors.notification_get_for_user(request_user(request), notification_id)
        services.notification_mark_read(user=request_user(request), notification=notification)
        target = notification.link if request.POST.get("follow") == "1" else ""
        if target and url_has_allowed_host_and_scheme(target, allowed_hosts=None):
            return redirect(target)
        return redirect("notification-list")


class NotificationReadAllView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest) -> HttpResponse:
        count = services.notifications_mark_all_read(user=request_user(request))
        messages.success(request, f"Marked {count} notification{'s' if count != 1 else ''} read.")
        return redirect("notification-list")


class NotificationPreferencesView(LoginRequiredMixin, TemplateView):
    template_name = "notifications/preferences.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["preferences"] = selectors.preferences_for_user(request_user(self.request))
        return context

    def post(self, request: HttpRequest) -> HttpResponse:
        # A checkbox left unticked is absent from the form: every kind is set from the form.
        changes = {
            kind: {
                "in_site": request.POST.get(f"{kind}-in_site") == "on",
                "by_email": request.POST.get(f"{kind}-by_email") == "on",
            }
            for kind in Kind.values
        }
        services.notification_preferences_update(user=request_user(request), changes=changes)
        messages.success(request, "Your notification preferences are saved.")
        return redirect("notification-preferences")
