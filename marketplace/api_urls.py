from django.urls import path

from marketplace.api import money, organizations

urlpatterns = [
    path("auth/token/", organizations.AuthTokenApi.as_view(), name="api-auth-token"),
    path("me/", organizations.MeApi.as_view(), name="api-me"),
    path(
        "organizations/",
        organizations.OrganizationListCreateApi.as_view(),
        name="api-organizations",
    ),
    path(
        "organizations/<uuid:organization_id>/",
        organizations.OrganizationDetailApi.as_view(),
        name="api-organization-detail",
    ),
    path(
        "organizations/<uuid:organization_id>/members/",
        organizations.OrganizationMemberListCreateApi.as_view(),
        name="api-organization-members",
    ),
]

organization_money = "organizations/<uuid:organization_id>/"
urlpatterns += [
    path(f"{organization_money}budget/", money.BudgetApi.as_view(), name="api-budget"),
    path(f"{organization_money}top-ups/", money.TopUpListCreateApi.as_view(), name="api-top-ups"),
    path(
        f"{organization_money}top-ups/<uuid:top_up_id>/",
        money.TopUpDetailApi.as_view(),
        name="api-top-up-detail",
    ),
    path(f"{organization_money}ledger/", money.LedgerApi.as_view(), name="api-ledger"),
    path(f"{organization_money}earnings/", money.EarningsApi.as_view(), name="api-earnings"),
]
