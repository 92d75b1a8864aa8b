from django.urls import path

from marketplace import api

urlpatterns = [
    path("auth/token/", api.AuthTokenApi.as_view(), name="api-auth-token"),
    path("me/", api.MeApi.as_view(), name="api-me"),
    path("organizations/", api.OrganizationListCreateApi.as_view(), name="api-organizations"),
    path(
        "organizations/<uuid:organization_id>/",
        api.OrganizationDetailApi.as_view(),
        name="api-organization-detail",
    ),
    path(
        "organizations/<uuid:organization_id>/members/",
        api.OrganizationMemberListCreateApi.as_view(),
        name="api-organization-members",
    ),
]
