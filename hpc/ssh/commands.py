"""Commands on the login node: the exact text the remote shell gets (a clean environment, and a
tenant's commands through sudo), and how a command's channel is read: both streams while it
runs, under a deadline, or its stdout handed over as it comes (`RemoteOutput`)."""

from __future__ import annotations

import re
import select
import shlex
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import paramiko

from hpc.errors import (
    ClusterUnreachable,
    RemoteCommandFailed,
    RemoteCommandTimeout,
    UnexpectedOutput,
)
from hpc.ssh.base import ConnectionBase

DEFAULT_COMMAND_TIMEOUT = 60.0
MAX_CAPTURED_BYTES = 16 * 1024 * 1024
READ_CHUNK = 65536

# Commands run under `env -i` with only these variables (plus SLURM_CONF when the login node
# sets it): nothing from the remote user's profile changes Slurm's output formats, and TZ=UTC
# makes every time Slurm prints unambiguous.
_CLEAN_ENVIRONMENT_PREFIX = (
    'exec env -i PATH="$PATH" HOME="$HOME" USER="$USER" LOGNAME="$LOGNAME" '
    "LANG=C.UTF-8 LC_ALL=C.UTF-8 TZ=UTC "
    '${SLURM_CONF:+SLURM_CONF="$SLURM_CONF"} /bin/sh -c '
)
# The same inside `sudo -n -u TENANT` (never a password prompt: a missing rule is an error).
# sudo resets the environment and sets HOME, USER and LOGNAME to the tenant's; the service
# user's PATH is given back (sudo's secure_path may not hold the site's Slurm) with the same
# locale, time zone and SLURM_CONF, and the command starts in the tenant's home.
_TENANT_PREFIX = (
    "exec sudo -n -u {user} -- /usr/bin/env "
    'PATH="$PATH" LANG=C.UTF-8 LC_ALL=C.UTF-8 TZ=UTC '
    '${{SLURM_CONF:+SLURM_CONF="$SLURM_CONF"}} /bin/sh -c '
)
_UNIX_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_status: int
    stdout: str
    stderr: str
    elapsed_seconds: float


def remote_command(arguments: Sequence[str] | str, *, as_user: str | None = None) -> str:
    """The exact text sent to the remote shell: the command (each argument quoted when given as a
    list) run by /bin/sh inside a clean environment, as the service user or, with `as_user`,
    as that tenant through sudo, in its home."""
    inner = arguments if isinstance(arguments, str) else shlex.join(arguments)
    if as_user is not None:
        # A single command replaces the tenant's shell: nothing of the tenant's stays between
        # sudo and the command (a scrub ends every process of the tenant but itself).
        start = inner if isinstance(arguments, str) else f"exec {inner}"
        inner = _TENANT_PREFIX.format(user=tenant_name(as_user)) + shlex.quote(f"cd && {start}")
    return _CLEAN_ENVIRONMENT_PREFIX + shlex.quote(inner)


def tenant_name(user: str) -> str:
    """`user` when it is a plain Unix user name; raises ValueError for anything else, so that
    no other text reaches sudo's command line as a user."""
    if not _UNIX_USER.fullmatch(user):
        raise ValueError(f"not a Unix user name: {user!r}")
    return user


def command_shown(arguments: Sequence[str] | str, as_user: str | None) -> str:
    """The command as errors and logs show it: its words, and the tenant it runs as."""
    shown = arguments if isinstance(arguments, str) else shlex.join(arguments)
    return shown if as_user is None else f"({as_user}) {shown}"


def exchange(
    channel: paramiko.Channel,
    command: str,
    stdin: bytes | None,
    *,
    deadline: float,
    shown: str,
    timeout: float,
) -> tuple[int, bytes, bytes]:
    """Runs `command` on an open session channel: its stdin sent, both streams read until it
    has exited, and its exit status. paramiko's errors pass through (the connection's to
    judge); `RemoteCommandTimeout` past the deadline."""
    channel.exec_command(command)
    if stdin:
        channel.sendall(stdin)
    channel.shutdown_write()
    stdout, stderr = collect(channel, deadline, shown, timeout)
    exit_status = channel.recv_exit_status()
    if exit_status == -1 and not channel.get_transport().is_active():
        # paramiko's status when the connection dropped before the command's own came: a lost
        # connection (transient), not a command that failed.
        raise EOFError("the connection closed before the command's exit status came")
    return exit_status, stdout, stderr


def collect(
    channel: paramiko.Channel, deadline: float, shown: str, timeout: float
) -> tuple[bytes, bytes]:
    """Reads both streams as they come, so that neither fills its window and blocks the
    remote command, until the command has exited and both streams are drained."""
    stdout = bytearray()
    stderr = bytearray()
    while True:
        drained = False
        while channel.recv_ready():
            chunk = channel.recv(READ_CHUNK)
            if len(stdout) < MAX_CAPTURED_BYTES:
                stdout.extend(chunk)
            drained = True
        while channel.recv_stderr_ready():
            chunk = channel.recv_stderr(READ_CHUNK)
            if len(stderr) < MAX_CAPTURED_BYTES:
                stderr.extend(chunk)
            drained = True
        if (
            channel.exit_status_ready()
            and (channel.eof_received or channel.closed)
            and not channel.recv_ready()
            and not channel.recv_stderr_ready()
        ):
            return bytes(stdout), bytes(stderr)
        if drained:
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RemoteCommandTimeout(shown, timeout)
        try:
            select.select([channel], [], [], min(remaining, 0.5))
        except (OSError, ValueError):  # the channel closed under us
            time.sleep(0.01)


class RemoteOutput:
    """The stdout of a command `SSHConnection.stream` runs, read as it arrives; its stderr is
    kept aside (at most MAX_CAPTURED_BYTES)."""

    def __init__(self, channel: paramiko.Channel, shown: str, timeout: float) -> None:
        self.channel = channel
        self.shown = shown
        self.timeout = timeout
        self.stderr = bytearray()
        self._buffer = bytearray()
        self._ended = False

    def _fill(self) -> bool:
        """Reads what comes next into the buffer; False at the end of stdout."""
        if self._ended:
            return False
        self._drain_stderr()
        chunk = self.channel.recv(READ_CHUNK)
        self._drain_stderr()
        if not chunk:
            self._ended = True
            return False
        self._buffer.extend(chunk)
        return True

    def _drain_stderr(self) -> None:
        while self.channel.recv_stderr_ready():
            chunk = self.channel.recv_stderr(READ_CHUNK)
            if len(self.stderr) < MAX_CAPTURED_BYTES:
                self.stderr.extend(chunk)

    def read(self, size: int) -> bytes:
        """Up to `size` bytes (fewer only at the end)."""
        while len(self._buffer) < size and self._fill():
            pass
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def read_exactly(self, size: int) -> bytes:
        data = self.read(size)
        if len(data) != size:
            raise UnexpectedOutput(f"`{self.shown}` ended in the middle of its answer")
        return data

    def readline(self) -> bytes:
        """One line with its line break; b"" at the end of stdout."""
        while b"\n" not in self._buffer and self._fill():
            pass
        end = self._buffer.find(b"\n")
        end = len(self._buffer) if end < 0 else end + 1
        line = bytes(self._buffer[:end])
        del self._buffer[:end]
        return line

    def finish(self) -> int:
        """Drains what is left and returns the exit status."""
        while self._fill():
            self._buffer.clear()
        deadline = time.monotonic() + self.timeout
        while not self.channel.exit_status_ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"`{self.shown}` closed its output but did not exit")
            self._drain_stderr()
            select.select([self.channel], [], [], 0.1)
        self._drain_stderr()
        status = self.channel.recv_exit_status()
        if status == -1:
            raise EOFError("the connection closed before the command's exit status came")
        return status


def stderr_text(channel: paramiko.Channel) -> str:
    """What a channel's command wrote to stderr before it ended, at most a few lines."""
    deadline = time.monotonic() + 2.0
    data = bytearray()
    while time.monotonic() < deadline:
        if channel.recv_stderr_ready():
            data.extend(channel.recv_stderr(READ_CHUNK))
            continue
        if channel.exit_status_ready() or channel.closed:
            break
        time.sleep(0.01)
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return "; ".join(lines[-3:])


class CommandRunner(ConnectionBase):
    """`SSHConnection`'s commands: each on a channel of its own, within the channel slots."""

    def run(
        self,
        arguments: Sequence[str] | str,
        *,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        stdin: bytes | None = None,
        check: bool = True,
        as_user: str | None = None,
    ) -> CommandResult:
        """Runs one command, as the service user or, with `as_user`, as that tenant (through
        sudo, in its home). A list is quoted argument by argument; a string is a shell command
        line the caller built from quoted parts. Raises `RemoteCommandFailed` on a non-zero exit
        (unless `check` is false), `RemoteCommandTimeout` past the deadline and
        `ClusterUnreachable` when the connection drops."""
        command = remote_command(arguments, as_user=as_user)
        shown = command_shown(arguments, as_user)
        started = time.monotonic()
        deadline = started + timeout
        with self._channel_slot(timeout, shown):
            self.open()
            client = self._client
            assert client is not None
            exit_status, stdout, stderr = self._execute(
                client, command, shown, stdin, deadline, timeout
            )
        result = CommandResult(
            command=shown,
            exit_status=exit_status,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            elapsed_seconds=time.monotonic() - started,
        )
        if check and exit_status != 0:
            raise RemoteCommandFailed(shown, exit_status, result.stdout, result.stderr)
        return result

    @contextmanager
    def stream(
        self,
        arguments: Sequence[str] | str,
        *,
        stdin: bytes,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        as_user: str | None = None,
    ) -> Iterator[RemoteOutput]:
        """Runs one command as `run` does, but hands its stdout over as it comes (`RemoteOutput`,
        read in pieces: a whole job's files need not fit in memory), each read waiting at most
        `timeout` for data. On leaving the block the rest is drained and the exit status read:
        `RemoteCommandFailed` when it is not 0, with the command's stderr."""
        command = remote_command(arguments, as_user=as_user)
        shown = command_shown(arguments, as_user)
        with self._channel_slot(timeout, shown):
            self.open()
            client = self._client
            assert client is not None
            try:
                channel = self._session(client, timeout)
            except (OSError, EOFError, paramiko.SSHException) as error:
                self.close()
                raise ClusterUnreachable(f"cannot start `{shown}`: {error}") from error
            try:
                output = RemoteOutput(channel, shown, timeout)
                try:
                    channel.settimeout(timeout)
                    channel.exec_command(command)
                    channel.sendall(stdin)
                    channel.shutdown_write()
                    yield output
                    exit_status = output.finish()
                except TimeoutError as error:
                    raise RemoteCommandTimeout(shown, timeout) from error
                except (OSError, EOFError, paramiko.SSHException) as error:
                    self.close()
                    raise ClusterUnreachable(
                        f"the SSH connection failed during `{shown}`: {error}"
                    ) from error
            finally:
                channel.close()
        if exit_status != 0:
            stderr = output.stderr.decode("utf-8", "replace")
            raise RemoteCommandFailed(shown, exit_status, "", stderr)

    def _execute(
        self,
        client: paramiko.SSHClient,
        command: str,
        shown: str,
        stdin: bytes | None,
        deadline: float,
        timeout: float,
    ) -> tuple[int, bytes, bytes]:
        try:
            channel = self._session(client, timeout)
            try:
                return exchange(
                    channel, command, stdin, deadline=deadline, shown=shown, timeout=timeout
                )
            finally:
                channel.close()
        except (OSError, EOFError, paramiko.SSHException) as error:
            self.close()
            raise ClusterUnreachable(
                f"the SSH connection failed during `{shown}`: {error}"
            ) from error
