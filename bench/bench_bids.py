"""Part 3 of bench/marketplace.py: the closing rush, many teams bidding on one auction in its
last minute. `bid_place` from one process against 4 processes at once (real processes, each
with its own database connection, all on the same offer), and afterwards the checks that
nothing was lost or wrong: every bid's hold is exactly `price x quantity`, every team's `held`
balance is the sum of its open holds, the offer's demand figures count every open bid, and
the ledger verifies.

Where the serial path's time goes is printed too: the SQL statements of one `bid_place`, with
the time spent in the database (and waiting on it) against the time in Python."""

import multiprocessing
import random
import time
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from bench_support import (
    WaitEvents,
    cpu_ceiling,
    load_average,
    parallel_ceiling,
    record_figure,
)
from bench_trace import _statement_kind

PROCESSES = 4
TEAMS = 40
FUNDS = Decimal("1000000")


@dataclass
class Rush:
    serial_bids: int
    serial_seconds: float
    rush_bids: int
    rush_seconds: float
    statements: list[tuple[str, float]]
    bid_seconds: float
    problems: list[str]
    load_average: str
    ceiling: float = 0.0
    cpu_ceiling: float = 0.0
    waits: str = ""

    @property
    def ratio(self) -> float:
        return (self.rush_bids / self.rush_seconds) / (self.serial_bids / self.serial_seconds)


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


def _place(offer_id: int, member_ids: list[int], count: int, seed: int) -> None:
    """`count` bids on the offer, by the given teams' admins in turn."""
    from marketplace import services
    from marketplace.models import Offer
    from organizations.models import Membership

    rng = random.Random(seed)  # noqa: S311 - bench data, not a secret
    offer = Offer.objects.get(pk=offer_id)
    members = list(
        Membership.objects.select_related("organization", "user").filter(pk__in=member_ids)
    )
    for index in range(count):
        services.bid_place(
            actor=members[index % len(members)],
            offer=offer,
            quantity=rng.randint(1, 10),
            price=Decimal(rng.randint(100, 1_000)) / 100,
        )


def _worker(
    barrier: Any, errors: Any, offer_id: int, members: list[int], count: int, seed: int
) -> None:
    from django.db import connection

    try:
        connection.ensure_connection()
        barrier.wait()
        _place(offer_id, members, count, seed)
    except BaseException as error:  # reported by the parent
        errors.put(repr(error))
        raise
    finally:
        connection.close()


def _timed_processes(offer_id: int, jobs: list[tuple[list[int], int, int]]) -> float:
    from django.db import connections

    connections.close_all()  # each forked child opens its own connection
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(len(jobs) + 1)
    errors = context.Queue()
    processes = [
        context.Process(target=_worker, args=(barrier, errors, offer_id, *job)) for job in jobs
    ]
    for process in processes:
        process.start()
    barrier.wait()
    started = time.perf_counter()
    for process in processes:
        process.join()
    elapsed = time.perf_counter() - started
    if not errors.empty() or any(process.exitcode for process in processes):
        raise RuntimeError(f"a bidding process failed: {errors.get(timeout=1)}")
    return elapsed


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


def bench_rush(bids: int) -> Rush:
    offer, members = _rush_setup()
    _place(offer.pk, members, 20, seed=0)  # warm: the first bids of a fresh table
    statements, bid_seconds = _one_bid_traced(offer.pk, members[0])
    serial = _timed_processes(offer.pk, [(members, bids, 1)])
    # Each process bids for its own teams, as in a real rush (a team's own bids wait on its
    # wallet, rightly); all on the one offer.
    per_process = bids // PROCESSES
    with WaitEvents() as waits:
        rush = _timed_processes(
            offer.pk,
            [(members[index::PROCESSES], per_process, 2 + index) for index in range(PROCESSES)],
        )
    machine_load = load_average()
    ceiling = parallel_ceiling(PROCESSES)
    cpu = cpu_ceiling(PROCESSES)
    return Rush(
        serial_bids=bids,
        serial_seconds=serial,
        rush_bids=per_process * PROCESSES,
        rush_seconds=rush,
        statements=statements,
        bid_seconds=bid_seconds,
        problems=_checks(offer.pk),
        load_average=machine_load,
        ceiling=ceiling,
        cpu_ceiling=cpu,
        waits=waits.top(),
    )


def print_rush(rush: Rush) -> None:
    print(f"3. The closing rush: bid_place on one offer by {TEAMS} teams")
    print(
        f"   1 process:   {rush.serial_bids:5d} bids in {rush.serial_seconds:6.2f} s  "
        f"{rush.serial_bids / rush.serial_seconds:7.0f} bids/s"
    )
    print(
        f"   {PROCESSES} processes: {rush.rush_bids:5d} bids in {rush.rush_seconds:6.2f} s  "
        f"{rush.rush_bids / rush.rush_seconds:7.0f} bids/s  ({rush.ratio:.2f}x)"
    )
    verdict = "sound" if not rush.problems else "; ".join(rush.problems[:3])
    print(f"   holds, held balances, demand figures and ledger_verify afterwards: {verdict}")
    print(f"   {rush.load_average}")
    print(f"   what the {PROCESSES} processes' backends waited on (sampled): {rush.waits}")
    print(
        f"   the machine's ceilings now, {PROCESSES} processes / 1 with nothing shared: each "
        f"INSERT + COMMIT into a table of its own {rush.ceiling:.2f}x, each a Python loop "
        f"(CPU only) {rush.cpu_ceiling:.2f}x"
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
        f"bid_place closing rush, {PROCESSES} processes / serial",
        f"{rush.ratio:.2f} (CPU ceiling {rush.cpu_ceiling:.2f})"
        + ("" if not rush.problems else " (checks failed)"),
        ">= 4",
        rush.ratio >= 4 and not rush.problems,
    )
