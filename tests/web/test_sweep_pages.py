"""The sweep pages through Django's test client: a table pasted from a spreadsheet is read as
a table, a failed row links to its task's stderr and exit code on its job's page, and the
counts are said in the singular where they are one. The browser test walks the same pages."""

from typing import Any

import pytest
from django.urls import reverse

from marketplace.models import Allocation
from scheduler_bridge import services
from scheduler_bridge.models import Job, Sweep, SweepJob
from tests.conftest import client_for
from tests.factories import PartitionFactory, allocation_bought
from tests.scheduler_bridge.test_sweeps_api import _body, _ended_with_files
from tests.web.test_market_pages import body_rows, messages_of
from tests.web.test_money_pages import html

pytestmark = pytest.mark.django_db


@pytest.fixture
def allocation(team: Any) -> Allocation:
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=100
    )


def _form(**changes: str) -> dict[str, str]:
    return {
        "name": "pasted",
        "script": "#!/bin/bash\necho $x\n",
        "table": "x,y\n1,2\n",
        "time_limit_minutes": "30",
        "cpus_per_task": "1",
        "concurrency": "2",
        "result_source": "stdout",
        "result_file": "",
        **changes,
    }


def test_a_table_pasted_from_a_spreadsheet_is_one_task_per_row(client, team, allocation):
    client.force_login(team.member)

    response = client.post(
        reverse("sweep-submit", args=[allocation.uuid]),
        _form(table="x\ty\r\n1\t0,5\r\n2\t1,5\r\n", name="pasted"),
        follow=True,
    )

    assert response.status_code == 200
    sweep = Sweep.objects.get()
    assert (sweep.columns, [row.values for row in sweep.rows.order_by("index")]) == (
        ["x", "y"],
        [["1", "0,5"], ["2", "1,5"]],
    )
    assert messages_of(html(response)) == [
        "pasted: 2 rows queued as one array job, at most 2 at once; it reserves 1 units of "
        "the allocation until it ends."
    ]


def test_a_ragged_pasted_table_is_refused_beside_it_with_what_to_do(client, team, allocation):
    client.force_login(team.member)

    response = client.post(
        reverse("sweep-submit", args=[allocation.uuid]), _form(table="x\ty\n1\t2\n3\n")
    )

    assert response.status_code == 400
    feedback = html(response).by_id("id_table").parent.find(css_class="invalid-feedback")
    assert feedback.text() == (
        "Line 3 has 1 value; the header names 2 columns. Give that line one value per column "
        "(an empty value is two separators side by side), or put a value that holds a "
        "separator between double quotes."
    )
    assert Sweep.objects.count() == 0 and Job.objects.count() == 0


def test_a_failed_row_links_to_its_tasks_stderr_and_exit_code_and_is_retried_alone(
    client, team, allocation
):
    sweep_id = (
        client_for(team.member)
        .post("/api/v1/sweeps/", _body(allocation, result_source="stdout"), format="json")
        .json()["id"]
    )
    job = _ended_with_files(
        sweep_id,
        ["completed", "failed", "completed"],
        {"stdout-0.txt": b"1\n", "stdout-2.txt": b"3\n"},
    )
    services.sweep_results_gather(job_id=job.pk)
    client.force_login(team.member)

    page = html(client.get(reverse("sweep-detail", args=[sweep_id])))

    rows = body_rows(page, "sweep-results")
    assert [row.find(data_field="row-stderr") is None for row in rows] == [True, False, True]
    link = rows[1].find(data_field="row-stderr")
    assert link.attrs["href"] == (
        f"{reverse('job-detail', args=[job.uuid])}?stream=stderr&task=1#job-output-box"
    )
    assert link.text() == "stderr and exit code 1 of row 1"
    assert page.by_id("sweep-retry").find("button").text() == "Retry the 1 failed row"
    assert page.find(css_class="card-body").text().startswith("3 rows, at most 2 at once")

    retried = client.post(reverse("sweep-retry-failed", args=[sweep_id]), follow=True)

    assert messages_of(html(retried)) == [
        "The 1 failed row runs again as a new array job; it reserves 0.5 units."
    ]
    retry = SweepJob.objects.get(sweep__uuid=sweep_id, attempt=2).job
    assert (retry.array, retry.task_count) == ("0-0%2", 1)


def test_the_job_page_opens_the_output_on_the_stream_and_task_its_link_names(
    client, team, allocation
):
    sweep_id = (
        client_for(team.member).post("/api/v1/sweeps/", _body(allocation), format="json").json()
    )["id"]
    job = SweepJob.objects.get(sweep__uuid=sweep_id).job
    client.force_login(team.member)
    output = reverse("job-output", args=[job.uuid])

    def opened(query: str) -> str:
        response = client.get(reverse("job-detail", args=[job.uuid]) + query)
        return html(response).by_id("job-output").attrs["hx-get"]

    assert opened("?stream=stderr&task=2") == f"{output}?stream=stderr&task=2"
    assert opened("") == f"{output}?stream=stdout"
    # A task the array does not have, or no number: the first task's, as without a query.
    assert opened("?stream=stderr&task=9") == f"{output}?stream=stderr"
    assert opened("?stream=bogus&task=x") == f"{output}?stream=stdout"
