"""Failed log-ins counted by django-axes, shared by every process through the cache (Redis in
production and the tests), by account and by client address separately: the log-in page, the
admin's and the API's token endpoint all authenticate through `django.contrib.auth.authenticate`
with the request, which axes watches.

Why the cache handler and not axes' database one: Redis counts with atomic INCR, so concurrent
failures on several gunicorn workers are each counted; each count expires by itself after the
cool-off (no table to prune); and a flood of wrong passwords writes nothing to PostgreSQL.

Two changes to axes' cache handler:

- Axes keys its counts by the bare value (sha256 of the username, or of the address), so a
  username spelled like an address ("203.0.113.9") would count against, and lock out, that
  address. Usernames are counted as `account:<username>` instead (AXES_USERNAME_CALLABLE).
- A successful log-in forgets the account's failures, not the address's: otherwise whoever
  holds one account of their own could clear their address's count between guesses at others'.

Operators unlock with `manage.py axes_reset_username <username>`, `axes_reset_ip <address>`,
or `axes_reset` for everyone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis
from axes.handlers.cache import AxesCacheHandler
from axes.helpers import get_cache, get_cool_off, make_cache_key_list
from django.conf import settings
from django.contrib.auth import authenticate
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from rest_framework.exceptions import Throttled

from computeshare.errors import InvalidCredentials

if TYPE_CHECKING:
    from computeshare.models import User

ACCOUNT_PREFIX = "account:"
LOCKED_OUT_DETAIL = (
    "Too many failed log-ins for this account or from this address: even the right password is "
    "refused until the lockout ends, or an operator lifts it."
)


def counted_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The name axes counts an account's failures under (AXES_USERNAME_CALLABLE)."""
    field = str(getattr(settings, "AXES_USERNAME_FORM_FIELD", "username"))
    if credentials:
        username = credentials.get(field)
    else:
        username = getattr(request, "data", request.POST).get(field)
    if not username:
        return None
    return _counted(str(username))


def retry_after_seconds() -> int:
    """At most this long until a lockout ends: a count expires a cool-off after the failure
    that reached the limit (failures during a lockout do not extend it)."""
    cool_off = get_cool_off()
    return int(cool_off.total_seconds()) if cool_off else 0


class LoginFailureCacheHandler(AxesCacheHandler):  # type: ignore[misc]
    """AxesCacheHandler, with usernames in their own namespace and a success that forgets the
    account's failures only (see the module's docstring)."""

    def user_logged_in(self, sender: Any, request: HttpRequest, user: User, **kwargs: Any) -> None:
        super().user_logged_in(sender, request, user, **kwargs)
        account_failures_forget(user.get_username())

    def reset_attempts(
        self,
        *,
        ip_address: str | None = None,
        username: str | None = None,
        ip_or_username: bool = False,
    ) -> int:
        """For axes' reset commands: `axes_reset_username alice` names the account as the
        operator knows it; `axes_reset` (neither given) forgets every count."""
        if ip_address is None and username is None:
            return _forget_every_count(self.cache)
        filters = []
        if username is not None:
            filters.append({"username": _counted(username)})
        if ip_address is not None:
            filters.append({"ip_address": ip_address})
        keys = make_cache_key_list(filters)
        found = sum(1 for key in keys if self.cache.get(key) is not None)
        self.cache.delete_many(keys)
        return found


def _counted(username: str) -> str:
    return f"{ACCOUNT_PREFIX}{username}"


def account_failures_forget(username: str) -> None:
    """Forgets the account's failed log-ins (its address's stay counted)."""
    get_cache().delete_many(make_cache_key_list([{"username": _counted(username)}]))


def _forget_every_count(cache: Any) -> int:
    """Deletes every count in axes' own cache (AXES_CACHE, which holds nothing else)."""
    if isinstance(cache, RedisCache):
        alias = getattr(settings, "AXES_CACHE", "default")
        client = redis.Redis.from_url(settings.CACHES[alias]["LOCATION"])
        keys = list(client.scan_iter(match=cache.make_key("*"), count=1000))
        return int(client.delete(*keys)) if keys else 0
    cache.clear()
    return 0


def failures_forget_all() -> int:
    """Forgets every failed log-in counted (the tests start each test with none)."""
    return _forget_every_count(get_cache())


def login_authenticate(request: HttpRequest, *, username: str, password: str) -> User:
    """The active user with these credentials, for the API's token endpoint.

    Through `authenticate` with the request, so that axes counts a failure and refuses a
    locked-out account or address even with the right password: DRF's `Throttled` then (429
    `throttled` with Retry-After); `InvalidCredentials` for a wrong password or an unknown user
    (the same answer for both). A success forgets the account's failures, as the log-in page's
    does."""
    user = authenticate(request, username=username, password=password)
    if user is None:
        if getattr(request, "axes_locked_out", False):
            raise Throttled(wait=retry_after_seconds(), detail=LOCKED_OUT_DETAIL)
        raise InvalidCredentials()
    account_failures_forget(user.get_username())
    return user


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict[str, Any] | None = None,
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: what AxesMiddleware answers a locked-out log-in with. The API's
    token endpoint has already answered 429 in the API's error shape; the log-in page and the
    admin's get a page that says so."""
    if original_response is not None and original_response.status_code == 429:
        return original_response
    wait = retry_after_seconds()
    response = render(
        request,
        "registration/locked_out.html",
        {"detail": LOCKED_OUT_DETAIL, "retry_after_minutes": max(1, -(-wait // 60))},
        status=429,
    )
    response["Retry-After"] = str(wait)
    return response
