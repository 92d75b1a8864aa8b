"""The demo's seed: the market, then jobs that really ran on the demo's `local` cluster and were
charged, once however often the seed runs; and the past weeks' jobs, charged on their days, so
that the dashboards' money per day has a history (issue 30)."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from billing import selectors as billing_selectors
from billing.models import Transaction
from billing.selectors import ledger_verify
from organizations.models import Organization
from scheduler_bridge.management.commands.demo_jobs import past_jobs
from scheduler_bridge.models import Job, JobState
from tests.conftest import local_cluster_root

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_demo_seeds_finished_jobs_once(settings, tmp_path_factory):
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    call_command("demo_seed", verbosity=0)

    call_command("demo_jobs", verbosity=0)
    call_command("demo_jobs", verbosity=0)

    jobs = list(Job.objects.filter(name__in=["lr-sweep", "mesh-convergence"]).order_by("name"))
    assert [(job.name, job.state, job.organization.name) for job in jobs] == [
        ("lr-sweep", JobState.COMPLETED, "Nimbus Research"),
        ("mesh-convergence", JobState.COMPLETED, "Nimbus Research"),
    ]
    for job in jobs:
        assert job.units > 0 and job.cost > 0 and job.efficiency > 0
        charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE, reference=job.uuid)
        assert charges.count() == job.task_count
    assert ledger_verify() == []


def test_the_past_weeks_jobs_are_charged_on_their_days_once(settings, tmp_path_factory):
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    now = timezone.now()
    call_command("demo_seed", verbosity=0)

    call_command("demo_jobs", verbosity=0)
    call_command("demo_jobs", verbosity=0)

    expected = past_jobs(now)
    past = list(Job.objects.filter(name__startswith="calibration-").order_by("created_at"))
    assert [job.name for job in past] == [item.name for item in expected]
    assert len(past) >= 12  # three weeks of working days
    for job, item in zip(past, expected, strict=True):
        assert job.state == JobState.COMPLETED
        assert job.created_at == item.submitted_at
        assert job.ended_at == item.submitted_at + timedelta(seconds=20, minutes=item.minutes)
        assert job.allocation.window_start < job.created_at < job.ended_at < now
        assert job.cost > 0
    nimbus = Organization.objects.get(name="Nimbus Research")
    aurora = Organization.objects.get(name="Aurora HPC Lab")
    since = now - timedelta(days=30)
    spent = billing_selectors.spending_by_day(nimbus, since=since)
    past_days = {item.submitted_at.date() for item in expected}
    assert past_days <= set(spent)
    earned = billing_selectors.earnings_by_day(aurora, since=since)
    assert past_days <= {day for source in earned for day in source.by_day}
    assert ledger_verify() == []
