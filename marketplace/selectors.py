"""Reads, always scoped to the user asking. What a user may not see is `NotFound`."""

import uuid

from django.db.models import F, QuerySet

from computeshare.errors import NotFound, PermissionDenied
from computeshare.models import User
from marketplace.models import Membership, Organization


def organization_list_for_user(user: User) -> QuerySet[Organization]:
    """The user's organizations, each annotated with the user's `role` in it."""
    return (
        Organization.objects.filter(memberships__user=user)
        .annotate(role=F("memberships__role"))
        .order_by("name", "id")
    )


def membership_get_for_user(user: User, organization_uuid: uuid.UUID | str) -> Membership:
    """The caller's membership of the organization; `NotFound` for outsiders."""
    try:
        return Membership.objects.select_related("organization").get(
            organization__uuid=organization_uuid, user=user
        )
    except (Membership.DoesNotExist, ValueError) as error:
        raise NotFound("No such organization.") from error


def membership_get_admin(user: User, organization_uuid: uuid.UUID | str) -> Membership:
    """Like `membership_get_for_user`, and `PermissionDenied` unless the caller is an admin."""
    membership = membership_get_for_user(user, organization_uuid)
    if not membership.is_admin:
        raise PermissionDenied("Only an admin of this organization can do this.")
    return membership


def membership_list(organization: Organization) -> QuerySet[Membership]:
    return (
        Membership.objects.filter(organization=organization)
        .select_related("user")
        .order_by("user__username")
    )


def organization_admin_emails(organization: Organization) -> list[str]:
    """The addresses of the organization's active admins (billing's alerts go to them)."""
    return list(
        Membership.objects.filter(
            organization=organization, role=Membership.Role.ADMIN, user__is_active=True
        )
        .exclude(user__email="")
        .order_by("user__username")
        .values_list("user__email", flat=True)
    )
