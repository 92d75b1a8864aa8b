"""Reads of organizations, memberships and invitations, always scoped to who is asking."""

import uuid
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import F, QuerySet
from django.utils import timezone

from computeshare.errors import NotFound, PermissionDenied, ValidationFailed
from computeshare.models import User
from organizations.models import Invitation, Membership, Organization


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
    except (Membership.DoesNotExist, ValueError, ValidationError) as error:
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


def membership_get_in_organization(actor: Membership, member_uuid: uuid.UUID | str) -> Membership:
    """A membership of the actor's organization, by its id or `me` for the actor's own;
    `NotFound` for any other."""
    if member_uuid == "me":
        return actor
    try:
        return Membership.objects.select_related("organization", "user").get(
            organization=actor.organization, uuid=member_uuid
        )
    except (Membership.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such member.") from error


def _pending(queryset: QuerySet[Invitation]) -> QuerySet[Invitation]:
    """Pending and not past their expiry (an expired one is closed when next touched)."""
    return queryset.filter(status=Invitation.Status.PENDING, expires_at__gt=timezone.now())


def invitation_list_pending_for_organization(organization: Organization) -> QuerySet[Invitation]:
    """The organization's open invitations, for its admins: by the name typed, whether or not
    it is a user."""
    return (
        _pending(Invitation.objects.filter(organization=organization))
        .select_related("organization", "invited_by")
        .order_by("-created_at", "id")
    )


def invitation_get_for_organization(
    organization: Organization, invitation_uuid: uuid.UUID | str
) -> Invitation:
    try:
        return Invitation.objects.select_related("organization", "invited_by").get(
            organization=organization, uuid=invitation_uuid
        )
    except (Invitation.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such invitation.") from error


def invitation_list_pending_for_user(user: User) -> QuerySet[Invitation]:
    """The invitations the user can still accept or decline."""
    return (
        _pending(Invitation.objects.filter(invitee=user))
        .select_related("organization", "invited_by")
        .order_by("expires_at", "id")
    )


def invitation_count_pending_for_user(user: User) -> int:
    return _pending(Invitation.objects.filter(invitee=user)).count()


def invitation_get_for_invitee(user: User, invitation_uuid: uuid.UUID | str) -> Invitation:
    """One of the user's own invitations, whatever its status (answering one twice is a
    conflict, not a 404); anybody else's is `NotFound`."""
    try:
        return Invitation.objects.select_related("organization", "invited_by").get(
            invitee=user, uuid=invitation_uuid
        )
    except (Invitation.DoesNotExist, ValueError, ValidationError) as error:
        raise NotFound("No such invitation.") from error


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


def organization_notified_user_ids(
    organization_ids: Iterable[int], admins_only: bool
) -> dict[int, list[int]]:
    """By organization, the active users its notifications go to: every member, or only its
    admins (one query for all of them: an auction tells every bidder at once)."""
    members = Membership.objects.filter(
        organization_id__in=set(organization_ids), user__is_active=True
    )
    if admins_only:
        members = members.filter(role=Membership.Role.ADMIN)
    found: dict[int, list[int]] = {}
    for organization_id, user_id in members.order_by("user_id").values_list(
        "organization_id", "user_id"
    ):
        found.setdefault(organization_id, []).append(user_id)
    return found


def membership_for_body(
    user: User, organization_uuid: Any, field: str = "organization"
) -> Membership:
    """The caller's membership of an organization named in a request body: an organization
    the caller is not in is a field error (the URL's object exists; the body is wrong)."""
    try:
        return membership_get_for_user(user, organization_uuid)
    except NotFound as error:
        raise ValidationFailed(
            fields={field: ["You are not a member of this organization."]}
        ) from error


def organization_ids_of(user: User) -> set[int]:
    return set(Membership.objects.filter(user=user).values_list("organization_id", flat=True))


def membership_in(user: User, organization_id: int) -> Membership | None:
    return (
        Membership.objects.select_related("organization", "user")
        .filter(organization_id=organization_id, user=user)
        .first()
    )


def organizations_administered_by(user: User) -> list[Organization]:
    """The user's organizations in which the user is an admin, the ones that can buy and bid."""
    return [
        organization
        for organization in organization_list_for_user(user)
        if organization.role == Membership.Role.ADMIN  # type: ignore[attr-defined]
    ]
