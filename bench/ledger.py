"""How fast money moves, on PostgreSQL, measured side by side in one run.

    make bench        (or: .venv/bin/python bench/ledger.py [--operations 400])

It migrates a scratch database `computeshare_bench` on the local PostgreSQL (DATABASE_URL's
server), empties it, and prints:

1. hold_place + hold_capture pairs per second, serially and from 8 threads, once with 8
   organizations (contention only on the platform's fees account) and once with one
   organization (every thread waits on the same wallet);
2. reading a balance from the cached account row against summing the account's entries, at
   the size the run leaves behind (the reason ADR 4 caches balances);
3. a signed Stripe webhook: a first delivery (verify, store, credit) against a duplicate
   (verify, count, nothing more).
"""

import argparse
import hashlib
import hmac
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))


def _bench_database_url() -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/computeshare")
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path="/computeshare_bench"))


def _prepare_django() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "computeshare.settings.test"
    os.environ["DATABASE_URL"] = _bench_database_url()
    import psycopg2

    parts = urlsplit(os.environ["DATABASE_URL"])
    admin = psycopg2.connect(
        host=parts.hostname, port=parts.port or 5432, user=parts.username, dbname="postgres"
    )
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = 'computeshare_bench'")
        if cursor.fetchone() is None:
            cursor.execute("CREATE DATABASE computeshare_bench")
    admin.close()

    import django

    django.setup()
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    setup_test_environment()  # lets the test client talk to the webhook view

    call_command("migrate", verbosity=0)
    # TRUNCATE, which the entries' append-only trigger allows; the platform's accounts are
    # opened again by the first service that needs them.
    call_command("flush", interactive=False, verbosity=0)


def _rate(count: int, seconds: float) -> str:
    return f"{count / seconds:8.0f}/s"


def _timed_threads(workers: int, work: Callable[[int], None]) -> float:
    from django.db import connection

    barrier = threading.Barrier(workers + 1)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            work(index)
        except BaseException as error:  # reported below, the bench must not hide it
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


def bench_holds(operations: int) -> None:
    from billing import services
    from billing.models import ReferenceKind
    from marketplace.models import Organization

    owner = Organization.objects.create(name=f"Owner {uuid.uuid4().hex[:6]}")
    services.wallet_open(owner)

    def team(name: str) -> Organization:
        organization = Organization.objects.create(name=f"{name} {uuid.uuid4().hex[:6]}")
        services.wallet_open(organization)
        services.wallet_credit(
            organization=organization,
            amount=Decimal("1000000"),
            idempotency_reference=f"bench-credit-{organization.uuid}",
        )
        return organization

    def pairs(organization: Organization, count: int, tag: str) -> None:
        for index in range(count):
            hold = services.hold_place(
                organization=organization, amount=Decimal("2.5"), reference_kind=ReferenceKind.BID
            )
            services.hold_capture(
                hold=hold,
                amount=Decimal("1.234567"),
                payee=owner,
                idempotency_reference=f"bench-{tag}-{index}",
            )

    serial_team = team("Serial")
    started = time.perf_counter()
    pairs(serial_team, operations, "serial")
    serial = time.perf_counter() - started

    workers = 8
    per_worker = max(1, operations // workers)
    teams = [team(f"Parallel {i}") for i in range(workers)]
    spread = _timed_threads(workers, lambda i: pairs(teams[i], per_worker, f"spread-{i}"))
    shared_team = team("Shared")
    shared = _timed_threads(workers, lambda i: pairs(shared_team, per_worker, f"shared-{i}"))

    done = per_worker * workers
    print("1. hold_place + hold_capture pairs (each pair is two transactions)")
    print(
        f"   serial, one organization           {operations:6d} pairs  {_rate(operations, serial)}"
    )
    print(f"   8 threads, 8 organizations         {done:6d} pairs  {_rate(done, spread)}")
    print(f"   8 threads, one organization        {done:6d} pairs  {_rate(done, shared)}")
    print(f"   8 organizations vs serial          {serial / operations * done / spread:6.2f}x")


def bench_balance_reads(repeat: int = 200) -> None:
    from django.db.models import Sum

    from billing.models import Account, Entry

    fees = Account.objects.get(organization__isnull=True, kind=Account.Kind.FEES)
    entries = Entry.objects.filter(account=fees).count()

    def cached() -> Decimal:
        return Account.objects.values_list("balance", flat=True).get(pk=fees.pk)

    def summed() -> Decimal:
        return Entry.objects.filter(account=fees).aggregate(total=Sum("amount"))["total"]

    assert cached() == summed()
    timings = {}
    for name, read in (("cached row", cached), ("sum of entries", summed)):
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            read()
            samples.append(time.perf_counter() - started)
        timings[name] = statistics.median(samples)
    print(f"2. reading the fees balance ({entries} entries on the account), median of {repeat}")
    for name, seconds in timings.items():
        print(f"   {name:<34} {seconds * 1e6:8.0f} µs")
    ratio = timings["sum of entries"] / timings["cached row"]
    print(f"   sum / cached                      {ratio:7.1f}x")


def bench_webhook(deliveries: int = 200) -> None:
    from django.conf import settings
    from django.test import Client

    from billing.models import TopUp
    from computeshare.models import User
    from marketplace.models import Organization

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
    parser.add_argument("--operations", type=int, default=400)
    arguments = parser.parse_args()
    _prepare_django()
    from billing.selectors import ledger_verify

    bench_holds(arguments.operations)
    bench_balance_reads()
    bench_webhook()
    problems = ledger_verify()
    print(f"ledger_verify after the run: {problems or 'sound'}")


if __name__ == "__main__":
    main()
