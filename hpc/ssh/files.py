"""Files over SFTP on the same connection: a session per user, the service user's or a tenant's
(the SFTP server program started as the tenant through sudo, in its home, so that every file is
read and written with the tenant's own rights), kept open between uses, the most recently used
few, since each holds one of the connection's channels."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import paramiko

from hpc.errors import ClusterUnreachable, RemoteCommandTimeout, TenantUnavailable
from hpc.ssh.base import ConnectionBase, SftpSlot
from hpc.ssh.commands import DEFAULT_COMMAND_TIMEOUT, remote_command, stderr_text, tenant_name

# How many SFTP sessions a connection keeps open between uses (each holds a channel).
CACHED_SFTP_SESSIONS = 2


class FileTransfer(ConnectionBase):
    """`SSHConnection`'s SFTP sessions."""

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
                slot = self._sftp_slots[as_user] = SftpSlot()
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
            for slot in open_slots[: max(0, len(open_slots) - CACHED_SFTP_SESSIONS)]:
                if slot.lock.acquire(blocking=False):
                    try:
                        if slot.client is not None:
                            self._drop_sftp(slot, slot.client)
                    finally:
                        slot.lock.release()

    def _drop_sftp(self, slot: SftpSlot, sftp: paramiko.SFTPClient) -> None:
        with self._lock:
            if slot.client is not sftp:
                return  # the connection was closed (and its SFTP slot freed) meanwhile
            slot.client = None
            sftp.close()
            self._channels.release()

    def _open_sftp(
        self, slot: SftpSlot, as_user: str | None, timeout: float
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
        channel = self._session(client, timeout)
        channel.settimeout(timeout)
        command = remote_command([self.settings.sftp_server, "-u", "077"], as_user=user)
        channel.exec_command(command)
        try:
            return paramiko.SFTPClient(channel)
        except (EOFError, paramiko.SSHException) as error:
            # The server never spoke: sudo refused, or the program is missing. Its words are on
            # stderr; the connection itself is fine.
            reason = stderr_text(channel) or str(error)
            channel.close()
            if self.is_open:
                raise TenantUnavailable(
                    f"cannot start an SFTP session as {user} "
                    f"({self.settings.sftp_server} through sudo): {reason}"
                ) from error
            raise
