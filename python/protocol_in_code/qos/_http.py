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
  revisions 08 and 09 define them), one policy per band; see :class:`Policy` for what ``q``,
  ``w``, ``r`` and ``t`` mean for a token bucket.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import reprlib
import urllib.parse
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeAlias

from protocol_in_code._native import Decision, KeyedRateLimiter, LimitOutcome, RateLimiter

_Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

NS_PER_SECOND = 1_000_000_000
PARTITION_KEYS_KEPT = 10_000

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
    """A request as a key, cost or exemption function sees it, whichever server runs it.

    ``headers`` has lower-case names, and repeated fields joined with ``", "``. ``client`` is
    the address :func:`client_address` settled on (``None`` when the server gives none, as on
    a Unix socket).
    """

    method: str
    path: str
    client: str | None
    headers: Mapping[str, str]


KeyFunction: TypeAlias = Callable[[RequestInfo], Hashable]
CostFunction: TypeAlias = Callable[[RequestInfo], int]


# ---------------------------------------------------------------------------------------------
# Whose request: the client's address, through trusted proxies only
# ---------------------------------------------------------------------------------------------


def trusted_networks(trusted_proxies: Iterable[str]) -> tuple[_Network, ...]:
    """``trusted_proxies`` (addresses or networks, ``"10.0.0.0/8"``) parsed once."""
    if isinstance(trusted_proxies, (str, bytes)):
        raise TypeError(
            "trusted_proxies must be a list of addresses or networks, "
            f"not the single string {trusted_proxies!r}"
        )
    networks = []
    for entry in trusted_proxies:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except (TypeError, ValueError):
            raise ValueError(
                f"trusted_proxies: {entry!r} is not an IP address or network"
            ) from None
    return tuple(networks)


def _address(text: str) -> _Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _is_trusted(address: str, networks: Sequence[_Network]) -> bool:
    parsed = _address(address)
    return parsed is not None and any(parsed in network for network in networks)


def _forwarded_for(value: str) -> list[str]:
    """The ``for=`` nodes of a ``Forwarded`` field (RFC 7239), brackets and ports removed."""
    nodes = []
    for element in value.split(","):
        for pair in element.split(";"):
            name, _, node = pair.strip().partition("=")
            if name.strip().lower() != "for":
                continue
            node = node.strip().strip('"')
            if node.startswith("["):  # "[2001:db8::1]:4711"
                node = node[1 : node.find("]")] if "]" in node else node[1:]
            elif node.count(":") == 1:  # "192.0.2.43:47011"
                node = node.partition(":")[0]
            nodes.append(node)
    return nodes


def client_address(
    peer: str | None,
    headers: Mapping[str, str],
    networks: Sequence[_Network],
    header: str,
) -> str | None:
    """The client's address: ``peer``, unless ``peer`` is a trusted proxy.

    Then the ``header`` chain (``x-forwarded-for`` or ``forwarded``) is read from the right,
    each hop appended by the proxy before it: the first address that is not a trusted proxy is
    the client. If every hop is trusted, the leftmost is. A header that is missing, or has
    anything but addresses where an address must be, leaves the peer as the client.
    """
    if peer is None or not networks or not _is_trusted(peer, networks):
        return peer
    value = headers.get(header)
    if not value:
        return peer
    if header == "forwarded":
        chain = _forwarded_for(value)
    else:
        chain = [hop.strip() for hop in value.split(",")]
    for hop in reversed(chain):
        if _address(hop) is None:
            return peer
        if not _is_trusted(hop, networks):
            return hop
    return chain[0] if chain else peer


# ---------------------------------------------------------------------------------------------
# Which limit: limiters, routes, exemptions, costs
# ---------------------------------------------------------------------------------------------


def _limiter_kind(limiter: Any, parameter: str) -> tuple[bool, bool, bool]:
    """(keyed, awaited, Redis) for one of our limiters, or TypeError naming ``parameter``.

    A Redis limiter is told apart because it takes only ``str`` and ``bytes`` keys.
    """
    from protocol_in_code.qos.distributed import (
        AsyncRedisKeyedRateLimiter,
        AsyncRedisRateLimiter,
        RedisKeyedRateLimiter,
        RedisRateLimiter,
    )

    if isinstance(limiter, KeyedRateLimiter):
        return True, False, False
    if isinstance(limiter, RateLimiter):
        return False, False, False
    if isinstance(limiter, RedisKeyedRateLimiter):
        return True, False, True
    if isinstance(limiter, RedisRateLimiter):
        return False, False, True
    if isinstance(limiter, AsyncRedisKeyedRateLimiter):
        return True, True, True
    if isinstance(limiter, AsyncRedisRateLimiter):
        return False, True, True
    raise TypeError(
        f"{parameter} must be a RateLimiter, KeyedRateLimiter or one of the Redis limiters, "
        f"not {type(limiter).__name__}"
    )


def _seconds_up(ns: int) -> int:
    return -(-ns // NS_PER_SECOND)


@dataclass(frozen=True)
class Policy:
    """One band of a limiter as a RateLimit policy: a token bucket said in quota and window.

    The draft describes a quota of ``q`` units per window of ``w`` seconds; a band is a bucket
    of ``burst`` tokens refilled at ``rate`` tokens per second. We say:

    * ``q`` = the burst: the most a client can ever spend at once.
    * ``w`` = the seconds an empty bucket takes to fill, ``burst / rate``, rounded up: so
      ``q / w`` never exceeds the rate, and a client that sends ``q`` per ``w`` is never
      refused.
    * ``r`` (remaining) = whole tokens left after this request, a lower bound on what can be
      spent now. With several bands the limiter answers the smallest across them, which every
      band has at least.
    * ``t`` = seconds until the bucket is full again (the draft's "quota resets"), computed
      from ``r`` and rounded up, so it is an upper bound: after ``t`` seconds ``q`` units are
      surely available. On a denial it is at least the ``Retry-After``.
    """

    name: str
    rate: Fraction
    burst: int
    window: int

    @classmethod
    def of(cls, name: str, rate: int | Fraction, burst: int) -> Policy:
        rate = Fraction(rate)
        return cls(name, rate, burst, max(1, _ceil(burst / rate)))

    def reset_seconds(self, remaining: int) -> int:
        """``t`` for ``remaining`` whole tokens: when the bucket is full again, rounded up."""
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
    prefix, by default, percent-encoded where it is not ASCII). ``limiter`` ``None`` exempts
    the route. Paths are matched as the client sent them, decoded from UTF-8, under WSGI as
    under ASGI.
    """

    prefix: str
    limiter: Any
    methods: Iterable[str] | None = None
    cost: CostFunction | None = None
    name: str | None = None


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
    policy_items: tuple[str, ...] = field(init=False)
    policy_text: str = field(init=False)

    def __post_init__(self) -> None:
        self.policy_items = tuple(
            f"{name};q={policy.burst};w={policy.window}"
            for name, policy in zip(self.names, self.policies, strict=True)
        )
        self.policy_text = ", ".join(self.policy_items)

    def matches(self, method: str, path: str) -> bool:
        if self.methods is not None and method not in self.methods:
            return False
        prefix = self.prefix
        return (
            not prefix
            or path == prefix
            or path.startswith(prefix if prefix.endswith("/") else prefix + "/")
        )


def _rule(
    limiter: Any,
    name: str,
    parameter: str,
    allow_async: bool,
    cost: CostFunction | None = None,
    prefix: str = "",
    methods: frozenset[str] | None = None,
) -> Rule:
    keyed, awaited, redis = _limiter_kind(limiter, parameter)
    if awaited and not allow_async:
        raise TypeError(
            f"{parameter}: an asyncio Redis limiter cannot serve WSGI; give it a "
            "synchronous client (redis.Redis)"
        )
    bands = tuple(limiter.bands)
    if len(bands) == 1:
        names: tuple[str, ...] = (name,)
    else:
        names = tuple(f"{name}-{i}" for i in range(1, len(bands) + 1))
    quoted = tuple(_sf_string(n, f"{parameter} name") for n in names)
    policies = tuple(
        Policy.of(n, rate, burst) for n, (rate, burst) in zip(names, bands, strict=True)
    )
    if cost is not None and not callable(cost):
        raise TypeError(f"{parameter} cost must be a function of the request, not {cost!r}")
    return Rule(limiter, keyed, awaited, cost, policies, quoted, prefix, methods, redis)


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
    ) -> None:
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
            rules.append(
                _rule(
                    route.limiter,
                    _route_name(route),
                    f"routes[{i}].limiter",
                    allow_async,
                    route.cost,
                    prefix,
                    methods,
                )
            )
        if limiter is not None:
            rules.append(_rule(limiter, name, "limiter", allow_async))
        elif not rules:
            raise ValueError("limiter: give a limiter, or routes with limiters, or both")
        self.rules = tuple(rules)
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function of the request, not {key!r}")
        if cost is not None and not callable(cost):
            raise TypeError(f"cost must be a function of the request, not {cost!r}")
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
        self.networks = trusted_networks(trusted_proxies)
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
            partition_secret = os.urandom(16)
        elif not isinstance(partition_secret, bytes) or len(partition_secret) < 16:
            raise ValueError("partition_secret must be at least 16 bytes")
        self.secret = partition_secret
        self._partition_keys: dict[bytes, str] = {}

    def rule_for(self, method: str, path: str) -> Rule | None:
        """The first rule for this request; ``None`` if it is exempt or no rule matches."""
        for prefix in self.exempt_prefixes:
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return None
        for rule in self.rules:
            if rule.matches(method, path):
                return rule if rule.limiter is not None else None
        return None

    def partition_key(self, key: Hashable) -> str:
        """``pk``: the key under a keyed hash, as a Byte Sequence: stable, but no address in it."""
        data = key_bytes(key)
        cached = self._partition_keys.get(data)
        if cached is not None:
            return cached
        digest = hmac.new(self.secret, data, hashlib.sha256).digest()[:12]
        pk = ":" + base64.b64encode(digest).decode("ascii") + ":"
        # Recent keys' hashes are remembered, in bounded memory: a flood of new keys only
        # empties the memo, it never grows past PARTITION_KEYS_KEPT.
        if len(self._partition_keys) >= PARTITION_KEYS_KEPT:
            self._partition_keys.clear()
        self._partition_keys[data] = pk
        return pk


def key_bytes(key: Hashable) -> bytes:
    """What a key's ``pk`` is the hash of: its text.

    A ``str`` is its UTF-8 (lone surrogates kept), ``bytes`` are themselves, and any other key
    (``42``, ``("user", 42)``) is its ``repr()``, which for numbers, strings and tuples of them
    is the same in every process, so every worker gives a client the same ``pk``. A key of the
    application's own class needs a ``__repr__`` that says its value for that to hold.
    """
    if isinstance(key, str):
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, bytes):
        return key
    return repr(key).encode("utf-8", "surrogatepass")


def _route_name(route: Route) -> str:
    """The route's policy name: ``name``, or else the prefix, percent-encoded as in a URL when
    it is not ASCII (``/café`` is ``/caf%C3%A9``), since the name is an ASCII String."""
    if route.name is not None:
        return route.name
    if route.prefix.isascii():
        return route.prefix
    return urllib.parse.quote(route.prefix)


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


def answer(
    rules: Rules, rule: Rule, decision: Decision, pk: str | None
) -> tuple[int, list[tuple[str, str]]]:
    """The status (0 to pass the request on) and the header fields for ``decision``.

    ``pk`` is the key's partition key (``None`` for a limiter without keys), made before the
    limiter was asked: nothing here can fail, so a request that spent a token is answered.
    """
    outcome = decision.outcome
    remaining = decision.remaining
    wait_ns = decision.wait_ns
    fields: list[tuple[str, str]] = []
    if outcome is LimitOutcome.ALLOWED:
        status = 0
        if not rules.headers_on_allowed:
            return status, fields
    elif outcome is LimitOutcome.DENIED:
        status = DENIED_STATUS
    elif outcome is LimitOutcome.NEVER:
        status = NEVER_STATUS
    else:
        status = REFUSED_STATUS
    retry = 0
    if wait_ns is not None and status:
        retry = _seconds_up(wait_ns)
        fields.append(("Retry-After", str(retry)))
    if outcome is LimitOutcome.REFUSED:
        # The key has no bucket: the table had no room for it. Its quota is not known, so
        # only the policies are stated.
        fields.append(("RateLimit-Policy", rule.policy_text))
        return status, fields
    pk_parameter = "" if pk is None else ";pk=" + pk
    items = []
    for name, policy in zip(rule.names, rule.policies, strict=True):
        t = max(policy.reset_seconds(remaining), retry)
        items.append(f"{name};r={min(remaining, policy.burst)};t={t}{pk_parameter}")
    if pk_parameter:
        fields.append(
            (
                "RateLimit-Policy",
                ", ".join(f"{item}{pk_parameter}" for item in rule.policy_items),
            )
        )
    else:
        fields.append(("RateLimit-Policy", rule.policy_text))
    fields.append(("RateLimit", ", ".join(items)))
    if rules.legacy_headers:
        first = rule.policies[0]
        fields.append(("X-RateLimit-Limit", str(first.burst)))
        fields.append(("X-RateLimit-Remaining", str(min(remaining, first.burst))))
        fields.append(("X-RateLimit-Reset", str(max(first.reset_seconds(remaining), retry))))
    return status, fields


def refusal_body(status: int) -> bytes:
    return f"{REASONS.get(status, 'Refused')}\n".encode("ascii")


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


def key_of(rules: Rules, rule: Rule, info: RequestInfo) -> Hashable:
    """The key of a keyed limiter: the key function's, or the client's address.

    A key the limiter cannot take raises ``TypeError`` here, naming it, before the limiter is
    asked: the middleware never fails after a token is spent.
    """
    if rules.key is None:
        return info.client if info.client is not None else "unknown"
    key = rules.key(info)
    if rule.redis:
        if not isinstance(key, (str, bytes)):
            raise TypeError(
                f"key= returned {reprlib.repr(key)}, which a Redis limiter cannot take: "
                "its keys are str or bytes"
            )
        return key
    try:
        hash(key)
    except TypeError:
        raise TypeError(
            f"key= returned {reprlib.repr(key)}, which a KeyedRateLimiter cannot take: "
            "its keys are hashable, as dict keys are (str, bytes, int, tuples of them...)"
        ) from None
    return key
