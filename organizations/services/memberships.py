"""Writes of memberships: invitations into an organization and their answers, leaving, removal
and role changes.

Two rules hold here. Nobody joins an organization without saying yes: an admin invites, the
invitee accepts. And an organization always keeps an admin: every change that could take away
an admin runs with the organization's row locked, so two admins leaving at the same moment are
serialized and the second is refused."""

from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.utils import timezone

from computeshare.errors import NotFound, PermissionDenied, ValidationFailed
from computeshare.models import User
from computeshare.queue import enqueue_after_commit
from computeshare.states import status_move, status_move_all
from notifications import selectors as notification_selectors
from organizations import notices
from organizations.errors import InvitationExpired, InvitationNotPending, LastAdmin
from organizations.models import Invitation, Membership, Organization

USERNAME_MAX_LENGTH = int(Invitation._meta.get_field("username").max_length or 150)


def _clean_role(role: str) -> str:
    if role not in Membership.Role.values:
        raise ValidationFailed(
            fields={"role": [f"Must be one of: {', '.join(Membership.Role.values)}."]}
        )
    return role


def invitation_expiry(now: datetime) -> datetime:
    return now + timedelta(days=settings.INVITATION_EXPIRY_DAYS)


@transaction.atomic
def invitation_create(*, actor: Membership, username: str, role: str) -> Invitation:
    """Invites `username` into the actor's organization. Only admins may.

    The answer does not tell whether the name exists: for every name the same queries run, an
    invitation row is stored and a mail task is enqueued after the commit. Only an active user
    who is not a member yet becomes the `invitee` (who can accept, and who the task mails); any
    other name gets an invitation nobody can accept, listed and expiring like the others.
    Inviting a name that has a pending invitation answers that invitation unchanged (to change
    its role, cancel it and invite again)."""
    if not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can invite members.")
    role = _clean_role(role)
    username = (username or "").strip()
    if not username or len(username) > USERNAME_MAX_LENGTH:
        raise ValidationFailed(
            fields={"username": [f"A username of 1 to {USERNAME_MAX_LENGTH} characters."]}
        )
    organization = actor.organization
    now = timezone.now()
    invitee = _invitee(organization, username)

    pending = (
        Invitation.objects.select_for_update()
        .filter(organization=organization, username=username, status=Invitation.Status.PENDING)
        .first()
    )
    if pending is not None:
        if not pending.is_expired(now):
            return pending
        _invitation_close(pending, Invitation.Status.EXPIRED, now)
    try:
        with transaction.atomic():
            invitation = Invitation.objects.create(
                organization=organization,
                username=username,
                invitee=invitee,
                role=role,
                invited_by=actor.user,
                expires_at=invitation_expiry(now),
            )
    except IntegrityError:
        # Another admin invited the same name (or the same user under a former name) meanwhile.
        existing = _pending_invitation_of(organization, username, invitee)
        if existing is None:
            raise
        return existing
    enqueue_after_commit(
        "organizations.tasks.invitation_notify_task",
        invitation.pk,
        recovered_by="the invitation waits on the invitee's Invitations page unmailed",
    )
    return invitation


def _invitee(organization: Organization, username: str) -> User | None:
    """The active user of that name who is not a member yet, the one who may accept: for any
    other name, nobody. Asked by name, not by user: the same queries whether the name exists
    or not."""
    user = User.objects.filter(username=username, is_active=True).first()
    is_member = Membership.objects.filter(
        organization=organization, user__username=username
    ).exists()
    return None if user is None or is_member else user


def _pending_invitation_of(
    organization: Organization, username: str, invitee: User | None
) -> Invitation | None:
    """The organization's pending invitation of that name, or of that user under a former
    name."""
    pending = Invitation.objects.filter(organization=organization, status=Invitation.Status.PENDING)
    return pending.filter(username=username).first() or (
        pending.filter(invitee=invitee).first() if invitee else None
    )


def invitation_notify(*, invitation_id: int) -> bool:
    """Tells the invitee under the bell and mails them their invitation (unless they turned
    mail of invitations off); False when there is nobody to mail (an invitation without an
    invitee, one answered meanwhile, a user without an address)."""
    invitation = (
        Invitation.objects.select_related("organization", "invitee", "invited_by")
        .filter(pk=invitation_id, status=Invitation.Status.PENDING, invitee__isnull=False)
        .first()
    )
    if invitation is None or invitation.invitee is None:
        return False
    # Here, in the worker, and not in the request: the admin's request runs the same queries
    # whether the name exists or not (ADR 0008).
    notices.invitation_created(invitation)
    if not invitation.invitee.email:
        return False
    if not notification_selectors.users_wanting_email([invitation.invitee.pk], "invitation"):
        return False  # the invitee turned off mail of invitations
    context = {"invitation": invitation, "site_url": settings.SITE_URL}
    send_mail(
        subject=f"You are invited to join {invitation.organization.name} on ComputeShare",
        message=render_to_string("organizations/email/invitation.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[invitation.invitee.email],
    )
    return True


def _invitation_close(invitation: Invitation, status: str, now: datetime) -> None:
    if invitation.status != Invitation.Status.PENDING:
        raise InvitationNotPending(extra={"status": invitation.status})
    status_move(invitation, status)
    invitation.answered_at = now
    invitation.save(update_fields=["status", "answered_at", "updated_at"])


def _invitation_answer(invitation: Invitation, status: str) -> Membership | None:
    """Closes the pending invitation with `status` under its row lock; on acceptance the
    membership is created in the same transaction. An invitation past its expiry is closed as
    expired (that write is kept) and refused with `InvitationExpired`."""
    now = timezone.now()
    membership = None
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.status == Invitation.Status.EXPIRED:
            raise InvitationExpired()
        if invitation.status != Invitation.Status.PENDING:
            raise InvitationNotPending(extra={"status": invitation.status})
        if invitation.is_expired(now):
            _invitation_close(invitation, Invitation.Status.EXPIRED, now)
            expired = True
        else:
            expired = False
            if status == Invitation.Status.ACCEPTED:
                assert invitation.invitee_id is not None  # only an invitee reaches this
                membership, _ = Membership.objects.get_or_create(
                    organization_id=invitation.organization_id,
                    user_id=invitation.invitee_id,
                    defaults={"role": invitation.role, "added_by_id": invitation.invited_by_id},
                )
            _invitation_close(invitation, status, now)
    if expired:
        raise InvitationExpired()
    return membership


def _check_invitee(user: User, invitation: Invitation) -> None:
    if invitation.invitee_id is None or invitation.invitee_id != user.pk:
        raise NotFound("No such invitation.")


def invitation_accept(*, user: User, invitation: Invitation) -> Membership:
    """The invitee joins the organization with the invitation's role. A user who is a member
    already keeps their membership as it is; the invitation just closes."""
    _check_invitee(user, invitation)
    membership = _invitation_answer(invitation, Invitation.Status.ACCEPTED)
    assert membership is not None
    return membership


def invitation_decline(*, user: User, invitation: Invitation) -> None:
    _check_invitee(user, invitation)
    _invitation_answer(invitation, Invitation.Status.DECLINED)


def invitation_cancel(*, actor: Membership, invitation: Invitation) -> Invitation:
    """An admin of the invitation's organization withdraws it while it is pending."""
    if invitation.organization_id != actor.organization_id:
        raise NotFound("No such invitation.")
    if not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can cancel invitations.")
    _invitation_answer(invitation, Invitation.Status.CANCELLED)
    invitation.refresh_from_db()
    return invitation


# --- Leaving, removal and roles ----------------------------------------------------------------


def _lock_organization(organization_id: int) -> Organization:
    return Organization.objects.select_for_update().get(pk=organization_id)


def _relock(actor: Membership, target: Membership) -> tuple[Membership, Membership]:
    """Both memberships as they are now, read with the organization's row locked: a concurrent
    removal or role change committed before the lock was taken is seen."""
    _lock_organization(actor.organization_id)
    current = {
        membership.pk: membership
        for membership in Membership.objects.select_related("organization", "user").filter(
            pk__in={actor.pk, target.pk}
        )
    }
    if actor.pk not in current:
        raise NotFound("No such organization.")
    if target.pk not in current:
        raise NotFound("No such member.")
    return current[actor.pk], current[target.pk]


def _is_last_admin(membership: Membership) -> bool:
    """Whether `membership` is the organization's only admin (call with the organization
    locked)."""
    if not membership.is_admin:
        return False
    return not (
        Membership.objects.filter(
            organization_id=membership.organization_id, role=Membership.Role.ADMIN
        )
        .exclude(pk=membership.pk)
        .exists()
    )


@transaction.atomic
def membership_remove(*, actor: Membership, membership: Membership) -> None:
    """Ends `membership`: the member leaves (actor is the member) or an admin removes them.
    A member may remove only themselves; the organization's last admin can do neither."""
    if membership.organization_id != actor.organization_id:
        raise NotFound("No such member.")
    if membership.pk != actor.pk and not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can remove members.")
    actor, membership = _relock(actor, membership)
    if membership.pk != actor.pk and not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can remove members.")
    if _is_last_admin(membership):
        raise LastAdmin()
    membership.delete()
    # An invitation of their name made while they were a member can never be accepted: closed,
    # so that inviting them back sends a real one.
    status_move_all(
        Invitation.objects.filter(
            organization_id=membership.organization_id,
            username=membership.user.username,
            invitee__isnull=True,
        ),
        Invitation.Status.CANCELLED,
        from_statuses=[Invitation.Status.PENDING],
        answered_at=timezone.now(),
    )


@transaction.atomic
def membership_role_change(*, actor: Membership, membership: Membership, role: str) -> Membership:
    """An admin gives a member another role; the last admin cannot become a member."""
    if membership.organization_id != actor.organization_id:
        raise NotFound("No such member.")
    if not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can change roles.")
    role = _clean_role(role)
    actor, membership = _relock(actor, membership)
    if not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can change roles.")
    if role == membership.role:
        return membership
    if role == Membership.Role.MEMBER and _is_last_admin(membership):
        raise LastAdmin()
    membership.role = role
    membership.save(update_fields=["role", "updated_at"])
    return membership
