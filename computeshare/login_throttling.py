"""Failed log-ins, counted in the cache every process shares (Redis in production and the tests),
on the log-in page, the admin's and `POST /api/v1/auth/token/`: all authenticate through
`django.contrib.auth.authenticate` with the request, which `ThrottleBackend` (first of the
authentication backends) and the `user_login_failed` signal watch.

Three counts, so that guessing stays slow and nobody can lock anybody else out by typing their
name (the weakness of counting by account alone, issue 29):

- A name from one client address: LOGIN_FAILURE_LIMIT failures lock that name from that address
  for LOGIN_BACKOFF_SECONDS, and each failure after a lock ends doubles the next one, up to
  LOGIN_BACKOFF_MAX_SECONDS. The count is forgotten a day after its last failure, or on a
  successful log-in from that address. Whoever types someone's name elsewhere locks only
  themselves.
- The name from everywhere: LOGIN_ACCOUNT_FAILURE_LIMIT failures within
  LOGIN_ACCOUNT_WINDOW_SECONDS lock the name for everyone for LOGIN_COOLOFF_SECONDS. One
  address reaches its own lock long before (a fifth of a day of back-off per hundred guesses);
  only a guess spread over many addresses reaches this ceiling.
- One client address, whatever the names: LOGIN_ADDRESS_FAILURE_LIMIT failures within the
  window lock the address for the cool-off (a password sprayed over many names).

Even the right password is refused while a lock stands. The owner of a locked name is let in by
a one-time link sent to the account's address (`unlock_tokens`): it allows one log-in with the
password despite the locks, expires after LOGIN_UNLOCK_SECONDS, dies with that log-in (the token
covers the last log-in time) and after LOGIN_UNLOCK_TRIES wrong passwords.

Names are counted lower-cased (a guess does not escape the ceiling by changing case), hashed,
never stored as typed; unknown names are counted as known ones are. Operators unlock with
`manage.py login_unlock NAME`, `--address ADDRESS` or `--everyone`."""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.tokens import PasswordResetTokenGenerator
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.crypto import constant_time_compare
from django.utils.http import base36_to_int
from rest_framework.exceptions import Throttled
from rest_framework.throttling import BaseThrottle

from computeshare.errors import InvalidCredentials

if TYPE_CHECKING:
    from computeshare.models import User

CACHE = "logins"
LOCKED_OUT_DETAIL = (
    "Too many failed log-ins for this account from here, for this account from many places, or "
    "from this address: even the right password is refused until the lock ends. The account's "
    "owner can ask for a one-time link by mail to log in now."
)


@dataclass(frozen=True)
class Lock:
    """Why a log-in is refused before its password is checked, and for how long."""

    scope: str  # "name from this address", "name", "address"
    retry_after: int  # seconds


def _cache() -> Any:
    return caches[CACHE]


def _key(kind: str, *parts: str) -> str:
    return f"{kind}:" + hashlib.sha256("\0".join(parts).encode("utf-8", "replace")).hexdigest()


def client_address(request: HttpRequest) -> str:
    """The client's address as DRF's throttles see it (TRUSTED_PROXY_COUNT through
    NUM_PROXIES: a client's own X-Forwarded-For counts for nothing)."""
    return str(BaseThrottle().get_ident(request))  # type: ignore[arg-type]


def _name(username: str) -> str:
    return username.strip().lower()


def lock_of(username: str, address: str) -> Lock | None:
    """The longest lock standing against this name from this address, if any."""
    name = _name(username)
    locks = {
        "name from this address": _key("pair-lock", name, address),
        "name": _key("account-lock", name),
        "address": _key("address-lock", address),
    }
    now = time.time()
    values = _cache().get_many(list(locks.values()))
    found = [
        Lock(scope, math.ceil(values[key] - now))
        for scope, key in locks.items()
        if values.get(key, 0) > now
    ]
    return max(found, key=lambda lock: lock.retry_after) if found else None


def _count(key: str, window: int) -> int:
    cache = _cache()
    cache.add(key, 0, timeout=window)
    try:
        count = int(cache.incr(key))
    except ValueError:  # expired between the two calls
        cache.set(key, 1, timeout=window)
        count = 1
    cache.touch(key, timeout=window)
    return count


def _lock(key: str, seconds: int) -> None:
    _cache().set(key, time.time() + seconds, timeout=seconds)


def failure_record(username: str, address: str) -> None:
    """Counts one failed log-in of `username` from `address`, and locks what reached its
    limit (see the module's docstring)."""
    name = _name(username)
    pair = _count(_key("pair", name, address), settings.LOGIN_BACKOFF_MAX_SECONDS)
    if pair >= settings.LOGIN_FAILURE_LIMIT:
        strikes = pair - settings.LOGIN_FAILURE_LIMIT
        seconds = min(
            settings.LOGIN_BACKOFF_SECONDS * 2 ** min(strikes, 32),
            settings.LOGIN_BACKOFF_MAX_SECONDS,
        )
        _lock(_key("pair-lock", name, address), seconds)
    window = settings.LOGIN_ACCOUNT_WINDOW_SECONDS
    if _count(_key("account", name), window) >= settings.LOGIN_ACCOUNT_FAILURE_LIMIT:
        _lock(_key("account-lock", name), settings.LOGIN_COOLOFF_SECONDS)
    if _count(_key("address", address), window) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT:
        _lock(_key("address-lock", address), settings.LOGIN_COOLOFF_SECONDS)


def success_record(username: str, address: str) -> None:
    """Forgets the failures of this name from this address, and of the name from everywhere
    (its owner is in). The address's count stays: whoever holds one account of their own must
    not clear it between guesses at others'."""
    name = _name(username)
    _cache().delete_many(
        [_key("pair", name, address), _key("pair-lock", name, address), _key("account", name)]
    )


def unlock(*, username: str | None = None, address: str | None = None) -> None:
    """An operator lifts the locks of a name (from every address it was counted from: those
    pairs expire on their own, and the name's own lock goes now), of an address, or, with
    neither, every count there is."""
    cache = _cache()
    if username is None and address is None:
        _forget_every_count()
        return
    if username is not None:
        name = _name(username)
        cache.delete_many([_key("account", name), _key("account-lock", name)])
        if address is not None:
            cache.delete_many([_key("pair", name, address), _key("pair-lock", name, address)])
    if address is not None:
        cache.delete_many([_key("address", address), _key("address-lock", address)])


def _forget_every_count() -> None:
    """Deletes every key of the `logins` cache. In Redis by its key prefix: `clear()` would
    empty the whole database, which other caches (and a broker) may share."""
    cache = _cache()
    if isinstance(cache, RedisCache):
        client = redis.Redis.from_url(settings.CACHES[CACHE]["LOCATION"])
        keys = list(client.scan_iter(match=cache.make_key("*"), count=1000))
        if keys:
            client.delete(*keys)
        return
    cache.clear()  # the demo's files, a folder of their own


def failures_forget_all() -> None:
    """Forgets every count (the tests start each test with none)."""
    _forget_every_count()


# --- Hooks into Django's authentication ---------------------------------------------------------


class ThrottleBackend:
    """First of AUTHENTICATION_BACKENDS: refuses a locked log-in before any password is
    checked (`PermissionDenied` stops `authenticate`), and marks the request so that the page
    or the API says why. A request that carries a valid unlock link (`login_lock_bypassed`)
    passes. It has no `get_user`, so that a session is never tied to it (Django, and its test
    client's `force_login`, take the first backend that has one)."""

    def authenticate(self, request: HttpRequest | None, **credentials: Any) -> None:
        username = credentials.get("username")
        if request is None or not username or getattr(request, "login_lock_bypassed", False):
            return None
        lock = lock_of(str(username), client_address(request))
        if lock is not None:
            request.login_lock = lock  # type: ignore[attr-defined]
            raise PermissionDenied(LOCKED_OUT_DETAIL)
        return None


def on_login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **_: Any
) -> None:
    """`user_login_failed`: counts the failure (a refusal for a lock is not one)."""
    username = credentials.get("username")
    if request is None or not username or getattr(request, "login_lock", None):
        return
    failure_record(str(username), client_address(request))


def on_logged_in(sender: Any, request: Any, user: User, **_: Any) -> None:
    """`user_logged_in`: a success forgets the name's failures (`success_record`)."""
    if request is not None:
        success_record(user.get_username(), client_address(request))


class LockoutMiddleware:
    """Turns the answer to a locked log-in on a page (the log-in page, the admin's) into the
    page that says so, 429 with Retry-After. The API's token endpoint has answered 429 in the
    API's error shape already."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response: HttpResponse = self.get_response(request)
        lock: Lock | None = getattr(request, "login_lock", None)
        if lock is None or response.status_code == 429:
            return response
        return lockout_response(request, lock)


def lockout_response(request: HttpRequest, lock: Lock) -> HttpResponse:
    username = request.POST.get("username", "") if request.method == "POST" else ""
    response = render(
        request,
        "registration/locked_out.html",
        {
            "detail": LOCKED_OUT_DETAIL,
            "retry_after_minutes": max(1, -(-lock.retry_after // 60)),
            "username": username,
        },
        status=429,
    )
    response["Retry-After"] = str(lock.retry_after)
    return response


def login_authenticate(request: HttpRequest, *, username: str, password: str) -> User:
    """The active user with these credentials, for the API's token endpoint: DRF's `Throttled`
    (429 `throttled` with Retry-After) while a lock stands, `InvalidCredentials` for a wrong
    password or an unknown user (the same answer for both)."""
    user = authenticate(request, username=username, password=password)
    if user is None:
        lock: Lock | None = getattr(request, "login_lock", None)
        if lock is not None:
            raise Throttled(wait=lock.retry_after, detail=LOCKED_OUT_DETAIL)
        raise InvalidCredentials()
    success_record(user.get_username(), client_address(request))
    return user


# --- The owner's way in -------------------------------------------------------------------------


class UnlockTokenGenerator(PasswordResetTokenGenerator):
    """Tokens of the mailed one-time links: Django's password-reset tokens (an HMAC of the user's
    id, password hash, last log-in time and the time made), with their own salt and lifetime
    (LOGIN_UNLOCK_SECONDS). A log-in changes the last log-in time, so a link lets in once."""

    key_salt = "computeshare.login_throttling.UnlockTokenGenerator"

    def check_token(self, user: Any, token: str | None) -> bool:
        if not (user and token) or "-" not in token:
            return False
        timestamp_text = token.split("-", 1)[0]
        try:
            timestamp = base36_to_int(timestamp_text)
        except ValueError:
            return False
        if not any(
            constant_time_compare(self._make_token_with_timestamp(user, timestamp, secret), token)
            for secret in [self.secret, *self.secret_fallbacks]
        ):
            return False
        age = self._num_seconds(self._now()) - timestamp
        return bool(0 <= age <= settings.LOGIN_UNLOCK_SECONDS)


unlock_tokens = UnlockTokenGenerator()


def unlock_try_count(token: str) -> int:
    """Counts one wrong password typed on an unlock link; the link dies at LOGIN_UNLOCK_TRIES."""
    return _count(_key("unlock-tries", token), settings.LOGIN_UNLOCK_SECONDS)


def unlock_tries_left(token: str) -> bool:
    tries = int(_cache().get(_key("unlock-tries", token), 0))
    return tries < int(settings.LOGIN_UNLOCK_TRIES)


def unlock_mail_allowed(username: str) -> bool:
    """At most one unlock mail per name every LOGIN_UNLOCK_MAIL_SECONDS, whoever asks."""
    return bool(
        _cache().add(_key("unlock-mail", _name(username)), 1, settings.LOGIN_UNLOCK_MAIL_SECONDS)
    )
