from django.contrib.auth import views as auth_views
from django.urls import path

from marketplace import views, views_money
from marketplace.forms import LoginForm

urlpatterns = [
    path("", views.HomeView.as_view(), name="home"),
    path("signup/", views.SignUpView.as_view(), name="signup"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            authentication_form=LoginForm, redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("dashboard/", views.DashboardView.as_view(), name="dashboard"),
    path("organizations/new/", views.OrganizationCreateView.as_view(), name="organization-create"),
    path(
        "organizations/<uuid:organization_id>/",
        views.OrganizationDetailView.as_view(),
        name="organization-detail",
    ),
    path("account/token/", views.ApiTokenView.as_view(), name="api-token"),
]

urlpatterns += [
    path(
        "organizations/<uuid:organization_id>/money/",
        views_money.MoneyView.as_view(),
        name="organization-money",
    ),
    path(
        "organizations/<uuid:organization_id>/statements/<int:year>/<int:month>/",
        views_money.StatementView.as_view(),
        name="organization-statement",
    ),
]
