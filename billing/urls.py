"""The pages of an organization's money."""

from django.urls import path

from billing import views

urlpatterns = [
    path(
        "organizations/<uuid:organization_id>/money/",
        views.MoneyView.as_view(),
        name="organization-money",
    ),
    path(
        "organizations/<uuid:organization_id>/statements/<int:year>/<int:month>/",
        views.StatementView.as_view(),
        name="organization-statement",
    ),
    path(
        "organizations/<uuid:organization_id>/payouts/",
        views.PayoutsView.as_view(),
        name="organization-payouts",
    ),
]
