"""Every write of organizations, memberships and invitations. Views, serializers, tasks and
commands call these by name."""

from organizations.services.login_unlock import (
    login_unlock_authenticate,
    login_unlock_mail,
    login_unlock_request,
    login_unlock_user,
)
from organizations.services.memberships import (
    invitation_accept,
    invitation_cancel,
    invitation_create,
    invitation_decline,
    invitation_expiry,
    invitation_notify,
    membership_remove,
    membership_role_change,
)
from organizations.services.organizations import organization_create

__all__ = [
    "invitation_accept",
    "invitation_cancel",
    "invitation_create",
    "invitation_decline",
    "invitation_expiry",
    "invitation_notify",
    "login_unlock_authenticate",
    "login_unlock_mail",
    "login_unlock_request",
    "login_unlock_user",
    "membership_remove",
    "membership_role_change",
    "organization_create",
]
