"""The command-line client run as a user runs it: `computeshare` as a subprocess against a live
gunicorn, with the suite's real Celery worker and the real Slurm test cluster behind it.

Issue 16: a 100-task array submitted with input files, followed with `--wait` to the end, its
results downloaded and checked byte for byte, and its cost what the API says."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from billing.selectors import ledger_verify
from organizations.models import Membership
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
# Every tenth task lasts a second: Slurm meters whole seconds, and the cost checked below
# should not be zero.
if (( i % 10 == 0 )); then sleep 1; fi
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


def log_in(server: GunicornServer, username: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`computeshare login` as `username`, its password on stdin."""
    return run(
        "login",
        "--url",
        server.base_url,
        "--username",
        username,
        "--password-stdin",
        home=home,
        stdin=PASSWORD + "\n",
    )


@pytest.mark.timeout(420)
def test_an_array_with_input_files_from_submit_to_results(
    cli_server, on_testcluster, poller, tmp_path
):
    # Given a member of a team with an allocation on the real test cluster,
    cluster = on_testcluster(pool="fixed")
    team = funded_organization("1000", name="Terminal Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(
        team, partition=cluster.partitions.get(), quantity=400, price="3.00"
    )
    home = tmp_path / "home"
    rng = random.Random(16)
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    lines = "".join(f"{rng.getrandbits(128):032x}\n" for _ in range(TASKS))
    (inputs / "lines.txt").write_text(lines)
    blob = rng.randbytes(3 * 1024 * 1024 + 17)
    (inputs / "blob.bin").write_bytes(blob)
    script = tmp_path / "sweep.sh"
    script.write_text(JOB_SCRIPT)

    # when they log in with the client,
    login = log_in(cli_server, member.username, home)
    assert login.returncode == 0, login.stderr
    config = home / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text())["organization"] == str(team.uuid)

    # ask for a quote, then submit the array with its inputs and follow it to the end,
    sizes = ["--allocation", str(allocation.uuid), "--time", "2", "--array", f"0-{TASKS - 1}"]
    quote = run("--json", "jobs", "quote", str(script), *sizes, home=home)
    assert quote.returncode == 0, quote.stderr
    quoted = json.loads(quote.stdout)
    assert quoted["expected_start_source"] in ("slurm", "unavailable")
    started = time.monotonic()
    submit = run(
        "jobs",
        "submit",
        str(script),
        *sizes,
        "--input",
        str(inputs / "blob.bin"),
        "--input",
        f"{inputs / 'lines.txt'}:data/lines.txt",
        "--wait",
        "--interval",
        "1",
        home=home,
        timeout=240,
    )
    waited = time.monotonic() - started
    assert submit.returncode == 0, submit.stderr
    [job] = Job.objects.filter(organization=team, origin=Job.Origin.PLATFORM)
    assert job.reserved_units == Decimal(quoted["reserved_units"])
    assert job.estimated_max_cost == Decimal(quoted["estimated_max_cost"])
    assert f"Job {job.uuid} completed ({TASKS} completed)" in submit.stderr
    assert f"{TASKS}/{TASKS}" in submit.stderr  # the progress bar's last state

    # list its files and download every one,
    listed = json.loads(run("--json", "jobs", "files", str(job.uuid), home=home).stdout)
    assert listed["state"] == "ready"
    names = {row["name"] for row in listed["results"]}
    assert {f"results/task-{index}.txt" for index in range(TASKS)} <= names
    assert {"blob.bin", "data/lines.txt"} <= names
    results = tmp_path / "results"
    download = run("jobs", "download", str(job.uuid), "--all", "-o", str(results), home=home)
    assert download.returncode == 0, download.stderr

    # then each task's result is what it computed from the inputs, byte for byte,
    digest = hashlib.sha256(blob).hexdigest()
    for index, line in enumerate(lines.splitlines()):
        written = (results / "results" / f"task-{index}.txt").read_bytes()
        assert written == f"{line}\n{digest}\n".encode(), index
    # the inputs came back as they went,
    assert (results / "blob.bin").read_bytes() == blob
    assert (results / "data" / "lines.txt").read_text() == lines
    # one file can be fetched alone,
    single = run(
        "jobs",
        "download",
        str(job.uuid),
        "results/task-42.txt",
        "-o",
        str(tmp_path / "one"),
        home=home,
    )
    assert single.returncode == 0, single.stderr
    assert (tmp_path / "one" / "results" / "task-42.txt").read_bytes() == (
        results / "results" / "task-42.txt"
    ).read_bytes()

    # and the cost the client shows is the API's own, charged once in a sound ledger.
    shown = json.loads(run("--json", "jobs", "show", str(job.uuid), home=home).stdout)
    status, body = cli_server.request(
        "GET",
        f"/api/v1/jobs/{job.uuid}/",
        headers={"Authorization": f"Token {json.loads(config.read_text())['token']}"},
    )
    assert status == 200
    api = json.loads(body)
    assert shown["state"] == api["state"] == "completed"
    assert shown["cost"] == api["cost"]
    assert Decimal(api["cost"]) > 0
    assert Decimal(api["cost"]) == sum(Decimal(task["cost"]) for task in api["tasks"])
    job.refresh_from_db()
    assert Decimal(api["cost"]) == job.cost
    usage_csv = run("usage", "--csv", home=home)
    assert usage_csv.returncode == 0, usage_csv.stderr
    [row] = [line for line in usage_csv.stdout.splitlines() if line.startswith(str(job.uuid))]
    assert Decimal(row.split(",")[6]) == job.cost
    assert ledger_verify() == []
    print(f"100-task array with inputs: submitted, followed and collected in {waited:.1f} s")


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


class AnswerLosingProxy:
    """A loopback TCP relay in front of the server that forwards each request whole and, for
    the first `POST /api/v1/jobs/`, lets the server answer but closes the client's connection
    without passing the answer on: the job is created, and the client never hears of it, as
    when a connection drops at the worst moment."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = 0
        self.posts = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client:
            request = self._read_request(client)
            if not request:
                return
            is_submit = request.startswith(b"POST /api/v1/jobs/ ")
            head, _, body = request.partition(b"\r\n\r\n")
            # One request per connection: the server closes after answering, so its whole
            # answer is what it sends before the close.
            request = head + b"\r\nConnection: close\r\n\r\n" + body
            with socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
                upstream.sendall(request)
                answer = b""
                while chunk := upstream.recv(65536):
                    answer += chunk
            if is_submit:
                self.posts += 1
                if self.dropped == 0:
                    self.dropped += 1
                    return  # the answer is lost
            client.sendall(answer)

    @staticmethod
    def _read_request(client: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += client.recv(65536)
        return head + b"\r\n\r\n" + body


def test_a_submit_whose_answer_was_lost_is_sent_again_and_runs_once(
    cli_server, on_testcluster, poller, tmp_path
):
    """The client sends an Idempotency-Key with the job and retries a submit whose answer did
    not come with the same key: the server answers the first job again, and there is one. Its
    output, followed, is printed once and the follow ends with the job."""
    cluster = on_testcluster(pool="fixed")
    team = funded_organization("100", name="Flaky Network Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(team, partition=cluster.partitions.get(), quantity=10)
    home = tmp_path / "home"
    script = tmp_path / "hello.sh"
    script.write_text("#!/bin/bash\necho hello\nsleep 2\necho 'and goodbye'\n")
    data = tmp_path / "data.txt"
    data.write_text("some input\n")
    proxy = AnswerLosingProxy(cli_server.port)
    try:
        login = run(
            "login",
            "--url",
            f"http://127.0.0.1:{proxy.port}",
            "--username",
            member.username,
            "--password-stdin",
            home=home,
            stdin=PASSWORD + "\n",
        )
        assert login.returncode == 0, login.stderr
        submit = run(
            "--json",
            "jobs",
            "submit",
            str(script),
            "--allocation",
            str(allocation.uuid),
            "--time",
            "1",
            "--input",
            str(data),
            home=home,
        )
    finally:
        proxy.close()
    assert submit.returncode == 0, submit.stderr
    assert (proxy.dropped, proxy.posts) == (1, 2)  # the first answer lost, the retry answered
    [job] = Job.objects.filter(organization=team, origin=Job.Origin.PLATFORM)
    assert json.loads(submit.stdout)["id"] == str(job.uuid)
    assert [item["name"] for item in json.loads(submit.stdout)["input_files"]] == ["data.txt"]

    follow = run(
        "--url", cli_server.base_url, "jobs", "output", str(job.uuid), "--follow",
        "--interval", "0.5", home=home, timeout=150,
    )  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout == "hello\nand goodbye\n"
    job.refresh_from_db()
    assert job.state == "completed"


@pytest.mark.timeout(240)
def test_a_batch_script_is_submitted_with_no_resource_flag_and_its_warnings_shown(
    cli_server, on_testcluster, poller, tmp_path
):
    """`computeshare jobs submit job.slurm --allocation A`: the script's #SBATCH lines give the
    job's name, time, CPUs and array, and what the platform overrides is printed as warnings."""
    cluster = on_testcluster(pool="fixed")
    team = funded_organization("100", name="Batch Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    allocation = allocation_bought(team, partition=cluster.partitions.get(), quantity=20)
    home = tmp_path / "home"
    script = tmp_path / "job.slurm"
    script.write_text(
        "#!/bin/bash\n"
        "#SBATCH --job-name=from-the-script\n"
        "#SBATCH --time=2 --cpus-per-task=1 --array=0-1\n"
        "#SBATCH --account=elsewhere --mail-user=ada@example.org\n"
        'echo "task $SLURM_ARRAY_TASK_ID"\n'
    )
    login = log_in(cli_server, member.username, home)
    assert login.returncode == 0, login.stderr

    submit = run(
        "jobs",
        "submit",
        str(script),
        "--allocation",
        str(allocation.uuid),
        "--wait",
        "--interval",
        "1",
        home=home,
        timeout=180,
    )

    assert submit.returncode == 0, submit.stderr
    assert "warning: line 4: --account=elsewhere overridden: It would reach outside" in (
        submit.stderr
    )
    assert "warning: line 4: --mail-user=ada@example.org overridden:" in submit.stderr
    job = Job.objects.get(organization=team)
    assert (job.name, job.time_limit_minutes, job.cpus_per_task, job.array) == (
        "from-the-script",
        2,
        1,
        "0-1",
    )
    assert f"Job {job.uuid} completed (2 completed)" in submit.stderr
    output = run("jobs", "output", str(job.uuid), "--task", "1", home=home)
    assert output.stdout == "task 1\n"


def test_offers_and_the_price_history_say_their_kind(cli_server, tmp_path):
    """Issue 27: the client lists offers of one kind or the other, with what their quantity
    counts, and the price history of one kind at a time."""
    from datetime import timedelta

    from django.utils import timezone

    from marketplace.models import Offer
    from tests.factories import OfferFactory

    team = funded_organization("100", name="Kind Team")
    member = MembershipFactory(organization=team, role=Membership.Role.MEMBER).user
    start = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    block = OfferFactory(
        capacity="reserved",
        quantity=4,
        auction_closes_at=start,
        window_start=start,
        window_end=start + timedelta(hours=6),
    )
    hours = OfferFactory(quantity=500)
    cleared = OfferFactory(
        capacity="reserved",
        quantity=2,
        auction_closes_at=start - timedelta(days=3),
        window_start=start - timedelta(days=3),
        window_end=start - timedelta(days=3) + timedelta(hours=2),
        status=Offer.Status.CLEARED,
        clearing_price="0.750000",
        units_sold=2,
        cleared_at=start - timedelta(days=3),
    )
    home = tmp_path / "home"
    login = log_in(cli_server, member.username, home)
    assert login.returncode == 0, login.stderr

    reserved = run("--json", "offers", "list", "--capacity", "reserved", home=home)
    table = run("offers", "list", "--status", "open", home=home)
    history = run("--json", "offers", "price-history", "--capacity", "reserved", home=home)
    preemptible_history = run("--json", "offers", "price-history", home=home)

    assert reserved.returncode == 0, reserved.stderr
    # Every status, ordered by the auction's close: the cleared block first.
    listed = json.loads(reserved.stdout)
    assert [(row["id"], row["quantity_unit"], row["unit_hours"]) for row in listed] == [
        (str(cleared.uuid), "cores", 2),
        (str(block.uuid), "cores", 6),
    ]
    assert table.returncode == 0, table.stderr
    assert "reserved" in table.stdout and "preemptible" in table.stdout
    assert "core-hours" in table.stdout and "cores" in table.stdout
    assert str(hours.uuid) in table.stdout
    assert [
        (row["offer"], row["capacity"], row["clearing_price"]) for row in json.loads(history.stdout)
    ] == [(str(cleared.uuid), "reserved", "0.750000")]
    assert json.loads(preemptible_history.stdout) == []
