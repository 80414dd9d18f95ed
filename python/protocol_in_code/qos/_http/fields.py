"""What status, what fields: a limiter's decision said in HTTP.

ALLOWED passes the request on. DENIED is ``429 Too Many Requests`` with ``Retry-After``: the
exact wait rounded *up* to whole seconds, so a client that waits that long is never refused for
being early. NEVER (the cost exceeds a band's burst: no wait will ever do) is ``429``
*without* ``Retry-After``, since there is no time to give. REFUSED (a keyed table is full of
clients still being limited) is ``503 Service Unavailable`` with ``Retry-After``: the server,
not this client, is out of room. Under ``enforce=False`` nothing is refused.

The RateLimit fields are those of draft-ietf-httpapi-ratelimit-headers (as its revision 11
defines them), one policy per band; see :class:`Policy` for what ``q``, ``w``, ``r`` and ``t``
mean for a token bucket, and :class:`PartitionKeys` for ``pk``. With ``problem_json`` a
refusal's body is a problem document (RFC 9457) of one of the draft's problem types.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, TypeAlias

from protocol_in_code._native import Decision, LimitOutcome, _host_secret
from protocol_in_code.qos._http.options import Options
from protocol_in_code.qos._http.told import NS_PER_SECOND

#: The status of each refusal, and whether it carries ``Retry-After``.
DENIED_STATUS = 429
NEVER_STATUS = 429
REFUSED_STATUS = 503
REASONS = {
    413: "Content Too Large",
    429: "Too Many Requests",
    503: "Service Unavailable",
}
_log = logging.getLogger("protocol_in_code.qos")

#: A request decided, as a shell or a view answers it: ``(status, fields, content_type,
#: body)``. ``status`` 0 lets the request go on, and its response carries ``fields``; any other
#: status is the refusal to send instead, with ``fields`` (``Retry-After`` and the RateLimit
#: fields), ``content_type`` and ``body`` (see :func:`refusal`). A plain tuple, as a named one
#: costs ten times more to make, and one is made for every request.
Verdict: TypeAlias = tuple[int, Sequence[tuple[str, str]], str, bytes]


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


def sf_string(name: str, parameter: str) -> str:
    if not name or any(not (0x20 <= ord(c) <= 0x7E) for c in name):
        raise ValueError(
            f"{parameter} must be printable ASCII (a Structured Field String), not {name!r}"
        )
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Limit(Protocol):
    """What the fields are made of, of one limit (a :class:`~.rules.Rule`): its policies,
    their names as Structured Field Strings and their text, made once; and how to ask each
    band's level after a decision, where the limiter can say it."""

    @property
    def keyed(self) -> bool: ...
    @property
    def policies(self) -> tuple[Policy, ...]: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def policy_items(self) -> tuple[str, ...]: ...
    @property
    def policy_text(self) -> str: ...
    @property
    def levels(self) -> Callable[..., list[tuple[int, int]]] | None: ...


def _levels(rule: Limit, key: Hashable | None) -> list[tuple[int, int]] | None:
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
    options: Options,
    rule: Limit,
    decision: Decision,
    n: int,
    key: Hashable | None,
    pk: str | None,
    levels: list[tuple[int, int]] | None = None,
) -> Verdict:
    """The answer to a request of ``n`` tokens that ``rule``'s limiter decided: the status (0
    to pass the request on), the header fields, and a refusal's content type and body (see
    :func:`refusal`).

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
    status = _status(options, decision)
    if not status and decision.outcome is LimitOutcome.ALLOWED and not options.headers_on_allowed:
        return 0, (), "", b""
    fields, retry = _retry_after(decision, status)
    policy, items, legacy = _described(options, rule, decision, pk, key, retry, levels)
    fields.append(("RateLimit-Policy", policy))
    if items is not None:
        fields.append(("RateLimit", items))
        if options.legacy_headers:
            fields.extend(legacy)
    if not status:
        return 0, fields, "", b""
    content_type, body = refusal(options, rule, decision, status, n, key, levels)
    return status, fields, content_type, body


def _status(options: Options, decision: Decision) -> int:
    """The status of ``decision``: 0 (pass the request on) when allowed or not enforced."""
    outcome = decision.outcome
    if outcome is LimitOutcome.ALLOWED or not options.enforce:
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
    options: Options,
    rule: Limit,
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
    if options.legacy_headers:
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
    rule: Limit,
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
    options: Options,
    rule: Limit,
    decision: Decision,
    status: int,
    n: int = 1,
    key: Hashable | None = None,
    levels: list[tuple[int, int]] | None = None,
) -> tuple[str, bytes]:
    """The content type and body of a refusal: a line of text, or with ``problem_json`` a
    problem document of the draft's type for it (``quota-exceeded`` on a 429,
    ``temporary-reduced-capacity`` on a 503) naming the ``violated-policies``."""
    if not options.problem_json:
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


def answer_together(
    options: Options,
    decision: Decision,
    asked: Iterable[tuple[Limit, int, Hashable | None, str | None]],
    parts: Iterable[Decision],
) -> Verdict:
    """The answer to a request decided under several limits together: ``decision``, and for
    each limit what it was ``asked`` (its rule, the tokens, the key and its ``pk``) and its own
    decision, in ``parts``. The request's status and ``Retry-After``, every limit's policies
    and ``RateLimit`` items, and the content type and body of a refusal, which (with
    ``problem_json``) names every violated policy of every limit that refused."""
    status = _status(options, decision)
    if not status and decision.outcome is LimitOutcome.ALLOWED and not options.headers_on_allowed:
        return 0, (), "", b""
    fields, retry = _retry_after(decision, status)
    policies, items, violated = [], [], []
    legacy: list[tuple[str, str]] = []
    legacy_refused = False
    for (rule, n, key, pk), part in zip(asked, parts, strict=True):
        policy, ratelimit, its_legacy = _described(options, rule, part, pk, key, retry)
        policies.append(policy)
        if ratelimit is not None:
            items.append(ratelimit)
        refused = part.outcome is not LimitOutcome.ALLOWED
        if refused:
            violated.extend(violated_policies(rule, part, n, key))
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
        return 0, fields, "", b""
    if options.problem_json:
        return status, fields, *_problem(status, violated)
    return status, fields, TEXT_PLAIN, refusal_body(status)


# ---------------------------------------------------------------------------------------------
# pk: the key's partition key
# ---------------------------------------------------------------------------------------------

#: The memo of partition keys holds at most this many keys, of at most this many bytes each:
#: at most a few MB, however long the keys a key function returns (a 60 KB API key...).
PARTITION_KEYS_KEPT = 10_000
PARTITION_KEY_BYTES_KEPT = 256


class PartitionKeys:
    """``pk``: a key under a keyed hash (HMAC-SHA256 with ``secret``), as a Byte Sequence:
    stable, but no address in it."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self._kept: dict[bytes, str] = {}

    def of(self, key: Hashable) -> str:
        """``key``'s ``pk``.

        Recent keys' ``pk`` are remembered, in memory bounded in keys and in bytes: a flood of
        new keys only empties the memo, and a key longer than ``PARTITION_KEY_BYTES_KEPT`` is
        never kept. Its ``pk`` is made anew each time, which costs what the digest of it that a
        memo would need costs, and what the limiter spends reading the key anyway.
        """
        data = key_bytes(key)
        if len(data) > PARTITION_KEY_BYTES_KEPT:
            return self._keyed_hash(data)
        pk = self._kept.get(data)
        if pk is None:
            pk = self._keyed_hash(data)
            if len(self._kept) >= PARTITION_KEYS_KEPT:
                self._kept.clear()
            self._kept[data] = pk
        return pk

    def _keyed_hash(self, data: bytes) -> str:
        """``data`` under HMAC-SHA256 with the secret, 12 bytes, as a Byte Sequence."""
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


def host_secret(folder: os.PathLike[str] | None = None) -> bytes:
    """The secret ``pk`` is keyed with unless ``partition_secret`` is given: one that every
    process of this user on this host reads alike (a file in the shared tables' folder, made
    once), so that every worker, and every restart until the host reboots, gives a client the
    same ``pk`` (the file is in ``folder`` where the store is a folder). Where that folder
    cannot be used, a random one of this process's, said once in the log."""
    try:
        return _host_secret(folder)
    except OSError as error:
        _log.warning(
            "the host's partition secret cannot be read (%s): pk is keyed with a secret of "
            "this process's own, so each worker gives a client another pk; give every worker "
            "the same partition_secret",
            error,
        )
        return os.urandom(16)
