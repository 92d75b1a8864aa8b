"""Reads of the platform's own models, scoped to who is asking."""

import uuid

from django.db.models import QuerySet

from computeshare.errors import NotFound
from computeshare.models import ApiToken, User


def api_token_list_for_user(user: User) -> QuerySet[ApiToken]:
    """The user's own tokens, newest first, revoked and expired ones included."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def api_token_get_for_user(user: User, token_id: uuid.UUID | str) -> ApiToken:
    """One of the user's own tokens; anyone else's is `NotFound`, as one that does not exist."""
    token = api_token_list_for_user(user).filter(uuid=token_id).first()
    if token is None:
        raise NotFound()
    return token
