"""The job pages through Django's test client: the submission form with its live estimate and
the services' refusals beside the fields, the jobs list and the rows it polls, a job's page
with its live part, its output and its cancel button. Members see their organization's jobs;
everyone else gets a 404. The browser test walks the same pages in Chromium."""

import datetime
import json
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from hpc.types import RunRecord
from marketplace.models import Allocation, Resource
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.forms.jobs import SAMPLE_SCRIPT
from scheduler_bridge.models import Job, JobEvent, JobRun, JobState, JobTask
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)
from tests.scheduler_bridge.test_jobs_api import tenant_job_ran
from tests.web.test_market_pages import body_rows, cell_texts, messages_of
from tests.web.test_money_pages import Node, field_block, html

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\necho hello\n"


# --- Fixtures and helpers ----------------------------------------------------------------------


@pytest.fixture
def allocation(team: Any) -> Allocation:
    """100 core-hours at 2.00 on a partition of 8 CPUs on 2 nodes, without GPUs."""
    return allocation_bought(
        team.organization,
        partition=PartitionFactory(cpus=8, nodes=2, gpus=0),
        quantity=100,
        price="2.00",
    )


def form_data(**changes: str) -> dict[str, str]:
    return {
        "name": "hello",
        "script": SCRIPT,
        "time_limit_minutes": "60",
        "cpus_per_task": "1",
        "ntasks": "1",
        "nodes": "1",
        "array": "",
        "environment": "",
        **changes,
    }


def submit(allocation: Allocation, user: Any, **changes: Any) -> Job:
    """A job accepted by the service, as the form would submit it."""
    actor = Membership.objects.select_related("organization", "user").get(
        user=user, organization=allocation.organization
    )
    request = services.JobRequest(
        **{"name": "hello", "script": SCRIPT, "time_limit_minutes": 60, **changes}
    )
    return services.job_submit(actor=actor, allocation=allocation, request=request)


def estimate_figures(document: Node) -> dict[str, str]:
    return {
        name: document.find(data_field=f"estimate-{name}").text()
        for name in ("units", "tasks", "cost", "unreserved")
    }


def nothing_reserved(allocation: Allocation) -> None:
    allocation.refresh_from_db()
    assert (allocation.reserved, allocation.used) == (0, 0)
    assert (Job.objects.count(), JobTask.objects.count(), JobEvent.objects.count()) == (0, 0, 0)


def finish(job: Job, **values: Any) -> Job:
    """Writes what the poll and the settlement would have written when the job ended."""
    started = job.created_at + datetime.timedelta(minutes=1)
    ended = started + datetime.timedelta(minutes=30)
    for state, at in (
        (JobState.SUBMITTED, job.created_at + datetime.timedelta(seconds=2)),
        (JobState.RUNNING, started),
        (JobState.COMPLETED, ended),
    ):
        JobEvent.objects.create(job=job, state=state, at=at)
    fields = {
        "state": JobState.COMPLETED,
        "scheduler_job_id": "4242",
        "submitted_at": job.created_at + datetime.timedelta(seconds=2),
        "started_at": started,
        "ended_at": ended,
        "exit_code": 0,
        "units": Decimal("0.5"),
        "cost": Decimal("1.000000"),
        "elapsed_seconds": 1800,
        "cpu_seconds": Decimal("900.000"),
        "allocated_core_seconds": 1800,
        **values,
    }
    Job.objects.filter(pk=job.pk).update(**fields)
    job.refresh_from_db()
    return job


# --- Login and visibility ----------------------------------------------------------------------


def job_page_urls(allocation: Allocation, job: Job) -> list[str]:
    return [
        reverse("job-submit", args=[allocation.uuid]),
        reverse("job-estimate", args=[allocation.uuid]),
        reverse("job-list"),
        reverse("job-list-rows"),
        reverse("job-detail", args=[job.uuid]),
        reverse("job-status", args=[job.uuid]),
        reverse("job-output", args=[job.uuid]),
    ]


def test_every_job_page_needs_a_login(client, team, allocation):
    job = submit(allocation, team.member)

    for url in job_page_urls(allocation, job):
        response = client.get(url)

        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url


def test_outsiders_get_404_on_every_page_of_a_job_and_of_its_allocation(client, team, allocation):
    job = submit(allocation, team.member)
    client.force_login(team.outsider)

    for url in job_page_urls(allocation, job):
        if url in (reverse("job-list"), reverse("job-list-rows")):
            continue  # the outsider's own (empty) list: checked below
        response = client.get(url)

        assert response.status_code == 404, url
        assert b"hello" not in response.content, url
    submitted = client.post(reverse("job-submit", args=[allocation.uuid]), form_data())
    cancelled = client.post(reverse("job-cancel", args=[job.uuid]))

    assert (submitted.status_code, cancelled.status_code) == (404, 404)
    assert Job.objects.count() == 1
    job.refresh_from_db()
    assert (job.state, job.cancel_requested_at) == (JobState.QUEUED, None)
    rows = body_rows(html(client.get(reverse("job-list"))), "jobs")
    assert [row.attrs.get("data-job") for row in rows] == [None]  # the "No jobs" row


def test_members_list_their_organizations_jobs_and_no_one_elses(client, team, allocation):
    ours = submit(allocation, team.member, name="ours")
    other_team = funded_organization("10000", name="Other Lab")
    other_member = MembershipFactory(organization=other_team).user
    theirs = submit(allocation_bought(other_team), other_member, name="theirs")
    client.force_login(team.member)

    rows = body_rows(html(client.get(reverse("job-list"))), "jobs")
    theirs_page = client.get(reverse("job-detail", args=[theirs.uuid]))

    assert [row.attrs["data-job"] for row in rows] == [str(ours.uuid)]
    assert theirs_page.status_code == 404


def test_the_submit_form_is_404_for_an_allocation_whose_window_is_closed(client, team, allocation):
    Allocation.objects.filter(pk=allocation.pk).update(closed_at=timezone.now())
    client.force_login(team.member)

    response = client.get(reverse("job-submit", args=[allocation.uuid]))

    assert response.status_code == 404


# --- The submission form and its estimate --------------------------------------------------------


def test_the_submit_form_offers_a_sample_script_and_estimates_its_initial_sizes(
    client, team, allocation
):
    client.force_login(team.member)

    response = client.get(reverse("job-submit", args=[allocation.uuid]))

    assert response.status_code == 200
    page = html(response)
    script, _ = field_block(page, "script")
    assert script.text() == " ".join(SAMPLE_SCRIPT.split())
    assert "data-script-editor" in script.attrs and "font-monospace" in script.classes
    assert page.by_id("id_gpus") is None  # the partition has no GPUs
    # 1 core x 10 minutes = 1/6 core-hour, rounded up to the micro-unit, at 2.00.
    assert estimate_figures(page) == {
        "units": "0.166667",
        "tasks": "1",
        "cost": "0.33 USD",
        "unreserved": "100",
    }
    # The script and the sizes are read again as they are typed.
    read = page.by_id("job-read")
    assert read.attrs["hx-post"] == reverse("job-directives", args=[allocation.uuid])
    assert read.attrs["hx-trigger"] == "input delay:300ms, load"
    assert page.by_id("id_time_limit_minutes").attrs.get("value") is None  # the script's


def test_the_gpu_field_is_shown_on_a_gpu_allocation_with_one_gpu_asked(client, team):
    allocation = allocation_bought(
        team.organization, partition=PartitionFactory(gpus=4), resource=Resource.GPU
    )
    client.force_login(team.member)

    page = html(client.get(reverse("job-submit", args=[allocation.uuid])))

    gpus, _ = field_block(page, "gpus")
    assert gpus.attrs["value"] == "1"
    # GPU-hours: 1 GPU x 10 minutes.
    assert estimate_figures(page)["units"] == "0.166667"


@pytest.mark.parametrize(
    ("sizes", "figures"),
    [
        (
            {"time_limit_minutes": "90", "cpus_per_task": "2", "ntasks": "2"},
            {"units": "6", "tasks": "1", "cost": "12.00 USD", "unreserved": "100"},
        ),
        (
            {"time_limit_minutes": "30", "array": "0-19%4"},
            {"units": "10", "tasks": "20", "cost": "20.00 USD", "unreserved": "100"},
        ),
        # Every task is rounded up on its own, as the submission reserves it.
        (
            {"time_limit_minutes": "1", "array": "0-2"},
            {"units": "0.050001", "tasks": "3", "cost": "0.10 USD", "unreserved": "100"},
        ),
    ],
)
def test_the_estimate_is_cores_times_hours_times_tasks_at_the_unit_price(
    client, team, allocation, sizes, figures
):
    client.force_login(team.member)
    query = {key: value for key, value in form_data(**sizes).items() if key not in ("script",)}

    response = client.get(reverse("job-estimate", args=[allocation.uuid]), query)

    assert response.status_code == 200
    page = html(response)
    assert estimate_figures(page) == figures
    assert page.find(data_field="estimate-over") is None


def test_the_estimate_equals_what_the_submission_reserves(client, team, allocation):
    client.force_login(team.member)
    data = form_data(time_limit_minutes="1", array="0-2")

    estimate = html(client.get(reverse("job-estimate", args=[allocation.uuid]), data))
    client.post(reverse("job-submit", args=[allocation.uuid]), data)

    job = Job.objects.get()
    assert estimate_figures(estimate)["units"] == f"{job.reserved_units.normalize():f}"


def test_the_estimate_shows_the_cost_the_api_quotes_to_the_cent_and_exactly_on_hover(
    client, team, allocation
):
    # 7 minutes on 3 tasks of an array: 0.116667 units each, 0.700002 for the lot at 2.00.
    client.force_login(team.member)
    data = form_data(time_limit_minutes="7", array="0-2")
    actor = Membership.objects.get(user=team.member, organization=team.organization)

    document = html(client.get(reverse("job-estimate", args=[allocation.uuid]), data))
    estimate = estimate_figures(document)
    quote = services.job_quote(
        actor=actor,
        allocation=allocation,
        request=services.JobRequest(name="hello", script=SCRIPT, time_limit_minutes=7, array="0-2"),
    )

    assert quote.estimated_max_cost == Decimal("0.700002")
    assert estimate["cost"] == "0.70 USD"
    assert document.find(data_field="estimate-cost").find("span").attrs["title"] == "0.700002"
    assert estimate["units"] == f"{quote.reserved_units.normalize():f}"


def test_the_estimate_warns_when_the_job_needs_more_than_the_unreserved_units(
    client, team, allocation
):
    submit(allocation, team.member, time_limit_minutes=60 * 5, cpus_per_task=8)  # 40 reserved
    client.force_login(team.member)

    page = html(
        client.get(
            reverse("job-estimate", args=[allocation.uuid]),
            form_data(time_limit_minutes="480", cpus_per_task="8"),
        )
    )

    assert estimate_figures(page) == {
        "units": "64",
        "tasks": "1",
        "cost": "128.00 USD",
        "unreserved": "60",
    }
    assert (
        page.find(data_field="estimate-over")
        .text()
        .startswith("More than the allocation's 60 unreserved units: the job would be refused.")
    )


def test_the_estimate_says_which_size_it_cannot_read(client, team, allocation):
    client.force_login(team.member)

    bad_number = html(
        client.get(reverse("job-estimate", args=[allocation.uuid]), form_data(ntasks="0"))
    )
    bad_array = html(
        client.get(reverse("job-estimate", args=[allocation.uuid]), form_data(array="5-1"))
    )

    assert bad_number.find(data_field="estimate-problem").text() == (
        "Tasks (ntasks): Ensure this value is greater than or equal to 1."
    )
    assert bad_array.find(data_field="estimate-problem").text() == (
        "Array: The range `5-1` ends before it starts."
    )
    assert bad_number.find(data_field="estimate-units") is None


# --- Submitting ----------------------------------------------------------------------------------


def test_a_member_submits_a_job_which_is_queued_and_lands_on_its_page(
    client, team, allocation, django_capture_on_commit_callbacks
):
    client.force_login(team.member)
    data = form_data(
        name="fold proteins",
        script=SCRIPT.replace("\n", "\r\n"),  # as browsers send a textarea
        time_limit_minutes="90",
        cpus_per_task="2",
        ntasks="2",
        environment="# inputs\nINPUT=data/run 1.csv\n\nQUOTED='$(not run)'\nEMPTY=\n",
    )

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("job-submit", args=[allocation.uuid]), data)

    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("job-detail", args=[job.uuid])
    assert (job.name, job.state, job.submitted_by) == ("fold proteins", "queued", team.member)
    assert (job.time_limit_minutes, job.cpus_per_task, job.ntasks, job.nodes, job.gpus) == (
        90,
        2,
        2,
        1,
        0,
    )
    assert job.script == SCRIPT
    assert job.environment == {"INPUT": "data/run 1.csv", "QUOTED": "'$(not run)'", "EMPTY": ""}
    assert job.reserved_units == Decimal("6")  # 4 cores x 1.5 h
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("6")
    assert len(callbacks) == 1  # the submission task, after the commit
    landed = client.get(response["Location"])
    assert messages_of(html(landed)) == [
        "fold proteins is submitted: it reserves 6 units of the allocation until it ends."
    ]
    assert html(landed).by_id("job-status").find(data_field="state").text() == "Queued"


@pytest.mark.parametrize(
    ("changes", "field", "error"),
    [
        ({"time_limit_minutes": "0"}, "time_limit_minutes", "greater than or equal to 1."),
        ({"ntasks": "two"}, "ntasks", "Enter a whole number."),
        ({"cpus_per_task": "9"}, "cpus_per_task", "ntasks x cpus_per_task is 9; the partition"),
        ({"nodes": "3", "ntasks": "3"}, "nodes", "The partition has 2 nodes."),
        ({"array": "5-1"}, "array", "The range `5-1` ends before it starts."),
        ({"array": "0-2000"}, "array", "Array indices go up to 1000."),
        (
            {"script": "echo no interpreter\n"},
            "script",
            "Line 1: This does not look like a batch script.",
        ),
        ({"time_limit_minutes": ""}, "time_limit_minutes", "Give a time limit: this field, or"),
        ({"environment": "A=1\nNO_EQUALS\nA=2"}, "environment", "Line 2: write NAME=value."),
        ({"environment": "A=1\nA=2"}, "environment", "Line 2: A is set twice."),
        ({"environment": "1BAD=x"}, "environment", "`1BAD` is not a valid name"),
        ({"environment": "SLURM_JOB_ID=1"}, "environment", "`SLURM_JOB_ID` is the scheduler's"),
    ],
)
def test_a_refused_field_is_shown_beside_it_and_nothing_is_reserved(
    client, team, allocation, changes, field, error
):
    client.force_login(team.member)

    response = client.post(reverse("job-submit", args=[allocation.uuid]), form_data(**changes))

    assert response.status_code == 400
    widget, errors = field_block(html(response), field)
    assert any(error in message for message in errors), errors
    assert "is-invalid" in widget.classes
    nothing_reserved(allocation)


def test_a_line_sbatch_would_refuse_is_shown_beside_the_script_with_its_line(
    client, team, allocation
):
    client.force_login(team.member)
    script = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH --walltime=10\necho hi\n"

    response = client.post(reverse("job-submit", args=[allocation.uuid]), form_data(script=script))

    assert response.status_code == 400
    widget, errors = field_block(html(response), "script")
    assert errors == ["Line 3: unrecognized option '--walltime=10'"]
    assert widget.text() == " ".join(script.split())  # what was typed is kept
    nothing_reserved(allocation)


def test_the_script_is_read_as_it_is_typed_with_its_warnings_and_the_estimate(
    client, team, allocation
):
    client.force_login(team.member)
    script = "#!/bin/bash\n#SBATCH -t 30 -n 2 --account=physics\n#SBATCH --array=0-3\necho\n"
    data = {**form_data(script=script), "time_limit_minutes": "", "ntasks": ""}

    response = client.post(reverse("job-directives", args=[allocation.uuid]), data)

    assert response.status_code == 200
    page = html(response)
    overridden = page.find(data_field="directives-overridden").text()
    assert "--account=physics" in overridden and "team's own Slurm account" in overridden
    values = json.loads(page.by_id("job-directives-values").text())
    assert values == {"time_limit_minutes": "30", "ntasks": "2", "array": "0-3"}
    # 4 tasks x 2 cores x 0.5 h at 2.00, swapped in beside it.
    assert estimate_figures(page) == {
        "units": "4",
        "tasks": "4",
        "cost": "8.00 USD",
        "unreserved": "100",
    }


def test_fields_the_page_filled_from_the_script_are_sent_as_the_scripts(client, team, allocation):
    client.force_login(team.member)
    script = "#!/bin/bash\n#SBATCH -t 30\n#SBATCH -J from-script\necho\n"
    data = {
        **form_data(script=script, name="from-script", time_limit_minutes="30", ntasks="2"),
        "script_fields": "name,time_limit_minutes",
    }

    response = client.post(reverse("job-submit", args=[allocation.uuid]), data)

    assert response.status_code == 302
    sources = {each["field"]: each["source"] for each in Job.objects.get().directives["effective"]}
    assert sources["time_limit_minutes"] == "script"
    assert sources["name"] == "script"
    assert sources["ntasks"] == "request"  # typed in: it wins over the script's


def test_a_job_larger_than_the_unreserved_units_is_refused_with_the_figures(
    client, team, allocation
):
    client.force_login(team.member)
    # 8 cores x 1 h x 20 tasks = 160 units; the allocation has 100.
    data = form_data(cpus_per_task="8", array="0-19")

    response = client.post(reverse("job-submit", args=[allocation.uuid]), data)

    assert response.status_code == 402
    page = html(response)
    assert page.by_id("job-refusal").text() == (
        "The job reserves 160 units (cores or GPUs x time limit x tasks); the allocation has "
        "100 left unreserved."
    )
    assert field_block(page, "array")[0].attrs["value"] == "0-19"
    assert page.find(data_field="estimate-over") is not None
    nothing_reserved(allocation)


# --- The list ------------------------------------------------------------------------------------


def test_the_list_shows_each_job_newest_first_and_polls_while_one_runs(client, team, allocation):
    ended = finish(submit(allocation, team.member, name="first"))
    queued = submit(allocation, team.member, name="second", array="0-2")
    client.force_login(team.member)

    response = client.get(reverse("job-list"))

    assert response.status_code == 200
    page = html(response)
    rows = body_rows(page, "jobs")
    cluster = allocation.cluster.name
    assert [row.attrs["data-job"] for row in rows] == [str(queued.uuid), str(ended.uuid)]
    assert [cell_texts(row)[1:] for row in rows] == [
        ["Queued", f"{cluster}/debug", f"{queued.created_at:%Y-%m-%d %H:%M}", "—", "0", "0.00"],
        [
            "Completed",
            f"{cluster}/debug",
            f"{ended.created_at:%Y-%m-%d %H:%M}",
            "30m 00s",
            "0.5",
            "1.00",
        ],
    ]
    assert cell_texts(rows[0])[0] == "second 0 of 3 tasks done Quantum Lab"
    body = page.by_id("job-rows")
    assert body.attrs["hx-get"] == reverse("job-list-rows")
    assert body.attrs["hx-trigger"] == "every 3s"


def test_the_rows_fragment_keeps_the_filters_and_stops_polling_once_every_job_has_ended(
    client, team, allocation
):
    job = submit(allocation, team.member)
    client.force_login(team.member)
    query = {"organization": str(team.organization.uuid), "state": ""}

    live = html(client.get(reverse("job-list"), query)).by_id("job-rows")
    finish(job, state=JobState.FAILED, exit_code=3, state_reason="NonZeroExitCode")
    fragment = client.get(live.attrs["hx-get"])

    assert live.attrs["hx-get"] == (
        f"{reverse('job-list-rows')}?organization={team.organization.uuid}&state="
    )
    assert fragment.status_code == 200
    assert fragment["Cache-Control"].startswith("max-age=0")
    body = html(fragment).by_id("job-rows")
    assert body is not None and "hx-trigger" not in body.attrs
    row = body.find("tbody").find("tr")
    assert cell_texts(row)[1] == "Failed Exited with code 3"


def test_the_list_filters_by_state_organization_and_allocation(client, team, allocation):
    queued = submit(allocation, team.member, name="queued")
    done = finish(submit(allocation, team.member, name="done"))
    other_allocation = allocation_bought(team.organization)
    elsewhere = submit(other_allocation, team.member, name="elsewhere")
    second_team = OrganizationFactory(name="Second Lab")
    MembershipFactory(organization=second_team, user=team.member)
    client.force_login(team.member)

    def listed(**query: str) -> list[str]:
        response = client.get(reverse("job-list"), query)
        assert response.status_code == 200
        rows = body_rows(html(response), "jobs")
        return [row.attrs["data-job"] for row in rows if "data-job" in row.attrs]

    assert listed(state="completed") == [str(done.uuid)]
    assert listed(allocation=str(other_allocation.uuid)) == [str(elsewhere.uuid)]
    assert listed(organization=str(team.organization.uuid)) == [
        str(elsewhere.uuid),
        str(done.uuid),
        str(queued.uuid),
    ]
    assert listed(organization=str(second_team.uuid)) == []
    assert client.get(reverse("job-list"), {"state": "asleep"}).status_code == 400


def test_the_list_makes_the_same_queries_for_1_and_20_jobs(client, team, allocation):
    client.force_login(team.member)
    submit(allocation, team.member)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("job-list"))
    for _ in range(19):
        submit(allocation, team.member, time_limit_minutes=1)
    with CaptureQueriesContext(connection) as many:
        response = client.get(reverse("job-list"))

    assert len(body_rows(html(response), "jobs")) == 20
    assert len(many) == len(few)


# --- One job -------------------------------------------------------------------------------------


def test_an_ended_jobs_page_shows_usage_cost_efficiency_and_history_without_polling(
    client, team, allocation
):
    job = finish(submit(allocation, team.member, name="analysis", cpus_per_task=2))
    client.force_login(team.member)

    response = client.get(reverse("job-detail", args=[job.uuid]))

    assert response.status_code == 200
    page = html(response)
    status = page.by_id("job-status")
    assert "hx-trigger" not in status.attrs
    assert status.find(data_field="state").text() == "Completed"
    assert status.find(data_field="scheduler-job-id").text() == "4242"
    assert status.find(data_field="exit-code").text() == "0"
    # 2 cores x 1 h at 2.00: at most 4.00.
    assert status.find(data_field="reserved").text() == "2 units, at most 4.00 USD"
    assert status.find(data_field="usage").text() == "0.5 units, elapsed 30m 00s, CPU time 900 s"
    assert status.find(data_field="cost").text() == "1.00 USD"
    assert status.find(data_field="efficiency").text() == "50.0 % CPU time over cores x elapsed"
    history = [cell_texts(row)[1] for row in body_rows(page, "job-history")]
    assert history == ["Queued", "Submitted", "Running", "Completed"]
    assert page.by_id("job-cancel") is None
    assert page.by_id("job-facts").find(data_field="sizes").text() == "1 node, 1 task x 2 CPUs"


def test_an_ended_array_of_tasks_under_a_second_shows_its_start_elapsed_and_efficiency(
    client, team, allocation
):
    """Settled as accounting reports tasks shorter than its whole second (elapsed 0, the
    start equal to the end): the page shows when the array started, each task's elapsed time
    and the job's efficiency, not "—" and "once the job has ended"."""
    job = submit(allocation, team.member, name="quick-array", array="0-1")
    services.job_mark_submitted(job_id=job.pk, scheduler_job_id="800")
    moment = datetime.datetime(2026, 11, 26, 16, 28, 21, tzinfo=datetime.UTC)
    for task in job.tasks.order_by("array_task_id"):
        run = RunRecord(
            job_id=f"800_{task.array_task_id}",
            raw_job_id=str(801 + task.array_task_id),
            array_job_id="800",
            array_task_id=task.array_task_id,
            name=job.scheduler_name,
            state="completed",
            scheduler_state="COMPLETED",
            exit_code=0,
            submit_time=moment - datetime.timedelta(seconds=45),
            start_time=moment,
            end_time=moment,
            elapsed_seconds=0,
            allocated_cpus=1,
            allocated_gpus=0,
            cpu_seconds=0.015,
        )
        services.job_task_settle(task_id=task.pk, runs=[run], final=run)
    services.job_state_refresh(job_id=job.pk)
    client.force_login(team.member)

    page = html(client.get(reverse("job-detail", args=[job.uuid])))

    status = page.by_id("job-status")
    assert status.find(data_field="state").text() == "Completed"
    assert status.find(data_field="started").text() == "2026-11-26 16:28:21"
    assert status.find(data_field="usage").text() == "0 units, elapsed under 1s, CPU time 0.030 s"
    # 0.03 s of CPU over one core for one second per task.
    assert status.find(data_field="efficiency").text() == "1.5 % CPU time over cores x elapsed"
    assert [cell_texts(row)[4] for row in body_rows(page, "job-tasks")] == ["under 1s"] * 2


def test_a_queued_jobs_page_polls_its_state_and_offers_to_cancel(client, team, allocation):
    job = submit(allocation, team.member, array="1,3,5", environment={"MODE": "fast"})
    client.force_login(team.member)

    page = html(client.get(reverse("job-detail", args=[job.uuid])))

    status = page.by_id("job-status")
    assert status.attrs["hx-get"] == reverse("job-status", args=[job.uuid])
    assert status.attrs["hx-trigger"] == "every 3s"
    assert status.find(data_field="efficiency").text() == "once the job has ended"
    assert page.by_id("job-cancel").attrs["action"] == reverse("job-cancel", args=[job.uuid])
    assert [row.attrs["data-task"] for row in body_rows(page, "job-tasks")] == ["1", "3", "5"]
    assert page.by_id("job-facts").find(data_field="environment").text() == "MODE=fast"
    output = page.by_id("job-output")
    assert output.attrs["hx-get"] == reverse("job-output", args=[job.uuid]) + "?stream=stdout"
    assert output.attrs["hx-trigger"] == "load"


def test_the_status_fragment_follows_the_job_and_stops_once_it_ended(client, team, allocation):
    job = submit(allocation, team.member)
    client.force_login(team.member)
    Job.objects.filter(pk=job.pk).update(
        state=JobState.PENDING, scheduler_job_id="77", state_reason="Resources"
    )

    pending = client.get(reverse("job-status", args=[job.uuid]))
    finish(job)
    ended = client.get(reverse("job-status", args=[job.uuid]))

    pending_status = html(pending).by_id("job-status")
    assert pending_status.find(data_field="state").text() == "Pending"
    # Slurm's reason code in words.
    assert pending_status.find(data_field="state-reason").text() == (
        "Waiting for cores or nodes to free up"
    )
    assert pending_status.attrs["hx-trigger"] == "every 3s"
    assert ended["Cache-Control"].startswith("max-age=0")
    ended_status = html(ended).by_id("job-status")
    assert ended_status.find(data_field="state").text() == "Completed"
    assert "hx-trigger" not in ended_status.attrs


def test_the_output_of_a_queued_job_says_it_has_not_started(client, team, allocation):
    job = submit(allocation, team.member)
    client.force_login(team.member)

    response = client.get(reverse("job-output", args=[job.uuid]), {"stream": "stderr"})

    assert response.status_code == 200
    fragment = html(response).by_id("job-output")
    assert fragment.attrs["data-stream"] == "stderr"
    assert fragment.attrs["hx-trigger"] == "every 5s"
    assert fragment.find(data_field="output-empty").text() == (
        "No output yet: the job has not reached the cluster."
    )


@pytest.mark.slurm
def test_the_output_of_a_cluster_that_cannot_be_reached_is_a_message_not_an_error(
    client, team, allocation
):
    # The factory's cluster pins a host key that the test cluster's sshd does not present.
    job = submit(allocation, team.member)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, scheduler_job_id="99")
    client.force_login(team.member)

    response = client.get(reverse("job-output", args=[job.uuid]))

    assert response.status_code == 200
    fragment = html(response).by_id("job-output")
    assert fragment.find(data_field="output-problem").text() == (
        "The cluster cannot be reached just now, so the output cannot be read. This part "
        "tries again by itself."
    )
    assert fragment.attrs["hx-trigger"] == "every 5s"


def test_cancelling_a_queued_job_ends_it_and_gives_its_units_back(client, team, allocation):
    job = submit(allocation, team.member, name="mistake")
    client.force_login(team.member)

    response = client.post(reverse("job-cancel", args=[job.uuid]), follow=True)

    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    page = html(response)
    assert messages_of(page) == [
        "mistake is cancelled before it reached the cluster; its reservation is back on the "
        "allocation."
    ]
    assert page.by_id("job-status").find(data_field="state").text() == "Cancelled"
    assert page.by_id("job-cancel") is None


def test_cancelling_an_ended_job_says_so_and_changes_nothing(client, team, allocation):
    job = finish(submit(allocation, team.member))
    client.force_login(team.member)

    response = client.post(reverse("job-cancel", args=[job.uuid]), follow=True)

    assert messages_of(html(response)) == ["The job has already ended."]
    job.refresh_from_db()
    assert (job.state, job.cancel_requested_at) == (JobState.COMPLETED, None)


def test_the_allocations_page_links_the_jobs_and_the_form_of_each_active_allocation(
    client, team, allocation
):
    closed = allocation_bought(team.organization)
    Allocation.objects.filter(pk=closed.pk).update(closed_at=timezone.now())
    client.force_login(team.member)

    page = html(client.get(reverse("organization-allocations", args=[team.organization.uuid])))

    submit_links = {
        row.attrs["data-allocation"]: [link.attrs["href"] for link in row.find_all("a")][1:]
        for row in body_rows(page, "allocations")
    }
    assert submit_links == {
        str(allocation.uuid): [
            reverse("job-submit", args=[allocation.uuid]),
            reverse("sweep-submit", args=[allocation.uuid]),
        ],
        str(closed.uuid): [],
    }
    assert page.by_id("organization-jobs").attrs["href"] == (
        f"{reverse('job-list')}?organization={team.organization.uuid}"
    )


def test_the_allocations_cards_carry_each_status_and_the_buttons_of_an_active_one(
    client, team, allocation
):
    """Below 768 px the table gives way to one card per allocation (the browser test checks
    which shows at which width): each with its status, and the active one with its forms."""
    closed = allocation_bought(team.organization)
    Allocation.objects.filter(pk=closed.pk).update(closed_at=timezone.now())
    client.force_login(team.member)

    page = html(client.get(reverse("organization-allocations", args=[team.organization.uuid])))

    cards = page.by_id("allocation-cards").find_all("li")
    assert [card.attrs["data-allocation-card"] for card in cards] == [
        str(closed.uuid),
        str(allocation.uuid),
    ]
    assert [card.find(data_field="status").text() for card in cards] == ["closed", "active"]
    assert [[link.attrs["href"] for link in card.find_all("a")][1:] for card in cards] == [
        [],
        [
            reverse("job-submit", args=[allocation.uuid]),
            reverse("sweep-submit", args=[allocation.uuid]),
        ],
    ]
    assert "d-md-none" in page.by_id("allocation-cards").classes
    assert "d-none" in page.by_id("allocations").parent.classes


def test_the_jobs_cards_carry_each_jobs_state_and_follow_it_with_the_rows(client, team, allocation):
    queued = submit(allocation, team.member, name="queued")
    ended = finish(submit(allocation, team.member, name="ended"))
    client.force_login(team.member)

    for url in (reverse("job-list"), reverse("job-list-rows")):
        live = html(client.get(url)).by_id("job-rows")

        cards = live.by_id("job-cards").find_all("li")
        assert [card.attrs["data-job-card"] for card in cards] == [
            str(ended.uuid),
            str(queued.uuid),
        ]
        assert [card.find(data_field="state").text() for card in cards] == ["Completed", "Queued"]
        assert cards[0].find(data_field="cost").text() == "1.00 USD"
        assert live.attrs["hx-trigger"] == "every 3s"
    assert html(client.get(reverse("job-list"))).by_id("jobs").find("th").text() == "Name"


# --- Jobs the team's own jobs submitted on the cluster, and jobs that ran again ----------------


def test_a_job_submitted_by_one_of_the_teams_jobs_shows_where_it_came_from(
    client, team, allocation
):
    job = tenant_job_ran(allocation, "9001", name="inner-step")
    client.force_login(team.member)

    page = html(client.get(reverse("job-detail", args=[job.uuid])))

    assert page.by_id("job-from-tenant").text() == (
        "Submitted on the cluster by one of your jobs (Slurm job 9001). The platform never had "
        "its script; it found the job under your team's account on the cluster and charges it "
        "to this allocation like any other."
    )
    assert page.by_id("job-script") is None
    assert page.by_id("job-facts").find(data_field="submitted-by").text() == (
        "one of your jobs, on the cluster"
    )
    # No output panel to load: a sentence says why.
    output = page.by_id("job-output")
    assert "hx-get" not in output.attrs
    assert output.attrs["data-field"] == "output-not-kept"
    assert output.text().startswith("The platform keeps no output of this job")
    status = page.by_id("job-status")
    assert status.find(data_field="scheduler-job-id").text() == "9001"
    assert status.find(data_field="cost").text() == "1.00 USD"


def test_the_output_fragment_of_such_a_job_says_it_is_not_kept_and_polls_nothing(
    client, team, allocation
):
    job = tenant_job_ran(allocation)
    client.force_login(team.member)

    response = client.get(reverse("job-output", args=[job.uuid]), {"stream": "stderr"})

    assert response.status_code == 200
    fragment = html(response).by_id("job-output")
    assert "hx-trigger" not in fragment.attrs
    assert fragment.attrs["data-field"] == "output-not-kept"
    assert "slurm-9001.out" in fragment.text()


def test_the_list_marks_the_jobs_the_teams_jobs_submitted(client, team, allocation):
    mine = finish(submit(allocation, team.member, name="driver"))
    theirs = tenant_job_ran(allocation, "9001", name="inner-step")
    client.force_login(team.member)

    rows = {
        row.attrs["data-job"]: row
        for row in body_rows(html(client.get(reverse("job-list"))), "jobs")
    }

    badge = rows[str(theirs.uuid)].find(data_field="origin")
    assert badge.text() == "from a job"
    assert badge.attrs["title"] == "Submitted on the cluster by one of your jobs (Slurm job 9001)"
    assert rows[str(mine.uuid)].find(data_field="origin") is None
    assert cell_texts(rows[str(theirs.uuid)])[2] == f"{allocation.cluster.name}/debug"


def test_a_job_that_requeued_itself_lists_each_charged_run(client, team, allocation):
    job = tenant_job_ran(allocation, "9002", elapsed=1800, requeued=True)
    plain = finish(submit(allocation, team.member))
    client.force_login(team.member)

    page = html(client.get(reverse("job-detail", args=[job.uuid])))

    first, second = JobRun.objects.filter(task__job=job).order_by("submit_time")
    assert [cell_texts(row) for row in body_rows(page, "job-runs")] == [
        [
            "9002",
            "Requeued by the job",
            f"{first.started_at:%Y-%m-%d %H:%M:%S}",
            "10m 00s",
            "0.166667",
            "0.33",
        ],
        ["9002", "Completed", f"{second.started_at:%Y-%m-%d %H:%M:%S}", "30m 00s", "0.5", "1.00"],
    ]
    requeued = body_rows(page, "job-runs")[0].find(data_field="state")
    assert "text-bg-warning" in requeued.classes
    assert html(client.get(reverse("job-detail", args=[plain.uuid]))).by_id("job-runs") is None


# --- New job and the output's download ---------------------------------------------------------


def test_new_job_goes_straight_to_the_form_of_the_one_active_allocation(client, team, allocation):
    client.force_login(team.member)

    response = client.get(reverse("job-new"))

    assert response.status_code == 302
    assert response["Location"] == reverse("job-submit", args=[allocation.uuid])


def test_new_job_of_an_organization_the_user_is_not_in_is_a_404(client, team, allocation):
    client.force_login(team.outsider)

    response = client.get(reverse("job-new"), {"organization": str(team.organization.uuid)})

    assert response.status_code == 404
    # And without one: the outsider's own organizations have no active allocation.
    page = html(client.get(reverse("job-new")))
    assert page.by_id("job-new-none") is not None
    assert page.by_id("job-new-allocations") is None


def test_the_output_download_refuses_a_task_that_is_not_a_number_and_is_empty_before_it_runs(
    client, team, allocation
):
    job = submit(allocation, team.member)
    client.force_login(team.member)
    url = reverse("job-output-download", args=[job.uuid])

    refused = client.get(url, {"task": "first"})
    queued = client.get(url, {"stream": "stderr"})

    assert (refused.status_code, refused.content) == (
        400,
        b"The task is a whole number, such as 0.",
    )
    assert queued.status_code == 200
    assert queued["Content-Disposition"] == f'attachment; filename="job-{job.uuid}.stderr.txt"'
    assert queued.content == b""
    client.force_login(team.outsider)
    assert client.get(url).status_code == 404
