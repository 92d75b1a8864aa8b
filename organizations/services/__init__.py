"""Every write of organizations, memberships and invitations. Views, serializers, tasks and
commands call these by name."""

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
    "membership_remove",
    "membership_role_change",
    "organization_create",
]
