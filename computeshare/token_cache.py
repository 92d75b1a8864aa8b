"""The live API tokens that recently authenticated, with their users, in the shared cache
(Redis), so that a request with a token usually makes no database query for it.

Keyed by the key's SHA-256 digest: a hit is the right key (the cache never holds the key
itself). Only live tokens of active users are cached, each for at most
`API_TOKEN_CACHE_SECONDS` and never past the moment its time of last use is due to be written
again, so the conditional write of `last_used_at` happens as it did without the cache.

Whatever may end a token's validity marks its digest stale at once (`forget`): revoking,
replacing, an admin's edit or deletion of the token, any change to its user (deactivation,
deletion). A stale mark is not removed but overwritten with a tombstone, and entries are only
ever added where nothing is (`cache.add`): a request that read the token from the database
just before the revocation committed cannot put it back. The mark is written before the
change commits and again after, so the revocation takes effect for every process at once.

Without Redis, requests read the token from the database as before; marking stale, though,
fails loudly (the revocation is refused and changes nothing) rather than leave an entry live.

Off (0 seconds) where the cache is not shared by every process (the demo without Redis) and in
the tests, which edit tokens' rows directly and count each endpoint's queries; the cache's own
tests turn it on."""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from computeshare.models import ApiToken

logger = logging.getLogger(__name__)

_PREFIX = "apitoken:"
_STALE = "stale"


def _seconds() -> int:
    return int(getattr(settings, "API_TOKEN_CACHE_SECONDS", 0))


def _key(digest: str) -> str:
    return _PREFIX + digest


def get(digest: str) -> ApiToken | None:
    """The cached live token (with its user) of this digest, or None: not cached, marked
    stale, or the cache is off."""
    if _seconds() <= 0:
        return None
    try:
        entry: Any = cache.get(_key(digest))
    except Exception:  # Redis unreachable: the database answers, as without the cache
        logger.warning("The token cache could not be read.", exc_info=True)
        return None
    return entry if isinstance(entry, ApiToken) else None


def add(token: ApiToken, *, now: datetime, last_used_resolution: timedelta) -> None:
    """Caches a live token just read from the database, unless its digest is marked stale; for
    no longer than until its next write of `last_used_at` is due."""
    seconds = _seconds()
    if seconds <= 0 or token.last_used_at is None:
        return
    until_write = (token.last_used_at + last_used_resolution - now).total_seconds()
    timeout = min(seconds, int(until_write))
    if timeout >= 1:
        try:
            cache.add(_key(token.digest), token, timeout=timeout)
        except Exception:  # not cached this time; the request goes on
            logger.warning("The token cache could not be written.", exc_info=True)


def forget(digests: Iterable[str]) -> None:
    """Marks the digests stale now and again once the current transaction commits (at once
    when there is none): no process takes them from the cache any more."""
    seconds = _seconds()
    marks = {_key(digest): _STALE for digest in digests}
    if seconds <= 0 or not marks:
        return
    # Longer than any entry lives, so that no entry read before the change can come back.
    timeout = seconds * 2
    cache.set_many(marks, timeout=timeout)
    transaction.on_commit(lambda: cache.set_many(marks, timeout=timeout))


def forget_user(user_id: int) -> None:
    """Marks every token of the user stale (a change to the user may end their validity)."""
    if _seconds() > 0:
        forget(ApiToken.objects.filter(user_id=user_id).values_list("digest", flat=True))
