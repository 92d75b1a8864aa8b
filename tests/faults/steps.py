"""Steps of the PostgreSQL fault tests that run Django on the private PostgreSQL cluster, each
in a process of its own (the test process's Django is bound to the suite's database):

    python -m tests.faults.steps settlement-setup
    python -m tests.faults.steps settlement-outcome '{"job": 1}'
    python -m tests.faults.steps auction-setup
    python -m tests.faults.steps auction-outcome '{"offer": 1}'

The environment names the database (DATABASE_URL) and the broker; each step prints one line
of JSON."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# The worked example of docs/design.md: A, B and C win 40, 30 and 30 units at 1.80; D wins nothing.
WORKED_EXAMPLE = [("A", 40, "2.50"), ("B", 30, "2.00"), ("C", 50, "1.80"), ("D", 20, "1.20")]


def settlement_setup(_: dict[str, Any]) -> dict[str, Any]:
    """A cluster row of the Slurm test cluster whose only tenant is the fixed pool's last one
    (the suite's own tests lease the first ones), an allocation on it, and one accepted job;
    its submission task goes to the broker after the commit."""
    from billing.models import Entry
    from scheduler_bridge import services
    from scheduler_bridge.models import Job
    from tests.factories import (
        MembershipFactory,
        allocation_bought,
        cluster_on_testcluster,
        funded_organization,
    )
    from tests.testcluster import testcluster_read

    testcluster = testcluster_read()
    last = testcluster.tenant_pool("fixed").tenants[-1]
    cluster = cluster_on_testcluster(testcluster, pool="fixed", tenants=[(last.user, last.home)])
    team = funded_organization("0", name="Settlement Team")
    member = MembershipFactory(organization=team, role="member")
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=40, price="3.00"
    )
    request = services.JobRequest(
        name="settled across a restart", script="#!/bin/bash\nsleep 2\n", time_limit_minutes=1
    )
    job = services.job_submit(actor=member, allocation=allocation, request=request)
    return {
        "job": job.pk,
        "cluster": cluster.pk,
        "scheduler_name": Job.objects.get(pk=job.pk).scheduler_name,
        "job_table": Job._meta.db_table,
        "entry_table": Entry._meta.db_table,
    }


def settlement_outcome(arguments: dict[str, Any]) -> dict[str, Any]:
    from billing.models import Hold, Transaction
    from billing.selectors import ledger_verify
    from marketplace.models import Allocation
    from scheduler_bridge.models import Job, JobRun, JobTask

    job = Job.objects.get(pk=arguments["job"])
    allocation = Allocation.objects.get(pk=job.allocation_id)
    hold = Hold.objects.get(pk=allocation.hold_id)
    runs = list(JobRun.objects.filter(task__job=job))
    return {
        "state": job.state,
        "cost": str(job.cost),
        "units": str(job.units),
        "runs": len(runs),
        "run_costs": [str(run.cost) for run in runs],
        "charges": Transaction.objects.filter(kind="charge", reference=job.uuid).count(),
        "tasks_released": list(
            JobTask.objects.filter(job=job).values_list("is_released", flat=True)
        ),
        "allocation_used": str(allocation.used),
        "allocation_reserved": str(allocation.reserved),
        "hold_captured": str(hold.captured),
        "ledger_problems": [str(problem) for problem in ledger_verify()],
    }


def auction_setup(_: dict[str, Any]) -> dict[str, Any]:
    """The worked example's offer and bids, its auction closed a moment ago."""
    from billing.models import Entry
    from marketplace.models import Bid
    from tests.marketplace.test_clearing import close_auction, listed_offer, place_bids

    _, offer = listed_offer(quantity=100, reserve="1.00")
    bids = place_bids(offer, WORKED_EXAMPLE)
    close_auction(offer)
    return {
        "offer": offer.pk,
        "bids": {name: bid.pk for name, bid in bids.items()},
        "bid_table": Bid._meta.db_table,
        "entry_table": Entry._meta.db_table,
    }


def auction_outcome(arguments: dict[str, Any]) -> dict[str, Any]:
    from billing.models import Hold, Transaction
    from billing.selectors import ledger_verify
    from marketplace.models import Allocation, Bid, Offer

    offer = Offer.objects.get(pk=arguments["offer"])
    bids = {
        bid.organization.name: bid
        for bid in Bid.objects.filter(offer=offer).select_related("organization", "hold")
    }
    holds = {name: Hold.objects.get(pk=bid.hold_id) for name, bid in bids.items()}
    return {
        "status": offer.status,
        "clearing_price": str(offer.clearing_price),
        "units_sold": offer.units_sold,
        "bids": {name: [bid.status, bid.quantity_won] for name, bid in sorted(bids.items())},
        "allocations": sorted(
            Allocation.objects.filter(offer=offer).values_list("organization__name", "quantity")
        ),
        "holds": {
            name: [str(hold.amount), str(hold.released), str(hold.placed), hold.status]
            for name, hold in sorted(holds.items())
        },
        "releases": Transaction.objects.filter(kind="release", reference=offer.uuid).count(),
        "ledger_problems": [str(problem) for problem in ledger_verify()],
    }


def _factory_sequences_apart() -> None:
    """Each step is a new process whose factories would count from 0 again, and make a second
    "Lab 0" in the same database: each process counts from a number of its own."""
    import factory

    from tests import factories

    for value in vars(factories).values():
        if isinstance(value, type) and issubclass(value, factory.django.DjangoModelFactory):
            value.reset_sequence(os.getpid() * 1000)


STEPS = {
    "settlement-setup": settlement_setup,
    "settlement-outcome": settlement_outcome,
    "auction-setup": auction_setup,
    "auction-outcome": auction_outcome,
}


def main(arguments: list[str]) -> None:
    if not arguments or arguments[0] not in STEPS:
        raise SystemExit(f"usage: python -m tests.faults.steps {{{','.join(STEPS)}}} [JSON]")
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "computeshare.settings.test")
    django.setup()
    _factory_sequences_apart()
    given = json.loads(arguments[1]) if len(arguments) > 1 else {}
    print(json.dumps(STEPS[arguments[0]](given), default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
