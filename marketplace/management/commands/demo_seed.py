"""Creates the demo's users, organizations and market (idempotent) and prints their log-ins.

The market: Aurora HPC Lab owns a cluster on the `local` backend (jobs run as processes on this
machine) with several open offers and a history of cleared auctions; Nimbus Research has money
in its wallet and an active allocation won at the last auction; Helix Genomics bids too, so the
auctions have competition."""

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from billing import services as billing
from computeshare.models import User
from marketplace import selectors, services
from marketplace.models import Cluster, Offer
from organizations import services as organization_services
from organizations.models import Membership, Organization

DEMO_PASSWORD = "computeshare-demo"  # noqa: S105 - printed for the demo on purpose
OWNER = "Aurora HPC Lab"

# username, e-mail, organization, role
PEOPLE = [
    ("olivia", "olivia@aurora-hpc.example", OWNER, Membership.Role.ADMIN),
    ("tom", "tom@nimbus-research.example", "Nimbus Research", Membership.Role.ADMIN),
    ("mia", "mia@nimbus-research.example", "Nimbus Research", Membership.Role.MEMBER),
    ("hana", "hana@helix-genomics.example", "Helix Genomics", Membership.Role.ADMIN),
]
# Demo credit per buying organization, posted once as a staff adjustment.
CREDIT = {"Nimbus Research": Decimal("500.00"), "Helix Genomics": Decimal("300.00")}

# Past auctions: days ago they closed, units, reserve, and the bids (team, units, price).
HISTORY = [
    (35, 160, "0.020", [("Nimbus Research", 80, "0.031"), ("Helix Genomics", 120, "0.026")]),
    (28, 160, "0.020", [("Nimbus Research", 100, "0.029"), ("Helix Genomics", 90, "0.033")]),
    (21, 200, "0.020", [("Nimbus Research", 60, "0.025"), ("Helix Genomics", 80, "0.024")]),
    (14, 160, "0.020", [("Nimbus Research", 90, "0.034"), ("Helix Genomics", 100, "0.030")]),
    (7, 160, "0.020", [("Nimbus Research", 120, "0.036"), ("Helix Genomics", 70, "0.032")]),
    (0, 200, "0.020", [("Nimbus Research", 150, "0.038"), ("Helix Genomics", 100, "0.035")]),
]
# Open offers: hours until the auction closes, window days, units, reserve, buy-now.
OPEN_OFFERS = [
    (2, 14, 120, "0.020", "0.045"),
    (12, 21, 200, "0.018", None),
    (36, 28, 300, "0.022", "0.040"),
    (72, 30, 160, "0.015", None),
]


class Command(BaseCommand):
    help = "Creates the demo users, organizations and market and prints their log-ins."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        for username, email, organization_name, role in PEOPLE:
            user, created = User.objects.get_or_create(username=username, defaults={"email": email})
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            organization = Organization.objects.filter(name=organization_name).first()
            if organization is None:
                organization_services.organization_create(creator=user, name=organization_name)
                continue
            if not Membership.objects.filter(organization=organization, user=user).exists():
                admin = Membership.objects.filter(
                    organization=organization, role=Membership.Role.ADMIN
                ).first()
                if admin is not None:
                    # The demo's people say yes at once: invited, then accepted.
                    invitation = organization_services.invitation_create(
                        actor=admin, username=username, role=role
                    )
                    organization_services.invitation_accept(user=user, invitation=invitation)
        if not Cluster.objects.filter(organization__name=OWNER).exists():
            self._seed_market()

        self.stdout.write(self.style.SUCCESS(f"Demo log-ins (password for all: {DEMO_PASSWORD})"))
        for username, _, organization_name, role in PEOPLE:
            self.stdout.write(f"  {username:<8} {role:<7} of {organization_name}")

    def _admin(self, organization_name: str) -> Membership:
        return Membership.objects.select_related("organization", "user").get(
            organization__name=organization_name, role=Membership.Role.ADMIN
        )

    def _seed_market(self) -> None:
        owner = self._admin(OWNER)
        staff = User.objects.filter(is_superuser=True).first()
        for organization_name, amount in CREDIT.items():
            billing.wallet_adjust(
                organization=self._admin(organization_name).organization,
                amount=amount,
                memo="Demo credit",
                actor=staff,
                idempotency_reference=f"demo-credit:{organization_name}",
            )
        cluster = services.cluster_create_local(
            organization=owner.organization, name="aurora-local"
        )
        cluster, _ = services.cluster_verify(actor=owner, cluster=cluster)
        partition = cluster.partitions.get().name
        now = timezone.now()

        for days_ago, quantity, reserve, bids in HISTORY:
            offer = services.offer_create(
                actor=owner,
                cluster=cluster,
                partition=partition,
                resource="cpu",
                quantity=quantity,
                window_start=now + timedelta(hours=1),
                window_end=now + timedelta(days=30),
                reserve_price=reserve,
                auction_closes_at=now + timedelta(minutes=30),
            )
            for team, units, price in bids:
                services.bid_place(
                    actor=self._admin(team), offer=offer, quantity=units, price=price
                )
            # Moved into the past as if it had run then, listed half an hour before its auction
            # closed (the calendar spreads an offer from the hour it was listed in); the last
            # one's window is open now.
            closed_at = now - timedelta(days=days_ago, minutes=5)
            Offer.objects.filter(pk=offer.pk).update(
                created_at=closed_at - timedelta(minutes=30),
                auction_closes_at=closed_at,
                window_start=closed_at + timedelta(minutes=1),
                window_end=closed_at + timedelta(days=7 if days_ago else 30),
            )
            services.auction_clear(offer_id=offer.pk, now=closed_at + timedelta(seconds=30))
        for closes_in_hours, window_days, quantity, reserve, buy_now in OPEN_OFFERS:
            closes = now + timedelta(hours=closes_in_hours)
            services.offer_create(
                actor=owner,
                cluster=cluster,
                partition=partition,
                resource="cpu",
                quantity=quantity,
                window_start=closes + timedelta(hours=1),
                window_end=closes + timedelta(days=window_days),
                reserve_price=reserve,
                buy_now_price=buy_now,
                auction_closes_at=closes,
            )
        # A reserved block of one core for the 8 hours from the next hour but one: the demo's
        # local scheduler keeps its reservation.
        block_start = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
        services.offer_create(
            actor=owner,
            cluster=cluster,
            partition=partition,
            resource="cpu",
            capacity="reserved",
            quantity=1,
            window_start=block_start,
            window_end=block_start + timedelta(hours=8),
            reserve_price="0.04",
            buy_now_price="0.06",
            auction_closes_at=block_start,
        )
        # Windows of the past auctions have ended: close them as the periodic task would.
        for allocation_id in selectors.allocations_due():
            services.allocation_close(allocation_id=allocation_id)
