"""The job pages of a cluster on the local backend (the demo's) say plainly when its jobs are not
isolated from each other: where bubblewrap is missing and the sandbox mode is "auto", the jobs
list, a job's page and the submission form carry the warning; sandboxed, a job's page says so
in a quiet line. Pages of Slurm clusters say nothing of it."""

from typing import Any

import pytest
from django.urls import reverse

from marketplace.models import Allocation, Cluster
from tests.factories import ClusterFactory, PartitionFactory, allocation_bought
from tests.web.test_job_pages import submit
from tests.web.test_money_pages import Node, html

pytestmark = pytest.mark.django_db

WARNING = (
    "Demo jobs on this machine are not isolated from each other: install bubblewrap "
    "(<code>apt install bubblewrap</code>) to sandbox them."
)
SANDBOXED = (
    "Sandboxed with bubblewrap: the job sees its own folder and the system, read-only, and no "
    "network."
)


@pytest.fixture
def local_allocation(team: Any) -> Allocation:
    cluster = ClusterFactory(backend=Cluster.Backend.LOCAL, ssh_host="", ssh_user="")
    partition = PartitionFactory(cluster=cluster, name="local", cpus=2, nodes=1, gpus=0)
    return allocation_bought(team.organization, partition=partition, quantity=10, price="6.00")


@pytest.fixture
def slurm_allocation(team: Any) -> Allocation:
    return allocation_bought(
        team.organization, partition=PartitionFactory(cpus=8, nodes=2, gpus=0), quantity=10
    )


@pytest.fixture
def without_bubblewrap(settings: Any) -> None:
    settings.LOCAL_BACKEND_SANDBOX = "auto"
    settings.LOCAL_BACKEND_BWRAP = "/nonexistent/bwrap"


def pages(allocation: Allocation, user: Any) -> list[str]:
    job = submit(allocation, user)
    return [
        reverse("job-list"),
        reverse("job-detail", args=[job.uuid]),
        reverse("job-submit", args=[allocation.uuid]),
    ]


def notice(client: Any, url: str) -> Node | None:
    response = client.get(url)
    assert response.status_code == 200, url
    return html(response).by_id("sandbox-notice")


def test_without_bubblewrap_every_job_page_of_a_local_cluster_warns_that_jobs_are_not_isolated(
    client, team, local_allocation, without_bubblewrap
):
    client.force_login(team.member)

    for url in pages(local_allocation, team.member):
        response = client.get(url)

        assert response.status_code == 200, url
        assert html(response).by_id("sandbox-notice") is not None, url
        assert WARNING in response.content.decode(), url


def test_the_pages_of_a_slurm_cluster_say_nothing_of_the_local_sandbox(
    client, team, slurm_allocation, without_bubblewrap
):
    client.force_login(team.member)

    for url in pages(slurm_allocation, team.member):
        assert notice(client, url) is None, url


def test_sandboxed_only_a_local_jobs_page_says_so_quietly(client, team, local_allocation, settings):
    # The test settings: sandbox required, bubblewrap installed (scripts/test-services).
    assert settings.LOCAL_BACKEND_SANDBOX == "required"
    client.force_login(team.member)
    jobs, job, form = pages(local_allocation, team.member)

    assert notice(client, jobs) is None
    assert notice(client, form) is None
    line = notice(client, job)
    assert line is not None and line.tag == "p"
    assert line.text() == SANDBOXED


def test_a_required_sandbox_that_cannot_be_had_is_shown_as_jobs_that_cannot_run(
    client, team, local_allocation, settings
):
    settings.LOCAL_BACKEND_BWRAP = "/nonexistent/bwrap"
    client.force_login(team.member)

    for url in pages(local_allocation, team.member):
        node = notice(client, url)

        assert node is not None, url
        assert node.text() == (
            "Jobs on this cluster cannot run on this machine: jobs must be sandboxed here "
            "(LOCAL_BACKEND_SANDBOX=required) and bubblewrap is not installed: "
            "`/nonexistent/bwrap` was not found."
        ), url
