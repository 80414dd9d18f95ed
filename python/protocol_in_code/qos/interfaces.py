"""The four limiter interfaces, declared once.

Every limiter in this package is one of four kinds, by two questions: does it hold one limit or
one per key, and are its calls answered at once or awaited?

============================  ===================================================
:class:`Limiter`              ``RateLimiter``, ``RedisRateLimiter``
:class:`KeyedLimiter`         ``KeyedRateLimiter``, ``RedisKeyedRateLimiter``
:class:`AsyncLimiter`         ``AsyncRedisRateLimiter``
:class:`AsyncKeyedLimiter`    ``AsyncRedisKeyedRateLimiter``
============================  ===================================================

Code that takes "any limiter" (the web middleware, a service's own helpers) is written against
these, so a limiter kept in another store fits it unchanged. The test suite has mypy check every
limiter of the package against its interface.

The in-process and synchronous Redis limiters also wait in asyncio (``acquire_async``); the
asyncio Redis limiters await everything, so their ``acquire`` is a coroutine. A keyed limiter
decides a whole batch of keys at once (``try_acquire_many``). At run time :func:`kind_of` tells
the four apart by ``check``: its first parameter, and whether it is a coroutine function.

The in-flight limiters (how many at once, :mod:`protocol_in_code.qos.concurrency`) have the same
four kinds: :class:`InFlightLimiter`, :class:`KeyedInFlightLimiter` and their asyncio forms. They
hand out leases: a :class:`SeatLease`, or an :class:`AsyncLease` where giving seats back is
awaited.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from protocol_in_code._native import Band, Decision

__all__ = [
    "AsyncInFlightLimiter",
    "AsyncKeyedInFlightLimiter",
    "AsyncKeyedLimiter",
    "AsyncLease",
    "AsyncLimiter",
    "InFlightLimiter",
    "KeyedInFlightLimiter",
    "KeyedLimiter",
    "Limiter",
    "SeatLease",
    "holds_seats",
    "in_flight_kind_of",
    "kind_of",
]

#: A keyed limiter's key type: any hashable value in-process, ``str`` or ``bytes`` on Redis.
KeyT_contra = TypeVar("KeyT_contra", contravariant=True)


@runtime_checkable
class Limiter(Protocol):
    """One limit, answered at once."""

    @property
    def bands(self) -> tuple[Band, ...]: ...
    def try_acquire(self, n: int = 1, now_ns: int | None = None) -> bool: ...
    def check(self, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def peek(self, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def refund(self, n: int = 1, now_ns: int | None = None) -> None: ...
    def settle(self, reserved: int, actual: int, now_ns: int | None = None) -> None: ...
    def available(self, now_ns: int | None = None) -> int: ...
    def acquire(self, n: int = 1, timeout: float | None = None) -> bool: ...
    def acquire_async(self, n: int = 1, timeout: float | None = None) -> Awaitable[bool]: ...


@runtime_checkable
class KeyedLimiter(Protocol[KeyT_contra]):
    """One limit per key, answered at once."""

    @property
    def bands(self) -> tuple[Band, ...]: ...
    def try_acquire(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> bool: ...
    def check(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def peek(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> Decision: ...
    def refund(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> None: ...
    def settle(
        self, key: KeyT_contra, reserved: int, actual: int, now_ns: int | None = None
    ) -> None: ...
    def available(self, key: KeyT_contra, now_ns: int | None = None) -> int: ...
    def acquire(self, key: KeyT_contra, n: int = 1, timeout: float | None = None) -> bool: ...
    def acquire_async(
        self, key: KeyT_contra, n: int = 1, timeout: float | None = None
    ) -> Awaitable[bool]: ...
    def try_acquire_many(self, keys: Sequence[Any], *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class AsyncLimiter(Protocol):
    """One limit, every call awaited."""

    @property
    def bands(self) -> tuple[Band, ...]: ...
    async def try_acquire(self, n: int = 1, now_ns: int | None = None) -> bool: ...
    async def check(self, n: int = 1, now_ns: int | None = None) -> Decision: ...
    async def peek(self, n: int = 1, now_ns: int | None = None) -> Decision: ...
    async def refund(self, n: int = 1, now_ns: int | None = None) -> None: ...
    async def settle(self, reserved: int, actual: int, now_ns: int | None = None) -> None: ...
    async def available(self, now_ns: int | None = None) -> int: ...
    async def acquire(self, n: int = 1, timeout: float | None = None) -> bool: ...


@runtime_checkable
class AsyncKeyedLimiter(Protocol[KeyT_contra]):
    """One limit per key, every call awaited."""

    @property
    def bands(self) -> tuple[Band, ...]: ...
    async def try_acquire(
        self, key: KeyT_contra, n: int = 1, now_ns: int | None = None
    ) -> bool: ...
    async def check(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> Decision: ...
    async def peek(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> Decision: ...
    async def refund(self, key: KeyT_contra, n: int = 1, now_ns: int | None = None) -> None: ...
    async def settle(
        self, key: KeyT_contra, reserved: int, actual: int, now_ns: int | None = None
    ) -> None: ...
    async def available(self, key: KeyT_contra, now_ns: int | None = None) -> int: ...
    async def acquire(self, key: KeyT_contra, n: int = 1, timeout: float | None = None) -> bool: ...
    async def try_acquire_many(self, keys: Sequence[Any], *args: Any, **kwargs: Any) -> Any: ...


# How many at once: the in-flight limiters (protocol_in_code.qos.concurrency and its stores).
# Their four kinds follow the rate limiters' two questions; what they hand out is a lease, given
# back when the work is done (synchronously, or awaited where giving back is a network call).


@runtime_checkable
class SeatLease(Protocol):
    """Seats held until :meth:`release` (releasing twice is harmless); a context manager."""

    @property
    def n(self) -> int: ...
    @property
    def token(self) -> int: ...
    def release(self) -> None: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *exc_info: object) -> Any: ...


@runtime_checkable
class AsyncLease(Protocol):
    """Seats held until :meth:`release` is awaited; an asynchronous context manager."""

    @property
    def n(self) -> int: ...
    @property
    def token(self) -> int: ...
    async def release(self) -> None: ...
    async def __aenter__(self) -> Any: ...
    async def __aexit__(self, *exc_info: object) -> Any: ...


@runtime_checkable
class InFlightLimiter(Protocol):
    """At most ``limit`` seats held at once."""

    @property
    def limit(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    def try_acquire(self, n: int = 1) -> SeatLease | None: ...
    def acquire(self, n: int = 1, timeout: float | None = None) -> SeatLease | None: ...
    def acquire_async(
        self, n: int = 1, timeout: float | None = None
    ) -> Awaitable[SeatLease | None]: ...


@runtime_checkable
class KeyedInFlightLimiter(Protocol[KeyT_contra]):
    """At most ``limit`` seats held at once per key."""

    @property
    def limit(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    def try_acquire(self, key: KeyT_contra, n: int = 1) -> SeatLease | None: ...
    def acquire(
        self, key: KeyT_contra, n: int = 1, timeout: float | None = None
    ) -> SeatLease | None: ...
    def acquire_async(
        self, key: KeyT_contra, n: int = 1, timeout: float | None = None
    ) -> Awaitable[SeatLease | None]: ...


@runtime_checkable
class AsyncInFlightLimiter(Protocol):
    """At most ``limit`` seats held at once, every call awaited."""

    @property
    def limit(self) -> int: ...
    async def try_acquire(self, n: int = 1) -> AsyncLease | None: ...
    async def acquire(self, n: int = 1, timeout: float | None = None) -> AsyncLease | None: ...


@runtime_checkable
class AsyncKeyedInFlightLimiter(Protocol[KeyT_contra]):
    """At most ``limit`` seats held at once per key, every call awaited."""

    @property
    def limit(self) -> int: ...
    async def try_acquire(self, key: KeyT_contra, n: int = 1) -> AsyncLease | None: ...
    async def acquire(
        self, key: KeyT_contra, n: int = 1, timeout: float | None = None
    ) -> AsyncLease | None: ...


def kind_of(limiter: object) -> tuple[bool, bool]:
    """``(keyed, awaited)`` for an object of one of the four interfaces; ``TypeError`` for any
    other.

    At run time a protocol is checked by its methods' names only, and the four share theirs:
    a keyed limiter is the one whose ``check`` takes ``key`` first (``n`` first is one limit;
    anything else is refused), and an awaited one is the one whose ``check`` is a coroutine
    function.
    """
    # The names every kind has, looked up without running them: a keyed limiter with plans has
    # a ``bands`` that raises AttributeError (read its ``plans``), and is still keyed.
    missing = [name for name in _NAMES if not _has(limiter, name)]
    if missing:
        raise TypeError(f"{type(limiter).__name__} has no {', '.join(missing)}")
    check = limiter.check  # type: ignore[attr-defined]  # every kind has it, found above
    try:
        parameters = list(inspect.signature(check).parameters)
    except (TypeError, ValueError):  # no signature to read: the batch method tells
        keyed = _has(limiter, "try_acquire_many")
    else:
        first = parameters[0] if parameters else None
        if first not in ("n", "key"):
            raise TypeError(
                f"{type(limiter).__name__}.check must take n first (one limit) or key first "
                f"(one limit per key), as the interfaces declare, not {first}"
            )
        keyed = first == "key"
    awaited = inspect.iscoroutinefunction(check)
    return keyed, awaited


def holds_seats(limiter: object) -> bool:
    """Whether ``limiter`` is an in-flight limiter (of any of its four kinds): it hands out seats
    (``try_acquire`` and a ``limit``) and decides no rate (it has no ``check``, which every rate
    limiter has). Looked up without running a property's code."""
    return _has(limiter, "try_acquire") and _has(limiter, "limit") and not _has(limiter, "check")


def in_flight_kind_of(limiter: object) -> tuple[bool, bool]:
    """``(keyed, awaited)`` for an in-flight limiter; ``TypeError`` for any other object.

    An in-flight limiter hands out leases: it has ``limit``, ``try_acquire`` and ``acquire``,
    and no ``check`` (which would make it a rate limiter). As for the rate limiters, the first
    parameter of ``try_acquire`` tells keyed (``key``) from one limit (``n``), and a coroutine
    function tells an asyncio limiter.
    """
    if _has(limiter, "check"):
        raise TypeError("it is a rate limiter (it has check); give it as the limiter")
    missing = [n for n in ("limit", "try_acquire", "acquire") if not _has(limiter, n)]
    if missing:
        raise TypeError(f"{type(limiter).__name__} has no {', '.join(missing)}")
    try_acquire = limiter.try_acquire  # type: ignore[attr-defined]  # found above
    try:
        parameters = list(inspect.signature(try_acquire).parameters)
    except (TypeError, ValueError):
        raise TypeError(f"{type(limiter).__name__}.try_acquire has no signature") from None
    first = parameters[0] if parameters else None
    if first not in ("n", "key"):
        raise TypeError(
            f"{type(limiter).__name__}.try_acquire must take n first (one limit) or key first "
            f"(one limit per key), not {first}"
        )
    return first == "key", inspect.iscoroutinefunction(try_acquire)


def _has(limiter: object, name: str) -> bool:
    """Whether ``limiter`` has the attribute ``name``, without running a property's code."""
    try:
        inspect.getattr_static(limiter, name)
    except AttributeError:
        return False
    return True


#: The names every kind of limiter has.
_NAMES = ("bands", "try_acquire", "check", "peek", "refund", "available", "acquire")
