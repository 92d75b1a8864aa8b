"""The command-line client run as a user runs it: `computeshare` as a subprocess against a live
gunicorn, with the suite's real Celery worker and the real Slurm test cluster behind it.

Issue 16: a 100-task array submitted with input files, followed with `--wait` to the end, its
results downloaded and checked byte for byte, and its cost what the API says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from marketplace.models import Membership
from scheduler_bridge.models import Job
from tests.factories import PASSWORD, MembershipFactory, allocation_bought, funded_organization
from tests.workers import GunicornServer, database_url, worker_environment

pytestmark = [pytest.mark.slurm, pytest.mark.celery, pytest.mark.django_db(transaction=True)]

COMPUTESHARE = shutil.which("computeshare", path=str(Path(sys.executable).parent))
TASKS = 100

# Each task reads its line of the inputs and the whole blob, and writes one result file; well
# under a second of work, so that the run measures the platform, not the job.
JOB_SCRIPT = """#!/bin/bash
set -euo pipefail
i=$SLURM_ARRAY_TASK_ID
mkdir -p results
{
  sed -n "$((i + 1))p" data/lines.txt
  sha256sum blob.bin | cut -d' ' -f1
} > "results/task-$i.txt"
echo "task $i done"
"""


@pytest.fixture(scope="module")
def cli_server(celery_worker, tmp_path_factory) -> Iterator[GunicornServer]:
    """gunicorn on the test database and Redis, as the CLI's server (one for the module: it
    takes seconds to start on a busy machine)."""
    environment = worker_environment(
        database=database_url(connection.settings_dict), redis=settings.REDIS_URL
    )
    log = tmp_path_factory.mktemp("cli-server") / "gunicorn.log"
    server = GunicornServer(environment, log, ["--workers=2", "--threads=4", "--timeout=120"])
    server.wait_ready()
    yield server
    server.stop()


def run(
    *arguments: str, home: Path, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`computeshare ARGUMENTS` with its config in `home`, as a separate process."""
    assert COMPUTESHARE, "computeshare is not installed in the virtualenv (make install)"
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith("COMPUTESHARE_")
    }
    environment |= {"COMPUTESHARE_CONFIG": str(home / "config.json"), "NO_COLOR": "1"}
    return subprocess.run(
        [COMPUTESHARE, *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        check=False,
    )


def test_refusals_exit_with_their_class_and_the_api_code(cli_server, tmp_path):
    """Each class of failure has its exit status, with the API's detail and code shown, and
    nothing is created."""
    team = funded_organization("100", name="Small Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(team, quantity=1, price="1.00")
    home = tmp_path / "home"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\necho hi\n")
    assert (
        run(
            "login",
            "--url",
            cli_server.base_url,
            "--username",
            member.username,
            "--password-stdin",
            home=home,
            stdin=PASSWORD + "\n",
        ).returncode
        == 0
    )
    submit = ["jobs", "submit", str(script), "--allocation", str(allocation.uuid)]

    too_big = run(*submit, "--time", "600", "--array", "0-9", home=home)
    assert too_big.returncode == 6, too_big.stderr  # 402: the allocation cannot cover it
    assert "[allocation_exhausted, HTTP 402]" in too_big.stderr

    invalid = run(*submit, "--time", "1", "--array", "5-1", home=home)
    assert invalid.returncode == 2
    assert "[invalid, HTTP 400]" in invalid.stderr
    assert "array:" in invalid.stderr

    escape = run(*submit, "--time", "1", "--input", f"{script}:../outside.sh", home=home)
    assert escape.returncode == 2
    assert "is not a file name for the job's folder" in escape.stderr

    missing = run("--json", "jobs", "show", "00000000-0000-0000-0000-000000000000", home=home)
    assert missing.returncode == 4
    assert json.loads(missing.stderr)["error"]["code"] == "not_found"

    wrong_token = run("--token", "not-a-token", "jobs", "list", home=home)
    assert wrong_token.returncode == 3, wrong_token.stderr
    assert "HTTP 401" in wrong_token.stderr

    unreachable = run("--url", "http://127.0.0.1:9", "--timeout", "2", "jobs", "list", home=home)
    assert unreachable.returncode == 7
    assert "[network_error]" in unreachable.stderr

    assert not Job.objects.exists()

    logout = run("logout", home=home)
    assert logout.returncode == 0, logout.stderr
    assert json.loads((home / "config.json").read_text())["token"] is None
    after = run("jobs", "list", home=home)
    assert after.returncode == 3
    assert "[not_logged_in]" in after.stderr
