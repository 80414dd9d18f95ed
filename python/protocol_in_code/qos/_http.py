"""What the ASGI and WSGI middleware share: a limiter's decision, said in HTTP.

Both middleware do the same four things for a request, and every one of them is here, once, as
plain functions of plain values, so the two servers differ only in how they read a request and
write a response:

* **Whose request is it?** :func:`client_address` reads the peer's address and, only when that
  peer is a configured trusted proxy, the ``X-Forwarded-For`` or ``Forwarded`` chain, walked
  from the right past every trusted hop. A header sent by anybody else is ignored, so a client
  cannot choose its own key.
* **Which limit, at what cost?** :class:`Rules` picks the first :class:`Route` whose path
  prefix and method match (or the default limiter), skips exempt requests, and asks the cost
  function how many tokens the request takes.
* **What status?** ALLOWED passes the request on. DENIED is ``429 Too Many Requests`` with
  ``Retry-After``: the exact wait rounded *up* to whole seconds, so a client that waits that
  long is never refused for being early. NEVER (the cost exceeds a band's burst: no wait will
  ever do) is ``429`` *without* ``Retry-After``, since there is no time to give. REFUSED (a
  keyed table is full of clients still being limited) is ``503 Service Unavailable`` with
  ``Retry-After``: the server, not this client, is out of room.
* **What fields?** The RateLimit fields of draft-ietf-httpapi-ratelimit-headers (as its
  revision 11 defines them), one policy per band; see :class:`Policy` for what ``q``, ``w``,
  ``r`` and ``t`` mean for a token bucket. With ``problem_json`` a refusal's body is a problem
  document (RFC 9457) of one of the draft's problem types.
* **Who is told?** ``on_decision`` is called once per decision with a :class:`DecisionEvent`
  (policy, route, outcome, wait; the key only if asked for); ``enforce=False`` decides and
  tells, and lets every request through.
"""

from __future__ import annotations

import base64
import errno
import functools
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import re
import reprlib
import threading
import urllib.parse
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple, TypeAlias

from protocol_in_code._native import (
    Decision,
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
    _host_secret,
)
from protocol_in_code.qos._workers import warn_if_several_workers
from protocol_in_code.qos.interfaces import kind_of
from protocol_in_code.qos.stack import Stacked, check_together, check_together_async

_Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

NS_PER_SECOND = 1_000_000_000
#: The memo of partition keys holds at most this many keys, of at most this many bytes each:
#: at most a few MB, however long the keys a key function returns (a 60 KB API key...).
PARTITION_KEYS_KEPT = 10_000
PARTITION_KEY_BYTES_KEPT = 256

#: The status of each refusal, and whether it carries ``Retry-After``.
DENIED_STATUS = 429
NEVER_STATUS = 429
REFUSED_STATUS = 503
REASONS = {
    413: "Content Too Large",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


@dataclass(frozen=True)
class RequestInfo:
    """A request as a key, cost, plan or exemption function sees it, whichever server runs it.

    ``path`` is relative to where the application is mounted, as its own routes are written:
    ASGI's ``path`` without ``root_path``, WSGI's ``PATH_INFO`` (``SCRIPT_NAME`` is not in
    it), Django's ``path_info``; decoded from UTF-8, and spelled as the client sent it (routes
    match it as routers read it, :func:`routed`). ``headers`` has lower-case names, and
    repeated fields joined with ``", "``. ``client`` is the address :func:`client_address`
    settled on (``None`` when the server gives none, as on a Unix socket).

    ``request`` is the request as the code around the limit holds it, for what only it knows
    (who is signed in): under the framework forms, the framework's own request (Django's
    ``HttpRequest``, with ``request.user``; Flask's ``flask.Request``; Starlette's
    ``Request`` for FastAPI); under the ASGI middleware the ASGI ``scope`` (where an
    authentication middleware in front puts ``scope["user"]``), and under the WSGI middleware
    the ``environ``. It is not compared and not shown, as it is not the request's value.
    """

    method: str
    path: str
    client: str | None
    headers: Mapping[str, str]
    request: Any = field(default=None, compare=False, repr=False)


#: What a key function may return: a value, equal to another key exactly when their values are
#: equal, in this process and in every other: text, bytes, numbers, and tuples of them.
Key: TypeAlias = str | bytes | int | float | tuple["Key", ...]
#: A key function: the request's key, or ``None`` when its limit does not apply to the request.
KeyFunction: TypeAlias = Callable[[RequestInfo], "Key | None"]
CostFunction: TypeAlias = Callable[[RequestInfo], int]


class DecisionEvent(NamedTuple):
    """One decision, as ``on_decision`` is told of it.

    * ``policy``: the limit's name (``name=``, or the route's), as the RateLimit fields give it
      (a limiter of several bands is one policy here, ``name``, whose bands are ``name-1``...).
    * ``plan``: the client's plan, for limiters with plans; ``None`` otherwise.
    * ``route``: the matched :class:`Route`'s prefix, ``None`` for the middleware's own
      ``limiter``.
    * ``outcome``: the limiter's :class:`LimitOutcome`, whether or not it was enforced.
    * ``wait_ns``: the decision's wait (0 when allowed; ``None`` for NEVER).
    * ``enforced``: ``False`` under ``enforce=False``, where no request is refused.
    * ``key``: the client's key, only with ``on_decision_key=True`` (else ``None``), so that
      what is labelled by these values has as many label sets as there are policies and
      routes, not clients.
    * ``limiter``: the limiter that decided (to read a keyed table's ``len()``).

    A named tuple, as a frozen dataclass is four times slower to make: this is made for
    every request.
    """

    policy: str
    plan: str | None
    route: str | None
    outcome: LimitOutcome
    wait_ns: int | None
    enforced: bool
    key: Hashable | None
    limiter: Any

    @property
    def wait(self) -> float | None:
        """``wait_ns`` in seconds."""
        return None if self.wait_ns is None else self.wait_ns / NS_PER_SECOND


DecisionHook: TypeAlias = Callable[[DecisionEvent], object]
_log = logging.getLogger("protocol_in_code.qos")


# ---------------------------------------------------------------------------------------------
# Whose request: the client's address, through trusted proxies only
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Which limit: limiters, routes, exemptions, costs
# ---------------------------------------------------------------------------------------------


def _limiter_kind(limiter: Any, parameter: str) -> tuple[bool, bool, bool]:
    """(keyed, awaited, Redis) for a limiter of one of the four interfaces
    (:mod:`protocol_in_code.qos.interfaces`), or TypeError naming ``parameter``.

    A Redis limiter is told apart because it takes only ``str`` and ``bytes`` keys.
    """
    from protocol_in_code.qos.distributed import (
        AsyncRedisKeyedRateLimiter,
        AsyncRedisRateLimiter,
        RedisKeyedRateLimiter,
        RedisRateLimiter,
    )

    try:
        keyed, awaited = kind_of(limiter)
    except TypeError as error:
        raise TypeError(
            f"{parameter} must be a limiter (RateLimiter, KeyedRateLimiter, one of the Redis "
            f"limiters, or any object of protocol_in_code.qos.interfaces), not "
            f"{type(limiter).__name__}: {error}"
        ) from None
    redis = isinstance(
        limiter,
        (
            RedisRateLimiter,
            RedisKeyedRateLimiter,
            AsyncRedisRateLimiter,
            AsyncRedisKeyedRateLimiter,
        ),
    )
    return keyed, awaited, redis


def _seconds_up(ns: int) -> int:
    return -(-ns // NS_PER_SECOND)


@dataclass(frozen=True)
class Policy:
    """One band of a limiter as a RateLimit policy: a token bucket said in quota and window.

    The draft describes a quota of ``q`` units per window of ``w`` seconds; a band is a bucket
    of ``burst`` tokens refilled at ``rate`` tokens per second. We say:

    * ``q`` = the burst: the most a client can ever spend at once.
    * ``w`` = the seconds an empty bucket takes to fill, ``burst / rate``, rounded up (and at
      least 1): so ``q / w`` never exceeds the rate, and a client that sends ``q`` per ``w``
      is never refused.
    * ``r`` (available quota) = this band's own whole tokens after this request: a client
      can spend that many now.
    * ``t`` (effective window) = whole seconds before this band can give one token more than
      ``r`` (the next token's arrival, or for a full band a token's refill time), rounded
      down: within ``t`` seconds the client can use no more than ``r``, which is what the
      draft's effective window says. It is omitted when it would be 0, and is never more than
      a ``Retry-After`` sent with it. See ``docs/web.md`` for why this is the honest ``t`` of
      a token bucket.
    """

    name: str
    rate: Fraction
    burst: int
    window: int

    @classmethod
    def of(cls, name: str, rate: int | Fraction, burst: int) -> Policy:
        rate = Fraction(rate)
        return cls(name, rate, burst, max(1, _ceil(burst / rate)))

    @property
    def slow(self) -> bool:
        """Whether a token takes a second or more to refill: only then can ``t`` be 1 or more."""
        return self.rate <= 1

    def reset_seconds(self, remaining: int) -> int:
        """When the bucket is full again, rounded up, for ``remaining`` whole tokens: the legacy
        ``X-RateLimit-Reset``."""
        missing = self.burst - min(remaining, self.burst)
        # ceil(missing / (p/q)) in integers: this runs for every response.
        return -(-missing * self.rate.denominator // self.rate.numerator)


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def _sf_string(name: str, parameter: str) -> str:
    if not name or any(not (0x20 <= ord(c) <= 0x7E) for c in name):
        raise ValueError(
            f"{parameter} must be printable ASCII (a Structured Field String), not {name!r}"
        )
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Route:
    """A limit for part of an application: requests whose path starts with ``prefix``.

    ``prefix`` matches whole path segments (``"/api"`` matches ``/api`` and ``/api/users``,
    not ``/apiary``). ``methods`` (say ``{"POST"}``) restricts the route to those methods;
    ``None`` is every method. GET brings HEAD with it: frameworks answer HEAD with the GET
    handler, so ``{"GET"}`` limits (or exempts) both. ``cost`` overrides the middleware's cost
    function for this route; ``name`` is the policy name the RateLimit fields give (the
    prefix, by default, percent-encoded where it is not ASCII); ``unit`` is its quota unit,
    ``qu`` (the middleware's ``quota_unit`` by default). ``limiter`` ``None`` exempts the
    route. ``prefix`` is written as the wrapped application writes its own routes: relative
    to where it is mounted (``Mount("/v1", ...)``, ``uvicorn --root-path``, ``SCRIPT_NAME``),
    so ``Route("/upload")`` limits ``/v1/upload`` in an application mounted at ``/v1``. Paths
    are matched as the client sent them, decoded from UTF-8, under WSGI as under ASGI, after
    the normalisation routers apply (repeated slashes merged, dot segments resolved), and
    methods in any case (see :func:`routed`).
    """

    prefix: str
    limiter: Any
    methods: Iterable[str] | None = None
    cost: CostFunction | None = None
    name: str | None = None
    unit: str | None = None


@dataclass
class Rule:
    """A limiter, checked and ready: its policies, their header text, how to call it."""

    limiter: Any
    keyed: bool
    awaited: bool
    cost: CostFunction | None
    policies: tuple[Policy, ...]
    names: tuple[str, ...]
    prefix: str = ""
    methods: frozenset[str] | None = None
    redis: bool = False
    #: ``qu``, quoted, or ``None`` for requests (the draft's default, not sent).
    unit: str | None = None
    #: The policy name without band suffixes, and the route's prefix (``None`` for the
    #: middleware's own limiter): what ``on_decision`` is told.
    policy: str = "default"
    route: str | None = None
    #: For one plan of a limiter with plans, the plan's name (what ``on_decision`` is told).
    plan: str | None = None
    #: For a limiter with plans, each plan's rule (the request's plan chooses one; see
    #: :meth:`Rules.planned`); ``None`` otherwise.
    plans: dict[str, Rule] | None = None
    policy_items: tuple[str, ...] = field(init=False)
    policy_text: str = field(init=False)
    #: What the middleware calls ``check`` on: the limiter itself, or, with ``on_decision``,
    #: an object whose ``check`` is the limiter's wrapped to tell it (see :meth:`Rules.hook`).
    #: Without a hook the call is the very one made before hooks existed.
    decider: Any = field(init=False)
    #: The limiter's ``band_levels`` where the fields need it (several bands, or a band slow
    #: enough that ``t`` can be 1 or more) and it has one; else ``None``.
    levels: Callable[..., list[tuple[int, int]]] | None = field(init=False)
    #: Whether the middleware ask :attr:`decider`'s ``check_levels`` in place of ``check``:
    #: where the fields need levels and the limiter says them with its decision, in the same
    #: round trip, rather than with ``band_levels`` (the Redis limiters).
    leveled: bool = field(init=False)
    #: With ``on_decision``, what tells it of one of this rule's decisions (see
    #: :meth:`Rules.teller`); ``None`` without a hook.
    tell: Callable[[Decision, Hashable | None], None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        unit = "" if self.unit is None else f";qu={self.unit}"
        self.policy_items = tuple(
            f"{name};q={policy.burst}{unit};w={policy.window}"
            for name, policy in zip(self.names, self.policies, strict=True)
        )
        self.policy_text = ", ".join(self.policy_items)
        self.decider = self.limiter
        levels = getattr(self.limiter, "band_levels", None)
        wanted = len(self.policies) > 1 or any(p.slow for p in self.policies)
        self.levels = levels if wanted and callable(levels) and not self.awaited else None
        check_levels = getattr(self.limiter, "check_levels", None)
        self.leveled = self.levels is None and wanted and callable(check_levels)

    def matches(self, method: str, path: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        prefix = self.prefix
        return (
            not prefix
            or path == prefix
            or path.startswith(prefix if prefix.endswith("/") else prefix + "/")
        )


#: ``qu`` when a cost function applies and no unit was named: the tokens a cost function
#: counts are not requests, and nothing more is known about them.
COST_UNIT = "units"


def _unit(unit: str | None, cost: bool, parameter: str) -> str | None:
    """``qu``, quoted, for a rule: the unit named, else :data:`COST_UNIT` when a cost function
    applies; ``None`` (nothing sent: the default, requests) for requests."""
    if unit is None:
        unit = COST_UNIT if cost else "requests"
    quoted = _sf_string(unit, parameter)
    return None if unit == "requests" else quoted


def _rule(
    limiter: Any,
    name: str,
    parameter: str,
    allow_async: bool,
    cost: CostFunction | None = None,
    prefix: str = "",
    methods: frozenset[str] | None = None,
    unit: str | None = None,
    route: str | None = None,
    on_event_loop: bool = False,
) -> Rule:
    keyed, awaited, redis = _limiter_kind(limiter, parameter)
    if awaited and not allow_async:
        raise TypeError(
            f"{parameter}: an asyncio Redis limiter cannot serve WSGI or a synchronous view; "
            "give it a synchronous client (redis.Redis)"
        )
    if redis and not awaited and on_event_loop:
        raise TypeError(
            f"{parameter}: a Redis limiter on a synchronous client would block the event loop "
            "at every request (a slow or stopped server would stall every request of this "
            "worker, exempt ones too); give it an asyncio client (redis.asyncio.Redis)"
        )
    plans = _plans_of(limiter)
    if plans is not None:
        # One rule per plan, each asking the limiter with its plan; the request's plan chooses.
        parent = Rule(limiter, keyed, awaited, cost, (), (), prefix, methods, redis, unit, name)
        parent.route = route
        parent.plans = {
            plan: _banded(
                _PlanView(limiter, plan, bands),
                f"{name}-{plan}",
                parameter,
                (keyed, awaited, redis),
                cost,
                prefix,
                methods,
                unit,
                route,
                policy=name,
                plan=plan,
            )
            for plan, bands in plans.items()
        }
        return parent
    return _banded(
        limiter, name, parameter, (keyed, awaited, redis), cost, prefix, methods, unit, route
    )


def _plans_of(limiter: Any) -> dict[str, tuple[Any, ...]] | None:
    """A limiter's plans (name to bands), or ``None`` for a limiter without plans."""
    try:
        plans = getattr(limiter, "plans", None)
    except Exception:  # a limiter of another kind whose attribute fails: no plans
        return None
    return dict(plans) if isinstance(plans, Mapping) else None


class _PlanView:
    """One plan of a limiter with plans, as a rule asks it: ``check`` (and ``band_levels`` or
    ``check_levels``) with the plan given, and the plan's bands."""

    __slots__ = ("band_levels", "bands", "check", "check_levels", "limiter", "plan")

    def __init__(self, limiter: Any, plan: str, bands: tuple[Any, ...]) -> None:
        self.limiter, self.plan, self.bands = limiter, plan, tuple(bands)
        self.check = functools.partial(limiter.check, plan=plan)
        levels = getattr(limiter, "band_levels", None)
        self.band_levels = None if levels is None else functools.partial(levels, plan=plan)
        with_levels = getattr(limiter, "check_levels", None)
        self.check_levels = (
            None if with_levels is None else functools.partial(with_levels, plan=plan)
        )


def _banded(
    limiter: Any,
    name: str,
    parameter: str,
    kind: tuple[bool, bool, bool],
    cost: CostFunction | None = None,
    prefix: str = "",
    methods: frozenset[str] | None = None,
    unit: str | None = None,
    route: str | None = None,
    policy: str | None = None,
    plan: str | None = None,
) -> Rule:
    """The rule of a limiter (or of one plan of it) whose bands are ``limiter.bands``."""
    keyed, awaited, redis = kind
    bands = tuple(limiter.bands)
    if len(bands) == 1:
        names: tuple[str, ...] = (name,)
    else:
        names = tuple(f"{name}-{i}" for i in range(1, len(bands) + 1))
    quoted = tuple(_sf_string(n, f"{parameter} name") for n in names)
    policies = tuple(
        Policy.of(n, band.per_second, band.burst) for n, band in zip(names, bands, strict=True)
    )
    if cost is not None and not callable(cost):
        raise TypeError(f"{parameter} cost must be a function of the request, not {cost!r}")
    return Rule(
        limiter,
        keyed,
        awaited,
        cost,
        policies,
        quoted,
        prefix,
        methods,
        redis,
        unit,
        name if policy is None else policy,
        route,
        plan,
    )


def _distinct_names(rules: tuple[Rule, ...]) -> None:
    """Stacked limits are told apart in the fields by their policies' names: no two limits may
    share one (the plans of one limiter may, since a request has one plan)."""
    seen: dict[str, int] = {}
    for i, rule in enumerate(rules):
        names: set[str] = set()
        for one in rule.plans.values() if rule.plans is not None else (rule,):
            names.update(one.names)
        for name in names:
            if seen.setdefault(name, i) != i:
                raise ValueError(
                    f"stack: two limits have the policy name {name}: give each Route a name= "
                    "of its own, so the RateLimit fields tell them apart"
                )


def _names(rule: Rule) -> str:
    """A limiter's plans, listed for an error."""
    return ", ".join(repr(name) for name in rule.plans or {})


class _Hooked:
    """A rule's :attr:`Rule.decider` when there is a hook: ``check`` (and ``check_levels``,
    for a rule that asks it) is the wrapped one."""

    __slots__ = ("check", "check_levels")

    def __init__(
        self, check: Callable[..., Any], check_levels: Callable[..., Any] | None = None
    ) -> None:
        self.check = check
        self.check_levels = check_levels


class Rules:
    """Everything the middleware were configured with, checked at construction.

    Every bad argument raises ``TypeError`` or ``ValueError`` naming the parameter, so a
    misconfigured application fails when it starts, not on its first request.
    """

    def __init__(
        self,
        limiter: Any,
        *,
        routes: Iterable[Route],
        key: KeyFunction | None,
        cost: CostFunction | None,
        exempt: Callable[[RequestInfo], bool] | Iterable[str] | None,
        trusted_proxies: Iterable[str],
        forwarded_header: str,
        name: str,
        headers_on_allowed: bool,
        legacy_headers: bool,
        partition_secret: bytes | None,
        allow_async: bool,
        quota_unit: str | None = None,
        problem_json: bool = False,
        enforce: bool = True,
        on_decision: DecisionHook | None = None,
        on_decision_key: bool = False,
        plan: Callable[[RequestInfo], str] | None = None,
        stack: bool = False,
        burst: int | None = None,
        store: Any = None,
        on_event_loop: bool = False,
        table: str = "web",
    ) -> None:
        if store is not None and not is_rate(limiter):
            routes = list(routes) if not isinstance(routes, Route) else routes
            if not any(is_rate(route.limiter) for route in routes if isinstance(route, Route)):
                raise TypeError(
                    "store= says where a rate's limits are kept ('100/minute'): with limiters "
                    "given, leave it out (each limiter keeps its own state)"
                )
        store = checked_store(store)
        # Checked before any rate's table is made: a refused construction leaves none behind.
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function of the request, not {key!r}")
        if cost is not None and not callable(cost):
            raise TypeError(f"cost must be a function of the request, not {cost!r}")
        if is_rate(limiter):
            _sf_string(name, "name")
        if isinstance(routes, Route):
            raise TypeError("routes must be a list of Route, not a single Route")
        rules: list[Rule] = []
        for i, route in enumerate(routes):
            if not isinstance(route, Route):
                raise TypeError(f"routes[{i}] must be a Route, not {type(route).__name__}")
            if not isinstance(route.prefix, str) or not route.prefix.startswith("/"):
                raise ValueError(f"routes[{i}].prefix must be a path starting with '/'")
            prefix = route.prefix.rstrip("/") or "/"
            methods = _methods(route, i)
            if route.limiter is None:
                rules.append(Rule(None, False, False, None, (), (), prefix, methods))
                continue
            costed = route.cost is not None or cost is not None
            unit = route.unit if route.unit is not None else quota_unit
            parameter = f"routes[{i}].limiter"
            if is_rate(route.limiter):
                _sf_string(_route_name(route), f"routes[{i}].name")
            rules.append(
                _rule(
                    limiter_of(route.limiter, None, store, table, _route_name(route), parameter),
                    _route_name(route),
                    _from_store(route.limiter, store, parameter),
                    allow_async,
                    route.cost,
                    prefix,
                    methods,
                    _unit(unit, costed, f"routes[{i}].unit"),
                    route.prefix,
                    on_event_loop=on_event_loop,
                )
            )
        if limiter is not None:
            unit = _unit(quota_unit, cost is not None, "quota_unit")
            parameter = _from_store(limiter, store, "limiter")
            limiter = limiter_of(limiter, burst, store, table, name, "limiter")
            rules.append(
                _rule(limiter, name, parameter, allow_async, unit=unit, on_event_loop=on_event_loop)
            )
        elif not rules:
            raise ValueError("limiter: give a limiter, or routes with limiters, or both")
        elif burst is not None:
            raise TypeError("burst is for a rate given as limiter ('100/minute'), not for routes")
        in_process = [rule.limiter for rule in rules if isinstance(rule.limiter, _IN_PROCESS)]
        if in_process:
            warn_if_several_workers(type(in_process[0]).__name__)
        self.rules = tuple(rules)
        self.key = key
        self.cost = cost
        self.exempt_prefixes: tuple[str, ...] = ()
        self.exempt: Callable[[RequestInfo], bool] | None = None
        if exempt is None:
            pass
        elif callable(exempt):
            self.exempt = exempt
        elif isinstance(exempt, str):
            raise TypeError(f"exempt must be a list of path prefixes, not the string {exempt!r}")
        else:
            prefixes = tuple(exempt)
            for p in prefixes:
                if not isinstance(p, str) or not p.startswith("/"):
                    raise ValueError(f"exempt: {p!r} is not a path starting with '/'")
            self.exempt_prefixes = prefixes
        self.proxies = TrustedProxies.parse(trusted_proxies)
        header = forwarded_header.lower() if isinstance(forwarded_header, str) else None
        if header not in ("x-forwarded-for", "forwarded"):
            raise ValueError(
                "forwarded_header must be 'X-Forwarded-For' or 'Forwarded', "
                f"not {forwarded_header!r}"
            )
        self.forwarded_header = header
        self.headers_on_allowed = bool(headers_on_allowed)
        self.legacy_headers = bool(legacy_headers)
        if partition_secret is None:
            partition_secret = host_secret(store)
        elif not isinstance(partition_secret, bytes) or len(partition_secret) < 16:
            raise ValueError("partition_secret must be at least 16 bytes")
        self.secret = partition_secret
        self._partition_keys: dict[bytes, str] = {}
        self.problem_json = bool(problem_json)
        self.enforce = bool(enforce)
        if on_decision is not None and not callable(on_decision):
            raise TypeError(
                f"on_decision must be a function of a DecisionEvent, not {on_decision!r}"
            )
        self.on_decision = on_decision
        self.on_decision_key = bool(on_decision_key)
        planned = [rule for rule in self.rules if rule.plans is not None]
        if plan is not None and not callable(plan):
            raise TypeError(f"plan must be a function of the request, not {plan!r}")
        if planned and plan is None:
            raise TypeError(
                f"plan: the limiter has plans ({_names(planned[0])}): give plan=, a function of "
                "the request that returns the name of the client's plan"
            )
        if plan is not None and not planned:
            raise TypeError("plan= was given, but no limiter here has plans")
        self.plan = plan
        if on_decision is not None:
            for rule in self.rules:
                for one in rule.plans.values() if rule.plans is not None else (rule,):
                    if one.limiter is not None:
                        one.tell = self.teller(one, on_decision)
                        one.decider = _Hooked(
                            self.hook(one, one.tell),
                            self.hook_levels(one, one.tell) if one.leveled else None,
                        )
        self.stack = bool(stack)
        if self.stack:
            _distinct_names(self.rules)

    def planned(self, rule: Rule, info: RequestInfo) -> Rule:
        """``rule``, or for a limiter with plans the rule of the request's plan (``plan=``)."""
        plans = rule.plans
        if plans is None:
            return rule
        assert self.plan is not None  # checked at construction
        name = self.plan(info)
        chosen = plans.get(name) if isinstance(name, str) else None
        if chosen is None:
            raise ValueError(
                f"plan() returned {name!r} for {info.method} {info.path}: not one of the "
                f"limiter's plans ({_names(rule)})"
            )
        return chosen

    def teller(
        self, rule: Rule, on_decision: DecisionHook
    ) -> Callable[[Decision, Hashable | None], None]:
        """What tells ``on_decision`` of one of ``rule``'s decisions, with the key asked about.

        An exception in the hook is logged (``protocol_in_code.qos``) and the request answered
        all the same, since the limiter has decided (and may have spent).
        """
        enforced = self.enforce
        with_key = self.on_decision_key and rule.keyed
        policy, plan, route = rule.policy, rule.plan, rule.route
        limiter = rule.limiter.limiter if isinstance(rule.limiter, _PlanView) else rule.limiter
        allowed = LimitOutcome.ALLOWED
        # Most decisions are this one, and an event is immutable: it is made once, since
        # making one costs more than the rest of the hook's path (200 ns).
        every_allowed = DecisionEvent(policy, plan, route, allowed, 0, enforced, None, limiter)

        def tell(decision: Decision, key: Hashable | None) -> None:
            outcome = decision.outcome
            wait_ns = decision.wait_ns
            if outcome is allowed and wait_ns == 0 and not with_key:
                event = every_allowed
            else:
                if not with_key:
                    key = None
                event = DecisionEvent(policy, plan, route, outcome, wait_ns, enforced, key, limiter)
            try:
                on_decision(event)
            except Exception:
                _log.exception("on_decision raised; the request is answered all the same")

        return tell

    def hook(
        self, rule: Rule, tell: Callable[[Decision, Hashable | None], None]
    ) -> Callable[..., Any]:
        """``rule``'s ``check``, wrapped to ``tell`` of every decision.

        Without a hook the middleware calls the limiter's own ``check``: no hook costs no
        instruction at all.
        """
        check = rule.limiter.check

        if rule.awaited:

            async def checked_async(*args: Any) -> Decision:
                decision: Decision = await check(*args)
                tell(decision, args[0] if rule.keyed else None)
                return decision

            return checked_async

        if rule.keyed:

            def checked_keyed(key: Hashable, n: int) -> Decision:
                decision: Decision = check(key, n)
                tell(decision, key)
                return decision

            return checked_keyed

        def checked(n: int) -> Decision:
            decision: Decision = check(n)
            tell(decision, None)
            return decision

        return checked

    def hook_levels(
        self, rule: Rule, tell: Callable[[Decision, Hashable | None], None]
    ) -> Callable[..., Any]:
        """``rule``'s ``check_levels``, wrapped to ``tell`` of every decision (as
        :meth:`hook`)."""
        check_levels = rule.limiter.check_levels
        keyed = rule.keyed

        if rule.awaited:

            async def checked_levels_async(*args: Any) -> Any:
                decided = await check_levels(*args)
                tell(decided[0], args[0] if keyed else None)
                return decided

            return checked_levels_async

        def checked_levels(*args: Any) -> Any:
            decided = check_levels(*args)
            tell(decided[0], args[0] if keyed else None)
            return decided

        return checked_levels

    def rule_for(self, method: str, path: str) -> Rule | None:
        """The first rule for this request; ``None`` if it is exempt or no rule matches. The
        method and path are matched as routers read them (see :func:`routed`)."""
        method, path = routed(method, path)
        for prefix in self.exempt_prefixes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return None
        for rule in self.rules:
            if rule.matches(method, path):
                return rule if rule.limiter is not None else None
        return None

    def rules_for(self, method: str, path: str) -> tuple[Rule, ...]:
        """Under ``stack=True``, every rule for this request: each matching route's and the
        middleware's own limiter; ``()`` if the request is exempt (a matching route without
        a limiter exempts it from every limit) or nothing matches."""
        method, path = routed(method, path)
        for prefix in self.exempt_prefixes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return ()
        matched = []
        for rule in self.rules:
            if rule.matches(method, path):
                if rule.limiter is None:
                    return ()
                matched.append(rule)
        return tuple(matched)

    def partition_key(self, key: Hashable) -> str:
        """``pk``: the key under a keyed hash, as a Byte Sequence: stable, but no address in it.

        Recent keys' ``pk`` are remembered, in memory bounded in keys and in bytes: a flood of
        new keys only empties the memo, and a key longer than ``PARTITION_KEY_BYTES_KEPT`` is
        never kept. Its ``pk`` is made anew each time, which costs what the digest of it that a
        memo would need costs, and what the limiter spends reading the key anyway.
        """
        data = key_bytes(key)
        if len(data) > PARTITION_KEY_BYTES_KEPT:
            return self._keyed_hash(data)
        pk = self._partition_keys.get(data)
        if pk is None:
            pk = self._keyed_hash(data)
            if len(self._partition_keys) >= PARTITION_KEYS_KEPT:
                self._partition_keys.clear()
            self._partition_keys[data] = pk
        return pk

    def _keyed_hash(self, data: bytes) -> str:
        """``data`` under HMAC-SHA256 with the partition secret, 12 bytes, as a Byte Sequence."""
        digest = hmac.new(self.secret, data, hashlib.sha256).digest()[:12]
        return ":" + base64.b64encode(digest).decode("ascii") + ":"


def key_bytes(key: Hashable) -> bytes:
    """What a key's ``pk`` is the hash of: its text.

    A ``str`` is its UTF-8 (lone surrogates kept), ``bytes`` are themselves, and any other key
    (``42``, ``("user", 42)``) is its ``repr()``, which for numbers, strings and tuples of them
    is the same in every process, so every worker gives a client the same ``pk``; an int too
    long for Python to write in decimal (more than 4,300 digits) is written in hex. Keys the
    limiter holds as one but spelled apart (``1`` and ``1.0``) have two ``pk``.
    """
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return key
    try:
        text = repr(key)
    except ValueError:  # an int of more digits than Python writes in decimal (4,300 by default)
        text = _long_text(key)
    return text.encode("utf-8", "surrogatepass")


def _long_text(key: Any) -> str:
    """:func:`repr`, but with an int of more digits than Python writes in decimal written in
    hex (``0x...``), as ``repr()`` raises for it: a key can be any int."""
    if isinstance(key, int) and not isinstance(key, bool):
        try:
            return repr(key)
        except ValueError:
            return hex(key)
    if isinstance(key, tuple):
        items = [_long_text(item) for item in key]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return repr(key)


def _route_name(route: Route) -> str:
    """The route's policy name: ``name``, or else the prefix, percent-encoded as in a URL when
    it is not ASCII (``/café`` is ``/caf%C3%A9``), since the name is an ASCII String."""
    if route.name is not None:
        return route.name
    if route.prefix.isascii():
        return route.prefix
    return urllib.parse.quote(route.prefix)


def routed(method: str, path: str) -> tuple[str, str]:
    """The method and path as the frameworks' routers read them, which is what a route must
    match: a spelling that a router sends to a limited view is limited.

    * The method in upper case: Flask (Werkzeug) and Django route ``post`` as ``POST``.
    * Empty segments merged and dot segments resolved: Werkzeug merges ``//upload`` into
      ``/upload``, and a client (or a server that decodes ``%2F``) may send ``/a/../upload``.
      A trailing slash is kept, since routers tell ``/upload/`` apart. (Servers decode
      percent-escapes before the application sees the path, ``%2F`` included under WSGI.)
    """
    method = method.upper()
    if "//" in path or "/." in path:
        segments: list[str] = []
        for segment in path.split("/"):
            if segment == "..":
                if segments:
                    segments.pop()
            elif segment not in ("", "."):
                segments.append(segment)
        trailing = "/" if path.endswith(("/", "/.", "/..")) and segments else ""
        path = "/" + "/".join(segments) + trailing
    return method, path


def _methods(route: Route, i: int) -> frozenset[str] | None:
    """The route's methods in upper case, and HEAD wherever GET is.

    Frameworks answer HEAD by running the GET handler and dropping the body, so a limit on
    GET that let HEAD through would let anyone run the handler unlimited.
    """
    if route.methods is None:
        return None
    if isinstance(route.methods, str):
        raise TypeError(f"routes[{i}].methods must be a set of methods, not {route.methods!r}")
    methods = frozenset(m.upper() for m in route.methods)
    if "GET" in methods:
        methods |= {"HEAD"}
    return methods


# ---------------------------------------------------------------------------------------------
# What to answer: status and header fields
# ---------------------------------------------------------------------------------------------


def _levels(rule: Rule, key: Hashable | None) -> list[tuple[int, int]] | None:
    """Each band's (whole tokens, ns until one more) now, just after the decision, where the
    limiter can say (:attr:`Rule.levels`); ``None`` where it cannot, or where asking fails
    (the decision is made, and the request must be answered: its fields then say less)."""
    levels = rule.levels
    if levels is None:
        return None
    try:
        return levels(key) if rule.keyed else levels()
    except Exception:
        return None


def answer(
    rules: Rules,
    rule: Rule,
    decision: Decision,
    pk: str | None,
    key: Hashable | None = None,
    levels: list[tuple[int, int]] | None = None,
) -> tuple[int, list[tuple[str, str]]]:
    """The status (0 to pass the request on) and the header fields for ``decision``.

    ``pk`` is the key's partition key (``None`` for a limiter without keys), made before the
    limiter was asked: nothing here can fail, so a request that spent a token is answered.
    ``key`` is the key asked about, to read each band's own level where the limiter can tell
    it (``band_levels``); ``levels`` are those levels when the limiter said them with its
    decision (a Redis limiter's ``check_levels``), and then nothing more is asked.

    Each band's item says its own ``r`` and, where the limiter tells when its next token
    comes, ``t``: the whole seconds within which no more than ``r`` can be used, omitted when
    0, and never more than the ``Retry-After`` beside it. Where the limiter cannot tell (the
    shared limiters, any other object, a Redis limiter whose server could not answer or in a
    stack), every band says the decision's ``remaining`` (the least of all bands, which every
    band holds) and no ``t``.

    Under ``enforce=False`` a refusal is only said: the status is 0, and there is no
    ``Retry-After``, since the request goes on.
    """
    status = _status(rules, decision)
    if not status and decision.outcome is LimitOutcome.ALLOWED and not rules.headers_on_allowed:
        return status, []
    fields, retry = _retry_after(decision, status)
    policy, items, legacy = _described(rules, rule, decision, pk, key, retry, levels)
    fields.append(("RateLimit-Policy", policy))
    if items is not None:
        fields.append(("RateLimit", items))
        if rules.legacy_headers:
            fields.extend(legacy)
    return status, fields


def _status(rules: Rules, decision: Decision) -> int:
    """The status of ``decision``: 0 (pass the request on) when allowed or not enforced."""
    outcome = decision.outcome
    if outcome is LimitOutcome.ALLOWED or not rules.enforce:
        return 0
    if outcome is LimitOutcome.DENIED:
        return DENIED_STATUS
    if outcome is LimitOutcome.NEVER:
        return NEVER_STATUS
    return REFUSED_STATUS


def _retry_after(decision: Decision, status: int) -> tuple[list[tuple[str, str]], int]:
    """``Retry-After`` for a refusal that is sent (none for NEVER), and its seconds (else 0)."""
    wait_ns = decision.wait_ns
    if wait_ns is None or not status:
        return [], 0
    retry = _seconds_up(wait_ns)
    return [("Retry-After", str(retry))], retry


def _described(
    rules: Rules,
    rule: Rule,
    decision: Decision,
    pk: str | None,
    key: Hashable | None,
    retry: int,
    levels: list[tuple[int, int]] | None = None,
) -> tuple[str, str | None, list[tuple[str, str]]]:
    """What the fields say of one limiter after ``decision``: its ``RateLimit-Policy`` items,
    its ``RateLimit`` items (``None`` when its table had no room for the key: its quota is not
    known, so only its policies are stated), and the legacy ``X-RateLimit-*`` fields."""
    if decision.outcome is LimitOutcome.REFUSED:
        return rule.policy_text, None, []
    remaining = decision.remaining
    pk_parameter = "" if pk is None else ";pk=" + pk
    if levels is None:
        levels = _levels(rule, key)
    items = []
    if levels is None:
        for name, policy in zip(rule.names, rule.policies, strict=True):
            items.append(f"{name};r={min(remaining, policy.burst)}{pk_parameter}")
    else:
        for name, (tokens, next_ns) in zip(rule.names, levels, strict=True):
            t = next_ns // NS_PER_SECOND
            if retry and t > retry:
                t = retry
            window = f";t={t}" if t else ""
            items.append(f"{name};r={tokens}{window}{pk_parameter}")
    if pk_parameter:
        stated = ", ".join(f"{item}{pk_parameter}" for item in rule.policy_items)
    else:
        stated = rule.policy_text
    legacy = []
    if rules.legacy_headers:
        first = rule.policies[0]
        first_remaining = min(remaining, first.burst) if levels is None else levels[0][0]
        legacy = [
            ("X-RateLimit-Limit", str(first.burst)),
            ("X-RateLimit-Remaining", str(first_remaining)),
            ("X-RateLimit-Reset", str(max(first.reset_seconds(first_remaining), retry))),
        ]
    return stated, ", ".join(items), legacy


def refusal_body(status: int) -> bytes:
    return f"{REASONS.get(status, 'Refused')}\n".encode("ascii")


#: The problem types of draft-ietf-httpapi-ratelimit-headers-11, section 5.
PROBLEM_TYPES = "https://iana.org/assignments/http-problem-types#"
QUOTA_EXCEEDED = PROBLEM_TYPES + "quota-exceeded"
TEMPORARY_REDUCED_CAPACITY = PROBLEM_TYPES + "temporary-reduced-capacity"
PROBLEM_JSON = "application/problem+json"
TEXT_PLAIN = "text/plain; charset=utf-8"


def violated_policies(
    rule: Rule,
    decision: Decision,
    n: int,
    key: Hashable | None = None,
    levels: list[tuple[int, int]] | None = None,
) -> list[str]:
    """The names of the policies a refusal of ``n`` tokens broke.

    NEVER: every band whose burst is less than ``n``. DENIED: every band that holds fewer
    than ``n`` tokens, where the limiter tells each band's level; where it cannot, every band
    the decision's ``remaining`` (the least band's) leaves short, which names the least band
    and any band that may be as low. REFUSED (a full keyed table): every policy of the limit,
    since the client could be given none of them. ``levels`` are the levels the limiter said
    with its decision, if it did (see :func:`answer`).
    """
    names = [policy.name for policy in rule.policies]
    outcome = decision.outcome
    if outcome is LimitOutcome.NEVER:
        return [name for name, p in zip(names, rule.policies, strict=True) if p.burst < n]
    if outcome is LimitOutcome.DENIED:
        if levels is None:
            levels = _levels(rule, key)
        if levels is not None:
            short = [name for name, (tokens, _) in zip(names, levels, strict=True) if tokens < n]
            if short:
                return short
        return names
    return names


def refusal(
    rules: Rules,
    rule: Rule,
    decision: Decision,
    status: int,
    n: int = 1,
    key: Hashable | None = None,
    levels: list[tuple[int, int]] | None = None,
) -> tuple[str, bytes]:
    """The content type and body of a refusal: a line of text, or with ``problem_json`` a
    problem document of the draft's type for it (``quota-exceeded`` on a 429,
    ``temporary-reduced-capacity`` on a 503) naming the ``violated-policies``."""
    if not rules.problem_json:
        return TEXT_PLAIN, refusal_body(status)
    return _problem(status, violated_policies(rule, decision, n, key, levels))


def _problem(status: int, violated: list[str]) -> tuple[str, bytes]:
    """A problem document of the draft's type for ``status``, naming ``violated``."""
    if status == REFUSED_STATUS:
        kind, title = TEMPORARY_REDUCED_CAPACITY, "Temporary Reduced Capacity"
    else:
        kind, title = QUOTA_EXCEEDED, "Quota Exceeded"
    problem = {"type": kind, "title": title, "status": status, "violated-policies": violated}
    return PROBLEM_JSON, json.dumps(problem).encode("utf-8")


#: The largest cost every limiter takes: ``n`` is an unsigned 64-bit count.
COST_MAX = 2**64 - 1


def cost_of(rules: Rules, rule: Rule, info: RequestInfo) -> int:
    """Tokens this request takes: the route's cost function, the middleware's, or 1.

    A cost no limiter takes raises here, naming it, before the limiter is asked.
    """
    function = rule.cost or rules.cost
    if function is None:
        return 1
    n = function(info)
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= COST_MAX:
        raise ValueError(
            f"cost= returned {reprlib.repr(n)}, which is not an int from 0 to 2**64 - 1"
        )
    return n


def key_of(rules: Rules, rule: Rule, info: RequestInfo) -> Key | None:
    """The key of a keyed limiter: the key function's, or the client's address.

    ``None`` from the key function means that this limit does not apply to this request (a
    limit per signed-in user, for a request nobody signed in to): it is passed over, as if its
    route did not match. Any other key must be a value (see :func:`not_a_key`); one that is not
    raises ``TypeError`` here, naming the key function and what it returned, before the limiter
    is asked: the middleware never fails after a token is spent.
    """
    function = rules.key
    if function is None:
        return info.client if info.client is not None else "unknown"
    key = function(info)
    if key is None:
        return None
    if rule.redis:
        if not isinstance(key, (str, bytes)):
            raise TypeError(
                f"key= returned {reprlib.repr(key)}, which a Redis limiter cannot take: "
                f"its keys are str or bytes ({function_name(function)} returned a "
                f"{type(key).__qualname__})"
            )
        return key
    kind = type(key)
    if kind is str or kind is int or kind is bytes:  # the keys most functions return
        return key
    wrong = not_a_key(key)
    if wrong is not None:
        raise TypeError(
            f"key= returned {reprlib.repr(key)}, which {wrong}. {function_name(function)} "
            "must return a value (str, bytes, int, float, or a tuple of them: the user's id, "
            "not the user), or None where this limit does not apply to the request"
        )
    return key


def not_a_key(key: object) -> str | None:
    """Why ``key`` is not a key, or ``None`` for a key.

    A key is a value: ``str``, ``bytes``, ``int``, ``float`` and tuples of them, nested to any
    depth, each equal to another key exactly when their values are. Anything else would
    misplace clients without a word. An object equal only to itself (an ORM's user, made anew
    for every request) is a new client at every request, so the limit never applies; so is
    NaN, which equals nothing. A list or a dict is no dict key. And a bool is refused too:
    ``True`` is the key ``1`` (the user of id 1), and a key function that returns one
    (``user.is_authenticated and user.pk``) puts every anonymous client in the one key
    ``False``; ``None`` says that a limit does not apply.
    """
    stack = [key]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            continue
        if isinstance(item, bool):
            return "is a bool, not a key: True is the key 1, and False is 0"
        if isinstance(item, int):
            continue
        if isinstance(item, float):
            if item != item:
                return "is NaN, not a key: NaN equals nothing, so each request is a new client"
            continue
        if isinstance(item, tuple):
            stack.extend(item)
            continue
        kind = type(item).__qualname__
        if item is key:
            return f"is a {kind}, not a key"
        return f"holds a {kind}, which is not a key"
    return None


def function_name(function: Callable[..., Any]) -> str:
    """A function as an error names it: its module and qualified name, where it has them."""
    name = getattr(function, "__qualname__", None)
    if not isinstance(name, str):
        return reprlib.repr(function)
    module = getattr(function, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) and module else name


# ---------------------------------------------------------------------------------------------
# One request, decided: what the framework forms (for_fastapi, for_flask, for_django) call
# ---------------------------------------------------------------------------------------------


class Verdict(NamedTuple):
    """A request decided, as a framework's view answers it.

    ``status`` 0 lets the view run, and its response carries ``fields``; any other status is
    the refusal to send instead, with ``fields`` (``Retry-After`` and the RateLimit fields),
    ``content_type`` and ``body`` (see :func:`refusal`).
    """

    status: int
    fields: list[tuple[str, str]]
    content_type: str
    body: bytes


class Asked(NamedTuple):
    """A request as one limit asks its limiter about it: the rule (for a limiter with plans,
    the request's plan's), the tokens, the key and its ``pk`` (``None`` for a limiter without
    keys)."""

    rule: Rule
    n: int
    key: Key | None
    pk: str | None


def prepared(rules: Rules, rule: Rule, info: RequestInfo) -> Asked | None:
    """What ``rule``'s limiter is asked about ``info``: everything that can fail (the key, the
    plan, the cost), read before anything is spent; ``None`` when the key function says that
    this limit does not apply to the request.

    The key is read first, so that a limit that does not apply asks nothing more of the
    request: a plan function for signed-in users is never called for anyone else.
    """
    key = pk = None
    if rule.keyed:
        key = key_of(rules, rule, info)
        if key is None:
            return None
    if rule.plans is not None:
        rule = rules.planned(rule, info)
    n = cost_of(rules, rule, info)
    if key is not None:
        pk = rules.partition_key(key)
    return Asked(rule, n, key, pk)


def ask(asked: Asked) -> Any:
    """The limiter's ``check`` (its ``check_levels`` for a :attr:`Rule.leveled` rule) called
    for ``asked``: the decision (with the levels), awaitable for an asyncio limiter."""
    rule = asked.rule
    decider = rule.decider
    if rule.leveled:
        if rule.keyed:
            return decider.check_levels(asked.key, asked.n)
        return decider.check_levels(asked.n)
    if rule.keyed:
        return decider.check(asked.key, asked.n)
    return decider.check(asked.n)


def passed() -> Verdict:
    """The verdict on a request no limit applies to: go on, with no fields."""
    return Verdict(0, [], "", b"")


def _verdict(
    rules: Rules,
    rule: Rule,
    decision: Decision,
    n: int,
    key: Key | None,
    pk: str | None,
    levels: list[tuple[int, int]] | None = None,
) -> Verdict:
    status, fields = answer(rules, rule, decision, pk, key, levels)
    if not status:
        return Verdict(0, fields, "", b"")
    content_type, body = refusal(rules, rule, decision, status, n, key, levels)
    return Verdict(status, fields, content_type, body)


def _decided(rules: Rules, asked: Asked, answered: Any) -> Verdict:
    """The verdict on ``asked``, given what :func:`ask` answered (awaited, if it was to be)."""
    if asked.rule.leveled:
        decision, levels = answered
        return _verdict(rules, asked.rule, decision, asked.n, asked.key, asked.pk, levels)
    return _verdict(rules, asked.rule, answered, asked.n, asked.key, asked.pk)


def decide_asked(rules: Rules, asked: Asked) -> Verdict:
    """Decide ``asked`` under a synchronous limiter: one call says the decision (and, for a
    :attr:`Rule.leveled` rule, every band's level, so that the fields say each band's own
    ``r`` and ``t``)."""
    return _decided(rules, asked, ask(asked))


async def decide_asked_async(rules: Rules, asked: Asked) -> Verdict:
    """:func:`decide_asked`, awaiting an asyncio limiter."""
    answered = ask(asked)
    if asked.rule.awaited:
        answered = await answered
    return _decided(rules, asked, answered)


def decide(rules: Rules, rule: Rule, info: RequestInfo) -> Verdict:
    """Decide ``info`` under ``rule`` (a synchronous limiter's), as the middleware do; under
    every rule together for a view's stacked limits."""
    if rules.stack:
        return decide_stacked(rules, rules.rules, info)
    if rule.awaited:
        raise TypeError("an asyncio limiter's decision must be awaited: use decide_async")
    asked = prepared(rules, rule, info)
    return passed() if asked is None else decide_asked(rules, asked)


async def decide_async(rules: Rules, rule: Rule, info: RequestInfo) -> Verdict:
    """:func:`decide`, awaiting the limiter's ``check`` where it is an asyncio limiter's (an
    in-process limiter's never sleeps, so it is called directly, as the ASGI middleware do)."""
    if rules.stack:
        return await decide_stacked_async(rules, rules.rules, info)
    asked = prepared(rules, rule, info)
    return passed() if asked is None else await decide_asked_async(rules, asked)


# ---------------------------------------------------------------------------------------------
# Stacked limits (stack=True): every matching limit decides the request together
# ---------------------------------------------------------------------------------------------


def _stack_parts(
    rules: Rules, matched: tuple[Rule, ...], info: RequestInfo
) -> tuple[list[Asked], list[tuple[Any, Key | None, int, str | None]]]:
    """What a stacked request asks of each limit: every key, plan and cost is read (each of
    which may raise) before any limit is asked. A limit whose key function returns ``None``
    does not apply, and is left out; the others decide."""
    asked, parts = [], []
    for rule in matched:
        one = prepared(rules, rule, info)
        if one is None:
            continue
        limiter, plan = one.rule.limiter, None
        if isinstance(limiter, _PlanView):
            limiter, plan = limiter.limiter, limiter.plan
        asked.append(one)
        parts.append((limiter, one.key, one.n, plan))
    return asked, parts


def _stacked_verdict(rules: Rules, asked: list[Asked], stacked: Stacked) -> Verdict:
    """The answer to a stacked request: the request's status and ``Retry-After``, every
    limit's policies and ``RateLimit`` items, and (with ``problem_json``) every violated
    policy of every limit that refused."""
    if rules.on_decision is not None:
        for one, decision in zip(asked, stacked.parts, strict=True):
            assert one.rule.tell is not None  # set for every rule when there is a hook
            one.rule.tell(decision, one.key)
    decision = stacked.decision
    status = _status(rules, decision)
    if not status and decision.outcome is LimitOutcome.ALLOWED and not rules.headers_on_allowed:
        return Verdict(0, [], "", b"")
    fields, retry = _retry_after(decision, status)
    policies, items, violated = [], [], []
    legacy: list[tuple[str, str]] = []
    legacy_refused = False
    for one, part in zip(asked, stacked.parts, strict=True):
        policy, ratelimit, its_legacy = _described(rules, one.rule, part, one.pk, one.key, retry)
        policies.append(policy)
        if ratelimit is not None:
            items.append(ratelimit)
        refused = part.outcome is not LimitOutcome.ALLOWED
        if refused:
            violated.extend(violated_policies(one.rule, part, one.n, one.key))
        # The legacy fields speak of one limit: the first that refused, else the first.
        if its_legacy and (not legacy or (refused and not legacy_refused)):
            legacy, legacy_refused = its_legacy, refused
    if decision.outcome is not LimitOutcome.ALLOWED and not legacy_refused:
        # Every limit that refused is a full table, with no quota to state: none, as such a
        # limit alone answers, rather than the fields of a limit that allowed.
        legacy = []
    fields.append(("RateLimit-Policy", ", ".join(policies)))
    if items:
        fields.append(("RateLimit", ", ".join(items)))
    fields.extend(legacy)
    if not status:
        return Verdict(0, fields, "", b"")
    if rules.problem_json:
        content_type, body = _problem(status, violated)
    else:
        content_type, body = TEXT_PLAIN, refusal_body(status)
    return Verdict(status, fields, content_type, body)


def decide_stacked(rules: Rules, matched: tuple[Rule, ...], info: RequestInfo) -> Verdict:
    """Decide ``info`` under every rule in ``matched`` together (see
    :mod:`protocol_in_code.qos.stack`)."""
    asked, parts = _stack_parts(rules, matched, info)
    if not asked:
        return passed()
    return _stacked_verdict(rules, asked, check_together(parts))


async def decide_stacked_async(
    rules: Rules, matched: tuple[Rule, ...], info: RequestInfo
) -> Verdict:
    """:func:`decide_stacked`, awaiting the asyncio limiters among them."""
    asked, parts = _stack_parts(rules, matched, info)
    if not asked:
        return passed()
    if any(one.rule.awaited for one in asked):
        stacked = await check_together_async(parts)
    else:
        stacked = check_together(parts)
    return _stacked_verdict(rules, asked, stacked)


def view_rules(
    limiter: Any,
    *,
    allow_async: bool,
    table: str,
    burst: int | None = None,
    store: Any = None,
    on_event_loop: bool = False,
    key: KeyFunction | None = None,
    cost: CostFunction | None = None,
    trusted_proxies: Iterable[str] = (),
    forwarded_header: str = "X-Forwarded-For",
    name: str = "default",
    headers_on_allowed: bool = True,
    legacy_headers: bool = False,
    partition_secret: bytes | None = None,
    quota_unit: str | None = None,
    problem_json: bool = False,
    enforce: bool = True,
    on_decision: DecisionHook | None = None,
    on_decision_key: bool = False,
    plan: Callable[[RequestInfo], str] | None = None,
) -> tuple[Rules, Rule]:
    """The rules of one view's limit, and its one rule: the middleware's, without routes.

    ``limiter`` is a limiter of any of the four interfaces, or a rate (``"5/minute"``, ``10``)
    with an optional ``burst``: one limit per client, kept in ``store`` under a name made of
    ``table`` (the view's) and the policy's name (see :func:`limiter_of`). A mapping of policy
    names to such limiters or rates is several limits stacked on the view (``{"global":
    RateLimiter("1000/second"), "client": "10/second"}``), decided together: taken from all or
    none. Every other parameter means what it means for the middleware.
    """
    routes: list[Route] = []
    if isinstance(limiter, Mapping):
        if burst is not None:
            raise TypeError("burst is for one rate (limit('5/minute', burst=10)), not a mapping")
        if not limiter:
            raise ValueError("limiter: a mapping of stacked limits needs at least one")
        for policy, one in limiter.items():
            if not isinstance(policy, str):
                raise TypeError(f"limiter: a stacked limit's name must be a str, not {policy!r}")
            if one is None:
                raise TypeError(
                    f"limiter[{policy!r}]: give a limiter, or a rate such as '5/minute'"
                )
        (name, limiter), *others = limiter.items()
        routes = [Route("/", one, name=policy) for policy, one in others]
    elif limiter is None:
        raise TypeError("limiter: give a limiter, or a rate such as '5/minute'")
    rules = Rules(
        limiter,
        routes=routes,
        key=key,
        cost=cost,
        exempt=None,
        trusted_proxies=trusted_proxies,
        forwarded_header=forwarded_header,
        name=name,
        headers_on_allowed=headers_on_allowed,
        legacy_headers=legacy_headers,
        partition_secret=partition_secret,
        allow_async=allow_async,
        quota_unit=quota_unit,
        problem_json=problem_json,
        enforce=enforce,
        on_decision=on_decision,
        on_decision_key=on_decision_key,
        plan=plan,
        stack=bool(routes),
        burst=burst,
        store=store,
        on_event_loop=on_event_loop,
        table=table,
    )
    return rules, rules.rules[-1]


#: The stores a rate given in place of a limiter can be kept in, by name: ``"shared"`` (the
#: default) is one limit for every process of the host, ``"process"`` one in each process.
STORES = ("shared", "process")

#: The longest name of a shared table (``shared_memory::LONGEST_NAME`` in the core).
LONGEST_TABLE_NAME = 100

_IN_PROCESS = (RateLimiter, KeyedRateLimiter)


def is_rate(limiter: Any) -> bool:
    """Whether ``limiter`` is a rate (``"5/minute"``, ``10``, ``Fraction(1, 3)``) given in
    place of a limiter."""
    return isinstance(limiter, (str, int, Fraction)) and not isinstance(limiter, bool)


def has_rate(limiter: Any) -> bool:
    """Whether a view's ``limiter`` (or a mapping of them) holds a rate, whose limit needs a
    name: the view's, known only once the decorator is given the view."""
    if isinstance(limiter, Mapping):
        return any(is_rate(one) for one in limiter.values())
    return is_rate(limiter)


def checked_store(store: Any) -> Any:
    """``store``, if it is one: ``"shared"``, ``"process"``, a folder that is there, or a Redis
    client (``None``, not given, is ``"shared"``)."""
    if store is None:
        return "shared"
    if isinstance(store, str):
        if store not in STORES:
            raise ValueError(
                f"store must be 'shared', 'process', a folder or a Redis client, not {store!r}"
            )
    elif isinstance(store, os.PathLike):
        if not os.path.isdir(store):
            raise FileNotFoundError(
                errno.ENOENT, f"store={os.fspath(store)!r} is no folder: make it, or give another"
            )
    elif not callable(getattr(store, "evalsha", None)):
        raise TypeError(
            "store must be 'shared', 'process', a folder (a pathlib.Path) or a Redis client, "
            f"not {type(store).__name__}"
        )
    return store


def _from_store(limiter: Any, store: Any, parameter: str) -> str:
    """The parameter an error about a rule's limiter names: ``store`` where the limiter was
    made from a rate in a Redis client given as ``store``, else ``parameter``."""
    if is_rate(limiter) and not isinstance(store, (str, os.PathLike)):
        return f"store (the Redis client for {parameter})"
    return parameter


def table_name(*parts: str) -> str:
    """The name a rate's limit is kept under: ``parts`` joined by dots, every character a
    table's name cannot hold (``<locals>``...) made ``-``, and a name too long shortened, a
    digest of the whole in its place of the end."""
    whole = ".".join(parts)
    text = re.sub(r"[^A-Za-z0-9._-]", "-", whole).lstrip(".") or "-"
    if len(text) > LONGEST_TABLE_NAME:
        digest = hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        text = f"{text[: LONGEST_TABLE_NAME - 17]}-{digest}"
    return text


def limiter_of(
    limiter: Any, burst: int | None, store: Any, table: str, name: str, parameter: str
) -> Any:
    """The limiter a rule asks: ``limiter`` itself, or, for a rate given in its place
    (``"100/minute"``, with ``burst``), one limit per client kept in ``store``:

    * ``"shared"`` (the default): a :class:`SharedKeyedRateLimiter` named ``<table>.<name>``
      (the policy's name), one limit for every worker process of the host. The workers of one
      application name it alike, and find the same table again after a restart.
    * a folder (``pathlib.Path("/run/shop/qos")``): the same, with the table in that folder.
    * ``"process"``: a :class:`KeyedRateLimiter`, a limit in each process.
    * a Redis client (sync or asyncio): a Redis keyed limiter of that name, one limit for
      every host.
    """
    if not is_rate(limiter):
        if burst is not None:
            raise TypeError(
                f"burst is for a rate ({parameter}='5/minute', burst=10), not for a limiter"
            )
        return limiter
    if store == "process":
        return KeyedRateLimiter(limiter, burst=burst)
    where = claimed_name(table_name(table, name))
    if store == "shared":
        return SharedKeyedRateLimiter(where, limiter, burst=burst)
    if isinstance(store, os.PathLike):
        return SharedKeyedRateLimiter(where, limiter, burst=burst, path=store)
    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter

    return RedisKeyedRateLimiter(store, limiter, burst=burst, name=where)


#: How many limits of this process were given each name, to tell apart those given one.
_claimed: dict[str, int] = {}
_claiming = threading.Lock()


def claimed_name(name: str) -> str:
    """``name`` for the first limit of this process that is given it, ``<name>.2`` for the
    second, and so on: limits that would share a name (two views of one qualified name, two
    dependencies written on one line, a mounted application's middleware and its parent's)
    keep apart. Every worker makes its limits in the same order (its application's import, its
    middleware stacks), so the workers name each limit alike."""
    with _claiming:
        count = _claimed[name] = _claimed.get(name, 0) + 1
    return name if count == 1 else table_name(name, str(count))


def host_secret(store: Any = None) -> bytes:
    """The secret ``pk`` is keyed with unless ``partition_secret`` is given: one that every
    process of this user on this host reads alike (a file in the shared tables' folder, made
    once), so that every worker, and every restart until the host reboots, gives a client the
    same ``pk``. Where that folder cannot be used, a random one of this process's, said once in
    the log."""
    try:
        return _host_secret(store if isinstance(store, os.PathLike) else None)
    except OSError as error:
        _log.warning(
            "the host's partition secret cannot be read (%s): pk is keyed with a secret of "
            "this process's own, so each worker gives a client another pk; give every worker "
            "the same partition_secret",
            error,
        )
        return os.urandom(16)


def view_table(view: Callable[..., Any]) -> str | None:
    """The name a view's rates are kept under: ``view.`` and its module and qualified name
    (``view.shop.views.login``), the same in every worker and after every restart. A class's
    view (Django's and Flask's ``as_view()``) is named after its class. ``None`` for the
    stand-in function Django's ``method_decorator`` decorates first, whose name is Django's:
    the view is named by the method it decorates next, at the first request."""
    named = getattr(view, "view_class", view)
    module = str(getattr(named, "__module__", None) or "-")
    if module == "django.utils.decorators":
        return None
    qualname = getattr(named, "__qualname__", None) or getattr(named, "__name__", None) or "-"
    return table_name("view", module, str(qualname))
