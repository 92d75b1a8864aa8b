"""Right-sizing advice, templates and copies of past jobs in headless Chromium, at desktop width
and at 390 px: a member reads the advice on an ended job's page, resubmits a copy with the
suggested sizes, starts a sweep from a template, is offered the sizes its run suggests the next
time, and reads the team's efficiency report; no sideways panning, no console error.

The jobs' cluster cannot be reached, so nothing reaches a scheduler: the test settles runs
through the settlement service as the poll would hand them over from sacct (the real
cluster's figures are checked in tests/scheduler_bridge/test_sizing_integration.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from hpc.types import RunRecord
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobState, JobTask
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.web.test_browser_notifications import WIDTHS, log_in, no_sideways_panning

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def settle(job: Job, *, cpus: int, elapsed: int, cpu_seconds: float) -> None:
    """Ends every task of the job with one run, as the poll does once sacct has it."""
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id="41")
    # Ended now, so that the report of this month counts it.
    end = timezone.now()
    for task in JobTask.objects.filter(job=job).order_by("array_task_id"):
        index = task.array_task_id
        record = RunRecord(
            job_id="41" if index is None else f"41_{index}",
            raw_job_id="41" if index is None else str(100 + index),
            array_job_id="41",
            array_task_id=index,
            name=job.scheduler_name,
            state="completed",
            scheduler_state="COMPLETED",
            exit_code=0,
            submit_time=end - timedelta(seconds=elapsed + 5),
            start_time=end - timedelta(seconds=elapsed),
            end_time=end,
            elapsed_seconds=elapsed,
            allocated_cpus=cpus,
            allocated_gpus=0,
            cpu_seconds=cpu_seconds,
            time_limit_minutes=job.time_limit_minutes,
        )
        services.job_task_settle(task_id=task.pk, runs=[record], final=record)
    services.job_state_refresh(job_id=job.pk)


@pytest.mark.parametrize("width", WIDTHS)
def test_advice_resubmit_with_its_sizes_and_a_template_run_before(page: Page, live_server, width):
    page.set_viewport_size(dict(zip(("width", "height"), WIDTHS[width], strict=True)))
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.on("pageerror", lambda error: errors.append(str(error)))
    base = live_server.url
    team = funded_organization("1000", name="Right Size Lab")
    membership = MembershipFactory(organization=team, role=Membership.Role.MEMBER)
    # A Slurm cluster whose SSH port refuses connections: a Celery worker that the session may
    # run leaves the jobs queued (a transient failure) and this test settles them itself.
    cluster = ClusterFactory(ssh_port=1)
    allocation = allocation_bought(
        team,
        partition=PartitionFactory(cluster=cluster, cpus=8, gpus=0),
        quantity=100,
        price="0.21",
    )
    # The example: 8 cores for 600 minutes, ran 12 minutes at 1.1 cores.
    past = services.job_submit(
        actor=membership,
        allocation=allocation,
        request=services.JobRequest(
            name="oversized",
            script="#!/bin/bash\necho big\n",
            time_limit_minutes=600,
            cpus_per_task=8,
        ),
    )
    settle(past, cpus=8, elapsed=720, cpu_seconds=792.0)

    log_in(page, base, membership.user.username)
    page.goto(f"{base}{reverse('job-detail', args=[past.uuid])}")
    advice = page.locator("#job-advice")
    expect(advice.locator("[data-advice=cores]")).to_have_text(
        "Asked for 8 cores, used 1.1 on average: ask for 2, this run would have cost 0.084 "
        "instead of 0.336 USD."
    )
    expect(advice.locator("[data-advice=time]")).to_have_text(
        "Ran 12 minutes of a 600-minute limit: a 20-minute limit reserves 30 times less "
        "(2.666667 units instead of 80) and may start sooner."
    )
    no_sideways_panning(page)

    # A copy with the suggested sizes: the form is filled, the estimate follows.
    advice.get_by_role("link", name="Resubmit with these sizes").click()
    expect(page.locator("#job-sizes-applied")).to_contain_text("cpus_per_task=2")
    expect(page.get_by_label("Name")).to_have_value("oversized")
    expect(page.get_by_label("CPUs per task")).to_have_value("2")
    expect(page.get_by_label("Time limit (minutes)")).to_have_value("20")
    expect(page.locator("[data-field=estimate-units]")).to_have_text("0.666667")
    no_sideways_panning(page)
    page.get_by_role("button", name="Submit the job").click()
    expect(page.locator("[data-field=sizes]")).to_contain_text("1 task x 2 CPUs")
    copy = Job.objects.exclude(pk=past.pk).get()
    assert (copy.cpus_per_task, copy.time_limit_minutes, copy.script) == (
        2,
        20,
        "#!/bin/bash\necho big\n",
    )

    # A template fills the form; the GPU one is not offered on a partition without GPUs.
    page.goto(f"{base}{reverse('job-submit', args=[allocation.uuid])}")
    templates = page.locator("#job-templates")
    expect(templates.locator("[data-template]")).to_have_count(4)
    expect(page.locator("#job-templates-no-gpu")).to_be_visible()
    templates.get_by_role("link", name="Python parameter sweep").click()
    expect(page.locator("#job-start-from")).to_contain_text("$SLURM_ARRAY_TASK_ID")
    expect(page.get_by_label("Array")).to_have_value("0-9%2")
    expect(page.locator("[data-field=estimate-tasks]")).to_contain_text("10")
    page.get_by_role("button", name="Submit the job").click()
    expect(page.locator("[data-field=template]")).to_have_text("python-sweep")
    sweep = Job.objects.get(template="python-sweep")
    assert (sweep.array, sweep.task_count) == ("0-9%2", 10)

    # Its ten tasks ran 30 s each in a 5-minute limit: the template, opened again, offers 1.
    settle(sweep, cpus=1, elapsed=30, cpu_seconds=25.0)
    assert Job.objects.get(pk=sweep.pk).state == JobState.COMPLETED
    page.goto(f"{base}{reverse('job-submit', args=[allocation.uuid])}?template=python-sweep")
    suggested = page.locator("#job-suggested-sizes")
    expect(suggested).to_contain_text("a 1-minute limit reserves 5 times less")
    expect(page.get_by_label("Time limit (minutes)")).to_have_value("5")
    suggested.get_by_role("link", name="Use the suggested sizes").click()
    expect(page.get_by_label("Time limit (minutes)")).to_have_value("1")
    expect(page.get_by_label("Array")).to_have_value("0-9%2")
    no_sideways_panning(page)

    # The team's month: what its jobs spent on idle cores and reserved for nothing.
    page.goto(f"{base}{reverse('organization-detail', args=[team.uuid])}")
    page.locator("#efficiency-link").click()
    expect(page.get_by_role("heading", name="Efficiency in")).to_be_visible()
    # 8 x 720 s idle but 792 s, and ten tasks of 30 s using 25: 1.38 + 0.013889 core-hours.
    expect(page.locator("[data-field=idle-core-hours]")).to_have_text("1.393889")
    expect(page.locator("#efficiency-jobs tbody tr").first).to_contain_text("oversized")
    no_sideways_panning(page)
    assert errors == []
