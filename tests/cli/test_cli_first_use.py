"""What a new user trips over in the command-line client (issue 30, "The CLI"), run as a user
runs it: `computeshare` as a subprocess against a live gunicorn. The offers need no log-in;
ids as the pages show them (the first 8 characters) are taken wherever unique, and the
candidates named where not; `jobs submit` picks the only active allocation; a wrong password
and a server that does not answer say what they are, with their exit status.

No test here reaches the Slurm test cluster: the jobs submitted run on the `local` backend."""

from __future__ import annotations

import json
import uuid

import pytest

from marketplace.models import Allocation, Cluster, Offer
from organizations.models import Membership
from scheduler_bridge.models import Job
from tests.cli import test_cli_end_to_end as end_to_end
from tests.cli.test_cli_end_to_end import log_in, run
from tests.conftest import local_cluster_root
from tests.factories import (
    PASSWORD,
    ClusterFactory,
    MembershipFactory,
    OfferFactory,
    PartitionFactory,
    allocation_bought,
    funded_organization,
)

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

# The end-to-end tests' gunicorn on the test database, one for this module too.
cli_server = end_to_end.cli_server

TWIN_A = uuid.UUID("abcd1234-0000-4000-8000-000000000001")
TWIN_B = uuid.UUID("abcd1234-ffff-4000-8000-000000000002")
LONER = uuid.UUID("1decda79-2d50-402d-a43a-48c9cf1c773d")


def renamed(model: type, pk: int, new: uuid.UUID) -> None:
    model.objects.filter(pk=pk).update(uuid=new)  # type: ignore[attr-defined]


@pytest.fixture
def local_partition(settings, tmp_path_factory):
    """A partition of a cluster on the `local` backend: what the worker submits there runs as
    a process of this machine, never on the Slurm test cluster."""
    settings.LOCAL_CLUSTER_ROOT = local_cluster_root(tmp_path_factory)
    cluster = ClusterFactory(backend=Cluster.Backend.LOCAL, ssh_host="", ssh_user="")
    return PartitionFactory(cluster=cluster, name="local", cpus=2, nodes=1, gpus=0)


def test_a_visitor_lists_and_reads_offers_without_logging_in(cli_server, tmp_path):
    # Given two open offers and nobody logged in (no config file at all),
    offer = OfferFactory(quantity=120)
    other = OfferFactory(quantity=80)
    renamed(Offer, offer.pk, LONER)
    home = tmp_path / "visitor"
    url = ["--url", cli_server.base_url]

    # when a visitor lists them, reads one by the 8 characters the pages show, and the price
    # history,
    listed = run(*url, "--json", "offers", "list", home=home)
    table = run(*url, "offers", "list", home=home)
    shown = run(*url, "--json", "offers", "show", str(LONER)[:8], home=home)
    history = run(*url, "--json", "offers", "price-history", home=home)

    # then each answers as the pages do, without a token,
    assert listed.returncode == 0, listed.stderr
    assert sorted(row["id"] for row in json.loads(listed.stdout)) == sorted(
        [str(LONER), str(other.uuid)]
    )
    assert table.returncode == 0, table.stderr
    assert str(LONER) in table.stdout
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == str(LONER)
    assert history.returncode == 0, history.stderr
    assert json.loads(history.stdout) == []
    # and what needs an organization still asks for a log-in.
    buy = run(*url, "buy", str(LONER)[:8], "--quantity", "1", home=home)
    assert buy.returncode == 3
    assert "[not_logged_in]" in buy.stderr


def test_ids_as_the_pages_show_them_are_taken_where_unique(cli_server, local_partition, tmp_path):
    # Given a team with two allocations whose ids start alike and a job on one of them,
    team = funded_organization("100", name="Short Id Team")
    member = MembershipFactory(organization=team, role=Membership.Role.ADMIN).user
    first = allocation_bought(team, partition=local_partition, quantity=10, price="1.00")
    second = allocation_bought(team, partition=local_partition, quantity=10, price="1.00")
    renamed(Allocation, first.pk, TWIN_A)
    renamed(Allocation, second.pk, TWIN_B)
    offer = OfferFactory(quantity=50)
    renamed(Offer, offer.pk, LONER)
    home = tmp_path / "home"
    assert log_in(cli_server, member.username, home).returncode == 0
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\necho hello\n")
    submit = run(
        "--json", "jobs", "submit", str(script), "--allocation", str(TWIN_B)[:13],
        "--time", "1", home=home,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stderr
    job_id = json.loads(submit.stdout)["id"]
    assert Job.objects.get(uuid=job_id).allocation_id == second.pk

    # when they name the job, the offer and one allocation by the start of their ids,
    job = run("--json", "jobs", "show", job_id[:8], home=home)
    listed = run("--json", "jobs", "list", "--allocation", str(TWIN_B)[:13], home=home)
    bids = run("--json", "bids", "list", "--offer", str(LONER)[:8], home=home)
    one = run("--json", "allocations", "show", str(TWIN_A).replace("-", "")[:12], home=home)
    # the start two allocations share,
    both = run("allocations", "show", "abcd1234", home=home)
    # the start of nothing of theirs, and what is no id at all,
    nothing = run("--json", "jobs", "show", "00000000", home=home)
    not_an_id = run("jobs", "cancel", "hello", home=home)

    # then a unique start is the whole id,
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout)["id"] == job_id
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == [job_id]
    assert bids.returncode == 0, bids.stderr
    assert json.loads(bids.stdout) == []
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["id"] == str(TWIN_A)
    # one shared by two names both and asks for more of the id (exit 2),
    assert both.returncode == 2, both.stderr
    assert "2 allocations have an id that starts with abcd1234; give more of the id" in (
        both.stderr
    )
    assert str(TWIN_A) in both.stderr and str(TWIN_B) in both.stderr
    assert "[ambiguous_id]" in both.stderr
    # none is not found (exit 4), and a word that is no id says so (exit 2).
    assert nothing.returncode == 4, nothing.stderr
    error = json.loads(nothing.stderr)["error"]
    assert error["code"] == "not_found"
    assert error["detail"] == "No job that you can see has an id that starts with 00000000."
    assert not_an_id.returncode == 2, not_an_id.stderr
    assert "'hello' is not a job id" in not_an_id.stderr
    assert Job.objects.count() == 1


def test_submit_picks_the_only_active_allocation_and_says_which(
    cli_server, local_partition, tmp_path
):
    # Given a team with one active allocation,
    team = funded_organization("100", name="One Allocation Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    only = allocation_bought(team, partition=local_partition, quantity=10, price="1.00")
    home = tmp_path / "home"
    assert log_in(cli_server, member.username, home).returncode == 0
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\necho hello\n")

    # when they submit and quote without --allocation,
    submit = run("jobs", "submit", str(script), "--time", "1", home=home)
    quote = run("--json", "jobs", "quote", str(script), "--time", "1", home=home)

    # then the job is on that allocation, and the terminal said so.
    assert submit.returncode == 0, submit.stderr
    [job] = Job.objects.filter(organization=team)
    assert job.allocation_id == only.pk
    assert f"Using allocation {only.uuid} (" in submit.stderr
    assert "your only active one." in submit.stderr
    assert submit.stdout.strip() == str(job.uuid)
    assert quote.returncode == 0, quote.stderr
    assert "Using allocation" not in quote.stderr  # --json: stdout and stderr for scripts

    # Given a second active allocation, a submit without --allocation names both and submits
    # nothing.
    another = allocation_bought(team, partition=local_partition, quantity=10, price="1.00")
    several = run("jobs", "submit", str(script), "--time", "1", home=home)
    assert several.returncode == 2, several.stderr
    assert "You have 2 active allocations: choose one with --allocation" in several.stderr
    assert str(only.uuid) in several.stderr and str(another.uuid) in several.stderr
    assert "[allocation_required]" in several.stderr
    assert Job.objects.filter(organization=team).count() == 1


def test_a_team_without_an_active_allocation_is_told_how_to_get_one(cli_server, tmp_path):
    team = funded_organization("100", name="Empty Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    home = tmp_path / "home"
    assert log_in(cli_server, member.username, home).returncode == 0
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\necho hello\n")

    submit = run("jobs", "submit", str(script), "--time", "1", home=home)

    assert submit.returncode == 4, submit.stderr
    assert "You have no active allocation to run a job on" in submit.stderr
    assert not Job.objects.exists()


def test_a_wrong_password_is_an_authentication_failure(cli_server, tmp_path):
    user = MembershipFactory(role=Membership.Role.MEMBER).user
    home = tmp_path / "home"

    wrong = run(
        "login", "--url", cli_server.base_url, "--username", user.username, "--password-stdin",
        home=home, stdin="not-" + PASSWORD + "\n",
    )  # fmt: skip

    assert wrong.returncode == 3, wrong.stderr
    assert "[invalid_credentials, HTTP 400]" in wrong.stderr
    assert not (home / "config.json").exists()


def test_a_server_that_does_not_answer_says_to_check_the_address(tmp_path):
    refused = run("--url", "http://127.0.0.1:9", "--timeout", "2", "offers", "list", home=tmp_path)

    assert refused.returncode == 7, refused.stderr
    assert "The connection to http://127.0.0.1:9 failed" in refused.stderr
    assert "Check the address (--url, COMPUTESHARE_URL, or the one stored at login) and " in (
        refused.stderr.replace("\n", " ")
    )
    assert "that the server is running." in refused.stderr.replace("\n", " ")
    assert "[network_error]" in refused.stderr
