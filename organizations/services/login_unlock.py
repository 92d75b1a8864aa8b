"""The owner's way in while a log-in lock stands (computeshare/login_throttling.py): a one-time
link by mail, asked for on the lockout page, and the log-in it allows."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import authenticate
from django.core.mail import send_mail
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from computeshare import login_throttling
from computeshare.models import User
from computeshare.queue import enqueue_after_commit


def login_unlock_request(*, username: str) -> None:
    """Asks for an unlock link for `username`: the same answer whether or not the name exists or
    has a mail address (nothing tells a stranger which), at most one mail per name every
    LOGIN_UNLOCK_MAIL_SECONDS. The mail is made and sent by a worker."""
    user = User.objects.filter(username=username, is_active=True).exclude(email="").first()
    if user is not None and login_throttling.unlock_mail_allowed(username):
        enqueue_after_commit(
            "organizations.tasks.login_unlock_mail_task",
            user.pk,
            recovered_by="the owner can ask for another link",
        )


def login_unlock_mail(*, user_id: int) -> bool:
    """Mails the user a link that lets them log in once with their password while a lock
    stands (valid LOGIN_UNLOCK_SECONDS)."""
    user = User.objects.filter(pk=user_id, is_active=True).exclude(email="").first()
    if user is None:
        return False
    path = reverse(
        "login-unlock",
        args=[
            urlsafe_base64_encode(force_bytes(user.pk)),
            login_throttling.unlock_tokens.make_token(user),
        ],
    )
    context = {
        "user": user,
        "link": f"{settings.SITE_URL}{path}",
        "minutes": settings.LOGIN_UNLOCK_SECONDS // 60,
    }
    send_mail(
        subject="Your one-time link to log in to ComputeShare",
        message=render_to_string("registration/email/login_unlock.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[user.email],
    )
    return True


def login_unlock_user(uidb64: str, token: str) -> User | None:
    """The user an unlock link is for, while it is valid: not used, not expired, not past
    LOGIN_UNLOCK_TRIES wrong passwords."""
    try:
        user_id = int(urlsafe_base64_decode(uidb64).decode())
    except (ValueError, UnicodeDecodeError):
        return None
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None or not login_throttling.unlock_tokens.check_token(user, token):
        return None
    return user if login_throttling.unlock_tries_left(token) else None


def login_unlock_authenticate(
    request: HttpRequest, *, user: User, token: str, password: str
) -> User | None:
    """The user, when `password` is theirs: the log-in a valid link allows despite the locks
    (the caller logs them in, which ends the link). A wrong password counts as a failure as
    anywhere, and against the link."""
    request.login_lock_bypassed = True  # type: ignore[attr-defined]
    authenticated = authenticate(request, username=user.get_username(), password=password)
    if authenticated is None:
        login_throttling.unlock_try_count(token)
    return authenticated
