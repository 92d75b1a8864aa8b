"""Who may act, checked before a request's body is read (house order: visible 404,
allowed 403, state 409, input 400, then the service)."""

from rest_framework import serializers
from rest_framework.request import Request

from computeshare.api import validated
from computeshare.authentication import request_user
from computeshare.errors import PermissionDenied
from marketplace.models import Cluster
from organizations import selectors as organization_selectors
from organizations.models import Membership


class _OrganizationField(serializers.Serializer):
    organization = serializers.UUIDField()


def admin_named_in_body(request: Request, what: str) -> Membership:
    """The caller's admin membership of the organization the body names, checked before the
    rest of the body (house order: allowed, 403, before input, 400). Not a member: 400 on
    `organization`; a member but not an admin: 403."""
    data = request.data if isinstance(request.data, dict) else {}
    named = validated(_OrganizationField, {"organization": data.get("organization")})
    actor = organization_selectors.membership_for_body(request_user(request), named["organization"])
    if not actor.is_admin:
        raise PermissionDenied(f"Only an admin of the organization can {what}.")
    return actor


def owner_membership(request: Request, cluster: Cluster) -> Membership:
    """The caller's membership of the cluster's organization; 403 for anyone else (the cluster
    itself is public, so it is not hidden)."""
    membership = organization_selectors.membership_in(
        request_user(request), cluster.organization_id
    )
    if membership is None:
        raise PermissionDenied("Only the cluster's owners can do this.")
    return membership
