"""Whose request is it: the client's address, through trusted proxies only.

:func:`client_address` reads the peer's address and, only when that peer is one of the
configured ``trusted_proxies``, the ``X-Forwarded-For`` or ``Forwarded`` chain, walked from the
right past every trusted hop. A header sent by anybody else is ignored, so a client cannot
choose its own key. Addresses are parsed once and remembered (:func:`_host`), as the same peers
come back.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

_Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

#: The entry of ``trusted_proxies`` that trusts a peer on a Unix socket, which has no address.
UNIX = "unix"
#: Text longer than this is no address (the longest, an IPv6 address with an IPv4 tail, has 45
#: characters; a zone, ``%eth0``, adds a few): it is neither parsed nor remembered.
ADDRESS_TEXT_MAX = 64
#: How many parsed addresses are remembered.
ADDRESSES_KEPT = 4096
#: A hop's port: digits, or the obfuscated ``_name`` RFC 7239 allows.
_PORT = re.compile(r"[0-9]{1,5}|_[A-Za-z0-9._-]+")


class Host(NamedTuple):
    """An address parsed once: the object networks are tested with, and its normal text."""

    address: _Address
    text: str


def _parsed(text: str) -> Host | None:
    """``text`` as an address, or ``None``; an IPv4-mapped IPv6 address (``::ffff:192.0.2.1``,
    as a dual-stack listener gives an IPv4 peer) is the IPv4 address it maps."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return Host(address, str(address))


#: Texts parsed recently, and what they were: see :func:`_host`.
_hosts: dict[str, Host | None] = {}


def _host(text: str) -> Host | None:
    """:func:`_parsed`, remembered: parsing is microseconds of pure Python, a good part of the
    middleware's time, and the same peers come back.

    The memo is bounded as the partition keys' is: in texts (a flood of new ones only empties
    it) and in bytes (text longer than any address is none, and is not kept).
    """
    if len(text) > ADDRESS_TEXT_MAX:
        return None
    try:
        return _hosts[text]  # one lookup: another thread may empty the memo at any time
    except KeyError:
        pass
    host = _parsed(text)
    if len(_hosts) >= ADDRESSES_KEPT:
        _hosts.clear()
    _hosts[text] = host
    return host


def _unmapped(network: _Network) -> _Network:
    """An IPv6 network of IPv4-mapped addresses (``::ffff:10.0.0.0/104``) as the IPv4 network
    it maps, since mapped peers are read as IPv4 addresses."""
    mapped = network.network_address
    if isinstance(mapped, ipaddress.IPv6Address) and mapped.ipv4_mapped is not None:
        if network.prefixlen >= 96:
            return ipaddress.IPv4Network((mapped.ipv4_mapped, network.prefixlen - 96))
    return network


@dataclass(frozen=True)
class TrustedProxies:
    """``trusted_proxies`` parsed once: networks, and whether a Unix-socket peer is trusted."""

    networks: tuple[_Network, ...] = ()
    unix: bool = False

    @classmethod
    def parse(cls, trusted_proxies: Iterable[str]) -> TrustedProxies:
        """Addresses, networks (``"10.0.0.0/8"``) and ``"unix"``, checked and parsed."""
        if isinstance(trusted_proxies, (str, bytes)):
            raise TypeError(
                "trusted_proxies must be a list of addresses or networks, "
                f"not the single string {trusted_proxies!r}"
            )
        networks = []
        unix = False
        for entry in trusted_proxies:
            if entry == UNIX:
                unix = True
                continue
            try:
                networks.append(_unmapped(ipaddress.ip_network(entry, strict=False)))
            except (TypeError, ValueError):
                raise ValueError(
                    f"trusted_proxies: {entry!r} is not an IP address or network, nor 'unix'"
                ) from None
        return cls(tuple(networks), unix)

    def trust(self, address: _Address) -> bool:
        """Whether ``address`` is in one of the trusted networks."""
        for network in self.networks:
            if address in network:
                return True
        return False


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` nodes of a ``Forwarded`` field (RFC 7239), quotes removed."""
    nodes = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, node = pair.strip().partition("=")
            if name.strip().lower() == "for":
                nodes.append(node.strip().strip('"'))
    return nodes


def _hop(text: str) -> Host | None:
    """The address in one hop of a forwarded chain, its port dropped.

    A hop is ``192.0.2.1``, ``192.0.2.1:8080``, ``2001:db8::1``, ``[2001:db8::1]`` or
    ``[2001:db8::1]:443``; anything else (``unknown``, an obfuscated ``_name``, a port that is
    no port, garbage) is ``None``.
    """
    text = text.strip()
    if text.startswith("["):
        inside, closed, rest = text[1:].partition("]")
        if not closed or (rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        return _host(inside)
    if text.count(":") == 1:
        text, _, port = text.partition(":")
        if not _PORT.fullmatch(port):
            return None
    return _host(text)


def _forwarded_client(value: str | None, header: str, proxies: TrustedProxies) -> str | None:
    """The client a trusted proxy forwarded in ``value``, a ``header`` field.

    The chain is read from the right, each hop appended by the proxy before it: the first
    address that is not a trusted proxy is the client; if every hop is trusted, the leftmost
    is. ``None`` when there is no field, or a hop that is no address stands where the client
    is looked for.
    """
    if not value:
        return None
    chain = _forwarded_for(value) if header == "forwarded" else value.split(",")
    host = None
    for hop in reversed(chain):
        host = _hop(hop)
        if host is None:
            return None
        if not proxies.trust(host.address):
            return host.text
    return None if host is None else host.text


def client_address(
    peer: str | None,
    headers: Mapping[str, str],
    proxies: TrustedProxies,
    header: str,
) -> str | None:
    """The client's address, in its normal text: the peer's, unless the peer is a trusted proxy.

    ``peer`` ``None`` is a peer on a Unix socket, trusted only if ``"unix"`` is; a peer that
    is no address (a test client's made-up name) is trusted never, and is the client as it is.
    A trusted proxy's ``header`` field (``x-forwarded-for`` or ``forwarded``) names the client
    (see :func:`_forwarded_client`); with no field, or garbage where the client should be, the
    peer is the client.

    Addresses are normalised, so that one client is one key however it is spelled:
    ``2001:DB8::1`` is ``2001:db8::1``, and ``::ffff:192.0.2.1`` is ``192.0.2.1``.
    """
    if peer is None:
        own, trusted = None, proxies.unix
    else:
        host = _host(peer)
        if host is None:
            return peer
        own, trusted = host.text, proxies.trust(host.address)
    if not trusted:
        return own
    forwarded = _forwarded_client(headers.get(header), header, proxies)
    return own if forwarded is None else forwarded


#: The fields a trusted proxy may name the client in, by their lower-case names.
FORWARDED_HEADERS = ("x-forwarded-for", "forwarded")


def forwarded_header_name(given: object) -> str:
    """``forwarded_header`` checked, and in lower case as :func:`client_address` takes it."""
    header = given.lower() if isinstance(given, str) else None
    if header is None or header not in FORWARDED_HEADERS:
        raise ValueError(
            f"forwarded_header must be 'X-Forwarded-For' or 'Forwarded', not {given!r}"
        )
    return header
