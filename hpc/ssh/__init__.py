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
cluster, and no team's code ever runs as the service user.

The package, bottom first: `settings` (where a connection goes), `keys` (the pinned host key,
the private key), `sockets` (the TCP connection), `base` (the connection's client and channel
slots), `commands` (the command's text and how its channel is read) and `files` (SFTP
sessions), put together in `connection`. Everything is imported from here."""

from hpc.ssh.base import DEFAULT_MAX_CHANNELS
from hpc.ssh.commands import (
    DEFAULT_COMMAND_TIMEOUT,
    MAX_CAPTURED_BYTES,
    CommandResult,
    RemoteOutput,
    remote_command,
    tenant_name,
)
from hpc.ssh.connection import SSHConnection
from hpc.ssh.keys import fingerprint, host_key_from_line, known_hosts_name, private_key_from_text
from hpc.ssh.settings import DEFAULT_SFTP_SERVER, AddressResolver, SSHSettings
from hpc.ssh.sockets import open_socket

__all__ = [
    "DEFAULT_COMMAND_TIMEOUT",
    "DEFAULT_MAX_CHANNELS",
    "DEFAULT_SFTP_SERVER",
    "MAX_CAPTURED_BYTES",
    "AddressResolver",
    "CommandResult",
    "RemoteOutput",
    "SSHConnection",
    "SSHSettings",
    "fingerprint",
    "host_key_from_line",
    "known_hosts_name",
    "open_socket",
    "private_key_from_text",
    "remote_command",
    "tenant_name",
]
