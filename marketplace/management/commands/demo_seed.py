"""Creates the demo's users and organizations (idempotent) and prints their log-ins."""

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from computeshare.models import User
from marketplace import services
from marketplace.models import Membership, Organization

DEMO_PASSWORD = "computeshare-demo"  # noqa: S105 - printed for the demo on purpose

# username, e-mail, organization, role
PEOPLE = [
    ("olivia", "olivia@aurora-hpc.example", "Aurora HPC Lab", Membership.Role.ADMIN),
    ("tom", "tom@nimbus-research.example", "Nimbus Research", Membership.Role.ADMIN),
    ("mia", "mia@nimbus-research.example", "Nimbus Research", Membership.Role.MEMBER),
]


class Command(BaseCommand):
    help = "Creates the demo users and organizations and prints their log-ins."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        for username, email, organization_name, role in PEOPLE:
            user, created = User.objects.get_or_create(username=username, defaults={"email": email})
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            organization = Organization.objects.filter(name=organization_name).first()
            if organization is None:
                services.organization_create(creator=user, name=organization_name)
                continue
            if not Membership.objects.filter(organization=organization, user=user).exists():
                admin = Membership.objects.filter(
                    organization=organization, role=Membership.Role.ADMIN
                ).first()
                if admin is not None:
                    services.membership_add(actor=admin, username=username, role=role)

        self.stdout.write(self.style.SUCCESS(f"Demo log-ins (password for all: {DEMO_PASSWORD})"))
        for username, _, organization_name, role in PEOPLE:
            self.stdout.write(f"  {username:<8} {role:<7} of {organization_name}")
