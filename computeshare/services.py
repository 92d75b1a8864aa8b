"""Writes of the platform's own models: API tokens."""

import hashlib
import hmac
import re
import secrets
import string
from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from computeshare import token_cache
from computeshare.errors import (
    AuthenticationFailed,
    TokenExpired,
    TokenLimitReached,
    TokenRevoked,
    ValidationFailed,
)
from computeshare.models import ApiToken, User

KEY_START = "cs_"
_KEY_ALPHABET = string.ascii_letters + string.digits
_LOOKUP_RANDOM_LENGTH = ApiToken.LOOKUP_LENGTH - len(KEY_START)  # 12 characters, 71 bits
_SECRET_LENGTH = 43  # 62**43 > 2**256
# What a key may look like, new (`cs_` and letters and digits) or migrated (hexadecimal):
# anything else is refused before it reaches the database.
_KEY_SHAPE = re.compile(rf"[A-Za-z0-9_]{{{ApiToken.LOOKUP_LENGTH + 1},200}}")
NAME_MAX_LENGTH = cast(int, ApiToken._meta.get_field("name").max_length)
EXPIRES_IN_DAYS_MAX = 3650
# The time of last use is written at most this often per token, so that a busy script does
# not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_token_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _random(length: int) -> str:
    return "".join(secrets.choice(_KEY_ALPHABET) for _ in range(length))


def _clean_name(name: str) -> str:
    cleaned = " ".join((name or "").split())
    if not cleaned:
        raise ValidationFailed(fields={"name": ["A name is required."]})
    if len(cleaned) > NAME_MAX_LENGTH:
        raise ValidationFailed(fields={"name": [f"At most {NAME_MAX_LENGTH} characters."]})
    return cleaned


def _clean_expires_in_days(expires_in_days: int | None) -> int | None:
    if expires_in_days is None:
        return None
    if not isinstance(expires_in_days, int) or not 1 <= expires_in_days <= EXPIRES_IN_DAYS_MAX:
        raise ValidationFailed(
            fields={"expires_in_days": [f"A whole number of days from 1 to {EXPIRES_IN_DAYS_MAX}."]}
        )
    return expires_in_days


@transaction.atomic
def api_token_create(
    *, user: User, name: str, expires_in_days: int | None = None, replace: bool = False
) -> tuple[ApiToken, str]:
    """Makes a token for `user` and answers it with its key, which exists nowhere else: only its
    digest is stored. A user has at most `API_TOKENS_PER_USER_MAX` live tokens (neither revoked
    nor expired); the user's row is locked while they are counted, so that concurrent requests
    cannot pass the limit together.

    With `replace`, the user's live tokens of the same name are revoked first: a script that
    logs in with its password at every run gets a fresh key each time instead of piling tokens
    up until the limit refuses it."""
    name = _clean_name(name)
    expires_in_days = _clean_expires_in_days(expires_in_days)
    User.objects.select_for_update().filter(pk=user.pk).first()
    now = timezone.now()
    if replace:
        replaced = ApiToken.objects.filter(user=user, name=name, revoked_at__isnull=True)
        token_cache.forget(list(replaced.values_list("digest", flat=True)))
        replaced.update(revoked_at=now)
    limit = settings.API_TOKENS_PER_USER_MAX
    if api_token_live_count(user=user, now=now) >= limit:
        raise TokenLimitReached(extra={"limit": limit})
    expires_at = now + timedelta(days=expires_in_days) if expires_in_days else None
    while True:
        key = f"{KEY_START}{_random(_LOOKUP_RANDOM_LENGTH)}{_random(_SECRET_LENGTH)}"
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    user=user,
                    name=name,
                    prefix=key[: ApiToken.LOOKUP_LENGTH],
                    digest=api_token_digest(key),
                    expires_at=expires_at,
                )
        except IntegrityError:  # the 71-bit lookup id of another token: draw again
            continue
        return token, key


def api_token_live_count(*, user: User, now: datetime) -> int:
    return (
        ApiToken.objects.filter(user=user, revoked_at__isnull=True)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .count()
    )


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revokes the token from now on; revoking a revoked token changes nothing (its first
    revocation time stays)."""
    now = timezone.now()
    token_cache.forget([token.digest])
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    token.refresh_from_db(fields=["revoked_at"])
    return token


def api_token_authenticate(*, key: str) -> ApiToken:
    """The live token whose key this is, with its user (who must be active), or
    `AuthenticationFailed` (`TokenExpired`, `TokenRevoked` once the key itself is right).

    A token that authenticated recently comes from the shared cache (computeshare.token_cache:
    no query; revocation and changes to the user mark it stale at once), else from the
    database. Marks the token used, at most once per `LAST_USED_RESOLUTION`: the update is
    conditional, so concurrent requests write it once, and a request within the minute writes
    nothing."""
    if not _KEY_SHAPE.fullmatch(key):
        raise AuthenticationFailed()
    digest = api_token_digest(key)
    now = timezone.now()
    cached = token_cache.get(digest)
    if cached is not None:
        # Cached only while live; it may have expired since.
        if cached.is_expired(now):
            raise TokenExpired()
        return cached
    token = (
        ApiToken.objects.select_related("user").filter(prefix=key[: ApiToken.LOOKUP_LENGTH]).first()
    )
    if token is None or not hmac.compare_digest(token.digest, digest):
        raise AuthenticationFailed()
    if token.is_revoked:
        raise TokenRevoked()
    if token.is_expired(now):
        raise TokenExpired()
    if not token.user.is_active:
        raise AuthenticationFailed("User inactive or deleted.")
    if token.last_used_at is None or token.last_used_at <= now - LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_RESOLUTION)
        ).update(last_used_at=now)
        token.last_used_at = now
    token_cache.add(token, now=now, last_used_resolution=LAST_USED_RESOLUTION)
    return token
