"""A member's job journeys in headless Chromium, at desktop width and on a 390 px phone: "New
job" from the jobs list lands on the form of the team's active allocation; an array's progress
on the list and on its page; an array of tasks shorter than a second, run for real, shows its
start, each task's elapsed time and its efficiency; the jobs and the allocations are a table on
the desktop and one card each on the phone, their states and "Submit a job" in sight; a
running job's output, where the stream clicked last is the one shown even while a poll of the
other is in flight, and its download.

The jobs run on the local backend (the demo's), whose output files the test writes where the
job would: no Celery worker runs here, so the test moves the job on as the poll would."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Browser, Locator, Page, expect

from marketplace.models import Allocation, Cluster
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.models import Job, JobState, JobTask
from scheduler_bridge.services.backends import backend_for
from tests.conftest import local_cluster_root, wait_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.web.test_browser_market import log_in
from tests.web.test_job_pages import submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}

# Holds every request for a job's output for a second before it is sent, as a slow network
# would, and counts those in flight.
SLOW_OUTPUT = """
(() => {
  const open = XMLHttpRequest.prototype.open;
  const send = XMLHttpRequest.prototype.send;
  const abort = XMLHttpRequest.prototype.abort;
  window.outputInFlight = 0;
  XMLHttpRequest.prototype.open = function (method, url, ...rest) {
    this.csUrl = String(url);
    return open.call(this, method, url, ...rest);
  };
  XMLHttpRequest.prototype.send = function (body) {
    if (!this.csUrl.includes('/output/?')) return send.call(this, body);
    window.outputInFlight += 1;
    this.addEventListener('loadend', () => { window.outputInFlight -= 1; });
    setTimeout(() => send.call(this, body), 1000);
  };
})();
"""


@pytest.fixture(params=sorted(VIEWPORTS))
def screen(request: pytest.FixtureRequest, browser: Browser) -> Iterator[Page]:
    """A page at desktop width, then on a phone; the console's errors fail the test."""
    context = browser.new_context(viewport=VIEWPORTS[request.param])  # type: ignore[arg-type]
    context.set_default_timeout(15_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("console", lambda message: message.type == "error" and errors.append(message.text))
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], "\n".join(errors)


def open_nav(page: Page, name: str) -> None:
    """Follows a link of the main menu, opening the collapsed menu first on a phone."""
    toggler = page.locator(".navbar-toggler")
    if toggler.is_visible():
        toggler.click()
    page.locator("#main-nav").get_by_role("link", name=name).click()


def not_panning(page: Page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"{page.url} is {width} px wide"  # type: ignore[index]


def tasks_ended(backend: Any, scheduler_job_id: str, count: int) -> bool:
    """Whether the backend's accounting has `count` ended runs of the job."""
    runs = backend.runs([scheduler_job_id])
    return len(runs) == count and all(run.is_ended for run in runs)


def is_phone(page: Page) -> bool:
    return page.viewport_size["width"] < 768  # type: ignore[index]


def in_sight(element: Locator) -> None:
    """Visible whole once scrolled to vertically: on a phone, nothing to pan sideways for."""
    expect(element).to_be_visible()
    element.scroll_into_view_if_needed()
    expect(element).to_be_in_viewport(ratio=1)
    assert element.page.evaluate("window.scrollX") == 0


def job_entry(page: Page, job: Job) -> Locator:
    """The job's row of the jobs list on a wide screen, its card on a phone."""
    if is_phone(page):
        return page.locator(f"#job-cards [data-job-card='{job.uuid}']")
    return page.locator(f"#jobs tr[data-job='{job.uuid}']")


def local_allocation(organization: Any, *, quantity: int = 100) -> Allocation:
    cluster = ClusterFactory(name="laptop", backend=Cluster.Backend.LOCAL, ssh_host="", ssh_user="")
    partition = PartitionFactory(cluster=cluster, name="local", cpus=4, nodes=1, gpus=0)
    return allocation_bought(organization, partition=partition, quantity=quantity, price="2.00")


def started(job: Job) -> Job:
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, scheduler_job_id="1001", submitted_at=now, started_at=now
    )
    job.refresh_from_db()
    return job


def write_output(job: Job, name: str, text: str) -> None:
    directory = Path(settings.LOCAL_CLUSTER_ROOT) / job.directory
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)


def test_new_job_from_the_jobs_list_leads_to_the_form_of_the_active_allocation(
    screen: Page, live_server
):
    base = live_server.url
    team = funded_organization("1000", name="Tidal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = local_allocation(team)

    log_in(screen, base, member.username)
    open_nav(screen, "Jobs")
    expect(screen.get_by_role("heading", name="Jobs")).to_be_visible()
    not_panning(screen)
    screen.get_by_role("link", name="New job").click()

    expect(screen.get_by_role("heading", name="Submit a job on laptop/local")).to_be_visible()
    assert screen.url == f"{base}{reverse('job-submit', args=[allocation.uuid])}"
    not_panning(screen)

    # The same from the dashboard's jobs.
    screen.goto(f"{base}{reverse('dashboard')}?organization={team.uuid}")
    screen.locator("#running-jobs").get_by_role("link", name="New job").click()
    expect(screen.get_by_role("heading", name="Submit a job on laptop/local")).to_be_visible()


def test_new_job_offers_the_choice_between_active_allocations_and_says_when_there_is_none(
    screen: Page, live_server
):
    base = live_server.url
    team = funded_organization("1000", name="Tidal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    other = funded_organization("1000", name="Empty Team")
    MembershipFactory(organization=other, user=member, role=Membership.Role.MEMBER)
    first = local_allocation(team)
    second = allocation_bought(team, partition=PartitionFactory(name="gpu", cpus=8, gpus=0))

    log_in(screen, base, member.username)
    screen.goto(f"{base}{reverse('organization-allocations', args=[team.uuid])}")
    screen.get_by_role("link", name="New job").click()
    choices = screen.locator("#job-new-allocations a")
    expect(choices).to_have_count(2)
    expect(choices.nth(0)).to_contain_text(f"{second.cluster.name}/gpu")
    expect(screen.locator(f"[data-allocation='{first.uuid}']")).to_contain_text(
        "100 of 100 units left"
    )
    not_panning(screen)
    screen.locator(f"[data-allocation='{first.uuid}']").click()
    expect(screen.get_by_role("heading", name="Submit a job on laptop/local")).to_be_visible()

    screen.goto(f"{base}{reverse('job-new')}?organization={other.uuid}")
    expect(screen.locator("#job-new-none")).to_contain_text(
        "Empty Team has no active allocation, and a job runs on one."
    )


def test_an_array_shows_its_progress_on_the_list_and_on_its_page(screen: Page, live_server):
    base = live_server.url
    team = funded_organization("1000", name="Tidal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    job = started(submit(local_allocation(team), member, name="sweep", array="0-9"))
    JobTask.objects.filter(job=job, array_task_id__lt=6).update(
        state=JobState.COMPLETED, units=Decimal("0.1"), cost=Decimal("0.2")
    )
    JobTask.objects.filter(job=job, array_task_id__gte=6).update(state=JobState.RUNNING)

    log_in(screen, base, member.username)
    screen.goto(f"{base}{reverse('job-list')}")
    row = job_entry(screen, job)
    expect(row.locator("[data-field=array-progress]")).to_have_text("6 of 10 tasks done")
    expect(row.locator("[data-field=state]")).to_be_visible()
    not_panning(screen)

    row.get_by_role("link", name="sweep").click()
    progress = screen.locator("#job-status [data-field=array-progress]")
    expect(progress).to_have_text("6 of 10 tasks done")
    # The page follows the tasks as they end, without reloading.
    JobTask.objects.filter(job=job).update(state=JobState.COMPLETED)
    expect(progress).to_have_text("10 of 10 tasks done", timeout=10_000)
    not_panning(screen)


def test_an_array_of_tasks_under_a_second_shows_its_start_elapsed_and_efficiency(
    screen: Page, live_server, settings, tmp_path_factory, no_worker_takes_the_tasks
):
    """Run for real on the local backend, and followed by the poll only once every task has
    ended (as the demo's poll, every 10 s, finds a quick array): the tasks' elapsed time is
    under accounting's whole second, and the page still says when the array started, each
    task's elapsed time and the job's efficiency."""
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    base = live_server.url
    team = funded_organization("1000", name="Quick Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    job = submit(
        local_allocation(team), member, name="quick", array="0-2", script="#!/bin/bash\ntrue\n"
    )
    services.cluster_jobs_submit(cluster_id=job.cluster_id)
    job.refresh_from_db()
    backend = backend_for(job.cluster)
    wait_for(lambda: tasks_ended(backend, job.scheduler_job_id, 3), timeout=30)

    def poll_ended() -> bool:
        services.cluster_poll(cluster_id=job.cluster_id)
        job.refresh_from_db()
        return job.is_ended

    wait_for(poll_ended, timeout=30)
    assert job.state == JobState.COMPLETED and job.started_at is not None

    log_in(screen, base, member.username)
    screen.goto(f"{base}{reverse('job-list')}")
    entry = job_entry(screen, job)
    expect(entry.locator("[data-field=state]")).to_have_text("Completed")
    expect(entry.locator("[data-field=state]")).to_be_visible()
    not_panning(screen)

    screen.goto(f"{base}{reverse('job-detail', args=[job.uuid])}")
    status = screen.locator("#job-status")
    expect(status.locator("[data-field=started]")).to_have_text(
        f"{job.started_at:%Y-%m-%d %H:%M:%S}"
    )
    expect(status.locator("[data-field=efficiency]")).to_have_text(
        f"{job.efficiency * 100:.1f} % CPU time over cores x elapsed"
    )
    elapsed = status.locator("#job-tasks [data-field=task-elapsed]")
    expect(elapsed).to_have_count(3)
    for index, task in enumerate(job.tasks.order_by("array_task_id")):
        expect(elapsed.nth(index)).to_have_text(
            f"{task.elapsed_seconds}s" if task.elapsed_seconds else "under 1s"
        )
    not_panning(screen)


def test_the_allocations_and_the_jobs_show_their_states_and_submit_a_job_without_panning(
    screen: Page, live_server
):
    """At 1280 px the tables; at 390 px one card per allocation and per job, with the state of
    each and the allocation's "Submit a job" in sight, and nothing wider than the screen."""
    base = live_server.url
    team = funded_organization("1000", name="Phone Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = local_allocation(team)
    job = started(submit(allocation, member, name="a job with a rather long name to wrap"))

    log_in(screen, base, member.username)
    screen.goto(f"{base}{reverse('organization-allocations', args=[team.uuid])}")
    if is_phone(screen):
        expect(screen.locator("#allocations")).to_be_hidden()
        entry = screen.locator(f"#allocation-cards [data-allocation-card='{allocation.uuid}']")
    else:
        expect(screen.locator("#allocation-cards")).to_be_hidden()
        entry = screen.locator(f"#allocations tr[data-allocation='{allocation.uuid}']")
    expect(entry.locator("[data-field=status]")).to_have_text("active")
    in_sight(entry.locator("[data-field=status]"))
    in_sight(screen.get_by_role("link", name="Submit a job on laptop/local"))
    not_panning(screen)

    screen.goto(f"{base}{reverse('job-list')}")
    if is_phone(screen):
        expect(screen.locator("#jobs")).to_be_hidden()
    else:
        expect(screen.locator("#job-cards")).to_be_hidden()
    state = job_entry(screen, job).locator("[data-field=state]")
    expect(state).to_have_text("Running")
    in_sight(state)
    not_panning(screen)

    screen.goto(f"{base}{reverse('organization-allocations', args=[team.uuid])}")
    screen.get_by_role("link", name="Submit a job on laptop/local").click()
    expect(screen.get_by_role("heading", name="Submit a job on laptop/local")).to_be_visible()


# Waits on the page's polls: at desktop width only (the phone's layout is the crawl's).
@pytest.mark.parametrize("screen", ["desktop"], indirect=True)
def test_the_stream_clicked_last_is_shown_even_while_a_poll_is_in_flight(screen: Page, live_server):
    base = live_server.url
    team = funded_organization("1000", name="Tidal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    job = started(submit(local_allocation(team), member, name="long run"))
    write_output(job, "stdout.txt", "step 1 of 3\n")
    write_output(job, "stderr.txt", "warning: slow disk\n")
    screen.add_init_script(SLOW_OUTPUT)

    log_in(screen, base, member.username)
    screen.goto(f"{base}{reverse('job-detail', args=[job.uuid])}")
    output = screen.locator("#job-output")
    expect(output.locator("#job-output-text")).to_have_text("step 1 of 3")

    # The next poll of stdout is on its way (held a second): stderr is clicked meanwhile.
    # The next poll of stdout is on its way (held a second): stderr is clicked meanwhile, and
    # stays shown once the poll is answered.
    screen.wait_for_function("window.outputInFlight > 0", timeout=10_000)
    screen.get_by_role("button", name="stderr").click()
    screen.wait_for_function("window.outputInFlight === 0")
    expect(output).to_have_attribute("data-stream", "stderr")
    expect(output.locator("#job-output-text")).to_have_text("warning: slow disk")
    # Two clicks in a row: the later wins.
    screen.get_by_role("button", name="stdout").click()
    screen.get_by_role("button", name="stderr").click()
    screen.get_by_role("button", name="stdout").click()
    screen.wait_for_function("window.outputInFlight === 0")
    expect(output).to_have_attribute("data-stream", "stdout")
    expect(output.locator("#job-output-text")).to_have_text("step 1 of 3")

    # The whole stream as a file.
    with screen.expect_download() as download:
        screen.get_by_role("link", name="Download stdout").click()
    assert download.value.suggested_filename == f"job-{job.uuid}.stdout.txt"
    assert Path(download.value.path()).read_text() == "step 1 of 3\n"
    not_panning(screen)


# Waits on the page's polls: at desktop width only (the phone's layout is the crawl's).
@pytest.mark.parametrize("screen", ["desktop"], indirect=True)
def test_a_job_waiting_on_the_cluster_says_so_and_then_shows_its_output(
    screen: Page, live_server, no_worker_takes_the_tasks
):
    base = live_server.url
    team = funded_organization("1000", name="Tidal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    job = submit(local_allocation(team), member, name="waits")

    log_in(screen, base, member.username)
    screen.goto(f"{base}{reverse('job-detail', args=[job.uuid])}")
    empty = screen.locator("#job-output [data-field=output-empty]")
    expect(empty).to_have_text("No output yet: the job has not reached the cluster.")
    Job.objects.filter(pk=job.pk).update(
        state=JobState.PENDING, scheduler_job_id="1002", submitted_at=timezone.now()
    )
    expect(empty).to_have_text(
        "No output yet: the job waits in the cluster's queue.", timeout=10_000
    )
    started(job)
    write_output(job, "stdout.txt", "hello\n")
    expect(screen.locator("#job-output-text")).to_have_text("hello", timeout=10_000)
    expect(screen.locator("#job-status [data-field=state]").first).to_have_text("Running")
    ended = timezone.now() + datetime.timedelta(seconds=30)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, ended_at=ended)
    expect(screen.locator("#job-status [data-field=state]").first).to_have_text(
        "Completed", timeout=10_000
    )
