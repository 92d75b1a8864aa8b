"""Where the platform may open connections to: the outbound address rules.

A cluster's SSH endpoint (and, later, an organization's webhook) is an address a user typed.
Connecting to whatever it names would let anyone reach what only the platform can: its own
database and Redis on loopback, the private network, the cloud's metadata service. So a host is
resolved once, every address it resolves to is checked against a deny list, and the connection
goes to a checked address, never through a second lookup: a name whose DNS answer changes
between the check and the connection (DNS rebinding) gains nothing.

Denied, in IPv4 and IPv6 alike: loopback, private (RFC 1918, fc00::/7), link-local
(169.254.0.0/16, fe80::/10), multicast, unspecified, reserved and documentation ranges,
shared address space (100.64.0.0/10), the cloud metadata addresses (169.254.169.254,
fd00:ec2::254), and every IPv6 form that carries one of those IPv4 addresses inside it
(IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64). An address inside one of the operator's
allowed networks (`CLUSTER_ALLOWED_NETWORKS`, for an owner's cluster on the platform's own
network, or the test cluster on loopback) is allowed whatever the list says.

Plain Python apart from `OutboundPolicy.from_settings`: the SSH library takes a policy as data
(`SSHSettings.resolver`) and calls `resolve` when it connects."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Checked by membership as well as through `ipaddress`'s properties, so that the rule does not
# change with the Python version's idea of "private" or "global".
DENIED_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(network)
    for network in (
        "0.0.0.0/8",  # "this network", 0.0.0.0 included
        "10.0.0.0/8",
        "100.64.0.0/10",  # shared address space (carrier-grade NAT)
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local, the cloud metadata service at 169.254.169.254
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, 255.255.255.255 included
        "::/128",
        "::1/128",
        "::ffff:0:0/96",  # IPv4-mapped: judged by the IPv4 address inside
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo's 2001::/32 judged by what it carries)
        "2001:db8::/32",
        "fc00::/7",  # unique local, AWS's metadata service at fd00:ec2::254
        "fe80::/10",
        "fec0::/10",  # site-local, deprecated
        "ff00::/8",
    )
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address) for address in ("169.254.169.254", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TEREDO = ipaddress.ip_network("2001::/32")


class AddressDenied(OSError):
    """A host resolves to an address the platform does not connect to. An `OSError`, as a
    refused connection is: the SSH library reports it like any other failure to connect."""

    def __init__(self, host: str, address: Address) -> None:
        self.host = host
        self.address = address
        super().__init__(f"{host} resolves to {address}, where the platform does not connect")


class CheckedAddress(NamedTuple):
    """One resolved address that passed the rules, as `socket.connect` takes it."""

    family: int
    sockaddr: tuple[Any, ...]

    @property
    def address(self) -> Address:
        return _parse(self.sockaddr[0])


def _parse(text: str) -> Address:
    # getaddrinfo may give a link-local IPv6 address with its zone (`fe80::1%eth0`).
    return ipaddress.ip_address(text.split("%", 1)[0])


def _embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries, which a connection to it may reach."""
    if isinstance(address, ipaddress.IPv4Address):
        return []
    carried = []
    if address.ipv4_mapped is not None:
        carried.append(address.ipv4_mapped)
    packed = address.packed
    if packed[:12] == bytes(12) and int(address) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
        carried.append(ipaddress.IPv4Address(packed[12:]))
    if address.sixtofour is not None:
        carried.append(address.sixtofour)
    if address in _TEREDO and address.teredo is not None:
        carried.extend(address.teredo)
    if address in _NAT64:
        carried.append(ipaddress.IPv4Address(packed[12:]))
    return carried


def is_special(address: Address) -> bool:
    """Whether an address, taken alone, is one the platform never connects to."""
    return (
        address in METADATA_ADDRESSES
        or any(address in network for network in DENIED_NETWORKS)
        or address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_unspecified
        or address.is_reserved
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
        or not address.is_global
    )


@dataclass(frozen=True)
class OutboundPolicy:
    """The rules with the operator's allowed networks. Hashable, so that it can be part of a
    connection pool's key."""

    allowed_networks: tuple[Network, ...] = ()

    @classmethod
    def from_networks(cls, networks: Iterable[str]) -> OutboundPolicy:
        """From CIDR strings (`127.0.0.0/8`, `::1/128`); a ValueError names a bad one."""
        parsed = []
        for network in networks:
            text = network.strip()
            if not text:
                continue
            try:
                parsed.append(ipaddress.ip_network(text))
            except ValueError as error:
                raise ValueError(f"not a network in CIDR notation: {text!r} ({error})") from None
        return cls(tuple(parsed))

    @classmethod
    def from_settings(cls) -> OutboundPolicy:
        """The clusters' policy: `CLUSTER_ALLOWED_NETWORKS` from the settings."""
        from django.conf import settings

        return cls.from_networks(settings.CLUSTER_ALLOWED_NETWORKS)

    def is_allowed(self, address: Address) -> bool:
        """Whether the platform may connect to `address`."""
        carried = _embedded_ipv4(address)
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        # An IPv4-mapped address (::ffff:a.b.c.d) is the IPv4 address it carries: it is
        # allowed or denied as that address is. Any other is judged with what it carries.
        candidates = [address, mapped] if mapped is not None else [address]
        if any(each in network for each in candidates for network in self.allowed_networks):
            return True
        judged = [mapped] if mapped is not None else [address, *carried]
        return not any(is_special(each) for each in judged)

    def check(self, host: str, addresses: Iterable[CheckedAddress]) -> tuple[CheckedAddress, ...]:
        """The addresses, once every one of them is allowed; `AddressDenied` names the first
        that is not (a name that also resolves to a denied address is refused whole: which one
        a connection would take is not ours to choose)."""
        checked = tuple(addresses)
        for each in checked:
            if not self.is_allowed(each.address):
                raise AddressDenied(host, each.address)
        return checked

    def resolve(self, host: str, port: int) -> tuple[CheckedAddress, ...]:
        """Resolves `host` once and returns its addresses, each checked, in the resolver's
        order: connect to these, never to `host` again. Raises `AddressDenied` or
        `socket.gaierror` (both `OSError`)."""
        return self.check(host, resolve(host, port))


def host_name_problem(host: str) -> str | None:
    """Why `host` cannot be a host name or an address, or None: an empty part (`a..b`), a part
    longer than 63 characters, a name longer than 253, or one IDNA cannot spell. Python's
    resolver raises `UnicodeError` on these rather than `socket.gaierror`."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    else:
        return None
    name = host.removesuffix(".")
    try:
        spelled = name.encode("idna")
    except UnicodeError:
        return "Each part of a host name has 1 to 63 characters (letters, digits, hyphens)."
    if not name or len(spelled) > 253:
        return "A host name has 1 to 253 characters."
    return None


def resolve(host: str, port: int) -> tuple[CheckedAddress, ...]:
    """Every TCP address `host` resolves to (duplicates dropped), unchecked."""
    if problem := host_name_problem(host):
        raise socket.gaierror(socket.EAI_NONAME, f"{host!r}: {problem}")
    found: dict[tuple[int, tuple[Any, ...]], None] = {}
    for family, _, _, _, sockaddr in socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    ):
        if family in (socket.AF_INET, socket.AF_INET6):
            found[(int(family), tuple(sockaddr))] = None
    if not found:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no IPv4 or IPv6 address")
    return tuple(CheckedAddress(family, sockaddr) for family, sockaddr in found)
