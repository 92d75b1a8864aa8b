"""An organization with its wallet and budget (ADR 0026); the paths are docs/api.md's."""

from django.urls import path

from portal import api

urlpatterns = [
    path("organizations/", api.OrganizationListCreateApi.as_view(), name="api-organizations"),
    path(
        "organizations/<uuid:organization_id>/",
        api.OrganizationDetailApi.as_view(),
        name="api-organization-detail",
    ),
]
