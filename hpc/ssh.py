"""One SSH connection to a cluster's login node, with the host key pinned.

Every command runs under a deadline with stdout and stderr read while it runs, in a clean
environment (so that the remote user's `SQUEUE_FORMAT` and friends cannot change what Slurm
prints), and a non-zero exit raises instead of returning output to parse.

Files go over SFTP on the same connection. A connection caps how many channels (commands and
SFTP sessions) it has open at once, because sshd refuses sessions past its `MaxSessions` (10 by
default) and a refused session looks like a dropped connection.

A command or an SFTP session can run as a tenant (a pool account leased to one team) instead of
the service user: through `sudo -n -u TENANT`, which the owner's sudoers rule allows for the
members of the tenant group and nobody else. One connection then serves every tenant of a
cluster, and no team's code ever runs as the service user."""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import select
import shlex
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import paramiko

from hpc.errors import (
    AuthenticationRefused,
    ClusterUnreachable,
    HostKeyMismatch,
    InvalidKey,
    RemoteCommandFailed,
    RemoteCommandTimeout,
    TenantUnavailable,
    UnexpectedOutput,
)

DEFAULT_COMMAND_TIMEOUT = 60.0
# Below OpenSSH's default MaxSessions (10): sshd never has to refuse one of our channels.
DEFAULT_MAX_CHANNELS = 8
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
# Where Linux distributions put OpenSSH's SFTP server program.
DEFAULT_SFTP_SERVER = "/usr/lib/openssh/sftp-server"
# How many SFTP sessions a connection keeps open between uses (each holds a channel).
_CACHED_SFTP_SESSIONS = 2


class AddressResolver(Protocol):
    """Where a connection to `host` may go: its addresses, each `(family, sockaddr)` as
    `socket.connect` takes them, checked against the caller's rules. Raises `OSError` (an
    unknown name, an address the rules deny). The connection goes to these addresses and
    never looks `host` up again. Implementations are hashable (they are part of the settings,
    which key the connection pool)."""

    def resolve(self, host: str, port: int) -> Sequence[tuple[int, tuple[Any, ...]]]: ...


@dataclass(frozen=True)
class SSHSettings:
    host: str
    port: int
    user: str
    private_key: str = field(repr=False)
    host_key: str
    connect_timeout: float = 10.0
    keepalive_seconds: int = 30
    # The SFTP server program that tenants' sessions run under sudo (the path on the cluster's
    # `Subsystem sftp` line; the owner gives it and verification's SFTP step tries it).
    sftp_server: str = DEFAULT_SFTP_SERVER
    # Resolves and checks the host's addresses (the platform's outbound rules); None: every
    # address the host resolves to.
    resolver: AddressResolver | None = None


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
    if isinstance(error, socket.gaierror):
        return str(error.strerror or error).lower()
    if isinstance(error, OSError) and error.errno:
        return os.strerror(error.errno).lower()
    return str(error) or type(error).__name__


def _resolve_any(host: str, port: int) -> list[tuple[int, tuple[Any, ...]]]:
    return [
        (family, sockaddr)
        for family, _, _, _, sockaddr in socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        if family in (socket.AF_INET, socket.AF_INET6)
    ]


def open_socket(settings: SSHSettings) -> socket.socket:
    """A TCP connection to the login node: the host resolved once (and checked, with a
    resolver), then each of its addresses tried in order. paramiko gets this socket, so it
    never resolves the host itself. Raises `ClusterUnreachable` with the reason."""
    where = f"{settings.host}:{settings.port}"
    try:
        if settings.resolver is not None:
            addresses = list(settings.resolver.resolve(settings.host, settings.port))
        else:
            addresses = _resolve_any(settings.host, settings.port)
    except OSError as error:
        raise ClusterUnreachable(f"cannot connect to {where}: {_connect_failure(error)}") from error
    failures: list[OSError] = []
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(settings.connect_timeout)
        try:
            sock.connect(sockaddr)
        except OSError as error:
            sock.close()
            failures.append(error)
            continue
        # A command is a few small packets each way: with Nagle's algorithm (paramiko
        # leaves it on) each waits for the login node's delayed acknowledgement, about
        # 30 ms a command, more than sudo or sbatch itself costs (`make bench`).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    reasons = sorted({_connect_failure(failure) for failure in failures}) or ["no address"]
    unreachable = ClusterUnreachable(f"cannot connect to {where}: {', '.join(reasons)}")
    raise unreachable from (failures[-1] if failures else None)


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


# Clients inherited from a parent process: never used, closed or garbage-collected in the child,
# because paramiko's channels send a close message over the socket when collected, which would
# end the parent's session. Their socket descriptors are closed in the child (see `_abandon`).
_INHERITED_CLIENTS: list[paramiko.SSHClient] = []


def _abandon(client: paramiko.SSHClient) -> None:
    """Lets go of a client opened by another (parent) process without a word on its socket: the
    child's copy of the descriptor is closed, the shared session stays the parent's."""
    transport = client.get_transport()
    sock = transport.sock if transport is not None else None
    if isinstance(sock, socket.socket) and sock.fileno() >= 0:
        # detach() first, so that the socket object never closes a descriptor number that the
        # child has reused by then.
        os.close(sock.detach())
    _INHERITED_CLIENTS.append(client)


@dataclass
class _SftpSlot:
    """One user's SFTP session on a connection, used by one thread at a time."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    client: paramiko.SFTPClient | None = None


class SSHConnection:
    """A connection to one login node, shared by threads: every command and SFTP session run on
    channels of one transport, at most `max_channels` at a time. SFTP sessions are kept open
    between uses, one per user (the service user's or a tenant's), the most recently used few.

    A connection opened in a parent process is never used in a forked child: the child opens its
    own (a transport's socket and threads cannot be shared across processes)."""

    def __init__(self, settings: SSHSettings, *, max_channels: int = DEFAULT_MAX_CHANNELS) -> None:
        self.settings = settings
        self.max_channels = max_channels
        self._client: paramiko.SSHClient | None = None
        self._opened_in_process: int | None = None
        self._lock = threading.RLock()
        self._channels = threading.BoundedSemaphore(max_channels)
        # user (None: the service user) -> session, least recently used first
        self._sftp_slots: OrderedDict[str | None, _SftpSlot] = OrderedDict()
        self._home: str | None = None

    def __enter__(self) -> SSHConnection:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def is_open(self) -> bool:
        client = self._client
        if client is None or self._opened_in_process != os.getpid():
            return False
        transport = client.get_transport()
        return bool(transport and transport.is_active())

    @property
    def transport(self) -> paramiko.Transport | None:
        """The SSH transport of this process's open client (keepalive, liveness), if any."""
        client = self._client
        if client is None or self._opened_in_process != os.getpid():
            return None
        return client.get_transport()

    def open(self) -> None:
        """Opens the connection, or opens it again when it has dropped or was opened by a
        parent process."""
        with self._lock:
            if self.is_open:
                return
            self._drop_client()
            self._client = self._connect()
            self._opened_in_process = os.getpid()

    def _connect(self) -> paramiko.SSHClient:
        settings = self.settings
        pinned = host_key_from_line(settings.host_key)
        client = paramiko.SSHClient()
        client.get_host_keys().add(
            known_hosts_name(settings.host, settings.port), pinned.get_name(), pinned
        )
        client.set_missing_host_key_policy(_RefuseUnknownHostKey(settings))
        sock = open_socket(settings)
        try:
            # The host name and port still name the pinned key (`known_hosts_name`); the
            # socket is already connected to the checked address.
            client.connect(
                settings.host,
                port=settings.port,
                sock=sock,
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
            sock.close()
            raise HostKeyMismatch(
                settings.host, settings.port, fingerprint(error.key), error.key.get_name()
            ) from error
        except paramiko.AuthenticationException as error:
            client.close()
            sock.close()
            raise AuthenticationRefused(
                f"{settings.user}@{settings.host}:{settings.port} refused the key: {error}"
            ) from error
        except HostKeyMismatch:
            client.close()
            sock.close()
            raise
        except (OSError, paramiko.SSHException, EOFError) as error:
            client.close()
            sock.close()
            raise ClusterUnreachable(
                f"cannot connect to {settings.host}:{settings.port}: {_connect_failure(error)}"
            ) from error
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(settings.keepalive_seconds)
        return client

    def close(self) -> None:
        with self._lock:
            self._drop_client()

    def forget_after_fork(self) -> None:
        """In a forked child: lets go of the parent's client without a word on its socket and
        without taking the connection's locks, which a thread of the parent may have held at
        the fork. The next use opens the child's own connection."""
        self._lock = threading.RLock()
        self._sftp_slots = OrderedDict()
        self._drop_client()

    def _drop_client(self) -> None:
        """Closes the client (and its SFTP sessions), or abandons it when a parent opened it."""
        client, self._client = self._client, None
        sessions = [slot.client for slot in self._sftp_slots.values() if slot.client is not None]
        for slot in self._sftp_slots.values():
            slot.client = None
        if client is None:
            return
        if self._opened_in_process != os.getpid():
            _abandon(client)
            # The parent's SFTP slots are not ours to give back: this process starts afresh.
            self._channels = threading.BoundedSemaphore(self.max_channels)
            return
        for session in sessions:
            session.close()
            self._channels.release()
        client.close()

    @contextmanager
    def _channel_slot(self, timeout: float, shown: str) -> Iterator[None]:
        """Holds one of the connection's channel slots, waiting at most `timeout` for one."""
        channels = self._channels
        if not channels.acquire(timeout=max(timeout, 0.0)):
            raise RemoteCommandTimeout(f"(waiting for a free channel) {shown}", timeout)
        try:
            yield
        finally:
            channels.release()

    @property
    def home(self) -> str:
        """The service user's home directory on the login node, resolved once over SFTP (the
        server's idea of `.`), not from a shell variable."""
        if self._home is None:
            with self.sftp() as sftp:
                self._home = sftp.normalize(".")
        return self._home

    @contextmanager
    def sftp(
        self, timeout: float = DEFAULT_COMMAND_TIMEOUT, *, as_user: str | None = None
    ) -> Iterator[paramiko.SFTPClient]:
        """An SFTP session of the service user or, with `as_user`, of that tenant (the SFTP
        server program started as the tenant through sudo, in its home): opened on first use
        and again after a drop, held by one thread at a time. Each SFTP request waits at most
        `timeout` for its answer.

        SFTP status errors (a missing file, a refused permission) pass through as paramiko's
        `OSError`s; a dropped connection raises `ClusterUnreachable`; a tenant that the service
        user cannot act as raises `TenantUnavailable`."""
        if as_user is not None:
            tenant_name(as_user)
        with self._lock:
            slot = self._sftp_slots.get(as_user)
            if slot is None:
                slot = self._sftp_slots[as_user] = _SftpSlot()
            self._sftp_slots.move_to_end(as_user)
        try:
            with slot.lock:
                sftp = self._open_sftp(slot, as_user, timeout)
                channel = sftp.get_channel()
                if channel is not None:
                    channel.settimeout(timeout)
                try:
                    yield sftp
                except TimeoutError as error:
                    # A late answer could still come: the session is not trusted again.
                    self._drop_sftp(slot, sftp)
                    raise RemoteCommandTimeout("(sftp)", timeout) from error
                except (OSError, EOFError, paramiko.SSHException) as error:
                    channel = sftp.get_channel()
                    session_alive = channel is not None and not channel.closed and self.is_open
                    if isinstance(error, OSError) and session_alive:
                        raise  # an answer of the server (no such file, ...): the session is fine
                    self._drop_sftp(slot, sftp)
                    if not self.is_open:
                        self.close()
                    raise ClusterUnreachable(f"the SFTP session failed: {error}") from error
        finally:
            self._close_idle_sftp_sessions()

    def _close_idle_sftp_sessions(self) -> None:
        """Closes the least recently used sessions beyond the few kept open, unless in use:
        each open session holds a channel that commands could use."""
        with self._lock:
            open_slots = [slot for slot in self._sftp_slots.values() if slot.client is not None]
            for slot in open_slots[: max(0, len(open_slots) - _CACHED_SFTP_SESSIONS)]:
                if slot.lock.acquire(blocking=False):
                    try:
                        if slot.client is not None:
                            self._drop_sftp(slot, slot.client)
                    finally:
                        slot.lock.release()

    def _drop_sftp(self, slot: _SftpSlot, sftp: paramiko.SFTPClient) -> None:
        with self._lock:
            if slot.client is not sftp:
                return  # the connection was closed (and its SFTP slot freed) meanwhile
            slot.client = None
            sftp.close()
            self._channels.release()

    def _open_sftp(
        self, slot: _SftpSlot, as_user: str | None, timeout: float
    ) -> paramiko.SFTPClient:
        """The slot's open SFTP session, or a new one. Called with the slot's lock held."""
        with self._lock:
            sftp = slot.client
            if sftp is not None:
                channel = sftp.get_channel()
                if channel is not None and not channel.closed and self.is_open:
                    return sftp
                self._drop_sftp(slot, sftp)
        # The channel slot is taken before the connection lock, in the same order as `run`.
        channels = self._channels
        if not channels.acquire(timeout=timeout):
            raise RemoteCommandTimeout("(waiting for a free channel) sftp", timeout)
        try:
            self.open()
            with self._lock:
                client = self._client
                assert client is not None
                if as_user is None:
                    sftp = client.open_sftp()
                else:
                    sftp = self._open_tenant_sftp(client, as_user, timeout)
                slot.client = sftp
                return sftp
        except BaseException as error:
            channels.release()
            if isinstance(error, OSError | EOFError | paramiko.SSHException):
                self.close()
                raise ClusterUnreachable(f"cannot open an SFTP session: {error}") from error
            raise

    def _open_tenant_sftp(
        self, client: paramiko.SSHClient, user: str, timeout: float
    ) -> paramiko.SFTPClient:
        """An SFTP session whose server runs as `user`: its program started under sudo on a
        plain session channel (what the `sftp` subsystem would start as the service user),
        with a umask that keeps new files the tenant's alone."""
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ClusterUnreachable("the SSH connection is closed")
        channel = transport.open_session(timeout=min(timeout, self.settings.connect_timeout))
        channel.settimeout(timeout)
        command = remote_command([self.settings.sftp_server, "-u", "077"], as_user=user)
        channel.exec_command(command)
        try:
            return paramiko.SFTPClient(channel)
        except (EOFError, paramiko.SSHException) as error:
            # The server never spoke: sudo refused, or the program is missing. Its words are on
            # stderr; the connection itself is fine.
            reason = _drain_stderr(channel) or str(error)
            channel.close()
            if self.is_open:
                raise TenantUnavailable(
                    f"cannot start an SFTP session as {user} "
                    f"({self.settings.sftp_server} through sudo): {reason}"
                ) from error
            raise

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
        shown = arguments if isinstance(arguments, str) else shlex.join(arguments)
        if as_user is not None:
            shown = f"({as_user}) {shown}"
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
        shown = arguments if isinstance(arguments, str) else shlex.join(arguments)
        if as_user is not None:
            shown = f"({as_user}) {shown}"
        with self._channel_slot(timeout, shown):
            self.open()
            client = self._client
            assert client is not None
            try:
                transport = client.get_transport()
                if transport is None or not transport.is_active():
                    raise ClusterUnreachable("the SSH connection is closed")
                channel = transport.open_session(
                    timeout=min(timeout, self.settings.connect_timeout)
                )
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
            transport = client.get_transport()
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
                if exit_status == -1 and not transport.is_active():
                    # paramiko's status when the connection dropped before the command's own
                    # came: a lost connection (transient), not a command that failed.
                    raise EOFError("the connection closed before the command's exit status came")
            finally:
                channel.close()
        except (OSError, EOFError, paramiko.SSHException) as error:
            self.close()
            raise ClusterUnreachable(
                f"the SSH connection failed during `{shown}`: {error}"
            ) from error
        return exit_status, stdout, stderr

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
        chunk = self.channel.recv(_READ_CHUNK)
        self._drain_stderr()
        if not chunk:
            self._ended = True
            return False
        self._buffer.extend(chunk)
        return True

    def _drain_stderr(self) -> None:
        while self.channel.recv_stderr_ready():
            chunk = self.channel.recv_stderr(_READ_CHUNK)
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


def _drain_stderr(channel: paramiko.Channel) -> str:
    """What a channel's command wrote to stderr before it ended, at most a few lines."""
    deadline = time.monotonic() + 2.0
    data = bytearray()
    while time.monotonic() < deadline:
        if channel.recv_stderr_ready():
            data.extend(channel.recv_stderr(_READ_CHUNK))
            continue
        if channel.exit_status_ready() or channel.closed:
            break
        time.sleep(0.01)
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return "; ".join(lines[-3:])
