"""Part 1 of bench/marketplace.py: clearing one offer's auction with many bids."""

import cProfile
import io
import itertools
import math
import pstats
import random
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from bench_support import analyze, load_average, record_figure
from bench_trace import Trace, traced

SIZES = (1_000, 10_000, 100_000)
MAX_TEAMS = 2_000
# The cluster's pool of tenant accounts: a Slurm cluster serves at most this many teams at
# once, so a clearing without a pool would sell nothing (and measure only releases).
TENANT_ACCOUNTS = 500
RESERVE = Decimal("1.00")
TEAM_FUNDS = Decimal("10000000")


@dataclass
class Market:
    owner: Any
    cluster: Any
    partition: Any
    teams: list[Any]  # Organization, funded
    admins: dict[int, Any]  # organization id -> its admin Membership (for the real services)


def market_setup() -> Market:
    from billing import services as billing
    from billing.models import Account
    from billing.services.ledger import accounts_open
    from computeshare.models import User
    from marketplace.models import Cluster, Partition, TenantAccount
    from organizations.models import Membership, Organization

    owner = Organization.objects.create(name="Bench owner")
    billing.wallet_open(owner)
    cluster = Cluster.objects.create(
        organization=owner,
        name="bench-cluster",
        status=Cluster.Status.ONLINE,
        ssh_host="127.0.0.1",
        ssh_user="computeshare",
        account_mode=Cluster.AccountMode.FIXED,
        slurm_account="computeshare",
        slurm_cluster_name="bench",
    )
    partition = Partition.objects.create(
        cluster=cluster, name="batch", nodes=64, cpus=4_096, gpus=0
    )
    TenantAccount.objects.bulk_create(
        [
            TenantAccount(
                cluster=cluster, username=f"tenant{index:03d}", home=f"/home/t{index:03d}"
            )
            for index in range(TENANT_ACCOUNTS)
        ]
    )
    teams = Organization.objects.bulk_create(
        [Organization(name=f"Team {index:04d}") for index in range(MAX_TEAMS)]
    )
    accounts_open([(team.pk, kind) for team in teams for kind in Account.ORGANIZATION_KINDS])
    for team in teams:  # once per team, through the service: the ledger starts sound
        billing.wallet_adjust(organization=team, amount=TEAM_FUNDS, memo="Bench funds", actor=None)
    users = User.objects.bulk_create(
        [User(username=f"bench-admin-{index:04d}") for index in range(MAX_TEAMS)]
    )
    Membership.objects.bulk_create(
        [
            Membership(organization=team, user=user, role=Membership.Role.ADMIN)
            for team, user in zip(teams, users, strict=True)
        ]
    )
    admins = {
        membership.organization_id: membership
        for membership in Membership.objects.select_related("organization", "user")
    }
    # A clearing hands its notices and its losing bids' releases to tasks after its commit. A
    # process's first message imports the task and opens the broker connection (about a second
    # under load), which a running worker or server did long ago: sent once now (a batch that
    # does not exist, so a worker that takes it does nothing), not inside the first timed
    # clearing.
    from computeshare.queue import enqueue_after_commit

    enqueue_after_commit("notifications.tasks.notice_batch_record_task", 0, recovered_by="-")
    enqueue_after_commit("billing.tasks.hold_release_batch_apply_task", 0, recovered_by="-")
    return Market(owner=owner, cluster=cluster, partition=partition, teams=teams, admins=admins)


@dataclass(frozen=True)
class BidSpec:
    team_id: int
    price: Decimal
    quantity: int
    min_quantity: int


def _bid_specs(rng: random.Random, count: int, teams: list[Any]) -> list[BidSpec]:
    """`count` bids from `teams`: every team bids at least once and the rest of the bids go
    to teams with Zipf weights (1/rank: a few teams bid a lot, most a little). 1 to 10 units
    at 1.00 to 10.00 per unit (the reserve is 1.00); one bid in five is all-or-nothing."""
    ranked = [team.pk for team in teams]
    rng.shuffle(ranked)
    owners = ranked[:count] + rng.choices(
        ranked, weights=[1 / rank for rank in range(1, len(ranked) + 1)], k=count - len(ranked)
    )
    rng.shuffle(owners)
    specs = []
    for team_id in owners:
        quantity = rng.randint(1, 10)
        specs.append(
            BidSpec(
                team_id=team_id,
                price=Decimal(rng.randint(100, 1_000)) / 100,
                quantity=quantity,
                min_quantity=quantity if rng.random() < 0.2 else 1,
            )
        )
    return specs


def _distribution(specs: list[BidSpec]) -> str:
    per_team = sorted(Counter(spec.team_id for spec in specs).values(), reverse=True)
    top_tenth = sum(per_team[: max(1, len(per_team) // 10)])
    return (
        f"bids per team min {per_team[-1]}, median {statistics.median(per_team):g}, "
        f"p90 {per_team[len(per_team) // 10]}, max {per_team[0]}; "
        f"top 10% of teams place {top_tenth / len(specs):.0%}"
    )


def _offer(market: Market, bids: int) -> Any:
    from django.utils import timezone

    from marketplace.models import Offer

    closes = timezone.now() + timedelta(hours=1)
    return Offer.objects.create(
        cluster=market.cluster,
        partition=market.partition,
        resource="cpu",
        quantity=bids // 2,
        reserve_price=RESERVE,
        auction_closes_at=closes,
        window_start=closes,
        window_end=closes + timedelta(days=30),
    )


def _place_with_services(market: Market, offer: Any, specs: list[BidSpec]) -> None:
    from marketplace import services

    for spec in specs:
        services.bid_place(
            actor=market.admins[spec.team_id],
            offer=offer,
            quantity=spec.quantity,
            price=spec.price,
            min_quantity=spec.min_quantity,
        )


def _place_in_bulk(market: Market, offer: Any, specs: list[BidSpec]) -> None:
    """What `bid_place` writes for each bid (a hold, its hold transaction with two entries,
    the bid, the wallet balances, the offer's demand figures), in a few set-based statements.
    Entries are written in order with the running balance, as the services would leave it."""
    from django.db import connection, transaction
    from django.db.models import F
    from django.utils import timezone

    from billing.models import Account, Entry, Hold, ReferenceKind, Transaction
    from marketplace.models import Bid, Offer, OfferDemand

    batch = 5_000
    where = f"{market.cluster.name}/{market.partition.name}"
    with transaction.atomic():
        accounts = {
            (account.organization_id, account.kind): account
            for account in Account.objects.select_for_update()
            .filter(
                organization_id__in={spec.team_id for spec in specs},
                kind__in=[Account.Kind.AVAILABLE, Account.Kind.HELD],
            )
            .order_by("id")
        }
        bid_ids = [uuid.uuid4() for _ in specs]
        holds = Hold.objects.bulk_create(
            [
                Hold(
                    organization_id=spec.team_id,
                    amount=spec.price * spec.quantity,
                    placed=spec.price * spec.quantity,
                    reference_kind=ReferenceKind.BID,
                    reference=bid_id,
                    memo=f"Bid {spec.quantity} x {spec.price} on {where}",
                )
                for spec, bid_id in zip(specs, bid_ids, strict=True)
            ],
            batch_size=batch,
        )
        postings = Transaction.objects.bulk_create(
            [
                Transaction(
                    kind=Transaction.Kind.HOLD,
                    organization_id=hold.organization_id,
                    hold=hold,
                    reference_kind=ReferenceKind.BID,
                    reference=hold.reference,
                    memo=hold.memo,
                )
                for hold in holds
            ],
            batch_size=batch,
        )
        entries = []
        for posted, hold in zip(postings, holds, strict=True):
            available = accounts[(hold.organization_id, Account.Kind.AVAILABLE)]
            held = accounts[(hold.organization_id, Account.Kind.HELD)]
            for account, amount in ((available, -hold.amount), (held, hold.amount)):
                account.balance += amount
                entries.append(
                    Entry(
                        transaction=posted,
                        account=account,
                        kind=Entry.Kind.HOLD,
                        amount=amount,
                        balance_after=account.balance,
                    )
                )
        if any(account.balance < 0 for account in accounts.values()):
            raise AssertionError("a team's funds do not cover its bids")
        Entry.objects.bulk_create(entries, batch_size=batch)
        now = timezone.now()
        # One statement over two arrays: bulk_update's CASE costs seconds of Python here.
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE billing_account AS account SET balance = new.balance, updated_at = %s "
                "FROM unnest(%s::bigint[], %s::numeric[]) AS new(id, balance) "
                "WHERE account.id = new.id",
                [
                    now,
                    [account.pk for account in accounts.values()],
                    [account.balance for account in accounts.values()],
                ],
            )
        Bid.objects.bulk_create(
            [
                Bid(
                    uuid=bid_id,
                    offer=offer,
                    organization_id=spec.team_id,
                    price=spec.price,
                    quantity=spec.quantity,
                    min_quantity=spec.min_quantity,
                    hold=hold,
                )
                for spec, bid_id, hold in zip(specs, bid_ids, holds, strict=True)
            ],
            batch_size=batch,
        )
        demand: dict[int, list[int]] = {}
        for spec in specs:
            row = demand.setdefault(spec.team_id % OfferDemand.SHARDS, [0, 0])
            row[0] += 1
            row[1] += spec.quantity
        OfferDemand.objects.bulk_create(
            [
                OfferDemand(offer=offer, shard=shard, bid_count=bids, units_bid=units)
                for shard, (bids, units) in demand.items()
            ]
        )
        Offer.objects.filter(pk=offer.pk).update(
            bid_count=F("bid_count") + len(specs),
            units_bid=F("units_bid") + sum(spec.quantity for spec in specs),
            updated_at=now,
        )


class _RollBack(Exception):
    pass


def _clear(offer_id: int, *, commit: bool, trace: Trace | None = None) -> tuple[float, Any]:
    """One clearing, timed; rolled back afterwards unless `commit`, so that it can run again."""
    from django.db import transaction

    from marketplace.services import auction_clear

    outcome = None
    elapsed = 0.0

    def run() -> None:
        nonlocal outcome, elapsed
        started = time.perf_counter()
        if trace is None:
            outcome = auction_clear(offer_id=offer_id)
        else:
            trace.started = started
            with traced(trace):
                outcome = auction_clear(offer_id=offer_id)
            trace.ended = time.perf_counter()
        elapsed = time.perf_counter() - started

    if commit:
        run()
    else:
        try:
            with transaction.atomic():
                run()
                raise _RollBack
        except _RollBack:
            pass
    return elapsed, outcome


def _load_bids(offer: Any) -> float:
    from marketplace.models import Bid

    started = time.perf_counter()
    bids = list(
        Bid.objects.filter(offer=offer, status="open").order_by("-price", "created_at", "pk")
    )
    elapsed = time.perf_counter() - started
    assert bids
    return elapsed


def _checks(offer: Any, outcome: Any) -> list[str]:
    """What must hold after a clearing, beyond the ledger: every winner holds exactly
    `price x units won`, losers hold nothing, and each team's `held` balance is the sum of its
    open holds."""
    from django.db.models import F, Sum

    from billing.models import Account, Hold
    from billing.selectors import ledger_verify
    from marketplace.models import Allocation, Bid

    problems = ledger_verify()
    won = Bid.objects.filter(offer=offer, status__in=["won", "partially_won"])
    wrong = won.exclude(hold__amount=F("price_paid") * F("quantity_won")).count()
    if wrong:
        problems.append(f"{wrong} winning bids hold other than price x units won")
    if lost := Bid.objects.filter(offer=offer, status="lost").exclude(hold__amount=0).count():
        problems.append(f"{lost} losing bids still hold money")
    if Bid.objects.filter(offer=offer, status="open").exists():
        problems.append("open bids left after the clearing")
    allocations = Allocation.objects.filter(offer=offer)
    units = allocations.aggregate(units=Sum("quantity"))["units"] or 0
    if (allocations.count(), units) != (outcome.winners, outcome.units_sold):
        problems.append(f"allocations {allocations.count()} for {units} units")
    held = dict(
        Account.objects.filter(kind=Account.Kind.HELD, organization__isnull=False).values_list(
            "organization_id", "balance"
        )
    )
    open_holds = dict(
        Hold.objects.filter(status="open")
        .values_list("organization_id")
        .annotate(total=Sum("amount"))
    )
    mismatched = [pk for pk, balance in held.items() if balance != open_holds.get(pk, 0)]
    if mismatched:
        problems.append(f"{len(mismatched)} teams' held balance differs from their open holds")
    return problems


@dataclass
class ClearingRun:
    bids: int
    teams: int
    distribution: str
    placed: str
    winners: int
    partial: int  # of the winners
    units_sold: int
    supply: int
    price: Decimal | None
    load: float
    clear: float
    clears: list[float]
    phases: list[tuple[str, float, float, int]]
    statements: list[str]
    checks: list[str]
    load_average: str
    managed: float | None = None
    profile: str = ""
    notices: tuple[float, int] | None = None  # after the commit: seconds, notifications
    # After the commit: seconds from the commit until the losing bids' holds were released,
    # the holds, the release transactions, and the seconds the release itself took.
    releases: tuple[float, int, int, float] | None = None


def bench_clearing(market: Market, size: int, rng: random.Random, profile: bool) -> ClearingRun:
    from django.utils import timezone

    from marketplace.models import Bid, Cluster, Offer

    teams = market.teams[: min(size, MAX_TEAMS)]
    specs = _bid_specs(rng, size, teams)
    offer = _offer(market, size)
    started = time.perf_counter()
    if size <= 1_000:
        _place_with_services(market, offer, specs)
        how = "bid_place"
    else:
        _place_in_bulk(market, offer, specs)
        how = "bulk insert"
    placed_in = time.perf_counter() - started
    placed = f"{how}, {placed_in:.1f} s ({size / placed_in:,.0f} bids/s)"
    analyze(
        "marketplace_bid", "billing_hold", "billing_transaction", "billing_entry", "billing_account"
    )
    Offer.objects.filter(pk=offer.pk).update(
        auction_closes_at=timezone.now() - timedelta(seconds=1)
    )

    loads = [_load_bids(offer) for _ in range(3)]

    clears = []
    managed = None
    profile_text = ""
    if size <= 10_000:  # cheap enough to repeat: two rolled-back clearings first
        clears += [_clear(offer.pk, commit=False)[0] for _ in range(2)]
    if size == 10_000:
        # The same clearing on a `managed` cluster: the winners' Slurm accounts are planned in
        # the transaction (the sync task is queued on commit, never reached: rolled back).
        from django.db import transaction

        try:
            with transaction.atomic():
                Cluster.objects.filter(pk=market.cluster.pk).update(
                    account_mode=Cluster.AccountMode.MANAGED
                )
                managed = _clear(offer.pk, commit=False)[0]
                raise _RollBack
        except _RollBack:
            pass
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        _clear(offer.pk, commit=False)
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(12)
        profile_text = text.getvalue()
    trace = Trace()
    elapsed, outcome = _clear(offer.pk, commit=True, trace=trace)
    committed = time.perf_counter()
    clears.append(elapsed)
    # The losing bids' releases first, as the `money` worker takes them at once (the notices
    # go to the `io` worker); the checks below run once both are done.
    releases = _releases_apply(committed)
    machine_load = load_average()
    notices = _notices_record()
    assert outcome.cleared and outcome.bids == size, outcome
    statuses = Counter(Bid.objects.filter(offer=offer).values_list("status", flat=True))
    return ClearingRun(
        bids=size,
        teams=len(teams),
        distribution=_distribution(specs),
        placed=placed,
        winners=outcome.winners,
        partial=statuses["partially_won"],
        units_sold=outcome.units_sold,
        supply=offer.quantity,
        price=outcome.price,
        load=statistics.median(loads),
        clear=statistics.median(clears),
        clears=clears,
        phases=trace.phases(),
        statements=trace.statements_by_phase(),
        checks=_checks(offer, outcome),
        load_average=machine_load,
        managed=managed,
        profile=profile_text,
        notices=notices,
        releases=releases,
    )


def _releases_apply(committed: float) -> tuple[float, int, int, float] | None:
    """What the `money` worker does after the clearing's commit, outside the offer's lock:
    applies the hold release batches the clearing wrote (the losing bids' holds), through the
    task's own service, in this process at once. Returns the seconds from the commit until the
    last hold was released, the holds, the release transactions and the seconds the release
    itself took; None when the clearing released nothing later."""
    from billing.models import HoldReleaseBatch, Transaction
    from billing.services import hold_release_batch_apply

    transactions = Transaction.objects.count()
    started = time.perf_counter()
    released = sum(
        hold_release_batch_apply(batch_id=pk)
        for pk in HoldReleaseBatch.objects.values_list("pk", flat=True)
    )
    ended = time.perf_counter()
    if not released:
        return None
    lines = Transaction.objects.count() - transactions
    return ended - committed, released, lines, ended - started


def _notices_record() -> tuple[float, int] | None:
    """What the worker does after the clearing's commit, outside the offer's lock: records
    the auction's notices (one per organization), timed; None when the clearing left none."""
    from notifications.models import NoticeBatch
    from notifications.services import notice_batch_record

    started = time.perf_counter()
    written = sum(
        notice_batch_record(batch_id=pk) for pk in NoticeBatch.objects.values_list("pk", flat=True)
    )
    return (time.perf_counter() - started, written) if written else None


def print_clearing(runs: list[ClearingRun]) -> None:
    print("1. Clearing one offer's auction (supply N/2 units; bids of 1-10 units at 1.00-10.00,")
    print("   reserve 1.00, one in five all-or-nothing; load = median of 3, clear = median of")
    print("   the runs shown, the last one committed; the others rolled back)")
    for run in runs:
        print(f"   N={run.bids:,}: {run.teams:,} teams; {run.distribution}")
        print(f"      placed by {run.placed}")
        print(
            f"      {run.winners:,} winners ({run.partial} partially filled), {run.units_sold:,} "
            f"of {run.supply:,} units sold at {run.price}; clear runs "
            f"{', '.join(f'{s * 1e3:,.0f} ms' for s in run.clears)}"
        )
        verdict = "sound" if not run.checks else "; ".join(run.checks[:3])
        print(f"      ledger_verify and hold checks after the clearing: {verdict}")
        print(f"      {run.load_average} when it cleared")
        if run.releases is not None:
            after, holds, lines, took = run.releases
            print(
                f"      then, after the commit (a task on the money queue, the offer unlocked): "
                f"{holds:,} losing bids' holds released ({lines:,} release transactions) in "
                f"{took * 1e3:,.0f} ms, all applied {after * 1e3:,.0f} ms after the commit"
            )
        if run.notices is not None:
            print(
                f"      then, after the commit (a task, the offer unlocked): "
                f"{run.notices[1]:,} notifications in {run.notices[0] * 1e3:,.0f} ms"
            )
    print()
    header = "   {:>9} {:>6} {:>8} {:>10} {:>10} {:>9} {:>9} {:>11}"
    print(
        header.format(
            "bids", "teams", "winners", "load ms", "clear ms", "load µs/b", "clr µs/b", "clear/load"
        )
    )
    for run in runs:
        print(
            header.format(
                f"{run.bids:,}",
                f"{run.teams:,}",
                f"{run.winners:,}",
                f"{run.load * 1e3:,.1f}",
                f"{run.clear * 1e3:,.1f}",
                f"{run.load / run.bids * 1e6:,.1f}",
                f"{run.clear / run.bids * 1e6:,.1f}",
                f"{run.clear / run.load:,.2f}",
            )
        )
    for before, after in itertools.pairwise(runs):
        growth = after.bids / before.bids
        nlogn = growth * math.log(after.bids) / math.log(before.bids)
        print(
            f"   {before.bids:,} -> {after.bids:,} bids (x{growth:g}): load x"
            f"{after.load / before.load:.1f}, clear x{after.clear / before.clear:.1f} "
            f"(n log n would be x{nlogn:.1f})"
        )
    aim = all(run.clear / run.load <= 3 for run in runs)
    print(f"   aim clear/load <= 3 at every N: {'met' if aim else 'NOT met'}")
    for run in runs:
        ratio = run.clear / run.load
        record_figure(
            f"clearing.{run.bids}",
            f"clearing / loading the bids, {run.bids:,} bids",
            f"{ratio:.2f}" + ("" if not run.checks else " (checks failed)"),
            "<= 3",
            ratio <= 3 and not run.checks,
        )
    for run in runs:
        if run.releases is not None and run.bids == 1_000:
            after = run.releases[0]
            record_figure(
                f"clearing.releases.{run.bids}",
                f"losing bids' holds released after the clearing's commit, {run.bids:,} bids",
                f"{after:.2f} s",
                "<= 5 s",
                after <= 5,
            )
    for run in runs:
        if run.managed is not None:
            print(
                f"   the same {run.bids:,}-bid clearing on a managed cluster (Slurm accounts "
                f"planned per allocation): {run.managed * 1e3:,.0f} ms "
                f"(x{run.managed / run.clear:.1f})"
            )
    print()
    print("   where auction_clear's time goes, ms (the committed run)")
    names = list(dict.fromkeys(phase[0] for run in runs for phase in run.phases))
    print("   {:<46}".format("phase") + "".join(f"{run.bids:>12,}" for run in runs))
    for name in names:
        cells = []
        for run in runs:
            found = [phase[1] for phase in run.phases if phase[0] == name]
            cells.append(f"{found[0] * 1e3:>12,.1f}" if found else f"{'-':>12}")
        print(f"   {name[:46]:<46}" + "".join(cells))
    print(
        "   {:<46}".format("total (auction_clear)")
        + "".join(f"{run.clears[-1] * 1e3:>12,.1f}" for run in runs)
    )
    largest = runs[-1]
    for run in runs:
        print(f"   at N={run.bids:,}, the SQL of each phase (statements x kind, time):")
        for line in run.statements:
            print(f"     {line}")
    if largest.profile:
        print(f"   cProfile of a rolled-back clearing at N={largest.bids:,} (by own time):")
        lines = largest.profile.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("ncalls"))
        for line in lines[start : start + 13]:
            print(f"     {line.rstrip()[:150]}")
