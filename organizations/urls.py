from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from organizations.forms.organizations import LoginForm
from organizations.views import login_unlock, organizations, tokens, webhooks

urlpatterns = [
    path("", organizations.HomeView.as_view(), name="home"),
    path("signup/", organizations.SignUpView.as_view(), name="signup"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            authentication_form=LoginForm, redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "login/unlock/",
        login_unlock.LoginUnlockRequestView.as_view(),
        name="login-unlock-request",
    ),
    path(
        "login/unlock/<str:uidb64>/<str:token>/",
        login_unlock.LoginUnlockView.as_view(),
        name="login-unlock",
    ),
    path("organizations/", organizations.OrganizationListView.as_view(), name="organization-list"),
    path(
        "organizations/new/",
        organizations.OrganizationCreateView.as_view(),
        name="organization-create",
    ),
    path("account/tokens/", tokens.ApiTokenListView.as_view(), name="api-tokens"),
    path(
        "account/tokens/<uuid:token_id>/revoke/",
        tokens.ApiTokenRevokeView.as_view(),
        name="api-token-revoke",
    ),
    # The page's address before there were several tokens.
    path("account/token/", RedirectView.as_view(pattern_name="api-tokens")),
    path(
        "organizations/<uuid:organization_id>/invitations/<uuid:invitation_id>/cancel/",
        organizations.OrganizationInvitationCancelView.as_view(),
        name="organization-invitation-cancel",
    ),
    path(
        # A membership's id, or `me` to leave.
        "organizations/<uuid:organization_id>/members/<str:member_id>/remove/",
        organizations.OrganizationMemberRemoveView.as_view(),
        name="organization-member-remove",
    ),
    path(
        "organizations/<uuid:organization_id>/members/<uuid:member_id>/role/",
        organizations.OrganizationMemberRoleView.as_view(),
        name="organization-member-role",
    ),
    path("invitations/", organizations.InvitationListView.as_view(), name="invitations"),
    path(
        "invitations/<uuid:invitation_id>/accept/",
        organizations.InvitationAnswerView.as_view(accept=True),
        name="invitation-accept",
    ),
    path(
        "invitations/<uuid:invitation_id>/decline/",
        organizations.InvitationAnswerView.as_view(accept=False),
        name="invitation-decline",
    ),
]

# An organization's webhooks (organizations/views/webhooks.py).
organization_webhooks = "organizations/<uuid:organization_id>/webhooks/"
urlpatterns += [
    path(
        organization_webhooks,
        webhooks.WebhookListView.as_view(),
        name="organization-webhooks",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/",
        webhooks.WebhookDetailView.as_view(),
        name="organization-webhook",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/rotate-secret/",
        webhooks.WebhookRotateSecretView.as_view(),
        name="organization-webhook-rotate-secret",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/remove/",
        webhooks.WebhookRemoveView.as_view(),
        name="organization-webhook-remove",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/redeliver/",
        webhooks.WebhookRedeliverView.as_view(),
        name="organization-webhook-redeliver",
    ),
]
