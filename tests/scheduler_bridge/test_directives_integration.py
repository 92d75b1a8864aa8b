"""A team's own batch script on the real Slurm test cluster: submitted with nothing but the
allocation and the script, its `#SBATCH` lines are what Slurm runs (accounting shows them),
its output lands where the script sent it, in the job's own folder, and the job's pages show
it; what would reach outside the team's purchase is overridden, and what reaches sbatch is the
platform's options and the script with its directive lines made comments."""

from __future__ import annotations

import pytest

from hpc.ssh import SSHConnection
from scheduler_bridge.models import Job
from tests.conftest import client_for, tenants_jobs_cancel, wait_for
from tests.factories import MembershipFactory, allocation_bought, funded_organization
from tests.scheduler_bridge.test_jobs_integration import ENDED, real_cluster
from tests.scheduler_bridge.test_jobs_integration import _sacct as sacct

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

ARRAY_SCRIPT = """#!/bin/bash
#SBATCH --job-name=sweep-me
#SBATCH --time=00:05:00
#SBATCH -c 2
#SBATCH --array=1,6-7,12
#SBATCH -o %x-%A_%a.out
#SBATCH --account=physics-lab --partition=bigmem
#SBATCH --mail-user=ada@example.org
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID with $SLURM_CPUS_PER_TASK CPUs"
echo "to stderr $SLURM_ARRAY_TASK_ID" >&2
"""


def _sacct(testcluster, job_id: str) -> dict[str, list[str]]:
    """Each task's time limit, CPUs, state, account and Slurm name as accounting has them."""
    fields = "JobID,Timelimit,AllocCPUS,State,Account,JobName"
    return {row[0]: row[1:] for row in sacct(testcluster, job_id, fields)}


@pytest.fixture
def team_on_the_cluster(testcluster, celery_worker, poller):
    cluster = real_cluster(testcluster)
    team = funded_organization("500", name="Script Team")
    member = MembershipFactory(organization=team, role="member").user
    allocation = allocation_bought(team, partition=cluster.partitions.get(), quantity=20)
    yield client_for(member), allocation
    tenants_jobs_cancel(testcluster)


def test_a_script_with_only_its_lines_runs_as_they_ask_and_its_output_is_shown(
    testcluster, team_on_the_cluster, client
):
    api, allocation = team_on_the_cluster
    answer = api.post(
        "/api/v1/jobs/", {"allocation": str(allocation.uuid), "script": ARRAY_SCRIPT}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    job_id = answer.json()["id"]
    overridden = {
        each["option"]: each["value"] for each in answer.json()["directives"]["overridden"]
    }
    assert overridden == {
        "--account": "physics-lab",
        "--partition": "bigmem",
        "--mail-user": "ada@example.org",
    }
    running = wait_for(
        lambda: (job := api.get(f"/api/v1/jobs/{job_id}/").json())["scheduler_job_id"] and job,
        timeout=60,
        interval=1,
    )
    # What sbatch read: the script with its directive lines made comments.
    stored = Job.objects.select_related("lease__account").get(uuid=job_id)
    with SSHConnection(testcluster.ssh_settings()) as connection:
        sent = connection.run(
            ["cat", f"{stored.lease.account.home}/{stored.directory}/job.sh"],
            as_user=stored.lease.account.username,
        ).stdout
    assert sent.splitlines()[1:4] == [
        "# [computeshare: honoured --job-name] SBATCH --job-name=sweep-me",
        "# [computeshare: honoured --time] SBATCH --time=00:05:00",
        "# [computeshare: honoured -c] SBATCH -c 2",
    ]
    assert "# [computeshare: overridden --account --partition] SBATCH" in sent
    assert not any(line.startswith("#SBATCH") for line in sent.splitlines())

    job = wait_for(
        lambda: (job := api.get(f"/api/v1/jobs/{job_id}/").json())["state"] in ENDED and job,
        timeout=180,
        interval=1,
    )

    assert job["state"] == "completed", job
    assert [task["index"] for task in job["tasks"]] == [1, 6, 7, 12]
    assert {task["state"] for task in job["tasks"]} == {"completed"}
    array_id = running["scheduler_job_id"]
    rows = _sacct(testcluster, array_id)
    assert sorted(rows) == [f"{array_id}_{index}" for index in (1, 12, 6, 7)]
    for limit, cpus, state, account, name in rows.values():
        assert (limit, cpus, state) == ("00:05:00", "2", "COMPLETED")
        assert account == stored.account == testcluster.fixed_pool.account  # not physics-lab
        assert name == f"cs-{job_id}"
    # The output went where the script sent it (%x is the job's name here), stderr with it as
    # sbatch sends it without --error, and the API and the page read it there.
    output = api.get(f"/api/v1/jobs/{job_id}/output/?task=6").content.decode()
    assert output == f"task 6 of {array_id} with 2 CPUs\nto stderr 6\n"
    stderr = api.get(f"/api/v1/jobs/{job_id}/output/?task=6&stream=stderr").content.decode()
    assert stderr == output
    client.force_login(stored.submitted_by)
    page = client.get(f"/jobs/{job_id}/output/?task=12").content.decode()
    assert f"task 12 of {array_id} with 2 CPUs" in page
    files = wait_for(
        lambda: (
            (answer := api.get(f"/api/v1/jobs/{job_id}/files/").json())["state"] == "ready"
            and answer
        ),
        timeout=60,
        interval=1,
    )
    names = sorted(each["name"] for each in files["results"])
    assert names == [f"sweep-me-{array_id}_{index}.out" for index in (1, 12, 6, 7)]


def test_a_dependency_on_the_teams_job_waits_for_it_on_the_cluster(team_on_the_cluster):
    api, allocation = team_on_the_cluster

    def submit(script: str) -> str:
        answer = api.post(
            "/api/v1/jobs/", {"allocation": str(allocation.uuid), "script": script}, format="json"
        )
        assert answer.status_code == 201, answer.json()
        return str(answer.json()["id"])

    first = submit("#!/bin/bash\n#SBATCH -t 2 -J first\nsleep 3\n")
    # Submitted in the same moment: its sbatch needs the first's Slurm id, so it goes after.
    # Its output in a folder the platform makes, named after the node Slurm runs it on (%N),
    # which the platform does not know: read back as the file that matches.
    second = submit(
        "#!/bin/bash\n#SBATCH -t 2 -J second -o logs/%x-%N.out\n"
        f"#SBATCH -d afterok:{first}\nsleep 2\necho after the first\n"
    )

    def ended(job_id: str) -> dict:
        return wait_for(
            lambda: (job := api.get(f"/api/v1/jobs/{job_id}/").json())["state"] in ENDED and job,
            timeout=120,
            interval=1,
        )

    before, after = ended(first), ended(second)
    assert (before["state"], after["state"]) == ("completed", "completed"), (before, after)
    assert after["started_at"] >= before["ended_at"], (before, after)
    assert Job.objects.get(uuid=second).options["dependency"]["conditions"][0]["kind"] == "afterok"
    output = api.get(f"/api/v1/jobs/{second}/output/").content.decode()
    assert output == "after the first\n"
