"""A team's own batch script through POST /jobs/ and /jobs/quote/ without a cluster: its
`#SBATCH` lines become the job's request (priced and reserved), the request's fields win over
them, what would reach outside what the team bought is overridden with a warning, whole nodes
are priced for --exclusive, and --dependency names only the team's own jobs."""

from __future__ import annotations

from decimal import Decimal

import pytest

from scheduler_bridge.models import Job, JobTask
from tests.conftest import client_for
from tests.factories import OrganizationFactory, PartitionFactory, allocation_bought

pytestmark = pytest.mark.django_db


@pytest.fixture
def allocation(team):
    partition = PartitionFactory(
        name="compute",
        cpus=32,
        nodes=4,
        gpus=0,
        cpus_per_node=8,
        memory_per_node_mb=16000,
        features=["avx2", "ib"],
    )
    return allocation_bought(team.organization, partition=partition, quantity=100)


def _post(team, allocation, path="/api/v1/jobs/", **body):
    return client_for(team.member).post(
        path, {"allocation": str(allocation.uuid), **body}, format="json"
    )


def _nothing_changed(allocation):
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    assert Job.objects.count() == 0 and JobTask.objects.count() == 0


def test_a_request_of_only_the_allocation_and_the_script_runs_as_its_lines_ask(team, allocation):
    script = (
        "#!/bin/bash\n"
        "#SBATCH --job-name=sim\n"
        "#SBATCH --time=00:05:00 -c 2\n"
        "#SBATCH --array=1,6-7,12\n"
        "#SBATCH -o %x-%A_%a.out\n"
        "srun ./sim\n"
    )
    answer = _post(team, allocation, script=script)

    assert answer.status_code == 201, answer.json()
    job = answer.json()
    assert (job["name"], job["time_limit_minutes"], job["cpus_per_task"]) == ("sim", 5, 2)
    assert (job["array"], job["task_count"]) == ("1,6-7,12", 4)
    assert job["reserved_units"] == "0.666668"  # 4 tasks x 2 cores x 5/60 h, each rounded up
    effective = {each["field"]: each for each in job["directives"]["effective"]}
    assert effective["time_limit_minutes"] == {
        "field": "time_limit_minutes",
        "value": "5",
        "source": "script",
        "option": "--time=00:05:00",
        "line": 3,
    }
    assert effective["ntasks"]["source"] == "default"
    assert effective["output"]["value"] == "%x-%A_%a.out"
    assert [each["option"] for each in job["directives"]["honoured"]] == [
        "--job-name",
        "--time",
        "-c",
        "--array",
        "-o",
    ]
    assert job["directives"]["overridden"] == []
    stored = Job.objects.get()
    assert stored.script == script  # the team's script as sent; its lines become comments at sbatch
    assert stored.options == {"output": "%x-%A_%a.out"}


def test_a_field_of_the_request_wins_over_the_scripts_line(team, allocation):
    script = "#!/bin/bash\n#SBATCH --time=60 --ntasks=4 --mem=2G\necho hi\n"
    answer = _post(
        team, allocation, script=script, name="mine", time_limit_minutes=30, mem_per_cpu=100
    )

    assert answer.status_code == 201, answer.json()
    job = answer.json()
    assert (job["time_limit_minutes"], job["ntasks"], job["mem_per_cpu"]) == (30, 4, 100)
    assert job["reserved_units"] == "2"  # 4 cores x 0.5 h
    sources = {each["field"]: each["source"] for each in job["directives"]["effective"]}
    assert sources["time_limit_minutes"] == "request"
    assert sources["ntasks"] == "script"
    assert sources["memory"] == "request"
    assert sources["name"] == "request"
    overridden = {each["option"]: each for each in job["directives"]["overridden"]}
    assert set(overridden) == {"--time", "--mem"}
    assert overridden["--time"]["value"] == "60"
    assert overridden["--time"]["why"] == (
        "The request's `time_limit_minutes` replaces it, as sbatch's command line replaces a "
        "script's directive."
    )
    assert Job.objects.get().options == {}


def test_account_partition_and_mail_user_in_one_script_are_overridden_with_warnings(
    team, allocation
):
    script = (
        "#!/bin/bash\n"
        "#SBATCH --account=physics-lab\n"
        "#SBATCH --partition=bigmem\n"
        "#SBATCH --mail-user=ada@example.org --mail-type=END\n"
        "#SBATCH --time=10\n"
        "python3 run.py\n"
    )
    answer = _post(team, allocation, script=script)
    # The quote asks the cluster too (this one is not real: it gives no estimate).
    quote = _post(team, allocation, path="/api/v1/jobs/quote/", script=script)

    assert answer.status_code == 201, answer.json()
    overridden = answer.json()["directives"]["overridden"]
    assert overridden == [
        {
            "option": "--account",
            "value": "physics-lab",
            "line": 2,
            "why": "It would reach outside what the team bought: the job runs under the team's "
            "own Slurm account on this cluster.",
        },
        {
            "option": "--partition",
            "value": "bigmem",
            "line": 3,
            "why": "It would reach outside what the team bought: the team bought time on "
            "another partition of this cluster.",
        },
        {
            "option": "--mail-user",
            "value": "ada@example.org",
            "line": 4,
            "why": "The platform tells the team itself (notifications, mail and webhooks such "
            "as job.ended); the cluster mails nobody.",
        },
        {
            "option": "--mail-type",
            "value": "END",
            "line": 4,
            "why": "The platform tells the team itself (notifications, mail and webhooks such "
            "as job.ended); the cluster mails nobody.",
        },
    ]
    assert quote.status_code == 200, quote.json()
    assert quote.json()["directives"]["overridden"] == overridden
    assert answer.json()["partition"] == "compute"
    detail = client_for(team.member).get(f"/api/v1/jobs/{answer.json()['id']}/")
    assert detail.json()["directives"]["overridden"] == overridden


def test_the_job_page_shows_what_was_overridden_and_why(client, team, allocation):
    script = "#!/bin/bash\n#SBATCH -t 10 -A physics-lab --mail-user=ada@example.org\necho\n"
    job_id = _post(team, allocation, script=script).json()["id"]
    client.force_login(team.member)

    page = client.get(f"/jobs/{job_id}/").content.decode()

    assert "Overridden: the job runs without these" in page
    assert "physics-lab" in page and "team&#x27;s own Slurm account" in page


def test_a_script_without_a_time_limit_needs_the_field(team, allocation):
    answer = _post(team, allocation, script="#!/bin/bash\necho hi\n")

    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert answer.json()["extra"]["fields"] == {
        "time_limit_minutes": [
            "Give a time limit: this field, or an #SBATCH --time line in the script."
        ]
    }
    _nothing_changed(allocation)


def test_the_scripts_sizes_are_held_to_the_partition_like_the_fields(team, allocation):
    answer = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 5 -n 8 -c 8\n")

    assert answer.status_code == 400
    assert answer.json()["extra"]["fields"]["cpus_per_task"] == [
        "ntasks x cpus_per_task is 64; the partition has 32 CPUs."
    ]
    _nothing_changed(allocation)


def test_a_constraint_the_partitions_nodes_lack_is_refused(team, allocation):
    honoured = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 60 -C 'avx2&ib'\n")
    assert honoured.status_code == 201, honoured.json()
    assert Job.objects.get().options == {"constraint": "avx2&ib"}

    answer = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 5 --constraint=a100\n")

    assert answer.status_code == 400
    assert answer.json()["code"] == "sbatch_directive_not_supported"
    assert answer.json()["extra"]["reason"] == (
        "--constraint=a100: the partition compute has no node with a100 (its features: avx2, ib)."
    )
    allocation.refresh_from_db()
    assert allocation.reserved == 1 and Job.objects.count() == 1


def test_exclusive_is_priced_as_whole_nodes(team, allocation):
    answer = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 60 -N 2 -n 2 --exclusive\n")

    assert answer.status_code == 201, answer.json()
    assert answer.json()["reserved_units"] == "16"  # 2 nodes x 8 CPUs x 1 h, not 2 cores
    job = Job.objects.get()
    assert job.options == {"exclusive": True, "node_cpus": 8, "node_gpus": 0}
    allocation.refresh_from_db()
    assert allocation.reserved == Decimal("16")


@pytest.mark.parametrize(
    ("partition_changes", "minutes", "reason"),
    [
        (
            {"nodes_differ": True},
            60,
            "the nodes of compute are not known alike, so a whole node cannot be priced.",
        ),
        (
            {},
            1000,
            "2 whole node(s) of compute for 1000 minutes are 266.666667 core-hours, more than "
            "the allocation's 100.",
        ),
    ],
)
def test_exclusive_where_the_allocation_cannot_cover_whole_nodes_is_refused(
    team, allocation, partition_changes, minutes, reason
):
    for name, value in partition_changes.items():
        setattr(allocation.partition, name, value)
    allocation.partition.save()

    answer = _post(team, allocation, script=f"#!/bin/bash\n#SBATCH -t {minutes} -N 2 --exclusive\n")

    assert answer.status_code == 400
    assert answer.json()["code"] == "sbatch_exclusive_not_covered"
    assert answer.json()["extra"]["reason"] == reason
    _nothing_changed(allocation)


def test_a_dependency_names_the_teams_jobs_by_their_ids_or_their_slurm_ids(team, allocation):
    first = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 5\n").json()
    Job.objects.filter(uuid=first["id"]).update(scheduler_job_id="4242")
    script = f"#!/bin/bash\n#SBATCH -t 5 --dependency=afterok:{first['id']}?afterany:4242_3\n"

    answer = _post(team, allocation, script=script)

    assert answer.status_code == 201, answer.json()
    assert Job.objects.get(uuid=answer.json()["id"]).options == {
        "dependency": {
            "any_of": True,
            "conditions": [
                {"kind": "afterok", "jobs": [{"job": first["id"], "task": None, "minutes": None}]},
                {"kind": "afterany", "jobs": [{"job": first["id"], "task": 3, "minutes": None}]},
            ],
        }
    }


@pytest.mark.parametrize("reference", ["9999", "other-team", "singleton"])
def test_a_dependency_on_anything_but_the_teams_jobs_is_refused(team, allocation, reference):
    other_team = allocation_bought(OrganizationFactory(), partition=allocation.partition)
    other = Job.objects.create(
        allocation=other_team,
        organization=other_team.organization,
        cluster=other_team.cluster,
        submitted_by=team.outsider,
        name="theirs",
        script="#!/bin/bash\n",
        time_limit_minutes=5,
        reserved_units=0,
        scheduler_job_id="9999",
    )
    dependency = {
        "9999": "afterok:9999",
        "other-team": f"afterok:{other.uuid}",
        "singleton": "singleton",
    }[reference]

    answer = _post(team, allocation, script=f"#!/bin/bash\n#SBATCH -t 5 -d {dependency}\n")

    assert answer.status_code == 400
    assert answer.json()["code"] == "sbatch_dependency_not_allowed"
    assert answer.json()["extra"]["line"] == 2
    allocation.refresh_from_db()
    assert allocation.reserved == 0
    assert list(Job.objects.values_list("name", flat=True)) == ["theirs"]


def test_an_option_the_platform_cannot_give_is_refused_with_why(team, allocation):
    answer = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 5 --overcommit\n")

    assert answer.status_code == 400
    assert answer.json() == {
        "detail": "Line 2: Fewer CPUs than tasks is not a size the platform prices; ask for "
        "the CPUs the tasks need.",
        "code": "sbatch_directive_not_supported",
        "extra": {
            "line": 2,
            "option": "--overcommit",
            "reason": "Fewer CPUs than tasks is not a size the platform prices; ask for the "
            "CPUs the tasks need.",
        },
    }
    _nothing_changed(allocation)


def test_the_job_templates_carry_their_sizes_in_their_scripts(team, allocation):
    templates = client_for(team.member).get("/api/v1/job-templates/").json()["results"]
    sweep = next(each for each in templates if each["id"] == "python-sweep")
    assert (sweep["time_limit_minutes"], sweep["array"], sweep["name"]) == (
        5,
        "0-9%2",
        "parameter sweep",
    )

    answer = _post(team, allocation, script=sweep["script"], template="python-sweep")

    assert answer.status_code == 201, answer.json()
    assert (answer.json()["array"], answer.json()["time_limit_minutes"]) == ("0-9%2", 5)


def test_requeue_is_the_scripts_except_on_preemptible_capacity(team, allocation):
    """A preempted run must go back to the queue to get the hours the team bought: on
    preemptible capacity the platform requeues, and a script's --no-requeue is overridden."""
    assert allocation.capacity == "preemptible"
    answer = _post(team, allocation, script="#!/bin/bash\n#SBATCH -t 5 --no-requeue\n")

    assert answer.status_code == 201, answer.json()
    (overridden,) = answer.json()["directives"]["overridden"]
    assert (overridden["option"], overridden["line"]) == ("--no-requeue", 2)
    assert overridden["why"].startswith("On preemptible capacity a run the owner's jobs preempt")
    assert Job.objects.get().options == {}
