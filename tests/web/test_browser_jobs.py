"""The job pages in headless Chromium: a member opens the submission form from the team's
allocations, watches the estimate follow the sizes as they are typed, submits, lands on the
job's page showing it queued, and sees its state change in the jobs list without reloading.

No Celery worker runs here, so the job stays queued until the test itself moves it on, as the
poll would."""

import datetime
import re
from decimal import Decimal

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from organizations.models import Membership
from scheduler_bridge.models import Job, JobEvent, JobState
from tests.factories import (
    MembershipFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.web.test_browser_market import log_in, open_organization
from tests.web.test_job_pages import finish, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_submits_a_job_with_a_live_estimate_and_follows_it(page: Page, live_server):
    base = live_server.url
    team = funded_organization("10000", name="Tidal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(
        team, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100, price="2.00"
    )
    cluster = allocation.cluster.name

    # From the team's allocations to the form of its active allocation.
    log_in(page, base, member.username)
    open_organization(page, "Tidal Team")
    page.get_by_role("link", name="Allocations and bids").click()
    page.get_by_role("link", name=f"Submit a job on {cluster}/debug").click()
    expect(page.get_by_role("heading", name=f"Submit a job on {cluster}/debug")).to_be_visible()
    units = page.locator("[data-field=estimate-units]")
    tasks = page.locator("[data-field=estimate-tasks]")
    cost = page.locator("[data-field=estimate-cost]")
    expect(units).to_have_text("0.166667")  # the sample: 1 core for 10 minutes
    expect(cost).to_have_text("0.33 USD")  # 0.166667 units at 2.00, to the cent
    expect(cost.locator("span")).to_have_attribute("title", "0.333334")
    expect(page.locator("[data-field=estimate-unreserved]")).to_have_text("100")

    # The script editor indents with Tab instead of leaving the field.
    page.get_by_label("Name").fill("browser job")
    script = page.get_by_label("Script")
    script.click()
    script.press("Control+End")
    script.press("Tab")
    script.press_sequentially("echo indented")
    expect(script).to_be_focused()
    assert script.input_value().endswith('echo "Done"\n    echo indented')

    # The estimate follows the sizes as they are typed: cores x hours x tasks at 2.00.
    page.get_by_label("Time limit (minutes)").fill("90")
    page.get_by_label("CPUs per task").fill("2")
    page.get_by_label("Tasks (ntasks)").fill("2")
    expect(units).to_have_text("6")
    expect(cost).to_have_text("12.00 USD")
    page.get_by_label("Array").fill("0-9")
    expect(tasks).to_have_text("10")
    expect(units).to_have_text("60")
    expect(cost).to_have_text("120.00 USD")
    page.get_by_label("CPUs per task").fill("4")
    expect(units).to_have_text("120")
    expect(page.locator("[data-field=estimate-over]")).to_contain_text(
        "More than the allocation's 100 unreserved units"
    )
    page.get_by_label("CPUs per task").fill("2")
    expect(units).to_have_text("60")
    expect(page.locator("[data-field=estimate-over]")).to_have_count(0)

    # Submitted: the job's page shows it queued, with what it reserves.
    page.get_by_role("button", name="Submit the job").click()
    expect(page.get_by_role("heading", name="browser job")).to_be_visible()
    status = page.locator("#job-status")
    expect(status.locator("[data-field=state]").first).to_have_text("Queued")
    expect(status.locator("[data-field=reserved]")).to_have_text("60 units, at most 120.00 USD")
    expect(page.locator("[data-field=output-empty]")).to_have_text(
        "No output yet: the job has not reached the cluster."
    )
    expect(page.locator("#job-tasks tbody tr")).to_have_count(10)
    job = Job.objects.get()
    assert (job.name, job.state, job.reserved_units, job.task_count) == (
        "browser job",
        JobState.QUEUED,
        Decimal("60"),
        10,
    )
    assert job.script.endswith('echo "Done"\n    echo indented')
    assert page.url == f"{base}{reverse('job-detail', args=[job.uuid])}"

    # The jobs list follows the job's state without reloading, and stops once it has ended.
    page.locator("#main-nav").get_by_role("link", name="Jobs").click()
    row = page.locator(f"#jobs tr[data-job='{job.uuid}']")
    expect(row.locator("[data-field=state]")).to_have_text("Queued")
    page.evaluate("window.notReloaded = true")
    now = job.created_at + datetime.timedelta(seconds=5)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, scheduler_job_id="501", submitted_at=now, started_at=now
    )
    JobEvent.objects.create(job=job, state=JobState.RUNNING, at=now)
    expect(row.locator("[data-field=state]")).to_have_text("Running", timeout=10_000)
    expect(row.locator("[data-field=elapsed]")).to_have_text(re.compile(r"so far$"))
    Job.objects.filter(pk=job.pk).update(
        state=JobState.COMPLETED,
        ended_at=now + datetime.timedelta(minutes=2),
        units=Decimal("0.5"),
        cost=Decimal("1"),
        elapsed_seconds=120,
    )
    expect(row.locator("[data-field=state]")).to_have_text("Completed", timeout=10_000)
    expect(row.locator("[data-field=cost]")).to_have_text("1.00")
    expect(page.locator("#job-rows")).not_to_have_attribute("hx-trigger", "every 3s")
    assert page.evaluate("window.notReloaded") is True


def test_a_pasted_script_fills_the_fields_as_it_is_typed_with_its_warnings(page: Page, live_server):
    base = live_server.url
    team = funded_organization("10000", name="Paste Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(
        team, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100, price="2.00"
    )
    log_in(page, base, member.username)
    page.goto(f"{base}{reverse('job-submit', args=[allocation.uuid])}")
    # The sample's own lines fill the fields once the page has read it.
    expect(page.get_by_label("Time limit (minutes)")).to_have_value("10")
    expect(page.get_by_label("Name")).to_have_value("hello")

    page.get_by_label("Script").fill(
        "#!/bin/bash\n"
        "#SBATCH --job-name=pasted --time=30 -c 2\n"
        "#SBATCH --array=0-3\n"
        "#SBATCH --account=physics --mail-user=ada@example.org\n"
        "srun ./model\n"
    )

    expect(page.get_by_label("Name")).to_have_value("pasted")
    expect(page.get_by_label("Time limit (minutes)")).to_have_value("30")
    expect(page.get_by_label("CPUs per task")).to_have_value("2")
    expect(page.get_by_label("Array")).to_have_value("0-3")
    expect(page.get_by_label("Tasks (ntasks)")).to_have_value("")  # the default, 1
    overridden = page.locator("[data-field=directives-overridden]")
    expect(overridden).to_contain_text("--account=physics")
    expect(overridden).to_contain_text("team's own Slurm account")
    expect(overridden).to_contain_text("--mail-user=ada@example.org")
    # 4 tasks x 2 cores x 0.5 h at 2.00
    expect(page.locator("[data-field=estimate-units]")).to_have_text("4")
    expect(page.locator("[data-field=estimate-cost]")).to_have_text("8.00 USD")

    # A field typed in is the user's: the script no longer fills it, and it wins.
    page.get_by_label("Time limit (minutes)").fill("15")
    expect(page.locator("[data-field=estimate-units]")).to_have_text("2")
    script = page.get_by_label("Script")
    script.fill(script.input_value().replace("--time=30", "--time=45"))
    expect(page.locator("[data-field=directives-overridden]")).to_contain_text(
        "The request's `time_limit_minutes` replaces it"
    )
    expect(page.get_by_label("Time limit (minutes)")).to_have_value("15")

    page.get_by_role("button", name="Submit the job").click()
    expect(page.get_by_role("heading", name="pasted")).to_be_visible()
    expect(page.locator("#job-directives [data-field=directives-overridden]")).to_contain_text(
        "--account=physics"
    )
    job = Job.objects.get()
    assert (job.time_limit_minutes, job.cpus_per_task, job.array) == (15, 2, "0-3")
    sources = {each["field"]: each["source"] for each in job.directives["effective"]}
    assert (sources["time_limit_minutes"], sources["cpus_per_task"], sources["name"]) == (
        "request",
        "script",
        "script",
    )


@pytest.mark.parametrize("width", [1280, 390])
def test_a_failed_jobs_page_says_why_in_words_and_wraps_its_long_script_lines(
    page: Page, live_server, width
):
    """Issue 30: "NonZeroExitCode" read as it came from Slurm, and a long script line widened
    the script's box past the screen."""
    organization = funded_organization("100", name="Wrap Lab")
    member = MembershipFactory(organization=organization, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(organization, partition=PartitionFactory(cpus=8, gpus=0))
    long_line = "srun ./simulate " + " ".join(
        f"--input=/scratch/wrap-lab/run-{n}" for n in range(20)
    )
    job = submit(allocation, member, name="wide", script=f"#!/bin/bash\n{long_line}\n")
    finish(job, state=JobState.FAILED, exit_code=3, state_reason="NonZeroExitCode")
    page.set_viewport_size({"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))

    log_in(page, live_server.url, member.username)
    page.goto(f"{live_server.url}{reverse('job-detail', args=[job.uuid])}")

    expect(page.locator("#job-status [data-field=state-reason]")).to_have_text("Exited with code 3")
    script = page.locator("#job-script")
    expect(script).to_contain_text("--input=/scratch/wrap-lab/run-19")
    # Wrapped inside its box: nothing to scroll sideways there, nor on the page.
    assert script.evaluate("element => element.scrollWidth <= element.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # The line breaks the script has are kept.
    assert script.inner_text().splitlines()[0] == "#!/bin/bash"
    assert errors == []
