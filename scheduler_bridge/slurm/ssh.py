"""One SSH connection to a cluster's login node, with the host key pinned.

Every command runs under a deadline with stdout and stderr read while it runs, in a clean
environment (so that the remote user's `SQUEUE_FORMAT` and friends cannot change what Slurm
prints), and a non-zero exit raises instead of returning output to parse."""

from __future__ import annotations

import base64
import binascii
import io
import os
import select
import shlex
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import paramiko

from scheduler_bridge.slurm.errors import (
    AuthenticationRefused,
    ClusterUnreachable,
    HostKeyMismatch,
    InvalidKey,
    RemoteCommandFailed,
    RemoteCommandTimeout,
)

DEFAULT_COMMAND_TIMEOUT = 60.0
MAX_CAPTURED_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 65536

# Commands run under `env -i` with only these variables (plus SLURM_CONF when the login node
# sets it): nothing from the remote user's profile changes Slurm's output formats, and TZ=UTC
# makes every time Slurm prints unambiguous.
_CLEAN_ENVIRONMENT_PREFIX = (
    'exec env -i PATH="$PATH" HOME="$HOME" USER="$USER" LOGNAME="$LOGNAME" '
    "LANG=C.UTF-8 LC_ALL=C.UTF-8 TZ=UTC "
    '${SLURM_CONF:+SLURM_CONF="$SLURM_CONF"} /bin/sh -c '
)


@dataclass(frozen=True)
class SSHSettings:
    host: str
    port: int
    user: str
    private_key: str = field(repr=False)
    host_key: str
    connect_timeout: float = 10.0
    keepalive_seconds: int = 30


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_status: int
    stdout: str
    stderr: str
    elapsed_seconds: float


def host_key_from_line(line: str) -> paramiko.PKey:
    """Reads a public key line `type base64 [comment]` (as in known_hosts or ssh-keyscan)."""
    parts = line.strip().split()
    if len(parts) >= 3 and not parts[0].startswith(("ssh-", "ecdsa-", "sk-")):
        parts = parts[1:]  # a known_hosts line starts with the host name
    if len(parts) < 2:
        raise InvalidKey("a host key line is `type base64`, for example `ssh-ed25519 AAAA...`")
    key_type, blob = parts[0], parts[1]
    try:
        return paramiko.PKey.from_type_string(key_type, base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError, paramiko.SSHException) as error:
        raise InvalidKey(f"cannot read the {key_type} host key: {error}") from error


def private_key_from_text(text: str) -> paramiko.PKey:
    """Reads an unencrypted private key (Ed25519, ECDSA or RSA) in OpenSSH or PEM format."""
    for key_class in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return key_class.from_private_key(io.StringIO(text))
        except (paramiko.SSHException, ValueError, IndexError):
            continue
    raise InvalidKey("the private key is not an unencrypted Ed25519, ECDSA or RSA key")


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as OpenSSH shows it


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _RefuseUnknownHostKey(paramiko.MissingHostKeyPolicy):
    def __init__(self, settings: SSHSettings) -> None:
        self.settings = settings

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise HostKeyMismatch(
            self.settings.host, self.settings.port, fingerprint(key), key.get_name()
        )


def _connect_failure(error: BaseException) -> str:
    """Why a connection failed, in words a cluster owner can act on ("connection refused"),
    rather than paramiko's "[Errno None] Unable to connect to port 22 on ..."."""
    if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = {
            os.strerror(errno).lower() if (errno := getattr(cause, "errno", None)) else str(cause)
            for cause in error.errors.values()
        }
        return ", ".join(sorted(reasons))
    if isinstance(error, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno).lower()
    return str(error) or type(error).__name__


def remote_command(arguments: Sequence[str] | str) -> str:
    """The exact text sent to the remote shell: the command (each argument quoted when given as a
    list) run by /bin/sh inside a clean environment."""
    inner = arguments if isinstance(arguments, str) else shlex.join(arguments)
    return _CLEAN_ENVIRONMENT_PREFIX + shlex.quote(inner)


class SSHConnection:
    """A connection to one login node. Not thread-safe; open it in the process that uses it."""

    def __init__(self, settings: SSHSettings) -> None:
        self.settings = settings
        self._client: paramiko.SSHClient | None = None

    def __enter__(self) -> SSHConnection:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        transport = self._client.get_transport() if self._client else None
        return bool(transport and transport.is_active())

    def open(self) -> None:
        if self.is_open:
            return
        settings = self.settings
        pinned = host_key_from_line(settings.host_key)
        client = paramiko.SSHClient()
        client.get_host_keys().add(
            known_hosts_name(settings.host, settings.port), pinned.get_name(), pinned
        )
        client.set_missing_host_key_policy(_RefuseUnknownHostKey(settings))
        try:
            client.connect(
                settings.host,
                port=settings.port,
                username=settings.user,
                pkey=private_key_from_text(settings.private_key),
                timeout=settings.connect_timeout,
                banner_timeout=settings.connect_timeout,
                auth_timeout=settings.connect_timeout,
                channel_timeout=settings.connect_timeout,
                look_for_keys=False,
                allow_agent=False,
            )
        except paramiko.BadHostKeyException as error:
            client.close()
            raise HostKeyMismatch(
                settings.host, settings.port, fingerprint(error.key), error.key.get_name()
            ) from error
        except paramiko.AuthenticationException as error:
            client.close()
            raise AuthenticationRefused(
                f"{settings.user}@{settings.host}:{settings.port} refused the key: {error}"
            ) from error
        except HostKeyMismatch:
            client.close()
            raise
        except (OSError, paramiko.SSHException, EOFError) as error:
            client.close()
            raise ClusterUnreachable(
                f"cannot connect to {settings.host}:{settings.port}: {_connect_failure(error)}"
            ) from error
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(settings.keepalive_seconds)
        self._client = client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def run(
        self,
        arguments: Sequence[str] | str,
        *,
        timeout: float = DEFAULT_COMMAND_TIMEOUT,
        stdin: bytes | None = None,
        check: bool = True,
    ) -> CommandResult:
        """Runs one command. A list is quoted argument by argument; a string is a shell command
        line the caller built from quoted parts. Raises `RemoteCommandFailed` on a non-zero exit
        (unless `check` is false), `RemoteCommandTimeout` past the deadline and
        `ClusterUnreachable` when the connection drops."""
        self.open()
        assert self._client is not None
        command = remote_command(arguments)
        shown = arguments if isinstance(arguments, str) else shlex.join(arguments)
        started = time.monotonic()
        deadline = started + timeout
        try:
            transport = self._client.get_transport()
            if transport is None or not transport.is_active():
                raise ClusterUnreachable("the SSH connection is closed")
            channel = transport.open_session(timeout=min(timeout, self.settings.connect_timeout))
            try:
                channel.exec_command(command)
                if stdin:
                    channel.sendall(stdin)
                channel.shutdown_write()
                stdout, stderr = self._collect(channel, deadline, shown, timeout)
                exit_status = channel.recv_exit_status()
            finally:
                channel.close()
        except (OSError, EOFError, paramiko.SSHException) as error:
            self.close()
            raise ClusterUnreachable(
                f"the SSH connection failed during `{shown}`: {error}"
            ) from error
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

    @staticmethod
    def _collect(
        channel: paramiko.Channel, deadline: float, shown: str, timeout: float
    ) -> tuple[bytes, bytes]:
        """Reads both streams as they come, so that neither fills its window and blocks the
        remote command, until the command has exited and both streams are drained."""
        stdout = bytearray()
        stderr = bytearray()
        while True:
            drained = False
            while channel.recv_ready():
                chunk = channel.recv(_READ_CHUNK)
                if len(stdout) < MAX_CAPTURED_BYTES:
                    stdout.extend(chunk)
                drained = True
            while channel.recv_stderr_ready():
                chunk = channel.recv_stderr(_READ_CHUNK)
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
