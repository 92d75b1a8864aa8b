"""Writes of organizations (memberships: memberships.py; API tokens: computeshare.services)."""

from django.db import IntegrityError, transaction

from computeshare.errors import ValidationFailed
from computeshare.models import User
from organizations.models import Membership, Organization

ORGANIZATION_NAME_MAX_LENGTH = int(Organization._meta.get_field("name").max_length or 120)


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
    their case, so that buyers and owners can tell organizations apart. Its wallet is not
    opened here (billing is above organizations): the ledger opens an organization's accounts
    on their first movement, and its reads answer zero until then."""
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
    return Membership.objects.create(
        organization=organization, user=creator, role=Membership.Role.ADMIN, added_by=creator
    )
