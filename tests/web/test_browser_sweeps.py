"""The sweep pages in headless Chromium.

Without a cluster: a member opens the sweep form from the team's allocations, a ragged table is
refused beside the table with nothing written, a valid one lands on the sweep's page whose grid
follows the tasks' states without reloading (moved by the test, as the poll would), and the
results table appears once the rows are gathered, with its CSV download; at 390 px wide
nothing pans sideways and the console stays free of errors.

On the real test cluster: a 100-row sweep typed into the form and another posted to the API run
side by side, each 2 at a time, and each ends with the 100-row results table its script
computes (on the page, in the API and as CSV); the 5 rows of each that failed are retried
alone, with the page's button and with retry-failed, as new array jobs reserved and charged for
those 5 rows only, the ledger balanced."""

from __future__ import annotations

import csv
import io
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from billing.models import Transaction
from billing.selectors import ledger_verify
from marketplace.models import Cluster
from organizations.models import Membership
from scheduler_bridge import services
from scheduler_bridge.job_files import job_files_storage, stored_name
from scheduler_bridge.models import Job, JobFile, JobRun, JobTask, Sweep, SweepRow
from tests.conftest import client_for, local_cluster_root, wait_for
from tests.factories import (
    ClusterFactory,
    MembershipFactory,
    PartitionFactory,
    allocation_bought,
    cluster_on_testcluster,
    funded_organization,
)
from tests.web.test_browser_market import log_in, open_organization

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _console_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def _pans_sideways(page: Page) -> bool:
    return bool(
        page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    )


def test_the_sweep_form_grid_and_results_table(page: Page, live_server):
    base = live_server.url
    team = funded_organization("1000", name="Grid Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(
        team, partition=PartitionFactory(cpus=8, nodes=1, gpus=0), quantity=100, price="2.00"
    )
    errors = _console_errors(page)

    log_in(page, base, member.username)
    open_organization(page, "Grid Team")
    page.get_by_role("link", name="Allocations and bids").click()
    page.get_by_role("link", name=f"Run a sweep on {allocation.cluster.name}/debug").click()
    expect(page.get_by_role("heading", name="Run a parameter sweep")).to_be_visible()

    # A row with a value too few is refused beside the table, and nothing is written.
    page.get_by_label("Name").fill("grid sweep")
    table = page.get_by_label("Parameters (CSV)")
    table.fill("x,y\n1,2\n3\n")
    page.get_by_role("button", name="Run the sweep").click()
    expect(page.locator("#id_table ~ .invalid-feedback")).to_have_text(
        "Line 3 has 1 value; the header names 2 columns. Give that line one value per column "
        "(an empty value is two separators side by side), or put a value that holds a "
        "separator between double quotes."
    )
    assert Sweep.objects.count() == 0 and Job.objects.count() == 0

    # Six rows, two at a time, the last printed line as the result.
    page.get_by_label("Parameters (CSV)").fill(
        "x,y\n" + "".join(f"{i},{i + 1}\n" for i in range(6))
    )
    page.get_by_label("At most at once").fill("2")
    page.get_by_label("Time limit per task (minutes)").fill("30")
    page.get_by_role("button", name="Run the sweep").click()
    expect(page.get_by_role("heading", name="grid sweep")).to_be_visible()
    expect(page.locator(".alert-success")).to_contain_text(
        "6 rows queued as one array job, at most 2 at once; it reserves 3 units"
    )
    sweep = Sweep.objects.get()
    job = sweep.sweep_jobs.get().job
    assert (job.array, job.task_count, job.reserved_units) == ("0-5%2", 6, Decimal("3"))
    cells = page.locator("#sweep-grid li")
    expect(cells).to_have_count(6)
    expect(page.locator("#sweep-grid li[data-state=queued]")).to_have_count(6)
    expect(page.locator("#sweep-results tbody tr")).to_have_count(6)

    # The grid follows the tasks' states without reloading.
    page.evaluate("window.notReloaded = true")
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(state="running", scheduler_job_id="77", started_at=now)
    JobTask.objects.filter(job=job, array_task_id__in=[0, 1]).update(state="running")
    expect(page.locator("#sweep-grid li[data-state=running]")).to_have_count(2, timeout=10_000)
    expect(cells.nth(0)).to_have_attribute("title", "Row 0: Running")

    # The rows end (one fails), the job's files are fetched, the results gathered.
    for index in range(6):
        JobTask.objects.filter(job=job, array_task_id=index).update(
            state="failed" if index == 4 else "completed",
            exit_code=1 if index == 4 else 0,
            ended_at=now,
        )
    storage = job_files_storage()
    for index in range(6):
        content = f"working\n{index * (index + 1)}\n".encode() if index != 4 else b""
        stored = storage.save(
            stored_name(job.uuid, "result", f"stdout-{index}.txt"), ContentFile(content)
        )
        JobFile.objects.create(
            job=job, kind="result", name=f"stdout-{index}.txt", size=len(content), stored=stored
        )
    Job.objects.filter(pk=job.pk).update(state="failed", ended_at=now, results_state="ready")
    services.sweep_results_gather(job_id=job.pk)

    expect(page.locator("[data-field=sweep-state]")).to_have_text(
        "Ended, results gathered", timeout=10_000
    )
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator("#sweep-grid li[data-state=completed]")).to_have_count(5)
    expect(page.locator("#sweep-grid li[data-state=failed]")).to_have_count(1)
    results = page.locator("#sweep-results tbody tr")
    expect(results.nth(3).locator("[data-field=result]")).to_have_text("12")
    expect(results.nth(4)).to_have_attribute("data-result-state", "failed")
    expect(results.nth(4)).to_contain_text("The task ended failed, exit code 1.")
    expect(page.get_by_role("button", name="Retry the 1 failed row")).to_be_visible()

    with page.expect_download() as download_info:
        page.locator("#sweep-results-csv").click()
    with open(download_info.value.path()) as downloaded:
        lines = list(csv.reader(io.StringIO(downloaded.read())))
    assert [line[:5] for line in lines] == [
        ["row", "x", "y", "result", "result_state"],
        *[
            [
                str(i),
                str(i),
                str(i + 1),
                "" if i == 4 else str(i * (i + 1)),
                "failed" if i == 4 else "ok",
            ]
            for i in range(6)
        ],
    ]

    # At a phone's width nothing pans sideways: the form, the grid, the table (it scrolls
    # inside its own box).
    page.set_viewport_size({"width": 390, "height": 800})
    page.reload()
    expect(page.locator("#sweep-grid li")).to_have_count(6)
    assert not _pans_sideways(page)
    page.goto(f"{base}/allocations/{allocation.uuid}/sweeps/new/")
    assert not _pans_sideways(page)
    page.goto(f"{base}/sweeps/")
    expect(page.locator("#sweep-list")).to_contain_text("grid sweep")
    assert not _pans_sideways(page)
    # The one message is the browser noting the refused form's 400, as it does for any page
    # answered with an error status; no script failed.
    assert errors == [
        "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    ]


@pytest.mark.parametrize("width", [1280, 390])
def test_a_pasted_table_runs_and_a_failed_row_links_to_its_stderr_and_is_retried_alone(
    page: Page, live_server, settings, tmp_path_factory, no_worker_takes_the_tasks, width
):
    """A range copied from a spreadsheet (tab-separated, decimal commas) pasted into the form
    runs one task per row. Once the rows ended, one of them failed: its row links to its
    task's stderr and exit code on the job's page, which opens on that stream of that task;
    "Retry the 1 failed row" says one row runs again. On the demo's local backend, whose
    output files the test writes where the task would; at 390 px nothing pans sideways."""
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    page.set_viewport_size({"width": width, "height": 844})
    base = live_server.url
    team = funded_organization("1000", name="Paste Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    cluster = ClusterFactory(name="laptop", backend=Cluster.Backend.LOCAL, ssh_host="", ssh_user="")
    allocation = allocation_bought(
        team, partition=PartitionFactory(cluster=cluster, name="local", cpus=4, gpus=0)
    )
    errors = _console_errors(page)

    log_in(page, base, member.username)
    page.goto(f"{base}{reverse('sweep-submit', args=[allocation.uuid])}")
    page.get_by_label("Name").fill("pasted sweep")
    page.get_by_label("Parameters (CSV)").fill("rate\tmomentum\n0,1\t0,9\n0,2\t0,8\n0,3\t0,7\n")
    page.get_by_label("Time limit per task (minutes)").fill("30")
    page.get_by_role("button", name="Run the sweep").click()
    expect(page.locator(".alert-success")).to_contain_text(
        "pasted sweep: 3 rows queued as one array job"
    )
    sweep = Sweep.objects.get()
    assert [row.values for row in sweep.rows.order_by("index")] == [
        ["0,1", "0,9"],
        ["0,2", "0,8"],
        ["0,3", "0,7"],
    ]

    # Row 1 fails with exit code 3 and a message on its stderr; the others complete.
    job = sweep.sweep_jobs.get().job
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(scheduler_job_id="1001", submitted_at=now)
    for index in range(3):
        JobTask.objects.filter(job=job, array_task_id=index).update(
            state="failed" if index == 1 else "completed",
            exit_code=3 if index == 1 else 0,
            ended_at=now,
        )
    folder = Path(settings.LOCAL_CLUSTER_ROOT) / job.directory
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stderr-1.txt").write_text("ValueError: momentum 0,8 is not a number\n")
    storage = job_files_storage()
    for index in (0, 2):
        stored = storage.save(
            stored_name(job.uuid, "result", f"stdout-{index}.txt"), ContentFile(b"0.5\n")
        )
        JobFile.objects.create(
            job=job, kind="result", name=f"stdout-{index}.txt", size=4, stored=stored
        )
    Job.objects.filter(pk=job.pk).update(state="failed", ended_at=now, results_state="ready")
    services.sweep_results_gather(job_id=job.pk)

    expect(page.locator("[data-field=sweep-state]")).to_have_text(
        "Ended, results gathered", timeout=10_000
    )
    failed = page.locator("#sweep-results tbody tr").nth(1)
    expect(failed).to_have_attribute("data-result-state", "failed")
    link = failed.locator("[data-field=row-stderr]")
    expect(link).to_have_text("stderr and exit code 3 of row 1")
    expect(page.locator("#sweep-results [data-field=row-stderr]")).to_have_count(1)
    retry = page.get_by_role("button", name="Retry the 1 failed row")
    expect(retry).to_have_text("Retry the 1 failed row")
    assert not _pans_sideways(page)

    link.click()
    expect(page.get_by_role("heading", name="pasted sweep")).to_be_visible()
    output = page.locator("#job-output")
    expect(output).to_have_attribute("data-stream", "stderr")
    expect(page.locator("#job-output-task")).to_have_value("1")
    expect(page.locator("#job-output-text")).to_have_text(
        "ValueError: momentum 0,8 is not a number"
    )
    expect(page.locator("#job-tasks tr[data-task='1']")).to_contain_text("Failed")
    expect(page.locator("#job-tasks tr[data-task='1'] td").nth(3)).to_have_text("3")
    assert not _pans_sideways(page)

    page.go_back()
    page.get_by_role("button", name="Retry the 1 failed row").click()
    expect(page.locator(".alert-success")).to_have_text(
        "The 1 failed row runs again as a new array job; it reserves 0.5 units."
    )
    assert sweep.sweep_jobs.count() == 2
    assert not _pans_sideways(page)
    assert errors == []


# --- On the real test cluster -----------------------------------------------------------------

# Typed into the page: the result is its last stdout line. Rows whose n ends in 7 of 20 fail
# once (a marker in the tenant's home, under the sweep's own token, lets their retry through).
PAGE_SCRIPT = """#!/usr/bin/env python3
import os, sys, time
n, w, token = os.environ["n"], os.environ["w"], os.environ["token"]
assert sys.argv[1:] == [n, w, token], sys.argv
marker = os.path.join(os.environ["HOME"], f"sweep-page-marker-{token}-{n}")
if int(n) % 20 == 7:
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(5)
    time.sleep(1.2)  # a retried row runs over a second: its charge is not zero
print("computing")
print(int(n) ** 2 - int(w))
"""
PAGE_FAILING = {7, 27, 47, 67, 87}
# Posted to the API: the result is a file the task writes in its folder.
API_SCRIPT = """#!/usr/bin/env python3
import os, sys, time
x, y, label, token = (os.environ[name] for name in ("x", "y", "label", "token"))
assert sys.argv[1:] == [x, y, label, token], sys.argv
marker = os.path.join(os.environ["HOME"], f"sweep-api-marker-{token}-{x}")
if label == "flaky":
    if not os.path.exists(marker):
        open(marker, "w").close()
        sys.exit(3)
    time.sleep(1.2)
os.makedirs("out", exist_ok=True)
with open("out/value.txt", "w") as result:
    result.write(f"{int(x) * float(y) + 1!r}\\n")
"""
API_FAILING = {3, 17, 42, 64, 99}


def _api_table(token: str) -> tuple[str, dict[int, str]]:
    lines = ["x,y,label,token"]
    expected = {}
    for x in range(100):
        y = f"{(x % 7) * 0.25 + 0.5}"
        lines.append(f"{x},{y},{'flaky' if x in API_FAILING else 'plain'},{token}")
        expected[x] = repr(x * float(y) + 1)
    return "\r\n".join(lines) + "\r\n", expected


def _api_wait_ended(client, sweep_id: str, timeout: float) -> dict:
    return wait_for(
        lambda: (
            (data := client.get(f"/api/v1/sweeps/{sweep_id}/").json())["state"] == "ended" and data
        ),
        timeout=timeout,
        interval=1,
    )


def _charges(reference: str | None = None):
    charges = Transaction.objects.filter(kind=Transaction.Kind.CHARGE)
    return charges if reference is None else charges.filter(reference=reference)


def test_a_100_row_sweep_through_the_page_and_one_through_the_api_run_on_the_cluster(
    page: Page, live_server, testcluster, celery_worker, poller
):
    """Both sweeps run side by side on the cluster's 2 CPUs (each at most 2 at once), so that
    the two hundred tasks share one wait; each is then retried, its failed rows alone."""
    base = live_server.url
    cluster = cluster_on_testcluster(testcluster, pool="fixed")
    team = funded_organization("1000", name="Sweep Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=40, price="3.00"
    )
    token = uuid.uuid4().hex[:12]
    page_expected = {n: str(n**2 - (n % 9)) for n in range(100)}
    api_text, api_expected = _api_table(token)
    client = client_for(member)
    errors = _console_errors(page)

    # Through the page: the script and a 100-row table typed into the form.
    log_in(page, base, member.username)
    page.goto(f"{base}/allocations/{allocation.uuid}/sweeps/new/")
    page.get_by_label("Name").fill("page squares")
    page.get_by_label("Script").fill(PAGE_SCRIPT)
    page.get_by_label("Parameters (CSV)").fill(
        "n,w,token\n" + "".join(f"{n},{n % 9},{token}\n" for n in range(100))
    )
    page.get_by_label("Time limit per task (minutes)").fill("2")
    page.get_by_label("At most at once").fill("2")
    started = time.monotonic()
    page.get_by_role("button", name="Run the sweep").click()
    expect(page.get_by_role("heading", name="page squares")).to_be_visible()
    expect(page.locator("#sweep-grid li")).to_have_count(100)

    # Through the API, at the same moment: a file result.
    answer = client.post(
        "/api/v1/sweeps/",
        {
            "allocation": str(allocation.uuid),
            "name": "api products",
            "script": API_SCRIPT,
            "table": api_text,
            "time_limit_minutes": 2,
            "concurrency": 2,
            "result_source": "file",
            "result_file": "out/value.txt",
        },
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    api_sweep = answer.json()
    [api_first] = api_sweep["jobs"]
    assert (api_first["array"], api_first["task_count"]) == ("0-99%2", 100)
    # 1 core x 2 minutes for each of the 100 rows, as any array reserves
    assert Decimal(api_first["reserved_units"]) == Decimal("0.033334") * 100
    assert api_sweep["rows"][5]["parameters"] == {
        "x": "5",
        "y": "1.75",
        "label": "plain",
        "token": token,
    }

    # The page's grid shows rows completing as they go, then its sweep ends.
    expect(page.locator("#sweep-grid li[data-state=completed]").first).to_be_visible(timeout=60_000)
    expect(page.locator("[data-field=sweep-state]")).to_have_text(
        "Ended, results gathered", timeout=240_000
    )
    print(f"\n200 rows of two sweeps: the page's ended after {time.monotonic() - started:.1f} s")
    # As Slurm's accounting recorded the runs (a task the poll never saw running has no
    # start of its own).
    page_runs = JobRun.objects.filter(task__job__sweep_job__sweep__name="page squares")
    first_start = min(run.started_at for run in page_runs if run.started_at)
    last_end = max(run.ended_at for run in page_runs if run.ended_at)
    print(f"Slurm ran its 100 tasks in {(last_end - first_start).total_seconds():.0f} s")
    expect(page.locator("#sweep-grid li[data-state=completed]")).to_have_count(95)
    expect(page.locator("#sweep-grid li[data-state=failed]")).to_have_count(5)
    rows = page.locator("#sweep-results tbody tr")
    expect(rows).to_have_count(100)
    shown = {
        int(row.get_attribute("data-row")): (
            row.get_attribute("data-result-state"),
            row.locator("[data-field=result]").inner_text(),
        )
        for row in rows.all()
    }
    assert shown == {
        n: ("failed", "") if n in PAGE_FAILING else ("ok", page_expected[n]) for n in range(100)
    }

    api_ended = _api_wait_ended(client, api_sweep["id"], timeout=120)
    print(f"the API's ended after {time.monotonic() - started:.1f} s")
    results = client.get(f"/api/v1/sweeps/{api_sweep['id']}/results/").json()
    assert results["count"] == 100 and results["columns"] == ["x", "y", "label", "token"]
    for row in results["rows"]:
        if row["index"] in API_FAILING:
            assert (row["state"], row["result_state"], row["exit_code"]) == ("failed", "failed", 3)
            assert (row["result"], row["result_detail"]) == (
                "",
                "The task ended failed, exit code 3.",
            )
        else:
            assert (row["state"], row["result_state"]) == ("completed", "ok"), row
            assert row["result"] == api_expected[row["index"]], row
    assert [row["index"] for row in results["rows"]] == list(range(100))
    assert api_ended["counts"] == {
        "states": {"completed": 95, "failed": 5},
        "results": {"ok": 95, "failed": 5},
    }

    # Every task's run was recorded and settled once; those that ran under a second of
    # Slurm's elapsed time cost nothing and post no charge.
    page_sweep = Sweep.objects.get(name="page squares")
    page_first = page_sweep.sweep_jobs.get().job
    api_first_job = Job.objects.get(uuid=api_first["id"])
    for job in (page_first, api_first_job):
        runs = JobRun.objects.filter(task__job=job)
        assert runs.count() == 100
        assert _charges(str(job.uuid)).count() == runs.exclude(cost=0).count()
    charges_before = _charges().count()

    # Retried: the page's with its button, the API's with retry-failed, side by side again.
    page.get_by_role("button", name="Retry the 5 failed rows").click()
    expect(page.locator(".alert-success")).to_contain_text("The 5 failed rows run again")
    retried = client.post(f"/api/v1/sweeps/{api_sweep['id']}/retry-failed/")
    assert retried.status_code == 201, retried.json()
    api_retry = retried.json()["jobs"][1]
    assert (api_retry["attempt"], api_retry["array"], api_retry["task_count"]) == (2, "0-4%2", 5)
    assert Decimal(api_retry["reserved_units"]) == Decimal("0.033334") * 5
    again = client.post(f"/api/v1/sweeps/{api_sweep['id']}/retry-failed/")
    assert again.status_code == 409 and again.json()["code"] == "sweep_still_running"

    expect(page.locator("[data-field=sweep-state]")).to_have_text(
        "Ended, results gathered", timeout=90_000
    )
    expect(page.locator("#sweep-grid li[data-state=completed]")).to_have_count(100)
    expect(page.locator("#sweep-results tbody tr[data-result-state=ok]")).to_have_count(100)
    shown_again = {
        int(row.get_attribute("data-row")): row.locator("[data-field=result]").inner_text()
        for row in page.locator("#sweep-results tbody tr").all()
    }
    assert shown_again == page_expected
    api_ended = _api_wait_ended(client, api_sweep["id"], timeout=60)
    print(f"both retries ended after {time.monotonic() - started:.1f} s")
    assert api_ended["counts"]["results"] == {"ok": 100}
    rows = client.get(f"/api/v1/sweeps/{api_sweep['id']}/results/").json()["rows"]
    assert {row["index"]: row["result"] for row in rows} == api_expected
    assert {row["index"] for row in rows if row["attempts"] == 2} == API_FAILING
    assert {row["job"] for row in rows if row["index"] in API_FAILING} == {api_retry["id"]}

    # Each retry ran and was charged for its 5 rows alone; nothing else was charged again.
    page_retry_job = page_sweep.sweep_jobs.get(attempt=2).job
    api_retry_job = Job.objects.get(uuid=api_retry["id"])
    for job in (page_retry_job, api_retry_job):
        assert job.task_count == 5
        runs = JobRun.objects.filter(task__job=job)
        assert runs.count() == 5 and all(run.cost > 0 for run in runs)
        assert _charges(str(job.uuid)).count() == 5
        assert sum(run.cost for run in runs) == job.cost
    assert _charges().count() == charges_before + 10
    assert JobRun.objects.filter(task__job=page_first).count() == 100
    assert JobRun.objects.filter(task__job=api_first_job).count() == 100
    assert Decimal(api_ended["jobs"][1]["cost"]) == api_retry_job.cost
    assert ledger_verify() == []

    download = client.get(f"/api/v1/sweeps/{api_sweep['id']}/results.csv")
    assert download.status_code == 200 and download["Content-Type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(download.content.decode())))
    assert lines[0] == [
        "row",
        "x",
        "y",
        "label",
        "token",
        "result",
        "result_state",
        "task_state",
        "exit_code",
        "detail",
    ]
    assert [(int(line[0]), line[5], line[6]) for line in lines[1:]] == [
        (index, api_expected[index], "ok") for index in range(100)
    ]
    assert SweepRow.objects.filter(sweep=page_sweep, attempts=2).count() == 5
    assert errors == []
