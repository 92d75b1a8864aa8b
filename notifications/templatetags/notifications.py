"""The count of the signed-in user's unread notifications, for the navigation's bell."""

from typing import Any

from django import template

from notifications import selectors

register = template.Library()


@register.simple_tag
def unread_notification_count(user: Any) -> int:
    if not getattr(user, "is_authenticated", False):
        return 0
    return selectors.notification_unread_count(user)
