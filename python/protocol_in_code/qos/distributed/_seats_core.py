"""In-flight limits on Redis, without I/O: the options, the keys, a call's arguments, its reply.

The seats of one limit are decided by one Lua script, ``seats.lua`` (beside this file), in one
call per operation. This module says what a call sends and what its reply means; the shells
(``_seats.py`` for a synchronous client, ``_seats_async.py`` for an asyncio one) only send and
wait. What a limiter and a lease keep between calls (:class:`SeatsState`, :class:`LeaseState`)
and the course of one acquire (:class:`Turn`) are here too, so both shells decide alike. The
script's own text says how it keeps the seats.

Keys. With ``P`` the prefix and ``T(x)`` the hash tag of ``x`` (``_keys.tag``), a limit named
``name`` keeps its state in ``P{T(name)}:seats:X`` and a keyed limit's key ``k`` in
``P{T(k)}:seats:X:name``, for six suffixes ``X`` (``m l h s w a``: see the script); a waiter's
grant list is ``P{T}:seats:g:ID`` (``...:g:ID:name`` for a keyed limit), and a lease released
is remembered a minute as ``P{T}:seats:r:ID`` (``...:r:ID:name``), so that a release the client
sends twice is told the second time that it was released, not that it lapsed. They share one
hash tag, so a limit's keys are in one cluster slot, and ``:seats:`` keeps them apart from the
rate limiters' keys, whose tag is followed by ``:`` and 16 hex digits.
"""

from __future__ import annotations

import hashlib
import os
import time
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from protocol_in_code.qos.distributed import _plugin
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
    """Where one limit lives: its six keys, and what comes before and after a caller's id in
    the keys named after it (before: then ``g:`` for its grant list, ``r:`` for its release)."""

    keys: tuple[bytes, ...]
    id_before: bytes
    id_after: bytes

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
        return cls(tuple(head + x + tail for x in SUFFIXES), head, tail)

    def grant_key(self, lease_id: bytes) -> bytes:
        """The list where a waiter finds its grant."""
        return self.id_before + b"g:" + lease_id + self.id_after

    def released_key(self, lease_id: bytes) -> bytes:
        """The key where the script remembers, a minute, that a lease was released."""
        return self.id_before + b"r:" + lease_id + self.id_after


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
            limit.id_before,
            limit.id_after,
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


class Turn:
    """One acquire's course, decided without I/O: the shells send :attr:`ask`, read the grant
    list until :meth:`read_until`, and ask again until seated, refused or :meth:`timed_out`."""

    def __init__(
        self, n: int, timeout: float | None, ttl_ms: int, lease_id: bytes | None = None
    ) -> None:
        self.n = n
        self.lease_id = lease_id or new_id()
        self.ttl_ms = ttl_ms
        #: Whether the caller stands in line when not seated at once (a timeout of 0 does not).
        self.join = timeout is None or timeout > 0
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.ask = Ask(b"acquire", self.lease_id, n, ttl_ms, self.join)

    def first(self, reply: Reply) -> int | None:
        """The token if the first ask seated, else None; raises if ``n`` could never be."""
        if reply.status == -1:
            raise too_many(self.n, reply.limit)
        return self.seated(reply)

    @staticmethod
    def seated(reply: Reply) -> int | None:
        """The token if ``reply`` seated the caller, else None."""
        return reply.value if reply.status == 1 else None

    def granted(self, got: bytes, limit: int) -> int:
        """The token found in the grant list; raises if it says the caller was refused (the
        limit, now ``limit``, was made smaller than what it asked)."""
        token = grant_token(got)
        if token is None:
            raise too_many(self.n, limit)
        return token

    def read_until(self, reply: Reply) -> float:
        """When (``time.monotonic``) to stop reading the grant list and ask again, after
        ``reply`` put the caller in line."""
        left = None if self.deadline is None else self.deadline - time.monotonic()
        return time.monotonic() + ask_again_in(left, reply.value, self.ttl_ms)

    def timed_out(self) -> bool:
        """Whether the caller's timeout has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline


class _Owner(Protocol):
    options: SeatOptions


class LeaseState:
    """What a lease keeps, and what its calls mean; the shells' leases send the calls.

    ``token`` is the fencing token, strictly increasing per limit. Releasing twice is harmless;
    releasing or extending a lease that had lapsed raises :class:`LeaseExpired`.

    A lease belongs to the process that took it (``_pid``). A child made by ``os.fork()`` gets
    a copy of it, but not its holder: the parent goes on working under it, and its heartbeat
    (a thread or a task of the parent) is not in the child. So in the child the copy gives
    nothing back: releasing it (also by leaving a ``with`` block) only marks the copy released,
    as a shared lease inherited across a fork does, and extending it is refused. Were the
    child's release sent, a child ending inside its parent's ``with`` block would give the
    seats back while the parent still works under them."""

    __slots__ = ("__weakref__", "_limit", "_owner", "_pid", "lease_id", "n", "released", "token")

    def __init__(self, owner: _Owner, limit: Limit, lease_id: bytes, n: int, token: int) -> None:
        self._owner = owner
        self._limit = limit
        self._pid = os.getpid()
        self.lease_id = lease_id
        self.n = n
        self.token = token
        self.released = False

    def _inherited(self) -> bool:
        """Whether this is a copy of a lease that a parent process took before ``os.fork()``."""
        return self._pid != os.getpid()

    def _releasing(self) -> Ask | None:
        """The release to send, or None if it was sent already or is not this process's to
        send (see the class); the heartbeat stops."""
        if self.released:
            return None
        self.released = True
        if self._inherited():
            return None  # the parent's seats, and the parent's heartbeat: neither is here
        self._stop_beating()
        return Ask(b"release", self.lease_id)

    def _extending(self, ttl: float | None) -> Ask:
        """The extension to send for ``ttl`` seconds (the limiter's ``lease_ttl`` if None)."""
        if self._inherited():
            raise RuntimeError(
                f"lease {self.token} was taken by process {self._pid} before os.fork(): it is "
                "that process's to extend or release, not this child's (a lease taken in the "
                "child is the child's own)"
            )
        if self.released:
            raise ValueError(f"lease {self.token} was released: there is nothing to extend")
        ttl_ms = self._owner.options.lease_ttl_ms if ttl is None else ttl_ms_of(ttl)
        return Ask(b"extend", self.lease_id, ttl_ms=ttl_ms)

    def _answered(self, reply: Reply, done: str) -> None:
        """Raises :class:`LeaseExpired` if ``reply`` says the lease had lapsed before it was
        ``done`` (released, extended)."""
        if reply.status == 0:
            raise LeaseExpired(f"lease {self.token} had lapsed before it was {done}")

    @staticmethod
    def _raises_on_exit(exc_info: tuple[object, ...]) -> bool:
        """Whether a :class:`LeaseExpired` met when a ``with`` block ends is raised: not when
        the block raised its own error, which is the one to see."""
        return not exc_info or exc_info[0] is None

    def _stop_beating(self) -> None:
        """Stop the heartbeat, if the shell's lease has one."""

    def __del__(self) -> None:
        # A lease dropped unreleased is left to lapse on the server; no call is made here,
        # as a finalizer may run anywhere (inside the client's own locks). A copy in a forked
        # child has no heartbeat of its own to stop.
        if not self._inherited():
            self._stop_beating()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, token={self.token}, released={self.released})"


_L = TypeVar("_L", bound=LeaseState)


class SeatsState(Generic[_L]):
    """What every in-flight limiter keeps, in either shell: its checked options, its client's
    script (:attr:`script_kind`, the shell's), the limit as last known, the leases it gave,
    and the leases its ``with`` blocks hold. A one-key limiter's keys are :attr:`_where`."""

    #: A keyed limit's state (its limit, its last token) is forgotten when nobody holds or
    #: waits, and every call writes the limiter's own limit (see the keyed limiters).
    keyed = False

    #: How the shell sends the script: made with the client and the limiter's class name.
    script_kind: ClassVar[Any]

    def __init__(
        self,
        client: Any,
        limit: int,
        *,
        name: str,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        heartbeat: bool = False,
        prefix: str | bytes = "qos:",
    ) -> None:
        self.options = SeatOptions.read(limit, name, lease_ttl, heartbeat, prefix)
        self.script = self.script_kind(client, type(self).__name__)
        self._limit = limit
        self._mine: weakref.WeakSet[_L] = weakref.WeakSet()
        self._held: ContextVar[tuple[_L, ...]] = ContextVar("held", default=())
        if not self.keyed:
            self._where = Limit.of(self.options)

    @property
    def limit(self) -> int:
        """The limit, as the server last told it to this limiter."""
        return self._limit

    def _noted(self, reply: Reply) -> Reply:
        """``reply``, its limit kept as the one-key limit's (a keyed limiter keeps its own)."""
        if not self.keyed:
            self._limit = reply.limit
        return reply

    def _kept(self, lease: _L) -> _L:
        """``lease``, counted among this limiter's own."""
        self._mine.add(lease)
        return lease

    def _resized(self, limit: int) -> None:
        check_limit(limit)
        self._limit = limit

    def _held_push(self, lease: _L) -> None:
        self._held.set((*self._held.get(), lease))

    def _held_pop(self) -> _L:
        held = self._held.get()
        self._held.set(held[:-1])
        return held[-1]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(limit={self._limit}, name={self.options.name!r})"


class KeyedSeats(SeatsState[_L]):
    """What a keyed in-flight limiter answers without the server, in either shell."""

    keyed = True

    def key_refusal(self, key: object) -> str | None:
        """Declared to the layers that take any limiter (see ``_plugin.py``): a key is
        ``str`` or ``bytes``, so the web forms refuse another before anything is taken."""
        return _plugin.key_refusal(key)

    @property
    def in_flight(self) -> int:
        """Seats held now through this limiter object, over every key (in a forked child, the
        child's own leases: its parent's are not the child's)."""
        return sum(
            lease.n for lease in list(self._mine) if not (lease.released or lease._inherited())
        )

    def resize(self, limit: int) -> None:
        """A new limit for this limiter's calls from now, evicting nobody."""
        self._resized(limit)
