"""`SSHConnection`: one connection to a cluster's login node, its commands and its files."""

from __future__ import annotations

from hpc.ssh.commands import CommandRunner
from hpc.ssh.files import FileTransfer


class SSHConnection(CommandRunner, FileTransfer):
    """A connection to one login node, shared by threads: every command and SFTP session run on
    channels of one transport, at most `max_channels` at a time. SFTP sessions are kept open
    between uses, one per user (the service user's or a tenant's), the most recently used few.

    A connection opened in a parent process is never used in a forked child: the child opens its
    own (a transport's socket and threads cannot be shared across processes).

    The connection itself (opening, closing, the channel slots) is `ConnectionBase`; the
    commands are `CommandRunner`'s, the SFTP sessions `FileTransfer`'s."""
