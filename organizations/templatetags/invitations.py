"""The count of the signed-in user's pending invitations, for the navigation."""

from typing import Any

from django import template

from organizations import selectors

register = template.Library()


@register.simple_tag
def pending_invitation_count(user: Any) -> int:
    if not getattr(user, "is_authenticated", False):
        return 0
    return selectors.invitation_count_pending_for_user(user)
