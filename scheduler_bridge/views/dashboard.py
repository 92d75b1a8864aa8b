"""The page after log-in: the user's organizations and the dashboard of one of them (the first
by name unless another is asked for). Its reads are `selectors_dashboard.dashboard_get`; the
charts' numbers travel in the page (json_script) and are drawn by Chart.js, with a table of the
same numbers beside each."""

from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views import View

from computeshare.authentication import request_user
from organizations import selectors as organization_selectors
from scheduler_bridge.selectors.dashboard import dashboard_get


class DashboardView(LoginRequiredMixin, View):
    template_name = "marketplace/dashboard.html"

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
