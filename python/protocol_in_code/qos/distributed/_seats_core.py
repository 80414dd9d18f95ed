"""In-flight limits on Redis, without I/O: the options, the keys, a call's arguments, its reply.

The seats of one limit are decided by one Lua script, ``seats.lua`` (beside this file), in one
call per operation. This module says what a call sends and what its reply means; the shells
(``_seats.py`` for a synchronous client, ``_seats_async.py`` for an asyncio one) only send and
wait. The script's own text says how it keeps the seats.

Keys. With ``P`` the prefix and ``T(x)`` the hash tag of ``x`` (``_keys.tag``), a limit named
``name`` keeps its state in ``P{T(name)}:seats:X`` and a keyed limit's key ``k`` in
``P{T(k)}:seats:X:name``, for six suffixes ``X`` (``m l h s w a``: see the script); a waiter's
grant list is ``P{T}:seats:g:ID`` (``...:g:ID:name`` for a keyed limit). They share one hash
tag, so a limit's keys are in one cluster slot, and ``:seats:`` keeps them apart from the rate
limiters' keys, whose tag is followed by ``:`` and 16 hex digits.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

from protocol_in_code.qos.distributed._keys import tag
from protocol_in_code.qos.distributed._options import checked_name

#: The lease time when none is given, in seconds: how long a killed holder's seats stay taken.
DEFAULT_LEASE_TTL = 30.0

#: The suffixes of a limit's keys, in the order the script takes them (see ``seats.lua``).
SUFFIXES = (b"m", b"h", b"s", b"l", b"w", b"a")


class LeaseExpired(RuntimeError):
    """A lease was released or extended after it had lapsed on the server (its ``lease_ttl``
    passed without an extension): its seats may have been given to another holder meanwhile,
    so the work it guarded may have run beside more than ``limit`` others."""


@dataclass(frozen=True)
class SeatOptions:
    """One in-flight limiter's options, checked where it is made."""

    limit: int
    name: bytes
    lease_ttl_ms: int
    heartbeat: bool
    prefix: bytes

    @classmethod
    def read(
        cls, limit: Any, name: Any, lease_ttl: Any, heartbeat: Any, prefix: Any
    ) -> SeatOptions:
        """The options checked; each error names the parameter and the value."""
        check_limit(limit)
        if not isinstance(heartbeat, bool):
            raise TypeError(f"heartbeat must be True or False, not {heartbeat!r}")
        if isinstance(prefix, str):
            prefix = prefix.encode("utf-8", "surrogatepass")
        if not isinstance(prefix, bytes):
            raise TypeError(f"prefix must be str or bytes, not {type(prefix).__name__}")
        if b"{" in prefix:
            raise ValueError(
                f"prefix must not contain '{{': the first '{{' of a Redis key opens its cluster "
                f"hash tag, which is the limit's name (or key), not {prefix!r}"
            )
        return cls(limit, checked_name(name), ttl_ms_of(lease_ttl, "lease_ttl"), heartbeat, prefix)

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between a held lease's automatic extensions: a third of its lease time, so
        two may fail in a row before it lapses."""
        return self.lease_ttl_ms / 3000


def check_limit(limit: Any) -> None:
    """``limit`` is a whole number of seats, at least 1."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, not {type(limit).__name__} ({limit!r})")
    if not 1 <= limit <= 2**50:
        raise ValueError(f"limit must be between 1 and 2**50, not {limit}")


def ttl_ms_of(ttl: Any, parameter: str = "ttl") -> int:
    """A lease time in seconds, checked, as the script's milliseconds."""
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(f"{parameter} must be a number of seconds, not {type(ttl).__name__}")
    if not 0.01 <= ttl <= 31_536_000:
        raise ValueError(
            f"{parameter} must be between 0.01 and 31536000 seconds (a year), not {ttl}"
        )
    return round(ttl * 1000)


def check_n(n: Any) -> None:
    """``n`` is a whole number of seats, at least 1 (the script tells one above the limit)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n must be an int, not {type(n).__name__} ({n!r})")
    if not 1 <= n <= 2**50:
        raise ValueError(f"n must be between 1 and 2**50, not {n}")


def check_timeout(timeout: Any) -> None:
    """``timeout`` is None (wait for ever) or a number of seconds, at least 0."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, not {timeout!r}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be at least 0 seconds, not {timeout}")


def too_many(n: int, limit: int) -> ValueError:
    """The error for asking more seats than the limit could ever give."""
    return ValueError(f"n must be at most the limit ({limit}), not {n}: it could never be seated")


@dataclass(frozen=True)
class Limit:
    """Where one limit lives: its six keys, and what comes before and after a waiter's id in
    its grant list's key."""

    keys: tuple[bytes, ...]
    grant_before: bytes
    grant_after: bytes

    @classmethod
    def of(cls, options: SeatOptions, key: Any = None) -> Limit:
        """A one-key limit (``key`` None), or a keyed limit's ``key`` (``str`` or ``bytes``)."""
        if key is None:
            head, tail = b"%s{%s}:seats:" % (options.prefix, tag(options.name)), b""
        else:
            if isinstance(key, str):
                key = key.encode("utf-8", "surrogatepass")
            elif not isinstance(key, bytes):
                raise TypeError(f"key must be str or bytes, not {type(key).__name__} ({key!r})")
            head, tail = b"%s{%s}:seats:" % (options.prefix, tag(key)), b":" + options.name
        return cls(tuple(head + x + tail for x in SUFFIXES), head + b"g:", tail)

    def grant_key(self, lease_id: bytes) -> bytes:
        """The list where a waiter finds its grant."""
        return self.grant_before + lease_id + self.grant_after


def new_id() -> bytes:
    """A new lease (and waiter) id: 16 random hex digits, drawn by the caller, so a call sent
    twice by the client finds its own lease instead of taking a second."""
    return os.urandom(8).hex().encode()


@dataclass(frozen=True)
class Ask:
    """The arguments of one script call (after the keys)."""

    op: bytes
    lease_id: bytes = b""
    n: int = 1
    ttl_ms: int = 0
    join: bool = False
    set_limit: bool = False

    def args(self, limit: Limit, asked_limit: int, keyed: bool) -> list[bytes | int]:
        """The script's ARGV for this call on ``limit``: a keyed limit writes its limit on
        every call, and is forgotten when nobody holds or waits."""
        return [
            self.op,
            self.lease_id,
            self.n,
            asked_limit,
            int(self.set_limit or keyed),
            int(keyed),
            self.ttl_ms,
            int(self.join),
            limit.grant_before,
            limit.grant_after,
        ]


@dataclass(frozen=True)
class Reply:
    """What the script answered: ``status`` (1 seated or done, 0 not, -1 too many asked),
    ``value`` (the token when seated, the milliseconds until a lapse to re-ask at when in line,
    -1 for none), and the limit's ``held`` seats and ``limit`` after the call."""

    status: int
    value: int
    held: int
    limit: int

    @classmethod
    def read(cls, raw: Any) -> Reply:
        status, value, held, limit = (int(x) for x in raw)
        return cls(status, value, held, limit)


def grant_token(raw: bytes) -> int | None:
    """The token a waiter found in its grant list, or None if it was refused (the limit was
    made smaller than what it asked)."""
    return None if raw == b"refused" else int(raw)


#: Seats' script, sent by its SHA1 (``EVALSHA``), and as source after a ``NOSCRIPT``.
SOURCE = resources.files(__package__).joinpath("seats.lua").read_text(encoding="utf-8")
SHA = hashlib.sha1(SOURCE.encode()).hexdigest()


def ask_again_in(seconds_left: float | None, wake_ms: int, ttl_ms: int) -> float:
    """How long a waiter waits for its grant before it asks the script again: no longer than
    its own timeout (``seconds_left``), than the next lapse nobody announces (``wake_ms``, -1
    for none: a holder's lease running out, another waiter's place), or than half its own
    lease time (its place in line lapses at the whole, so that a waiter that died leaves it)."""
    wait = ttl_ms / 2000
    if wake_ms >= 0:
        wait = min(wait, wake_ms / 1000)
    if seconds_left is not None:
        wait = min(wait, seconds_left)
    return max(wait, 0.0)


def blocking_read(seconds: float, socket_timeout: float | None) -> float:
    """The timeout of one ``BLPOP`` within a wait of ``seconds``: under the client's socket
    timeout (a read longer than it would be taken for a dead server), and at least a
    millisecond (``BLPOP`` with 0 waits for ever)."""
    if socket_timeout is not None:
        seconds = min(seconds, socket_timeout * 0.8)
    return max(seconds, 0.001)
