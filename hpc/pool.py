"""SSH connections pooled per process and cluster.

A Celery worker forks its pool processes after start-up; a paramiko transport is a socket plus
a reader thread, and neither survives a fork (the thread is gone in the child, the socket is
shared with the parent). So a pool forgets, in a forked child, every connection the parent
opened, without closing it (which would end the parent's session), and the child opens its own
on first use."""

from __future__ import annotations

import os
import threading
import weakref

from hpc.ssh import DEFAULT_MAX_CHANNELS, SSHConnection, SSHSettings


class ConnectionPool:
    """One open `SSHConnection` per cluster settings in this process, shared by its threads.

    The key is the whole `SSHSettings`: a rotated key, a changed host key or port gives a new
    connection, never a session authenticated with the old one."""

    def __init__(self, *, max_channels: int = DEFAULT_MAX_CHANNELS) -> None:
        self.max_channels = max_channels
        self._lock = threading.Lock()
        self._connections: dict[SSHSettings, SSHConnection] = {}
        self._process = os.getpid()
        reference = weakref.ref(self)

        def forget_in_child() -> None:
            pool = reference()
            if pool is not None:
                pool._forget_parent_connections()

        os.register_at_fork(after_in_child=forget_in_child)

    def connection(self, settings: SSHSettings) -> SSHConnection:
        """The open connection for `settings`, opened now if it is new, has dropped, or was
        the parent process's. Raises what `SSHConnection.open` raises."""
        with self._lock:
            if self._process != os.getpid():
                # A fork the hook did not see (it runs for os.fork only).
                self._forget_parent_connections_locked()
            connection = self._connections.get(settings)
            if connection is None:
                connection = SSHConnection(settings, max_channels=self.max_channels)
                self._connections[settings] = connection
        # Outside the pool's lock: opening one cluster's connection never waits on another's.
        connection.open()
        return connection

    def discard(self, settings: SSHSettings) -> None:
        """Closes and forgets the connection for `settings` (after an error that leaves it in
        doubt); the next `connection` opens a new one."""
        with self._lock:
            connection = self._connections.pop(settings, None)
        if connection is not None:
            connection.close()

    def close_all(self) -> None:
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()

    def __len__(self) -> int:
        return len(self._connections)

    def _forget_parent_connections(self) -> None:
        # In the child right after fork only the forking thread exists; the lock may have been
        # held by another thread of the parent, so it is replaced rather than acquired.
        self._lock = threading.Lock()
        self._forget_parent_connections_locked()

    def _forget_parent_connections_locked(self) -> None:
        inherited = list(self._connections.values())
        self._connections.clear()
        self._process = os.getpid()
        for connection in inherited:
            connection.forget_after_fork()


# The pool of this process, for callers that do not keep their own.
default_pool = ConnectionPool()
