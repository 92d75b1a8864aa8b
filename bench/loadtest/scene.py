"""The load test's market, made through the services on its own scratch database: teams with
wallets funded through the ledger (`wallet_adjust`, as the tests fund them), people with
passwords and API tokens, local clusters with open offers to browse, bid on and buy, and, on
the real Slurm test cluster, a cluster row whose teams hold allocations to run jobs on."""

from __future__ import annotations

import random
import secrets
import uuid
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from bench_jobs_cluster import TEST_CLUSTER, fixed_tenants
from bench_support import analyze

# Enough that no wallet, offer or allocation runs out during a run of an hour.
FUNDS = Decimal("10000000")
OFFER_QUANTITY = 1_000_000
ALLOCATION_UNITS = 5_000


@dataclass
class Person:
    username: str
    password: str
    token: str
    organization: str  # uuid
    allocation: str | None = None  # uuid, for the people who run jobs


@dataclass
class Scene:
    browsers: list[Person] = field(default_factory=list)
    traders: list[Person] = field(default_factory=list)
    runners: list[Person] = field(default_factory=list)
    offers: list[str] = field(default_factory=list)
    buy_now_offers: list[str] = field(default_factory=list)
    job_cluster: str = ""
    tenants: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _person(organization: Any, label: str) -> Person:
    from computeshare import services as accounts
    from organizations.models import Membership
    from tests.factories import MembershipFactory, UserFactory

    password = secrets.token_urlsafe(12)
    user = UserFactory(username=f"load-{label}")
    user.set_password(password)
    user.save()
    MembershipFactory(user=user, organization=organization, role=Membership.Role.ADMIN)
    _, token = accounts.api_token_create(user=user, name="loadtest")
    return Person(user.username, password, token, str(organization.uuid))


def _team(name: str) -> Any:
    from billing import services as billing
    from tests.factories import OrganizationFactory

    team = OrganizationFactory(name=name)
    billing.wallet_open(team)
    billing.wallet_adjust(organization=team, amount=FUNDS, memo="Load test funds", actor=None)
    return team


def _offers(rng: random.Random, clusters: int, per_cluster: int) -> tuple[list[str], list[str]]:
    """Open offers on local clusters (no SSH: nothing leaves the machine when one is bought),
    their auctions closing in days, so that none clears during the run."""
    from django.utils import timezone

    from marketplace import services as market
    from marketplace.models import Cluster, Offer, Partition
    from tests.factories import OrganizationFactory

    now = timezone.now()
    offers = []
    for index in range(clusters):
        owner = OrganizationFactory(name=f"Load owner {index:02d}")
        cluster = market.cluster_create_local(organization=owner, name=f"load-{index:02d}")
        Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.ONLINE)
        partition = Partition.objects.create(
            cluster=cluster, name="batch", nodes=64, cpus=4096, gpus=64
        )
        for _ in range(per_cluster):
            closes = now + timedelta(days=rng.randint(2, 30))
            reserve = Decimal(rng.randint(10, 500)) / 100
            offers.append(
                Offer(
                    cluster=cluster,
                    partition=partition,
                    resource=rng.choice(["cpu", "cpu", "gpu"]),
                    quantity=OFFER_QUANTITY,
                    reserve_price=reserve,
                    buy_now_price=reserve * 3 if rng.random() < 0.5 else None,
                    auction_closes_at=closes,
                    window_start=closes,
                    window_end=closes + timedelta(days=rng.randint(1, 30)),
                )
            )
    made = Offer.objects.bulk_create(offers, batch_size=2_000)
    return (
        [str(offer.uuid) for offer in made],
        [str(offer.uuid) for offer in made if offer.buy_now_price is not None],
    )


def scene_make(
    *, browsers: int, traders: int, runners: int, teams: int = 10, seed: int = 20_261_126
) -> Scene:
    """The people of a run: `browsers` (pages and the API), `traders` (bids and purchases) in
    `teams` teams, and `runners` (jobs) in two teams with allocations on the test cluster, each
    team leasing one tenant account of its fixed pool."""
    from marketplace.models import Cluster, Offer, Partition, TenantLease
    from organizations.models import Organization
    from tests.factories import allocation_bought, cluster_on_testcluster

    rng = random.Random(seed)  # noqa: S311 (a market to measure, not a secret)
    scene = Scene()
    scene.offers, scene.buy_now_offers = _offers(rng, clusters=20, per_cluster=250)
    trading = [_team(f"Load team {index:02d}") for index in range(teams)]
    for index in range(browsers):
        scene.browsers.append(_person(trading[index % teams], f"browser-{index:02d}"))
    for index in range(traders):
        scene.traders.append(_person(trading[index % teams], f"trader-{index:02d}"))

    # The last two accounts of the fixed pool: the tests lease the first ones first.
    tenants = fixed_tenants()[-2:]
    cluster = cluster_on_testcluster(
        TEST_CLUSTER,
        pool="fixed",
        name=f"load-slurm-{uuid.uuid4().hex[:6]}",
        tenants=[(tenant.user, tenant.home) for tenant in tenants],
    )
    partition = cluster.partitions.get()
    scene.job_cluster = str(cluster.uuid)
    scene.tenants = [tenant.user for tenant in tenants]
    for team_index in range(len(tenants)):
        team = _team(f"Load job team {team_index}")
        allocation = allocation_bought(
            team, partition=partition, quantity=ALLOCATION_UNITS, price="0.10"
        )
        TenantLease.objects.get(cluster=cluster, organization=team)  # leased when bought
        for index in range(team_index, runners, len(tenants)):
            person = _person(team, f"runner-{index:02d}")
            person.allocation = str(allocation.uuid)
            scene.runners.append(person)
    # Statistics as autovacuum would have them on a market of that size: planned as empty
    # tables, the offers list sorted all 5,000 open offers on every page (26 ms in PostgreSQL
    # rather than 2, off the status-and-closing index).
    analyze(*{model._meta.db_table for model in (Offer, Partition, Cluster, Organization)})
    return scene
