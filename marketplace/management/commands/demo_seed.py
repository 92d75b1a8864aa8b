"""Creates the demo's users, organizations and market (idempotent) and prints their log-ins.

The market: Aurora HPC Lab owns a cluster on the `local` backend (jobs run as processes on this
machine) with several open offers and five weeks of cleared auctions; Nimbus Research has money
in its wallet and an active allocation won at the last auction; Helix Genomics bids too, so the
auctions have competition.

The history is replayed at the times it happened, through the same services, on Django's clock
set back (`clock`, as the dashboards' tests make their past): each offer is listed days before
its auction closes, bids are placed while it is open, it clears at its close and its notices
are recorded then, each allocation is told that it started, that it ends soon (before it ends)
and is closed at its window's end. Four weeks of idle samples, an outage and a few runs the
owner's side ended give the idle grid and the track record something to show on the first
visit."""

import datetime
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import timedelta
from decimal import Decimal
from functools import partial
from typing import Any
from unittest import mock

from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from billing import services as billing
from computeshare.models import User
from hpc.slurm.inventory import PartitionIdle
from marketplace import notices, selectors, services
from marketplace.models import Cluster, Offer
from marketplace.services import capacity
from notifications import selectors as notification_selectors
from notifications import services as notification_services
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

# Past auctions: days ago they closed, days their window lasts, units, reserve, and the bids
# (team, units, price). Most windows were a week; the one of three weeks ago is still open, and
# demo_jobs runs the teams' past jobs on it; the last one's opened just now.
HISTORY = [
    (35, 7, 160, "0.020", [("Nimbus Research", 80, "0.031"), ("Helix Genomics", 120, "0.026")]),
    (28, 7, 160, "0.020", [("Nimbus Research", 100, "0.029"), ("Helix Genomics", 90, "0.033")]),
    (21, 28, 200, "0.020", [("Nimbus Research", 60, "0.025"), ("Helix Genomics", 80, "0.024")]),
    (14, 7, 160, "0.020", [("Nimbus Research", 90, "0.034"), ("Helix Genomics", 100, "0.030")]),
    (7, 7, 160, "0.020", [("Nimbus Research", 120, "0.036"), ("Helix Genomics", 70, "0.032")]),
    (0, 30, 200, "0.020", [("Nimbus Research", 150, "0.038"), ("Helix Genomics", 100, "0.035")]),
]
# Each past offer is listed this long before its auction closes; its bids come in between.
LISTED_BEFORE_CLOSE = timedelta(days=3)
BIDS_BEFORE_CLOSE = (timedelta(days=2), timedelta(hours=20))
# The "ends soon" notice comes this long before a window ends (within the platform's lead).
ENDING_NOTICE_BEFORE_END = timedelta(minutes=30)
# Open offers: hours until the auction closes, window days, units, reserve, buy-now.
OPEN_OFFERS = [
    (2, 14, 120, "0.020", "0.045"),
    (12, 21, 200, "0.018", None),
    (36, 28, 300, "0.022", "0.040"),
    (72, 30, 160, "0.015", None),
]
# Idle time: hours sampled (four weeks, as the idle grid reads) and samples per hour (two
# whole-CPU samples make a quarter of a small machine's CPUs), and the outage and the runs the
# owner's side ended that the track record counts (days ago, minutes; days ago, Slurm's state).
IDLE_HOURS = 28 * 24
IDLE_SAMPLES_PER_HOUR = 2
OUTAGE = (12, 40)
OWNER_SIDE_RUN_ENDS = [(19, "PREEMPTED"), (9, "PREEMPTED"), (4, "NODE_FAIL")]


@contextmanager
def clock(moment: datetime.datetime) -> Iterator[None]:
    """Django's clock set to `moment`: every `timezone.now()` and `auto_now_add` reads it, so
    that what the services write while it is set is dated as it would have been then."""
    with mock.patch("django.utils.timezone.now", return_value=moment):
        yield


def idle_share(moment: datetime.datetime) -> float:
    """The share of the partition idle at `moment`, as a lab's cluster is: idle at weekends,
    mostly idle at night, busy in working hours."""
    if moment.weekday() >= 5:
        return 1.0
    if 8 <= moment.hour < 18:
        return 0.25
    return 0.75


class Command(BaseCommand):
    help = "Creates the demo users, organizations and market and prints their log-ins."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        is_fresh = not Cluster.objects.filter(organization__name=OWNER).exists()
        # On a fresh database the people and their organizations exist from before the
        # history, so that nobody bids before they joined.
        with clock(self._history_start(now)) if is_fresh else nullcontext():
            self._people()
        if is_fresh:
            self._seed_market(now)

        self.stdout.write(self.style.SUCCESS(f"Demo log-ins (password for all: {DEMO_PASSWORD})"))
        for username, _, organization_name, role in PEOPLE:
            self.stdout.write(f"  {username:<8} {role:<7} of {organization_name}")

    def _people(self) -> None:
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

    @staticmethod
    def _history_start(now: datetime.datetime) -> datetime.datetime:
        oldest = max(row[0] for row in HISTORY)
        return now - timedelta(days=oldest + 1) - LISTED_BEFORE_CLOSE

    def _admin(self, organization_name: str) -> Membership:
        return Membership.objects.select_related("organization", "user").get(
            organization__name=organization_name, role=Membership.Role.ADMIN
        )

    def _seed_market(self, now: datetime.datetime) -> None:
        """The cluster and the teams' credit at the start of the history, then every event of
        the history in the order it happened (`_history`), then what is open now."""
        owner = self._admin(OWNER)
        with clock(self._history_start(now)):
            cluster = self._cluster_and_credit(owner)
        partition = cluster.partitions.get().name
        events = sorted(self._history(owner, cluster, partition, now), key=lambda e: e[0])
        for moment, step in events:
            with clock(moment):
                step()
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

    def _cluster_and_credit(self, owner: Membership) -> Cluster:
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
        return cluster

    def _history(
        self, owner: Membership, cluster: Cluster, partition: str, now: datetime.datetime
    ) -> Iterator[tuple[datetime.datetime, Callable[[], object]]]:
        """(when, what) for each event of the market's past, in no particular order: the
        auctions, the idle samples, and what the cluster's owners' side did."""
        for row in HISTORY:
            yield from self._auction_events(owner, cluster, partition, now, row)
        yield from self._idle_history(cluster, now)
        yield from self._owner_side_events(cluster, now)

    def _auction_events(
        self,
        owner: Membership,
        cluster: Cluster,
        partition: str,
        now: datetime.datetime,
        row: tuple[int, int, int, str, list[tuple[str, int, str]]],
    ) -> Iterator[tuple[datetime.datetime, Callable[[], object]]]:
        """One offer of `HISTORY`: its listing, its bids, its clearing and its allocations'
        notices and close."""
        days_ago, window_days, quantity, reserve, bids = row
        closes = now - timedelta(days=days_ago, minutes=5)
        window_start = closes + timedelta(minutes=1)
        window_end = closes + timedelta(days=window_days)
        listing: dict[str, Offer] = {}
        yield (
            closes - LISTED_BEFORE_CLOSE,
            partial(
                self._list,
                listing,
                owner=owner,
                cluster=cluster,
                partition=partition,
                quantity=quantity,
                reserve=reserve,
                window=(window_start, window_end),
                closes=closes,
            ),
        )
        for before, (team, units, price) in zip(BIDS_BEFORE_CLOSE, bids, strict=True):
            yield closes - before, partial(self._bid, listing, team, units, price)
        cleared_at = closes + timedelta(seconds=30)
        yield cleared_at, partial(self._clear, listing, cleared_at)
        # Told that it started once its window opened, that it ends soon before it ends,
        # and closed once it ended, as the periodic tasks would.
        yield window_start + timedelta(minutes=1), notices.allocation_notices_due
        if window_end < now:
            yield window_end - ENDING_NOTICE_BEFORE_END, notices.allocation_notices_due
            yield window_end + timedelta(minutes=1), self._close_ended

    def _idle_history(
        self, cluster: Cluster, now: datetime.datetime
    ) -> Iterator[tuple[datetime.datetime, Callable[[], object]]]:
        first_hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=IDLE_HOURS)
        for index in range(IDLE_HOURS * IDLE_SAMPLES_PER_HOUR):
            sample = index % IDLE_SAMPLES_PER_HOUR
            moment = first_hour + timedelta(hours=index // IDLE_SAMPLES_PER_HOUR, minutes=sample)
            yield moment, partial(self._idle_sample, cluster, moment, sample)

    @staticmethod
    def _owner_side_events(
        cluster: Cluster, now: datetime.datetime
    ) -> Iterator[tuple[datetime.datetime, Callable[[], object]]]:
        """What the track record counts: the `OUTAGE`, and the runs the owner's side ended."""
        days_ago, minutes = OUTAGE
        went = now - timedelta(days=days_ago, hours=3)
        yield (
            went,
            partial(
                capacity.cluster_reachability_record,
                cluster=cluster,
                is_reachable=False,
                source="poll",
                detail="Connecting to the login node timed out.",
            ),
        )
        yield (
            went + timedelta(minutes=minutes),
            partial(
                capacity.cluster_reachability_record,
                cluster=cluster,
                is_reachable=True,
                source="poll",
            ),
        )
        for index, (days_ago, state) in enumerate(OWNER_SIDE_RUN_ENDS):
            ended = now - timedelta(days=days_ago, hours=5)
            yield (
                ended,
                partial(
                    capacity.owner_side_run_end_record,
                    cluster=cluster,
                    raw_job_id=str(4100 + index),
                    submit_time=ended - timedelta(hours=2),
                    scheduler_state=state,
                    ended_at=ended,
                ),
            )

    def _list(
        self,
        listing: dict[str, Offer],
        *,
        owner: Membership,
        cluster: Cluster,
        partition: str,
        quantity: int,
        reserve: str,
        window: tuple[datetime.datetime, datetime.datetime],
        closes: datetime.datetime,
    ) -> None:
        listing["offer"] = services.offer_create(
            actor=owner,
            cluster=cluster,
            partition=partition,
            resource="cpu",
            quantity=quantity,
            window_start=window[0],
            window_end=window[1],
            reserve_price=reserve,
            auction_closes_at=closes,
        )

    def _bid(self, listing: dict[str, Offer], team: str, units: int, price: str) -> None:
        services.bid_place(
            actor=self._admin(team), offer=listing["offer"], quantity=units, price=price
        )

    def _clear(self, listing: dict[str, Offer], at: datetime.datetime) -> None:
        """Clears the auction at its time and records its notices then, as the worker would
        have at once (they are queued as a batch, `notifications_record_after_commit`)."""
        services.auction_clear(offer_id=listing["offer"].pk, now=at)
        for batch_id in notification_selectors.notice_batches_due(grace_seconds=0):
            notification_services.notice_batch_record(batch_id=batch_id)

    def _close_ended(self) -> None:
        for allocation_id in selectors.allocations_due():
            services.allocation_close(allocation_id=allocation_id)

    def _idle_sample(self, cluster: Cluster, moment: datetime.datetime, sample: int) -> None:
        partition = cluster.partitions.get()
        # Whole CPUs whose mean over the hour's samples is the share's (dithered).
        idle = min(
            partition.cpus,
            math.floor(partition.cpus * idle_share(moment) + sample / IDLE_SAMPLES_PER_HOUR),
        )
        capacity.partition_idle_record(
            cluster=cluster,
            idle=[
                PartitionIdle(
                    name=partition.name, cpus=partition.cpus, idle_cpus=idle, gpus=0, idle_gpus=0
                )
            ],
            at=moment,
        )
