"""Part 3 of bench/marketplace.py: the closing rush, many teams bidding on one auction in its
last minute. `bid_place` from one process against 4 processes at once (real processes, each
with its own database connection, all on the same offer), and afterwards the checks that
nothing was lost or wrong: every bid's hold is exactly `price x quantity`, every team's `held`
balance is the sum of its open holds, the offer's demand figures count every open bid, and
the ledger verifies.

Where the serial path's time goes is printed too: the SQL statements of one `bid_place`, with
the time spent in the database (and waiting on it) against the time in Python."""

import itertools
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from bench_support import (
    CEILING_AIM,
    Scaling,
    Step,
    WaitEvents,
    load_average,
    parallel_ceiling,
    processes_rate,
    record_figure,
    scaling_measure,
)
from bench_trace import _statement_kind

PROCESSES = 4
TEAMS = 40
FUNDS = Decimal("1000000")


@dataclass
class Rush:
    scaling: Scaling
    statements: list[tuple[str, float]]
    bid_seconds: float
    problems: list[str]
    load_average: str
    ceiling: float = 0.0
    waits: str = ""


def _rush_setup() -> tuple[Any, list[int]]:
    """A Slurm cluster with enough tenant accounts, an offer whose auction closes in a few
    minutes, and `TEAMS` funded teams with an admin each (their membership ids)."""
    from django.utils import timezone

    from billing import services as billing
    from computeshare.models import User
    from marketplace.models import Cluster, Offer, Partition, TenantAccount
    from organizations.models import Membership, Organization

    owner = Organization.objects.create(name="Rush owner")
    billing.wallet_open(owner)
    cluster = Cluster.objects.create(
        organization=owner,
        name="rush-cluster",
        status=Cluster.Status.ONLINE,
        ssh_host="127.0.0.1",
        ssh_user="computeshare",
        account_mode=Cluster.AccountMode.FIXED,
        slurm_account="computeshare",
        slurm_cluster_name="rush",
    )
    partition = Partition.objects.create(cluster=cluster, name="batch", nodes=8, cpus=512, gpus=0)
    TenantAccount.objects.bulk_create(
        [
            TenantAccount(cluster=cluster, username=f"rush{index:03d}", home=f"/home/r{index:03d}")
            for index in range(TEAMS)
        ]
    )
    closes = timezone.now() + timedelta(minutes=10)
    offer = Offer.objects.create(
        cluster=cluster,
        partition=partition,
        resource="cpu",
        quantity=1_000,
        reserve_price=Decimal("1.00"),
        auction_closes_at=closes,
        window_start=closes,
        window_end=closes + timedelta(days=7),
    )
    members = []
    for index in range(TEAMS):
        team = Organization.objects.create(name=f"Rush team {index:02d}")
        billing.wallet_open(team)
        billing.wallet_adjust(organization=team, amount=FUNDS, memo="Bench funds", actor=None)
        user = User.objects.create(username=f"rush-admin-{index:02d}")
        members.append(
            Membership.objects.create(organization=team, user=user, role=Membership.Role.ADMIN).pk
        )
    return offer, members


def _bids_step(offer_id: int, member_ids: list[int], seed: int) -> Step:
    """In a bench process: the offer and the teams' admins loaded and one bid placed (the
    warm-up), then a step that places one more bid on the offer, by the given teams' admins in
    turn."""
    from marketplace import services
    from marketplace.models import Offer
    from organizations.models import Membership

    rng = random.Random(seed)  # noqa: S311 - bench data, not a secret
    offer = Offer.objects.get(pk=offer_id)
    members = itertools.cycle(
        Membership.objects.select_related("organization", "user").filter(pk__in=member_ids)
    )

    def step() -> int:
        services.bid_place(
            actor=next(members),
            offer=offer,
            quantity=rng.randint(1, 10),
            price=Decimal(rng.randint(100, 1_000)) / 100,
        )
        return 1

    step()
    return step


def _one_bid_traced(offer_id: int, member_id: int) -> tuple[list[tuple[str, float]], float]:
    """One `bid_place`, every SQL statement timed (the commit included)."""
    from django.db import connection

    from marketplace import services
    from marketplace.models import Offer
    from organizations.models import Membership

    offer = Offer.objects.get(pk=offer_id)
    member = Membership.objects.select_related("organization", "user").get(pk=member_id)
    statements: list[tuple[str, float]] = []

    def timed(execute: Any, sql: str, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, *args)
        finally:
            statements.append((_statement_kind(sql), time.perf_counter() - started))

    with connection.execute_wrapper(timed):
        started = time.perf_counter()
        services.bid_place(actor=member, offer=offer, quantity=3, price=Decimal("2.50"))
        total = time.perf_counter() - started
    return statements, total


def _checks(offer_id: int) -> list[str]:
    from django.db.models import Count, F, Sum

    from billing.models import Account, Hold
    from billing.selectors import ledger_verify
    from marketplace.models import Bid, Offer

    problems = ledger_verify()
    bids = Bid.objects.filter(offer_id=offer_id, status=Bid.Status.OPEN)
    wrong = bids.exclude(hold__amount=F("price") * F("quantity")).count()
    wrong += bids.exclude(hold__placed=F("price") * F("quantity")).count()
    if wrong:
        problems.append(f"{wrong} bids hold other than price x quantity")
    demand = bids.aggregate(count=Count("pk"), units=Sum("quantity"))
    offer = Offer.objects.get(pk=offer_id)
    if (offer.bid_count, offer.units_bid) != (demand["count"], demand["units"]):
        problems.append(
            f"the offer shows {offer.bid_count} bids for {offer.units_bid} units, "
            f"there are {demand['count']} for {demand['units']}"
        )
    held = dict(
        Account.objects.filter(kind=Account.Kind.HELD, organization__isnull=False).values_list(
            "organization_id", "balance"
        )
    )
    open_holds = dict(
        Hold.objects.filter(status=Hold.Status.OPEN)
        .values_list("organization_id")
        .annotate(total=Sum("amount"))
    )
    if mismatched := [pk for pk, balance in held.items() if balance != open_holds.get(pk, 0)]:
        problems.append(f"{len(mismatched)} teams' held balance differs from their open holds")
    return problems


def bench_rush(seconds: float, rounds: int) -> Rush:
    offer, members = _rush_setup()
    _bids_step(offer.pk, members, seed=0)  # warm: the first bids of a fresh table
    statements, bid_seconds = _one_bid_traced(offer.pk, members[0])

    def rush(count: int, index: int) -> Step:
        # Each process bids for its own teams, as in a real rush (a team's own bids wait on
        # its wallet, rightly); all on the one offer.
        return _bids_step(offer.pk, members[index::count], seed=1 + count * 10 + index)

    scaling = scaling_measure(rush, PROCESSES, rounds, seconds)
    machine_load = load_average()
    with WaitEvents() as waits:
        processes_rate(PROCESSES, seconds, lambda index: rush(PROCESSES, index))
    ceiling = parallel_ceiling(PROCESSES)
    return Rush(
        scaling=scaling,
        statements=statements,
        bid_seconds=bid_seconds,
        problems=_checks(offer.pk),
        load_average=machine_load,
        ceiling=ceiling,
        waits=waits.top(),
    )


def print_rush(rush: Rush) -> None:
    scaling = rush.scaling
    print(
        f"3. The closing rush: bid_place on one offer by {TEAMS} teams, 1 process against "
        f"{PROCESSES}, each with a connection and warmed up by one bid before the start line"
    )
    print(
        f"   {PROCESSES} processes / 1, {scaling.spread()} (the CPU ceiling, a Python loop, "
        "measured right after each trial for as long)"
    )
    print(
        f"   medians: 1 process {scaling.one_rate:.0f} bids/s, ratio {scaling.ratio:.2f}x, "
        f"CPU ceiling {scaling.ceiling:.2f}x, ratio / ceiling {scaling.share:.2f}"
    )
    verdict = "sound" if not rush.problems else "; ".join(rush.problems[:3])
    print(f"   holds, held balances, demand figures and ledger_verify afterwards: {verdict}")
    print(f"   {rush.load_average}")
    print(f"   what the {PROCESSES} processes' backends waited on (sampled): {rush.waits}")
    print(
        f"   the machine's database ceiling, {PROCESSES} processes / 1 with nothing shared, "
        f"each INSERT + COMMIT into a table of its own: {rush.ceiling:.2f}x"
    )
    in_sql = sum(seconds for _, seconds in rush.statements)
    print(
        f"   one bid_place: {rush.bid_seconds * 1e3:.1f} ms, {len(rush.statements)} statements "
        f"taking {in_sql * 1e3:.1f} ms, Python {(rush.bid_seconds - in_sql) * 1e3:.1f} ms:"
    )
    for kind, seconds in rush.statements:
        print(f"     {seconds * 1e3:6.2f} ms  {kind}")
    record_figure(
        "bids.rush",
        f"bid_place closing rush, {PROCESSES} processes / 1",
        scaling.value() + ("" if not rush.problems else " (checks failed)"),
        f">= {CEILING_AIM} of the CPU ceiling",
        scaling.is_met and not rush.problems,
    )
