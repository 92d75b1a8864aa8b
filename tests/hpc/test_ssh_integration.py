"""The SSH library against the real Slurm test cluster behind a real sshd on loopback.

These tests fail (never skip) when the cluster does not answer."""

import socket
import subprocess
import time
from pathlib import Path

import paramiko
import pytest

from hpc.errors import (
    AuthenticationRefused,
    ClusterUnreachable,
    HostKeyMismatch,
    InvalidKey,
    RemoteCommandFailed,
    RemoteCommandTimeout,
)
from hpc.slurm.parsers import parse_parsable2, parse_sbatch_parsable
from hpc.ssh import SSHConnection, host_key_from_line
from tests.factories import ssh_key_pair

pytestmark = pytest.mark.slurm


def public_key_line(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.get_base64()}"


@pytest.fixture
def connection(testcluster):
    with SSHConnection(testcluster.ssh_settings()) as opened:
        yield opened


def sacct_state(connection: SSHConnection, job_id: str) -> str | None:
    fields = ["JobIDRaw", "State", "ExitCode", "Comment"]
    result = connection.run(
        ["sacct", "--noheader", "--parsable2", "-X", "-j", job_id, "-o", ",".join(fields)]
    )
    rows = parse_parsable2(result.stdout, fields)
    return rows[0]["State"] if rows else None


def test_sinfo_over_ssh_with_the_pinned_host_key(connection, testcluster):
    fields = ["PartitionName", "CPUs", "TimeLimit", "Avail"]
    result = connection.run(["sinfo", "--noheader", "-o", "%R|%c|%l|%a"])

    rows = parse_parsable2(result.stdout, fields)

    assert testcluster.partition in {row["PartitionName"] for row in rows}
    assert all(row["Avail"] == "up" for row in rows)
    assert all(int(row["CPUs"]) >= 1 for row in rows)


def test_a_one_line_job_runs_as_a_tenant_and_is_completed_in_sacct(connection, testcluster):
    """The service user runs no job itself: it acts as a tenant of the pool through sudo."""
    tenant = testcluster.fixed_pool.tenants[0].user
    result = connection.run(
        [
            "sbatch",
            "--parsable",
            "--job-name",
            "cs-foundation-check",
            "--comment",
            "foundation",
            "--account",
            testcluster.fixed_pool.account,
            "--partition",
            testcluster.partition,
            "--time",
            "1",
            "--output",
            "/dev/null",
            "--wrap",
            "echo hello from slurm",
        ],
        as_user=tenant,
    )
    job_id = parse_sbatch_parsable(result.stdout).job_id

    deadline = time.monotonic() + 60
    state = None
    while time.monotonic() < deadline:
        state = sacct_state(connection, job_id)
        if state == "COMPLETED":
            break
        time.sleep(0.5)

    user = connection.run(
        ["sacct", "--noheader", "--parsable2", "-X", "-j", job_id, "-o", "User"]
    ).stdout.strip()
    assert (state, user) == ("COMPLETED", tenant)
    comment = connection.run(
        ["sacct", "--noheader", "--parsable2", "-X", "-j", job_id, "-o", "Comment"]
    ).stdout.strip()
    assert comment == "foundation"


def test_a_wrong_pinned_host_key_is_refused(testcluster):
    _, other_key = ssh_key_pair()
    connection = SSHConnection(testcluster.ssh_settings(host_key=other_key))

    with pytest.raises(HostKeyMismatch) as refused:
        connection.open()

    assert refused.value.offered_type == "ssh-ed25519"
    assert refused.value.offered_fingerprint == host_key_from_line(testcluster.host_key).fingerprint
    assert not connection.is_open


def test_a_pinned_key_of_another_type_is_refused_too(testcluster):
    rsa = paramiko.RSAKey.generate(2048)
    connection = SSHConnection(testcluster.ssh_settings(host_key=public_key_line(rsa)))

    with pytest.raises(HostKeyMismatch):
        connection.open()


def test_an_unreadable_host_key_line_is_invalid(testcluster):
    with pytest.raises(InvalidKey):
        SSHConnection(testcluster.ssh_settings(host_key="ssh-ed25519 not-base64!")).open()


def test_a_key_the_server_does_not_know_is_refused(testcluster):
    text, _ = ssh_key_pair()

    with pytest.raises(AuthenticationRefused):
        SSHConnection(testcluster.ssh_settings(private_key=text)).open()


def test_a_closed_port_is_unreachable(testcluster):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]

    with pytest.raises(ClusterUnreachable) as unreachable:
        SSHConnection(testcluster.ssh_settings(port=free_port)).open()

    assert "127.0.0.1" in str(unreachable.value)
    assert unreachable.value.is_transient


def test_a_non_zero_exit_raises_with_the_reason_and_is_never_data(connection):
    with pytest.raises(RemoteCommandFailed) as failed:
        connection.run(["sacct", "--noheader", "-j", "not-a-job-id"])

    assert failed.value.exit_status != 0
    assert failed.value.stderr


def test_a_command_past_its_deadline_times_out_and_the_connection_stays_usable(connection):
    started = time.monotonic()

    with pytest.raises(RemoteCommandTimeout):
        connection.run(["sleep", "30"], timeout=1.0)

    assert time.monotonic() - started < 5
    assert connection.run(["echo", "still here"]).stdout == "still here\n"


def test_large_output_on_both_streams_is_read_while_the_command_runs(connection):
    # 4 MiB on each stream, more than the SSH window: a reader that waited for the exit would
    # deadlock here.
    script = "head -c 4194304 /dev/zero | tr '\\0' o; head -c 4194304 /dev/zero | tr '\\0' e >&2"

    result = connection.run(["sh", "-c", script], timeout=30)

    assert len(result.stdout) == 4194304
    assert len(result.stderr) == 4194304


@pytest.mark.parametrize(
    "text",
    [
        'it\'s "quoted"',
        "$(touch /tmp/computeshare-injected)",
        "`touch /tmp/computeshare-injected`",
        "a; touch /tmp/computeshare-injected",
        "line one\nline two",
        "ünïcödé ✓ 計算",
        "$HOME ${PATH} \\ * ?",
    ],
)
def test_arguments_reach_the_cluster_as_data_never_as_commands(connection, text):
    injected = Path("/tmp/computeshare-injected")  # the cluster is this machine
    injected.unlink(missing_ok=True)

    result = connection.run(["printf", "%s", text])

    assert result.stdout == text
    assert not injected.exists()


@pytest.fixture
def hostile_login_environment(testcluster):
    """Sets SQUEUE_FORMAT and SACCT_FORMAT in the service user's shell start-up, as a user's own
    profile might, for the length of one test."""
    bashrc = Path(f"/home/{testcluster.user}/.bashrc")
    original = bashrc.read_bytes() if bashrc.exists() else None
    hostile = b"export SQUEUE_FORMAT='%i BROKEN'\nexport SACCT_FORMAT='JobID,BROKEN'\n"
    bashrc.write_bytes(hostile + (original or b""))
    yield
    if original is None:
        bashrc.unlink()
    else:
        bashrc.write_bytes(original)


def test_the_remote_slurm_environment_does_not_leak_in(testcluster, hostile_login_environment):
    settings = testcluster.ssh_settings()
    raw = paramiko.SSHClient()
    raw.get_host_keys().add(
        f"[{settings.host}]:{settings.port}", "ssh-ed25519", host_key_from_line(settings.host_key)
    )
    raw.connect(
        settings.host,
        port=settings.port,
        username=settings.user,
        key_filename=testcluster.private_key_path,
        look_for_keys=False,
        allow_agent=False,
    )
    _, stdout, _ = raw.exec_command("echo ${SQUEUE_FORMAT-unset}")
    seen_by_a_plain_command = stdout.read().decode().strip()
    raw.close()

    with SSHConnection(settings) as connection:
        seen_by_the_bridge = connection.run(
            ["sh", "-c", "echo ${SQUEUE_FORMAT-unset} ${SACCT_FORMAT-unset}"]
        ).stdout.strip()

    assert seen_by_a_plain_command == "%i BROKEN"  # the trap is really set
    assert seen_by_the_bridge == "unset unset"


def test_the_cluster_refuses_password_logins(testcluster):
    result = subprocess.run(
        [
            "ssh",
            "-p",
            str(testcluster.port),
            "-o",
            "BatchMode=yes",
            "-o",
            "PreferredAuthentications=password",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            f"{testcluster.user}@{testcluster.host}",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )

    assert result.returncode == 255
    assert "Permission denied" in result.stderr
