"""Signing an event and posting it to an endpoint under the outbound rules.

Plain Python (no Django): the address is resolved once and checked by an `OutboundPolicy`
(computeshare/outbound.py), the connection goes to a checked address while the request keeps
the endpoint's name in its Host header and, for https, in SNI and the certificate check.
Redirects are not followed (a 3xx is a failed attempt), and at most `EXCERPT_BYTES` of the
answer are read."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from computeshare.outbound import CheckedAddress, OutboundPolicy

SIGNATURE_HEADER = "ComputeShare-Signature"
EVENT_ID_HEADER = "ComputeShare-Event-Id"
EXCERPT_BYTES = 500


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" keyed with the secret>`."""
    signed = f"{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


@dataclass(frozen=True)
class Answer:
    """What the endpoint said: `status_code` None when no answer came (`error` says why)."""

    status_code: int | None
    error: str = ""
    excerpt: str = ""

    @property
    def is_success(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _connect(addresses: tuple[CheckedAddress, ...], timeout: float) -> socket.socket:
    last: OSError | None = None
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(sockaddr)
        except OSError as error:
            sock.close()
            last = error
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    raise last or OSError("no address to connect to")


class _CheckedHTTPConnection(http.client.HTTPConnection):
    """Connects to the checked addresses, never resolving the host again."""

    def __init__(
        self, host: str, port: int, *, addresses: tuple[CheckedAddress, ...], timeout: float
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = addresses

    def connect(self) -> None:
        self.sock = _connect(self.addresses, float(self.timeout))  # type: ignore[arg-type]


class _CheckedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(
        self, host: str, port: int, *, addresses: tuple[CheckedAddress, ...], timeout: float
    ) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(host, port, timeout=timeout, context=self.tls)
        self.addresses = addresses

    def connect(self) -> None:
        raw = _connect(self.addresses, float(self.timeout))  # type: ignore[arg-type]
        self.sock = self.tls.wrap_socket(raw, server_hostname=self.host)


def url_parts(url: str) -> tuple[str, str, int, str]:
    """scheme, host, port and the request target of an endpoint's URL; ValueError if it is
    not an http(s) URL with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an http or https URL with a host")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, target


def post(
    *,
    url: str,
    body: bytes,
    secret: str,
    event_id: str,
    policy: OutboundPolicy,
    timeout: float,
    user_agent: str = "ComputeShare-Webhooks/1",
) -> Answer:
    """Posts `body` signed with `secret` to `url`; never raises for what the network or the
    endpoint does (a denied address, a refused connection, a time-out are an `Answer` with an
    error)."""
    try:
        scheme, host, port, target = url_parts(url)
        addresses = policy.resolve(host, port)
    except (ValueError, OSError) as error:
        return Answer(None, error=f"not sent: {error}"[:500])
    connection_class = _CheckedHTTPSConnection if scheme == "https" else _CheckedHTTPConnection
    connection = connection_class(host, port, addresses=addresses, timeout=timeout)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": user_agent,
        EVENT_ID_HEADER: event_id,
        SIGNATURE_HEADER: signature_header(secret, body, int(time.time())),
    }
    try:
        connection.request("POST", target, body=body, headers=headers)
        response = connection.getresponse()
        excerpt = response.read(EXCERPT_BYTES).decode("utf-8", errors="replace")
        return Answer(response.status, excerpt=excerpt)
    except TimeoutError:
        return Answer(None, error=f"no answer within {timeout:g} s")
    except (OSError, http.client.HTTPException) as error:
        return Answer(None, error=f"{type(error).__name__}: {error}"[:500])
    finally:
        connection.close()
