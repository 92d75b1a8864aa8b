"""Part of bench/jobs.py: what sudo costs the bridge. Everything done for a team runs as its
tenant through `sudo -n -u TENANT` on the service user's one SSH connection; a submission batch
pays that once per tenant for its SFTP session and once for its command.

Measured side by side on one kept connection, the kinds taking turns so that a busy moment of
the shared machine weighs on all of them:

- the same tiny command (`true`) as the service user and as a tenant (sudo'd, in its home, as
  `SSHConnection.run` sends it), on the kept connection (TCP_NODELAY, as the library sets it)
  and on one with Nagle's algorithm back on, as paramiko leaves it (a command's small packets
  then wait for the login node's delayed acknowledgement: why the library turns it off);
- an SFTP session opened as the service user (its `sftp` subsystem: internal-sftp on the test
  cluster, served inside sshd), as the service user with the SFTP server program on a plain
  session channel (no sudo), and as a tenant (that program under sudo: what the bridge opens).
  A session counts from the channel's opening to the server's version answer.

Nothing here needs Django."""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass, field

import paramiko

from hpc.ssh import SSHConnection, remote_command
from hpc.types import Tenant

SFTP_TIMEOUT = 30.0


@dataclass
class Samples:
    label: str
    seconds: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return 1000 * statistics.median(self.seconds)

    @property
    def spread(self) -> str:
        """The 10th to 90th percentile, in ms."""
        if len(self.seconds) < 10:
            return f"{1000 * min(self.seconds):.1f}-{1000 * max(self.seconds):.1f}"
        deciles = statistics.quantiles(self.seconds, n=10)
        return f"{1000 * deciles[0]:.1f}-{1000 * deciles[-1]:.1f}"


def with_nagle(connection: SSHConnection) -> SSHConnection:
    """Opens `connection` and turns Nagle's algorithm back on (the library turns it off):
    small packets wait for the last one's acknowledgement, as with paramiko's default."""
    connection.open()
    transport = connection.transport
    assert transport is not None
    transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)  # type: ignore[union-attr]
    return connection


@dataclass
class SudoCost:
    command_service: Samples
    command_tenant: Samples
    command_service_nagle: Samples
    command_tenant_nagle: Samples
    sftp_subsystem: Samples
    sftp_program: Samples
    sftp_tenant: Samples

    @property
    def per_command_ms(self) -> float:
        """sudo's own cost per command, on the kept connection."""
        return self.command_tenant.median_ms - self.command_service.median_ms

    @property
    def nagle_ms(self) -> float:
        """What Nagle's algorithm would add to a command (the library turns it off)."""
        return self.command_service_nagle.median_ms - self.command_service.median_ms

    @property
    def per_session_ms(self) -> float:
        """A tenant's session over the service user's subsystem: what the bridge pays for
        running SFTP as the tenant."""
        return self.sftp_tenant.median_ms - self.sftp_subsystem.median_ms

    @property
    def per_session_sudo_ms(self) -> float:
        """sudo's own share: the same program started with and without sudo."""
        return self.sftp_tenant.median_ms - self.sftp_program.median_ms

    @property
    def per_batch_ms(self) -> float:
        """Per tenant and submission batch: one command (the files travel in it; the SFTP
        session of outputs and staged files is not in a batch's path)."""
        return self.per_command_ms


def _timed_command(connection: SSHConnection, as_user: str | None) -> float:
    begun = time.perf_counter()
    connection.run(["true"], as_user=as_user)
    return time.perf_counter() - begun


def _timed_session(connection: SSHConnection, kind: str, tenant: Tenant) -> float:
    """Opens one SFTP session of `kind` on the connection, past the server's version answer,
    and closes it (the closing not timed). Sessions are opened here rather than through
    `SSHConnection.sftp`, which keeps them open between uses: each sample is a new one."""
    connection.open()
    transport = connection.transport
    assert transport is not None
    begun = time.perf_counter()
    if kind == "subsystem":
        session = paramiko.SFTPClient.from_transport(transport)
        assert session is not None
    elif kind == "tenant":
        # The library's own way to a tenant's session (what `sftp(as_user=...)` opens).
        client = connection._client
        assert client is not None
        session = connection._open_tenant_sftp(client, tenant.user, SFTP_TIMEOUT)
    else:
        # The same steps as the tenant's, without sudo: the program as the service user.
        channel = transport.open_session(timeout=SFTP_TIMEOUT)
        channel.settimeout(SFTP_TIMEOUT)
        channel.exec_command(remote_command([connection.settings.sftp_server, "-u", "077"]))
        session = paramiko.SFTPClient(channel)
    seconds = time.perf_counter() - begun
    session.close()
    return seconds


def sudo_cost(
    connection: SSHConnection,
    nagle: SSHConnection,
    tenant: Tenant,
    *,
    commands: int = 50,
    sessions: int = 20,
) -> SudoCost:
    """`commands` quadruples of `true` (as the service user and as `tenant`, on `connection`
    and on `nagle`, with Nagle's algorithm on) and `sessions` triples of SFTP sessions,
    each in a turning order."""
    cost = SudoCost(
        Samples("`true` as the service user"),
        Samples(f"`true` as a tenant (sudo -n -u {tenant.user})"),
        Samples("`true` as the service user, Nagle's algorithm on"),
        Samples("`true` as a tenant, Nagle's algorithm on"),
        Samples("an SFTP session as the service user (sftp subsystem)"),
        Samples("an SFTP session as the service user (sftp-server on a channel)"),
        Samples("an SFTP session as a tenant (sftp-server under sudo)"),
    )
    runs = [
        (connection, None, cost.command_service),
        (connection, tenant.user, cost.command_tenant),
        (nagle, None, cost.command_service_nagle),
        (nagle, tenant.user, cost.command_tenant_nagle),
    ]
    # Warm: each connection's first channel, sudo's first lookup of the tenant.
    for on, as_user, _ in runs:
        _timed_command(on, as_user)
    for turn in range(commands):
        shift = turn % len(runs)
        for on, as_user, samples in runs[shift:] + runs[:shift]:
            samples.seconds.append(_timed_command(on, as_user))
    kinds = [
        ("subsystem", cost.sftp_subsystem),
        ("program", cost.sftp_program),
        ("tenant", cost.sftp_tenant),
    ]
    for kind, _ in kinds:
        _timed_session(connection, kind, tenant)
    for turn in range(sessions):
        shift = turn % len(kinds)
        for kind, samples in kinds[shift:] + kinds[:shift]:
            samples.seconds.append(_timed_session(connection, kind, tenant))
    return cost
