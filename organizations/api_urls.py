from django.urls import path

from organizations.api import memberships, organizations, tokens, webhooks

urlpatterns = [
    path("auth/token/", organizations.AuthTokenApi.as_view(), name="api-auth-token"),
    path("auth/tokens/", tokens.ApiTokenListCreateApi.as_view(), name="api-auth-tokens"),
    path(
        "auth/tokens/<uuid:token_id>/",
        tokens.ApiTokenRevokeApi.as_view(),
        name="api-auth-token-revoke",
    ),
    path("me/", organizations.MeApi.as_view(), name="api-me"),
    path(
        "organizations/<uuid:organization_id>/members/",
        organizations.OrganizationMemberListCreateApi.as_view(),
        name="api-organization-members",
    ),
    path(
        # A membership's id, or `me` for the caller's own.
        "organizations/<uuid:organization_id>/members/<str:member_id>/",
        memberships.OrganizationMemberDetailApi.as_view(),
        name="api-organization-member",
    ),
    path(
        "organizations/<uuid:organization_id>/invitations/",
        memberships.OrganizationInvitationListApi.as_view(),
        name="api-organization-invitations",
    ),
    path(
        "organizations/<uuid:organization_id>/invitations/<uuid:invitation_id>/cancel/",
        memberships.OrganizationInvitationCancelApi.as_view(),
        name="api-organization-invitation-cancel",
    ),
    path("invitations/", memberships.InvitationListApi.as_view(), name="api-invitations"),
    path(
        "invitations/<uuid:invitation_id>/accept/",
        memberships.InvitationAcceptApi.as_view(),
        name="api-invitation-accept",
    ),
    path(
        "invitations/<uuid:invitation_id>/decline/",
        memberships.InvitationDeclineApi.as_view(),
        name="api-invitation-decline",
    ),
]

organization_webhooks = "organizations/<uuid:organization_id>/webhook-endpoints/"
urlpatterns += [
    path(
        organization_webhooks,
        webhooks.WebhookEndpointListCreateApi.as_view(),
        name="api-webhook-endpoints",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/",
        webhooks.WebhookEndpointDetailApi.as_view(),
        name="api-webhook-endpoint",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/rotate-secret/",
        webhooks.WebhookEndpointRotateSecretApi.as_view(),
        name="api-webhook-endpoint-rotate-secret",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/",
        webhooks.WebhookDeliveryListApi.as_view(),
        name="api-webhook-deliveries",
    ),
    path(
        f"{organization_webhooks}<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/redeliver/",
        webhooks.WebhookDeliveryRedeliverApi.as_view(),
        name="api-webhook-delivery-redeliver",
    ),
]
