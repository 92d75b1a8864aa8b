"""Where a connection goes and as whom: the settings of one login node, which also key the
connection pool."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Where Linux distributions put OpenSSH's SFTP server program.
DEFAULT_SFTP_SERVER = "/usr/lib/openssh/sftp-server"


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
