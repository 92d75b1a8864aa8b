"""The job pages' files and quote: the form takes input files (refused ones beside the field,
nothing written), the job's page lists its inputs and its results with download links, one by
one and as a tar.gz, and the form's Quote button shows the quote."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from scheduler_bridge.models import Job, JobFile
from tests.scheduler_bridge.test_job_files_api import _results
from tests.web.test_job_pages import allocation, form_data  # noqa: F401 - the fixture
from tests.web.test_money_pages import field_block, html

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage_root(settings: Any, tmp_path: Any) -> Any:
    settings.JOB_FILES_ROOT = tmp_path / "job-files"
    return settings.JOB_FILES_ROOT


def test_the_form_takes_input_files_and_the_page_lists_them(client, team, allocation):  # noqa: F811
    client.force_login(team.member)
    files = [SimpleUploadedFile("in.csv", b"a,b\n1,2\n"), SimpleUploadedFile("run.cfg", b"x=1")]

    response = client.post(
        reverse("job-submit", args=[allocation.uuid]), {**form_data(), "input_files": files}
    )

    assert response.status_code == 302, response.content.decode()[:500]
    job = Job.objects.get()
    assert sorted(job.files.values_list("name", "size")) == [("in.csv", 8), ("run.cfg", 3)]
    page = html(client.get(response["Location"]))
    listed = page.find_all(css_class="font-monospace")
    assert {"in.csv", "run.cfg"} <= {node.text() for node in listed}


def test_a_refused_input_file_is_shown_beside_the_field_and_nothing_is_written(
    client,
    team,
    allocation,  # noqa: F811
    settings,
):
    settings.JOB_INPUT_FILE_MAX_BYTES = 4
    client.force_login(team.member)

    response = client.post(
        reverse("job-submit", args=[allocation.uuid]),
        {**form_data(), "input_files": [SimpleUploadedFile("big.bin", b"12345")]},
    )

    assert response.status_code == 413
    _, errors = field_block(html(response), "input_files")
    assert errors and "larger than 4 bytes" in errors[0]
    assert Job.objects.count() == 0 and JobFile.objects.count() == 0


def test_the_page_lists_results_with_links_that_download_them(client, team, allocation, user):  # noqa: F811
    client.force_login(team.member)
    client.post(reverse("job-submit", args=[allocation.uuid]), form_data())
    job = Job.objects.get()
    files = {"stdout.txt": b"hello\n", "out/table.csv": b"1,2\n" * 1000}
    _results(job, files)

    page = client.get(reverse("job-detail", args=[job.uuid])).content.decode()
    for name in files:
        assert reverse("job-file", args=[job.uuid, name]) in page
    assert reverse("job-files-archive", args=[job.uuid]) in page
    assert 'hx-trigger="every 3s"' not in page  # settled: the card stops asking
    for name, content in files.items():
        download = client.get(reverse("job-file", args=[job.uuid, name]))
        assert b"".join(download.streaming_content) == content
    archive = client.get(reverse("job-files-archive", args=[job.uuid]))
    with tarfile.open(fileobj=io.BytesIO(b"".join(archive.streaming_content)), mode="r:gz") as tar:
        assert {name: tar.extractfile(name).read() for name in tar.getnames()} == files  # type: ignore[union-attr]
    client.force_login(user)
    assert client.get(reverse("job-file", args=[job.uuid, "stdout.txt"])).status_code == 404


def test_the_quote_button_shows_the_quote_or_why_not(client, team, allocation):  # noqa: F811
    client.force_login(team.member)
    url = reverse("job-quote", args=[allocation.uuid])

    quote = html(client.post(url, form_data(time_limit_minutes="90", ntasks="2")))
    units = quote.find(**{"data-field": "quote-units"})
    after = quote.find(**{"data-field": "quote-allocation-after"})
    assert units is not None and units.text() == "3"
    assert after is not None and after.text() == "97"
    assert quote.find(**{"data-field": "quote-start"}) is not None
    assert Job.objects.count() == 0

    refused = html(client.post(url, form_data(time_limit_minutes="6000", ntasks="8")))
    assert refused.find(**{"data-field": "quote-problem"}) is not None
