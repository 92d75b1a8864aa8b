"""The demo's seed: the market, then jobs that really ran on the demo's `local` cluster and were
charged, once however often the seed runs."""

import pytest
from django.core.management import call_command

from billing.models import Transaction
from billing.selectors import ledger_verify
from scheduler_bridge.models import Job, JobState
from tests.conftest import local_cluster_root

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_demo_seeds_finished_jobs_once(settings, tmp_path_factory):
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    call_command("demo_seed", verbosity=0)

    call_command("demo_jobs", verbosity=0)
    call_command("demo_jobs", verbosity=0)

    jobs = list(Job.objects.order_by("name"))
    assert [(job.name, job.state, job.organization.name) for job in jobs] == [
        ("lr-sweep", JobState.COMPLETED, "Nimbus Research"),
        ("mesh-convergence", JobState.COMPLETED, "Nimbus Research"),
    ]
    for job in jobs:
        assert job.units > 0 and job.cost > 0 and job.efficiency > 0
        charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job.uuid)
        assert charges.count() == job.task_count
    assert ledger_verify() == []
