"""The outbound address rules (computeshare/outbound.py): which addresses the platform connects
to, in IPv4, IPv6 and the IPv6 forms that carry an IPv4 address, with and without allowed
networks, and host names resolved once with every address checked."""

import ipaddress
import re
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from computeshare.outbound import DENIED_NETWORKS, AddressDenied, OutboundPolicy

NOTHING_ALLOWED = OutboundPolicy()
LOOPBACK_ALLOWED = OutboundPolicy.from_networks(["127.0.0.0/8", "::1/128"])

DENIED = [
    "127.0.0.1",
    "127.255.255.254",
    "10.0.0.1",
    "172.16.0.1",
    "172.31.255.255",
    "192.168.1.1",
    "169.254.169.254",  # the cloud metadata service
    "169.254.0.1",
    "100.64.0.1",  # shared address space
    "0.0.0.0",  # noqa: S104 (an address to deny, not one to bind)
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    "192.0.2.1",
    "198.18.0.1",
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "fd12:3456::1",
    "fd00:ec2::254",  # AWS's metadata service over IPv6
    "ff02::1",
    "fec0::1",
    "2001:db8::1",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:0.0.0.0",
    "::127.0.0.1",  # IPv4-compatible
    "::a9fe:a9fe",
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b::7f00:1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "151.101.1.69", "2606:4700:4700::1111", "2a00:1450:4001::200e"]


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize("address", DENIED)
def test_special_addresses_are_denied_when_nothing_is_allowed(address):
    assert NOTHING_ALLOWED.is_allowed(ip(address)) is False


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address):
    assert NOTHING_ALLOWED.is_allowed(ip(address)) is True
    assert LOOPBACK_ALLOWED.is_allowed(ip(address)) is True


def test_a_public_ipv4_address_written_as_ipv4_mapped_ipv6_is_that_address():
    assert NOTHING_ALLOWED.is_allowed(ip("::ffff:8.8.8.8")) is True


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        # Only loopback: the rest of the deny list stands.
        ("10.0.0.1", False),
        ("169.254.169.254", False),
        ("::ffff:169.254.169.254", False),
        ("fd00:ec2::254", False),
        ("fe80::1", False),
        ("2002:7f00:1::1", False),  # 6to4 goes through a relay, not to our loopback
        ("::127.0.0.1", False),
    ],
)
def test_allowed_networks_let_through_only_what_they_contain(address, allowed):
    assert LOOPBACK_ALLOWED.is_allowed(ip(address)) is allowed


def test_an_allowed_network_lets_a_single_private_host_through():
    policy = OutboundPolicy.from_networks(["10.1.2.3/32"])

    assert policy.is_allowed(ip("10.1.2.3")) is True
    assert policy.is_allowed(ip("::ffff:10.1.2.3")) is True
    assert policy.is_allowed(ip("10.1.2.4")) is False


def test_a_network_that_is_not_one_is_refused_with_its_text():
    with pytest.raises(ValueError, match=re.escape("'10.0.0.1/33'")):
        OutboundPolicy.from_networks(["127.0.0.0/8", "10.0.0.1/33"])
    assert OutboundPolicy.from_networks([" ", ""]) == NOTHING_ALLOWED


def test_localhost_is_denied_unless_loopback_is_allowed_and_then_its_addresses_return():
    with pytest.raises(AddressDenied) as refused:
        NOTHING_ALLOWED.resolve("localhost", 22)

    assert refused.value.host == "localhost"
    assert refused.value.address.is_loopback
    assert isinstance(refused.value, OSError)
    addresses = LOOPBACK_ALLOWED.resolve("localhost", 2222)
    assert addresses
    assert all(address.address.is_loopback for address in addresses)
    assert all(address.sockaddr[1] == 2222 for address in addresses)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1", "2130706433", "0x7f.0.0.1", "::1"])
def test_every_spelling_of_loopback_is_denied_by_what_it_resolves_to(host):
    with pytest.raises(AddressDenied):
        NOTHING_ALLOWED.resolve(host, 22)


def test_a_name_that_does_not_resolve_raises_the_resolvers_error():
    with pytest.raises(socket.gaierror):
        NOTHING_ALLOWED.resolve("no-such-host.invalid", 22)


def test_a_name_with_one_denied_address_among_public_ones_is_denied_whole():
    from computeshare.outbound import CheckedAddress

    addresses = [
        CheckedAddress(socket.AF_INET, ("8.8.8.8", 22)),
        CheckedAddress(socket.AF_INET, ("10.0.0.1", 22)),
    ]

    with pytest.raises(AddressDenied) as refused:
        NOTHING_ALLOWED.check("mixed.example", addresses)

    assert refused.value.address == ip("10.0.0.1")


# --- Properties over the whole address space ---------------------------------------------------

ipv4_addresses = st.integers(min_value=0, max_value=2**32 - 1).map(ipaddress.IPv4Address)
ipv6_addresses = st.integers(min_value=0, max_value=2**128 - 1).map(ipaddress.IPv6Address)


def _in_network(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> st.SearchStrategy:
    first = int(network.network_address)
    return st.integers(first, first + network.num_addresses - 1).map(type(network.network_address))


denied_ipv4 = st.sampled_from(
    [network for network in DENIED_NETWORKS if network.version == 4]
).flatmap(_in_network)
denied_ipv6 = st.sampled_from(
    [
        ipaddress.ip_network(network)
        for network in ("::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "fd00:ec2::/64")
    ]
).flatmap(_in_network)


@given(denied_ipv4)
def test_every_address_of_a_denied_ipv4_network_is_denied_in_every_ipv6_form(address):
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80) | 1)
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(address))

    assert NOTHING_ALLOWED.is_allowed(address) is False
    assert NOTHING_ALLOWED.is_allowed(mapped) is False
    assert NOTHING_ALLOWED.is_allowed(sixtofour) is False
    assert NOTHING_ALLOWED.is_allowed(nat64) is False


@given(denied_ipv6)
def test_every_address_of_the_denied_ipv6_networks_is_denied(address):
    assert NOTHING_ALLOWED.is_allowed(address) is False


@given(ipv4_addresses)
def test_an_ipv4_address_and_its_ipv4_mapped_form_get_the_same_answer(address):
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")

    assert NOTHING_ALLOWED.is_allowed(mapped) == NOTHING_ALLOWED.is_allowed(address)
    assert LOOPBACK_ALLOWED.is_allowed(mapped) == LOOPBACK_ALLOWED.is_allowed(address)


@given(st.one_of(ipv4_addresses, ipv6_addresses))
def test_an_allowed_address_is_a_global_unicast_one(address):
    if NOTHING_ALLOWED.is_allowed(address):
        judged = address.ipv4_mapped or address if address.version == 6 else address
        assert judged.is_global
        assert not judged.is_multicast
        assert not judged.is_private


@given(ipv4_addresses)
def test_allowing_loopback_changes_the_answer_for_loopback_only(address):
    if NOTHING_ALLOWED.is_allowed(address) != LOOPBACK_ALLOWED.is_allowed(address):
        assert address in ipaddress.ip_network("127.0.0.0/8")
