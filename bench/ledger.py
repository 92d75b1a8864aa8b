"""How fast money moves, on PostgreSQL, measured side by side in one run.

    make bench        (or: .venv/bin/python bench/ledger.py [--seconds 1.5] [--rounds 9])

It migrates a scratch database (bench_support: BENCH_DATABASE, default `computeshare_bench`)
on the local PostgreSQL (DATABASE_URL's server), empties it, and prints:

1. hold_place + hold_capture pairs per second from real processes, each with its own database
   connection: 8 processes on 8 organizations (each paying its own owner) against one, in
   rounds with the CPU ceiling measured right beside each trial (bench_support.Scaling: the
   figure is the ratio over that ceiling, aim 0.9); then, one trial each, the same 8 paying
   one owner, and 8 on one organization (every process waits on the same wallet); and how
   many rows every charge locks (ADR 10: none, the platform's accounts are sharded);
2. reading the platform's fees from its cached shard rows against summing its entries, at the
   size the run leaves behind (the reason ADR 4 caches balances);
3. a signed Stripe webhook: a first delivery (verify, store, credit) against a duplicate
   (verify, count, nothing more).
"""

import argparse
import hashlib
import hmac
import itertools
import json
import os
import statistics
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(REPOSITORY), str(BENCH)]

from bench_support import (  # noqa: E402
    CEILING_AIM,
    Step,
    WaitEvents,
    load_average,
    parallel_ceiling,
    prepare_django,
    processes_rate,
    record_figure,
    scaling_measure,
)

WORKERS = 8


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.0f}/s"


def _pairs_step(payer_id: int, payee_id: int) -> Step:
    """In a bench process: its organizations loaded and one pair made (the warm-up), then a
    step that makes one more hold_place + hold_capture pair of `payer_id`'s wallet, charged to
    `payee_id`, each capture with a reference of its own."""
    from billing import services
    from billing.models import ReferenceKind
    from organizations.models import Organization

    payer = Organization.objects.get(pk=payer_id)
    payee = Organization.objects.get(pk=payee_id)
    tag = f"bench-{payer_id}-{payee_id}-{os.getpid()}"
    numbers = itertools.count()

    def step() -> int:
        hold = services.hold_place(
            organization=payer, amount=Decimal("2.5"), reference_kind=ReferenceKind.BID
        )
        services.hold_capture(
            hold=hold,
            amount=Decimal("1.234567"),
            payee=payee,
            idempotency_reference=f"{tag}-{next(numbers)}",
        )
        return 1

    step()
    return step


def _rows_every_charge_locks(payers: list[int]) -> int:
    """How many rows every charge paid by `payers` locked: the accounts its entries are on
    that are the same for all of them (each charge's hold is its own). A charge locks its hold
    and exactly the accounts it writes entries on."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH charges AS (
                SELECT id FROM billing_transaction
                WHERE kind = 'charge' AND organization_id = ANY(%s)
            )
            SELECT count(*) FROM (
                SELECT entry.account_id FROM billing_entry AS entry
                JOIN charges ON charges.id = entry.transaction_id
                GROUP BY entry.account_id
                HAVING count(DISTINCT entry.transaction_id) = (SELECT count(*) FROM charges)
            ) AS shared
            """,
            [payers],
        )
        (count,) = cursor.fetchone()
    return int(count)


def bench_holds(seconds: float, rounds: int) -> None:
    from billing import services
    from organizations.models import Organization

    def organization(name: str, funds: Decimal = Decimal(0)) -> int:
        created = Organization.objects.create(name=f"{name} {uuid.uuid4().hex[:6]}")
        services.wallet_open(created)
        if funds:
            services.wallet_credit(
                organization=created,
                amount=funds,
                idempotency_reference=f"bench-credit-{created.uuid}",
            )
        return created.pk

    funds = Decimal(10_000_000)
    owners = [organization(f"Owner {index}") for index in range(WORKERS)]
    serial_team = organization("Serial", funds)
    teams = [organization(f"Parallel {index}", funds) for index in range(WORKERS)]
    one_owner_teams = [organization(f"To one owner {index}", funds) for index in range(WORKERS)]
    shared_team = organization("Shared", funds)

    def spread(count: int, index: int) -> Step:
        if count == 1:
            return _pairs_step(serial_team, owners[0])
        return _pairs_step(teams[index], owners[index])

    scaling = scaling_measure(spread, WORKERS, rounds, seconds)
    machine_load = load_average()
    with WaitEvents() as waits:
        spread_rate = processes_rate(WORKERS, seconds, lambda index: spread(WORKERS, index))
    one_owner = processes_rate(
        WORKERS, seconds, lambda index: _pairs_step(one_owner_teams[index], owners[0])
    )
    shared = processes_rate(WORKERS, seconds, lambda index: _pairs_step(shared_team, owners[index]))
    ceiling = parallel_ceiling(WORKERS)
    shared_rows = _rows_every_charge_locks(teams)
    shared_one_owner = _rows_every_charge_locks(one_owner_teams)

    print(
        "1. hold_place + hold_capture pairs (each pair is two transactions), real processes "
        f"with a connection each, warmed up by one pair before the start line, {seconds:g} s "
        "a trial"
    )
    print(
        f"   {WORKERS} processes on {WORKERS} organizations / 1 process, {scaling.spread()} "
        "(the CPU ceiling, a Python loop, measured right after each trial for as long)"
    )
    print(
        f"   medians: 1 process {_rate(1, 1 / scaling.one_rate).strip()}, ratio "
        f"{scaling.ratio:.2f}x, CPU ceiling {scaling.ceiling:.2f}x, ratio / ceiling "
        f"{scaling.share:.2f}"
    )
    print(f"   {machine_load}")
    print("   then one trial each:")
    rows = [
        (f"{WORKERS} processes, {WORKERS} payers to {WORKERS} owners", spread_rate),
        (f"{WORKERS} processes, {WORKERS} payers to one owner", one_owner),
        (f"{WORKERS} processes, one organization", shared),
    ]
    for label, rate in rows:
        print(f"   {label:<38} {rate:8.0f}/s  ({rate / scaling.one_rate:.2f}x the 1 process)")
    print(
        f"   rows every charge locks: {shared_rows} ({WORKERS} payers to {WORKERS} owners), "
        f"{shared_one_owner} (to one owner: its earnings)"
    )
    print(f"   what the {WORKERS} processes' backends waited on (sampled): {waits.top()}")
    print(
        f"   the machine's database ceiling, {WORKERS} processes / 1 with nothing shared, each "
        f"INSERT + COMMIT into a table of its own: {ceiling:.2f}x; a pair is mostly Python's "
        "CPU (the backends wait on their processes), so the CPU ceiling is the one it meets"
    )
    record_figure(
        "money.processes",
        f"hold + capture pairs, {WORKERS} processes on {WORKERS} organizations / 1 process",
        scaling.value(),
        f">= {CEILING_AIM} of the CPU ceiling",
        scaling.is_met,
    )
    record_figure(
        "money.shared_rows", "rows every charge must lock", str(shared_rows), "0", shared_rows == 0
    )


def bench_balance_reads(repeat: int = 200) -> None:
    from django.db.models import Sum

    from billing.models import Account, Entry

    fees = Account.objects.filter(organization__isnull=True, kind=Account.Kind.FEES)
    entries = Entry.objects.filter(account__in=fees).count()

    def cached() -> Decimal:
        return fees.aggregate(total=Sum("balance"))["total"]

    def summed() -> Decimal:
        return Entry.objects.filter(account__in=fees).aggregate(total=Sum("amount"))["total"]

    assert cached() == summed()
    timings = {}
    for name, read in (("cached row", cached), ("sum of entries", summed)):
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            read()
            samples.append(time.perf_counter() - started)
        timings[name] = statistics.median(samples)
    shards = fees.count()
    print(
        f"2. reading the fees balance ({entries} entries on its {shards} shards), "
        f"median of {repeat}"
    )
    for name, seconds in timings.items():
        print(f"   {name:<34} {seconds * 1e6:8.0f} µs")
    ratio = timings["sum of entries"] / timings["cached row"]
    print(f"   sum / cached                      {ratio:7.1f}x")


def bench_webhook(deliveries: int = 200) -> None:
    from django.conf import settings
    from django.test import Client

    from billing.models import TopUp
    from computeshare.models import User
    from organizations.models import Organization

    organization = Organization.objects.create(name=f"Webhook {uuid.uuid4().hex[:6]}")
    user = User.objects.create(username=f"bench-{uuid.uuid4().hex[:6]}")
    client = Client()

    def signed(payload: bytes) -> str:
        stamp = int(time.time())
        digest = hmac.new(
            settings.STRIPE_WEBHOOK_SECRET.encode(), f"{stamp}.".encode() + payload, hashlib.sha256
        ).hexdigest()
        return f"t={stamp},v1={digest}"

    def event_for(top_up: TopUp) -> bytes:
        intent = {
            "id": top_up.payment_intent,
            "amount": top_up.amount_minor,
            "amount_received": top_up.amount_minor,
            "currency": top_up.currency.lower(),
            "metadata": {"top_up": str(top_up.uuid)},
        }
        return json.dumps(
            {
                "id": f"evt_{uuid.uuid4().hex}",
                "type": "payment_intent.succeeded",
                "data": {"object": intent},
            }
        ).encode()

    payloads = []
    for _ in range(deliveries):
        top_up = TopUp.objects.create(
            organization=organization,
            created_by=user,
            amount=Decimal("10.00"),
            currency=settings.PLATFORM_CURRENCY,
            payment_intent=f"pi_{uuid.uuid4().hex}",
        )
        payloads.append(event_for(top_up))

    def deliver_all() -> float:
        started = time.perf_counter()
        for payload in payloads:
            answer = client.post(
                "/api/v1/billing/stripe/webhook/",
                data=payload,
                content_type="application/json",
                HTTP_STRIPE_SIGNATURE=signed(payload),
            )
            assert answer.status_code == 200, answer.content
        return time.perf_counter() - started

    first = deliver_all()
    duplicate = deliver_all()
    print(f"3. signed webhook deliveries ({deliveries} each)")
    print(f"   first delivery (credit)            {first / deliveries * 1e3:8.2f} ms")
    print(f"   duplicate delivery (no-op)         {duplicate / deliveries * 1e3:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="of each trial")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of 1 and 8 processes")
    arguments = parser.parse_args()
    prepare_django()
    from billing.selectors import ledger_verify

    bench_holds(arguments.seconds, arguments.rounds)
    bench_balance_reads()
    bench_webhook()
    problems = ledger_verify()
    print(f"ledger_verify after the run: {problems or 'sound'}")


if __name__ == "__main__":
    main()
