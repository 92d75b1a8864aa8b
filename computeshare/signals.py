"""Changes made outside the token services (the admin, a user's deactivation or deletion) that
may end an API token's validity mark it stale in the shared cache (computeshare.token_cache)."""

from typing import Any

from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db.models.signals import post_delete, post_save, pre_delete
from django.dispatch import receiver

from computeshare import login_throttling, token_cache
from computeshare.models import ApiToken, User


@receiver(post_save, sender=ApiToken)
def _token_saved(sender: type[ApiToken], instance: ApiToken, created: bool, **_: Any) -> None:
    # A new token is in no cache yet: marking it would only keep it out for a while.
    if not created:
        token_cache.forget([instance.digest])


@receiver(post_delete, sender=ApiToken)
def _token_deleted(sender: type[ApiToken], instance: ApiToken, **_: Any) -> None:
    token_cache.forget([instance.digest])


@receiver(post_save, sender=User)
def _user_saved(sender: type[User], instance: User, update_fields: Any = None, **_: Any) -> None:
    # A log-in writes only `last_login`, which no token depends on.
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    token_cache.forget_user(instance.pk)


@receiver(pre_delete, sender=User)
def _user_deleted(sender: type[User], instance: User, **_: Any) -> None:
    # Before the deletion reaches the tokens, while their digests can still be read.
    token_cache.forget_user(instance.pk)


# Failed and successful log-ins, whichever page or endpoint authenticated (the log-in
# throttling: computeshare/login_throttling.py).
user_login_failed.connect(login_throttling.on_login_failed, dispatch_uid="login-throttling-failed")
user_logged_in.connect(login_throttling.on_logged_in, dispatch_uid="login-throttling-logged-in")
