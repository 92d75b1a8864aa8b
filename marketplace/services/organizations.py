"""Writes of the marketplace: organizations and memberships."""

from django.conf import settings
from django.contrib.auth import authenticate
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.template.loader import render_to_string
from rest_framework.authtoken.models import Token

from billing import services as billing_services
from computeshare.errors import (
    AlreadyMember,
    InvalidCredentials,
    PermissionDenied,
    ValidationFailed,
)
from computeshare.models import User
from marketplace.models import Membership, Organization

ORGANIZATION_NAME_MAX_LENGTH = Organization._meta.get_field("name").max_length


def _clean_name(name: str) -> str:
    cleaned = " ".join((name or "").split())
    if not cleaned:
        raise ValidationFailed(fields={"name": ["A name is required."]})
    if len(cleaned) > ORGANIZATION_NAME_MAX_LENGTH:
        raise ValidationFailed(
            fields={"name": [f"At most {ORGANIZATION_NAME_MAX_LENGTH} characters."]}
        )
    return cleaned


@transaction.atomic
def organization_create(*, creator: User, name: str) -> Membership:
    """Creates an organization with its creator as its first admin. Names are unique whatever
    their case, so that buyers and owners can tell organizations apart."""
    name = _clean_name(name)
    if Organization.objects.filter(name__iexact=name).exists():
        raise ValidationFailed(fields={"name": ["An organization with this name exists."]})
    try:
        with transaction.atomic():
            organization = Organization.objects.create(name=name)
    except IntegrityError as error:  # a concurrent creation of the same name
        raise ValidationFailed(
            fields={"name": ["An organization with this name exists."]}
        ) from error
    billing_services.wallet_open(organization)
    return Membership.objects.create(
        organization=organization, user=creator, role=Membership.Role.ADMIN, added_by=creator
    )


@transaction.atomic
def membership_add(*, actor: Membership, username: str, role: str) -> Membership:
    """Adds a user to the actor's organization. Only admins may; a user is a member once.
    The new member is told by mail after the commit."""
    # Imported here: the tasks module imports this one.
    from marketplace.tasks import membership_notify_task

    if not actor.is_admin:
        raise PermissionDenied("Only an admin of this organization can add members.")
    if role not in Membership.Role.values:
        raise ValidationFailed(
            fields={"role": [f"Must be one of: {', '.join(Membership.Role.values)}."]}
        )
    user = User.objects.filter(username=username, is_active=True).first()
    if user is None:
        raise ValidationFailed(fields={"username": ["No active user has this username."]})
    organization = actor.organization
    if Membership.objects.filter(organization=organization, user=user).exists():
        raise AlreadyMember(extra={"username": username})
    try:
        with transaction.atomic():
            membership = Membership.objects.create(
                organization=organization, user=user, role=role, added_by=actor.user
            )
    except IntegrityError as error:  # added concurrently by another admin
        raise AlreadyMember(extra={"username": username}) from error
    transaction.on_commit(lambda: membership_notify_task.delay(membership.pk))
    return membership


def membership_notify(*, membership_id: int) -> bool:
    """Mails the new member that they were added; False when there is nothing to send."""
    membership = (
        Membership.objects.select_related("organization", "user", "added_by")
        .filter(pk=membership_id)
        .first()
    )
    if membership is None or not membership.user.email:
        return False
    context = {"membership": membership}
    send_mail(
        subject=f"You were added to {membership.organization.name} on ComputeShare",
        message=render_to_string("marketplace/email/membership_added.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        recipient_list=[membership.user.email],
    )
    return True


def auth_token_obtain(*, request: HttpRequest | None, username: str, password: str) -> Token:
    """The API token of the active user with these credentials, made on first use;
    `InvalidCredentials` otherwise (the same answer whether the user or the password is wrong)."""
    user = authenticate(request, username=username, password=password)
    if user is None:
        raise InvalidCredentials()
    return auth_token_get(user=user)


def auth_token_get(*, user: User) -> Token:
    token, _ = Token.objects.get_or_create(user=user)
    return token


@transaction.atomic
def token_regenerate(*, user: User) -> Token:
    """Replaces the user's API token; the old key stops working at once."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)
