"""The errors of organizations and invitations. Codes are part of the public contract
(docs/api.md, Error codes)."""

from computeshare.errors import Conflict


class InvitationExpired(Conflict):
    code = "invitation_expired"
    default_detail = "This invitation has expired; ask an admin of the organization for a new one."


class InvitationNotPending(Conflict):
    code = "invitation_not_pending"
    default_detail = "This invitation was already accepted, declined or cancelled."


class LastAdmin(Conflict):
    code = "last_admin"
    default_detail = (
        "An organization needs an admin: make another member admin before the last admin "
        "leaves, is removed or becomes a member."
    )
