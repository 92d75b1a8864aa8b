"""The sandbox of the local backend's jobs, on real bubblewrap and real processes: what a job
sees of this machine (its own folder, the system read-only, no network), the CPU time of every
process in it, and what each `LOCAL_BACKEND_SANDBOX` mode does where bubblewrap is missing or
cannot run. The behaviour a sandboxed job shares with an unsandboxed one (output, exit codes,
time limits, cancel) is tested in test_local_backend.py, under the test settings' "required"."""

import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpc.backends.local import LocalBackend, LocalBackendRefused
from hpc.backends.sandbox import sandbox_check
from scheduler_bridge.services.backends import local_backend, local_sandbox
from tests.hpc.test_local_backend import (
    KILL_GRACE_SECONDS,
    REPOSITORY,
    SECONDS_PER_MINUTE,
    job_spec,
    submit_one,
    wait_for_end,
    wait_until,
)

# Says, for each path it is given, whether the job can see it, and reads what it can.
PROBE_SCRIPT = """#!/bin/bash
for path in "$@"; do
  if [ -e "$path" ]; then echo "visible $path"; else echo "hidden $path"; fi
done
"""


def make_backend(root: Path, **options: object) -> LocalBackend:
    """A backend as the test settings have it ("required"), unless `options` say otherwise."""
    values: dict[str, object] = {
        "cpus": 2,
        "seconds_per_minute": SECONDS_PER_MINUTE,
        "kill_grace_seconds": KILL_GRACE_SECONDS,
        "sandbox": "required",
        "bwrap": "bwrap",
    }
    return LocalBackend(root, **{**values, **options})  # type: ignore[arg-type]


def ended_cleanly(backend: LocalBackend) -> None:
    backend.cancel(None, sorted({entry.array_job_id for entry in backend.queue([])}))
    wait_until(lambda: backend.queue([]) == [], timeout=10)
    assert list(backend.state.jobs.glob("*/supervisor.log")) == []


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """A stand-in for the demo's `var/`: the local cluster's root, and beside it a file as
    the SQLite database is."""
    var = tmp_path / "var"
    (var / "local-cluster").mkdir(parents=True)
    (var / "db.sqlite3").write_text("every team's data")
    return var


@pytest.fixture
def backend(machine: Path) -> Iterator[LocalBackend]:
    """The backend of the test settings: sandbox required, bubblewrap found on PATH."""
    backend = make_backend(machine / "local-cluster")
    yield backend
    ended_cleanly(backend)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP server on this machine's loopback, where the platform's services listen."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.5)
    yield server
    server.close()


def connections(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            connection, _ = server.accept()
        except TimeoutError:
            return count
        connection.close()
        count += 1


def connect_script(port: int) -> str:
    return (
        "#!/bin/bash\n"
        f"if exec 3<>/dev/tcp/127.0.0.1/{port}; then echo connected; else echo refused; fi\n"
    )


def test_the_test_settings_run_every_job_in_a_sandbox(backend: LocalBackend):
    job_id = submit_one(backend, job_spec("cs-sandboxed", "#!/bin/bash\necho $$\n"))
    wait_for_end(backend, job_id)

    [record] = backend.state.read_tasks(int(job_id))
    assert backend.sandbox_mode == "required"
    assert backend.sandbox().program == str(Path("/usr/bin/bwrap").resolve())
    assert backend.state.read_job(int(job_id)).sandbox == backend.sandbox().program
    assert record.sandbox is not None
    # The script is pid 2 of its own PID namespace (bubblewrap's init is pid 1).
    assert backend.output_tail(None, "jobs/cs-sandboxed", "stdout", None, 100) == b"2\n"


def test_a_sandboxed_job_sees_its_own_folder_and_the_system_and_nothing_else(
    backend: LocalBackend, machine: Path
):
    # Given another team's job, whose folder holds its output and whose record holds a secret
    other_id = submit_one(
        backend,
        job_spec(
            "cs-other-team",
            "#!/bin/bash\necho 'their results' > results.txt\n",
            directory="jobs/other-team/cs-other-team",
            environment={"API_TOKEN": "their-secret"},
        ),
    )
    wait_for_end(backend, other_id)
    root = backend.root
    other_record = root / ".local-scheduler" / "jobs" / other_id / "job.json"
    assert "their-secret" in other_record.read_text()
    paths = [
        str(root / "jobs/other-team/cs-other-team/results.txt"),
        str(root / "jobs/other-team"),
        str(root / ".local-scheduler"),
        str(other_record),
        str(machine / "db.sqlite3"),
        str(REPOSITORY / "manage.py"),
        "/root",
        "/home",
        "/etc/shadow",
        "/etc/ssl/private",
        "/usr/bin/python3",
        "/etc/passwd",
    ]
    directory = root / "jobs/my-team/cs-mine"
    script = (
        PROBE_SCRIPT
        + "ls -A ..\n"
        + 'echo "$HOME"\n'
        + "echo mine > written.txt\n"
        + "touch /usr/bin/planted 2>/dev/null || echo 'system read-only'\n"
    )

    # When a job of another team looks at each of them
    job_id = submit_one(
        backend,
        job_spec(
            "cs-mine",
            script.replace('"$@"', " ".join(f"'{path}'" for path in paths)),
            directory="jobs/my-team/cs-mine",
        ),
    )
    [run] = wait_for_end(backend, job_id)

    # Then it saw the system and its own folder only, and wrote there
    assert (run.state, run.exit_code) == ("completed", 0)
    hidden = [f"hidden {path}" for path in paths[:-2]]
    visible = [f"visible {path}" for path in paths[-2:]]
    assert backend.output_tail(None, "jobs/my-team/cs-mine", "stdout", None, 10_000) == (
        "\n".join([*hidden, *visible, "cs-mine", str(directory), "system read-only", ""]).encode()
    )
    assert (directory / "written.txt").read_text() == "mine\n"
    assert not Path("/usr/bin/planted").exists()


def test_a_sandboxed_job_cannot_reach_this_machine_over_the_network(
    backend: LocalBackend, listener: socket.socket
):
    port = listener.getsockname()[1]

    job_id = submit_one(backend, job_spec("cs-network", connect_script(port)))
    [run] = wait_for_end(backend, job_id)

    assert run.state == "completed"
    assert backend.output_tail(None, "jobs/cs-network", "stdout", None, 100) == b"refused\n"
    assert connections(listener) == 0


# The CPU time of a process is what it burned: `BURN` spins until its own CPU time is 1 s, so
# that what a job used is known whatever the machine's load. The other two then leave a mark in
# the job's folder; `BURN_THEN_SLEEP` then sleeps, deaf to SIGTERM, until a SIGKILL ends it.
BURN = "import time\nwhile time.process_time() < 1.0: pass\n"
BURN_THEN_MARK = BURN + "open('orphan', 'w').close()\n"
BURN_THEN_SLEEP = (
    "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    + BURN
    + "open('sleeper', 'w').close()\ntime.sleep(300)\n"
)
BURNERS = {"BURN": BURN, "BURN_THEN_MARK": BURN_THEN_MARK, "BURN_THEN_SLEEP": BURN_THEN_SLEEP}


@pytest.mark.parametrize(
    ("sandbox", "ending", "state"),
    [
        ("required", "time limit", "timeout"),
        ("required", "cancel", "cancelled"),
        ("off", "cancel", "cancelled"),
    ],
)
def test_cpu_time_counts_every_process_of_the_job_those_killed_at_its_end_included(
    machine: Path, sandbox: str, ending: str, state: str
):
    # Given a script whose processes each burn 1 s of CPU: a child it waits for, an orphan (its
    # parent exits at once), one that then sleeps until a SIGKILL ends it, and its own
    backend = make_backend(machine / "local-cluster", sandbox=sandbox)
    script = (
        "#!/bin/bash\n"
        'python3 -c "$BURN" &\n'
        "child=$!\n"
        '( python3 -c "$BURN_THEN_MARK" & )\n'
        'python3 -c "$BURN_THEN_SLEEP" &\n'
        'python3 -c "$BURN"\n'
        'wait "$child"\n'
        "until [ -e orphan ] && [ -e sleeper ]; do sleep 0.05; done\n"
        "touch burned\n"
        "sleep 300\n"
    )

    # When it is ended by its 5-minute limit (10 seconds here), or cancelled once they burned
    job_id = submit_one(
        backend, job_spec("cs-cpu", script, time_limit_minutes=5, environment=BURNERS)
    )
    if ending == "cancel":
        wait_until(lambda: (backend.root / "jobs/cs-cpu/burned").exists())
        backend.cancel(None, [job_id])
    [run] = wait_for_end(backend, job_id, timeout=20)

    # Then the kernel counted the 4 seconds they burned (and a little for bash and sleep)
    assert run.state == state
    assert (backend.state.read_tasks(int(job_id))[0].sandbox is not None) == (sandbox != "off")
    assert 4.0 <= run.cpu_seconds < 4.5
    ended_cleanly(backend)


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_cpu_time_counts_what_a_script_left_running_when_it_exited(machine: Path, sandbox: str):
    # Given a script that exits while a process it started burned 1 s and sleeps on
    backend = make_backend(machine / "local-cluster", sandbox=sandbox)
    script = (
        '#!/bin/bash\npython3 -c "$BURN_THEN_SLEEP" &\nuntil [ -e sleeper ]; do sleep 0.05; done\n'
    )

    # When it has run
    job_id = submit_one(
        backend, job_spec("cs-leftover", script, time_limit_minutes=5, environment=BURNERS)
    )
    [run] = wait_for_end(backend, job_id)

    # Then the job completed, what it left was killed, and its second counted
    assert (run.state, run.exit_code) == ("completed", 0)
    assert 1.0 <= run.cpu_seconds < 1.3
    assert backend.queue([]) == []
    ended_cleanly(backend)


def test_in_a_sandbox_a_process_that_leaves_the_session_is_killed_and_counted_all_the_same(
    backend: LocalBackend,
):
    # Unsandboxed, `setsid` escapes both (local_runner's docstring); a PID namespace cannot be
    # left.
    script = (
        "#!/bin/bash\n"
        'setsid python3 -c "$BURN_THEN_SLEEP" &\n'
        "until [ -e sleeper ]; do sleep 0.05; done\n"
    )

    job_id = submit_one(
        backend, job_spec("cs-setsid", script, time_limit_minutes=5, environment=BURNERS)
    )
    [run] = wait_for_end(backend, job_id)

    assert (run.state, run.exit_code) == ("completed", 0)
    assert 1.0 <= run.cpu_seconds < 1.3


# --- Where there is no sandbox --------------------------------------------------------------------


def test_required_without_bubblewrap_fails_every_task_unstarted_with_the_reason(machine: Path):
    # Given a sandbox required, and a bubblewrap program that is not there
    missing = machine / "no-such-bwrap"
    backend = make_backend(machine / "local-cluster", sandbox="required", bwrap=str(missing))

    # When a job (an array of 2) is submitted
    job_id = submit_one(
        backend, job_spec("cs-refused", "#!/bin/bash\necho ran > ran.txt\n", array="0-1")
    )
    runs = wait_for_end(backend, job_id)

    # Then it was accepted, and each task failed without running
    reason = (
        "not run: jobs here must be sandboxed (LOCAL_BACKEND_SANDBOX=required) and cannot be: "
        f"bubblewrap is not installed: `{missing}` was not found"
    )
    assert [(run.state, run.reason, run.exit_code, run.start_time) for run in runs] == [
        ("failed", reason, None, None),
        ("failed", reason, None, None),
    ]
    assert [run.allocated_cpus for run in runs] == [0, 0]
    assert sorted(path.name for path in (backend.root / "jobs/cs-refused").iterdir()) == ["job.sh"]
    ended_cleanly(backend)


def test_a_bubblewrap_that_cannot_make_a_sandbox_here_is_not_used(machine: Path):
    # Given a bwrap that fails as it does where unprivileged user namespaces are disabled
    fake = machine / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)

    check = sandbox_check(str(fake))

    assert (check.program, check.is_available) == (None, False)
    assert check.problem == (
        f"{fake} cannot create a sandbox here (bwrap: setting up uid map: Permission denied); "
        "unprivileged user namespaces may be disabled"
    )


def test_auto_without_bubblewrap_runs_the_job_unsandboxed_and_says_so_once(
    machine: Path, listener: socket.socket, caplog: pytest.LogCaptureFixture
):
    # Given the auto mode on a machine without bubblewrap
    missing = machine / "no-such-bwrap"
    backend = make_backend(machine / "local-cluster", sandbox="auto", bwrap=str(missing))
    port = listener.getsockname()[1]
    probe = PROBE_SCRIPT.replace('"$@"', f"'{machine / 'db.sqlite3'}'")
    script = probe + connect_script(port).removeprefix("#!/bin/bash\n")

    # When two jobs run
    with caplog.at_level(logging.WARNING, logger="hpc.backends.local"):
        first = submit_one(backend, job_spec("cs-unsandboxed", script))
        second = submit_one(backend, job_spec("cs-unsandboxed-too", "#!/bin/bash\n"))
        [run] = wait_for_end(backend, first)
        wait_for_end(backend, second)

    # Then they ran as they are: the first saw the database and reached the listener
    assert (run.state, run.exit_code) == ("completed", 0)
    assert backend.state.read_tasks(int(first))[0].sandbox is None
    assert backend.output_tail(None, "jobs/cs-unsandboxed", "stdout", None, 1000) == (
        f"visible {machine / 'db.sqlite3'}\nconnected\n".encode()
    )
    assert connections(listener) == 1
    assert [record.getMessage() for record in caplog.records] == [
        "Local jobs run WITHOUT a sandbox (LOCAL_BACKEND_SANDBOX=auto): bubblewrap is not "
        f"installed: `{missing}` was not found. A job can read every other job's files and the "
        "platform's; install bubblewrap to sandbox them."
    ]
    ended_cleanly(backend)


def test_off_never_sandboxes(machine: Path):
    backend = make_backend(machine / "local-cluster", sandbox="off")

    job_id = submit_one(backend, job_spec("cs-off", "#!/bin/bash\necho $$\n"))
    [run] = wait_for_end(backend, job_id)

    assert run.state == "completed"
    assert backend.state.read_job(int(job_id)).sandbox is None
    assert backend.state.read_tasks(int(job_id))[0].sandbox is None
    assert backend.output_tail(None, "jobs/cs-off", "stdout", None, 100) != b"2\n"
    ended_cleanly(backend)


@pytest.mark.parametrize(
    ("mode", "bwrap", "state"),
    [
        ("required", "bwrap", "sandboxed"),
        ("auto", "bwrap", "sandboxed"),
        ("auto", "/nonexistent/bwrap", "unsandboxed"),
        ("required", "/nonexistent/bwrap", "refused"),
        ("off", "bwrap", "off"),
    ],
)
def test_the_sandbox_status_the_pages_show(settings, mode: str, bwrap: str, state: str):
    settings.LOCAL_BACKEND_SANDBOX = mode
    settings.LOCAL_BACKEND_BWRAP = bwrap

    assert local_sandbox().state == state


# --- Production -----------------------------------------------------------------------------------


def test_a_deployment_that_does_not_allow_the_local_backend_cannot_build_one(
    settings, tmp_path: Path
):
    settings.LOCAL_BACKEND_ALLOWED = False
    settings.LOCAL_CLUSTER_ROOT = tmp_path / "root"

    with pytest.raises(LocalBackendRefused) as refusal:
        local_backend()

    assert not refusal.value.is_transient
    assert str(refusal.value) == (
        "this deployment does not run jobs on the local backend (LOCAL_BACKEND_ALLOWED is "
        "false): its jobs would run as the platform's own processes"
    )
    assert not (tmp_path / "root").exists()
    assert local_sandbox().state == "refused"
