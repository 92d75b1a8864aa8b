"""The pages that span apps (ADR 0026): the page after log-in, an organization's dashboard and
its overview. Their paths and names are those they had in marketplace/ and scheduler_bridge/."""

from django.urls import path

from portal import views

urlpatterns = [
    # The page after log-in: it shows jobs beside the market's allocations and billing's money.
    path("dashboard/", views.DashboardView.as_view(), name="dashboard"),
    path(
        "organizations/<uuid:organization_id>/dashboard/",
        views.DashboardView.as_view(),
        name="organization-dashboard",
    ),
    path(
        "organizations/<uuid:organization_id>/",
        views.OrganizationDetailView.as_view(),
        name="organization-detail",
    ),
]
