"""The connection itself: one paramiko client per process, opened on first use and again after
a drop or a fork, with the login node's host key pinned; and the channels (commands and SFTP
sessions) it may have open at once, because sshd refuses sessions past its `MaxSessions` (10 by
default) and a refused session looks like a dropped connection. What runs on the channels is
`commands` and `files`."""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Self

import paramiko

from hpc.errors import (
    AuthenticationRefused,
    ClusterUnreachable,
    HostKeyMismatch,
    RemoteCommandTimeout,
)
from hpc.ssh.keys import (
    RefuseUnknownHostKey,
    fingerprint,
    host_key_from_line,
    known_hosts_name,
    private_key_from_text,
)
from hpc.ssh.settings import SSHSettings
from hpc.ssh.sockets import connect_failure, open_socket

# Below OpenSSH's default MaxSessions (10): sshd never has to refuse one of our channels.
DEFAULT_MAX_CHANNELS = 8

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
class SftpSlot:
    """One user's SFTP session on a connection, used by one thread at a time."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    client: paramiko.SFTPClient | None = None


class ConnectionBase:
    """What `SSHConnection`'s commands and SFTP sessions share: the client of this process and
    the channel slots. A connection opened in a parent process is never used in a forked child:
    the child opens its own (a transport's socket and threads cannot be shared across
    processes)."""

    def __init__(self, settings: SSHSettings, *, max_channels: int = DEFAULT_MAX_CHANNELS) -> None:
        self.settings = settings
        self.max_channels = max_channels
        self._client: paramiko.SSHClient | None = None
        self._opened_in_process: int | None = None
        self._lock = threading.RLock()
        self._channels = threading.BoundedSemaphore(max_channels)
        # user (None: the service user) -> session, least recently used first
        self._sftp_slots: OrderedDict[str | None, SftpSlot] = OrderedDict()
        self._home: str | None = None

    def __enter__(self) -> Self:
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
        client.set_missing_host_key_policy(RefuseUnknownHostKey(settings))
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
                f"cannot connect to {settings.host}:{settings.port}: {connect_failure(error)}"
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

    def _session(self, client: paramiko.SSHClient, timeout: float) -> paramiko.Channel:
        """A new session channel on the client's transport, waiting at most `timeout` (and no
        longer than a connection may take) for the login node to open it."""
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise ClusterUnreachable("the SSH connection is closed")
        return transport.open_session(timeout=min(timeout, self.settings.connect_timeout))
