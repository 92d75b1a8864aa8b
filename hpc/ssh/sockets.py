"""The TCP connection under SSH: the login node's addresses resolved once (and checked, with the
settings' resolver), each tried in order, and why none answered in words an owner can act on."""

from __future__ import annotations

import os
import socket
from typing import Any

import paramiko

from hpc.errors import ClusterUnreachable
from hpc.ssh.settings import SSHSettings


def connect_failure(error: BaseException) -> str:
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
        raise ClusterUnreachable(f"cannot connect to {where}: {connect_failure(error)}") from error
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
    reasons = sorted({connect_failure(failure) for failure in failures}) or ["no address"]
    unreachable = ClusterUnreachable(f"cannot connect to {where}: {', '.join(reasons)}")
    raise unreachable from (failures[-1] if failures else None)
