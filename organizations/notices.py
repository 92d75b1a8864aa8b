"""The notifications of organizations (invitations), recorded in the caller's transaction
through the notifications app's one entry point."""

from django.urls import reverse

from notifications.services import NotificationEvent, notifications_record
from organizations.models import Invitation


def invitation_created(invitation: Invitation) -> None:
    """The invitee (only an existing user who can accept) sees the invitation under the bell;
    its mail is organizations' own (`invitation_notify`, which honours the mail preference)."""
    if invitation.invitee_id is None:
        return
    inviter = invitation.invited_by.username if invitation.invited_by else "an admin"
    notifications_record(
        [
            NotificationEvent(
                kind="invitation",
                key=f"invitation:{invitation.uuid}",
                title=f"You are invited to join {invitation.organization.name}",
                body=f"As {invitation.role}, by {inviter}.",
                link=reverse("invitations"),
                user_ids=[invitation.invitee_id],
                is_mailed_here=False,
            )
        ]
    )
