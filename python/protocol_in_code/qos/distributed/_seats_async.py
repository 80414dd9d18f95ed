"""In-flight limits across hosts, on an asyncio Redis client: every call awaited.

The same script calls as ``_seats.py``, in the same order; only the waiting differs: a waiter's
``BLPOP`` is awaited, and a task cancelled while it waits (or while it is being seated) leaves
the line in a give-back the cancel cannot stop (``_give_backs.run_to_the_end``), so it holds
nothing after and passes its turn on. A waiting task holds one of the client's connections.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from protocol_in_code.qos._give_backs import in_background, run_to_the_end
from protocol_in_code.qos.distributed._client import LimiterUnavailable
from protocol_in_code.qos.distributed._seats import SeatScript
from protocol_in_code.qos.distributed._seats_core import (
    DEFAULT_LEASE_TTL,
    SHA,
    SOURCE,
    Ask,
    LeaseExpired,
    Limit,
    Reply,
    SeatOptions,
    ask_again_in,
    blocking_read,
    check_limit,
    check_n,
    check_timeout,
    grant_token,
    new_id,
    too_many,
    ttl_ms_of,
)

_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])


class AsyncSeatScript(SeatScript):
    """:class:`SeatScript` on an asyncio client."""

    awaited = True

    async def call_async(self, limit: Limit, ask: Ask, asked_limit: int, keyed: bool) -> Reply:
        """The script's reply to ``ask`` on ``limit``."""
        args = ask.args(limit, asked_limit, keyed)
        try:
            try:
                raw = await self.client.evalsha(SHA, len(limit.keys), *limit.keys, *args)
            except self.errors.no_script:
                raw = await self.client.eval(SOURCE, len(limit.keys), *limit.keys, *args)
        except self.errors.unavailable as error:
            raise self.unavailable(error) from error
        return Reply.read(raw)

    async def read_grant_async(self, key: bytes, seconds: float) -> bytes | None:
        """What arrives in the grant list ``key`` within ``seconds``, or None."""
        timeout = blocking_read(seconds, self.socket_timeout)
        try:
            got = await self.client.blpop([key], timeout=timeout)
        except self.errors.unavailable as error:
            raise self.unavailable(error) from error
        return None if got is None else bytes(got[1])


class AsyncRedisLease:
    """:class:`~protocol_in_code.qos.distributed.RedisLease` whose calls are awaited; an
    asynchronous context manager. With ``heartbeat=True`` a task extends it until released."""

    __slots__ = ("__weakref__", "_beat", "_limit", "_owner", "lease_id", "n", "released", "token")

    def __init__(
        self, owner: _AsyncSeats, limit: Limit, lease_id: bytes, n: int, token: int
    ) -> None:
        self._owner = owner
        self._limit = limit
        self.lease_id = lease_id
        self.n = n
        self.token = token
        self.released = False
        self._beat: asyncio.Task[None] | None = None
        if owner.options.heartbeat:
            self._beat = asyncio.ensure_future(owner.beat(limit, lease_id))

    async def release(self) -> None:
        """Give the seats back (once; a second call does nothing). Raises
        :class:`LeaseExpired` if they had lapsed first. A cancel does not stop it half way."""
        if self.released:
            return
        self.released = True
        self._stop_beating()
        reply = await _to_the_end(self._owner.call(self._limit, Ask(b"release", self.lease_id)))
        if reply.status == 0:
            raise LeaseExpired(f"lease {self.token} had lapsed before it was released")

    async def extend(self, ttl: float | None = None) -> None:
        """Hold the seats ``ttl`` seconds more from now (the limiter's ``lease_ttl`` if None)."""
        if self.released:
            raise ValueError(f"lease {self.token} was released: there is nothing to extend")
        ttl_ms = self._owner.options.lease_ttl_ms if ttl is None else ttl_ms_of(ttl)
        reply = await self._owner.call(self._limit, Ask(b"extend", self.lease_id, ttl_ms=ttl_ms))
        if reply.status == 0:
            raise LeaseExpired(f"lease {self.token} had lapsed before it was extended")

    def _stop_beating(self) -> None:
        if self._beat is not None:
            self._beat.cancel()

    async def __aenter__(self) -> AsyncRedisLease:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.release()
        except LeaseExpired:
            if not exc_info or exc_info[0] is None:
                raise

    def __del__(self) -> None:
        self._stop_beating()

    def __repr__(self) -> str:
        return f"AsyncRedisLease(n={self.n}, token={self.token}, released={self.released})"


async def _to_the_end(call: Awaitable[Reply]) -> Reply:
    """``call``'s reply; a cancel of the caller lets it go on in the background to its end."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            in_background(cast("Awaitable[None]", task))  # its reply is nobody's now
        raise


class _AsyncSeats:
    """What both asyncio in-flight limiters do, for a limit given by its keys."""

    keyed = False

    def __init__(
        self, client: Any, limit: int, name: str, lease_ttl: float, heartbeat: bool, prefix: Any
    ) -> None:
        self.options = SeatOptions.read(limit, name, lease_ttl, heartbeat, prefix)
        self.script = AsyncSeatScript(client, type(self).__name__)
        self._limit = limit
        self._mine: weakref.WeakSet[AsyncRedisLease] = weakref.WeakSet()
        self._held: contextvars.ContextVar[tuple[AsyncRedisLease, ...]] = contextvars.ContextVar(
            "held", default=()
        )

    @property
    def limit(self) -> int:
        """The limit, as the server last told it to this limiter."""
        return self._limit

    async def call(self, limit: Limit, ask: Ask) -> Reply:
        reply = await self.script.call_async(limit, ask, self._limit, self.keyed)
        if not self.keyed:
            self._limit = reply.limit
        return reply

    def _lease(self, limit: Limit, lease_id: bytes, n: int, token: int) -> AsyncRedisLease:
        lease = AsyncRedisLease(self, limit, lease_id, n, token)
        self._mine.add(lease)
        return lease

    async def beat(self, limit: Limit, lease_id: bytes) -> None:
        """Extend a lease every :attr:`SeatOptions.heartbeat_interval` until cancelled or
        lapsed; a failed extension is tried again at the next beat."""
        ask = Ask(b"extend", lease_id, ttl_ms=self.options.lease_ttl_ms)
        while True:
            await asyncio.sleep(self.options.heartbeat_interval)
            try:
                if (await self.call(limit, ask)).status == 0:
                    return
            except LimiterUnavailable:
                continue

    async def _take(self, limit: Limit, n: int, timeout: float | None) -> AsyncRedisLease | None:
        """Seats now, or in line until granted or ``timeout`` (see ``_seats._Seats._take``)."""
        check_n(n)
        check_timeout(timeout)
        lease_id, ttl = new_id(), self.options.lease_ttl_ms
        join = timeout is None or timeout > 0
        deadline = None if timeout is None else time.monotonic() + timeout
        ask = Ask(b"acquire", lease_id, n, ttl, join)
        try:
            reply = await self.call(limit, ask)
        except asyncio.CancelledError:  # it may have been seated, or put in line
            in_background(self._leave(limit, lease_id))
            raise
        if reply.status == 1:
            return self._lease(limit, lease_id, n, reply.value)
        if reply.status == -1:
            raise too_many(n, reply.limit)
        if not join:
            return None
        seated = False
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                until = time.monotonic() + ask_again_in(left, reply.value, ttl)
                got = await self._read_until(limit, lease_id, until)
                if got is not None:
                    token = grant_token(got)
                    if token is None:
                        raise too_many(n, self._limit)
                    seated = True
                    return self._lease(limit, lease_id, n, token)
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                reply = await self.call(limit, ask)
                if reply.status == 1:
                    seated = True
                    return self._lease(limit, lease_id, n, reply.value)
        finally:
            if not seated:
                await run_to_the_end(self._leave(limit, lease_id))

    async def _read_until(self, limit: Limit, lease_id: bytes, until: float) -> bytes | None:
        key = limit.grant_key(lease_id)
        while True:
            got = await self.script.read_grant_async(key, until - time.monotonic())
            if got is not None or time.monotonic() >= until:
                return got

    async def _leave(self, limit: Limit, lease_id: bytes) -> None:
        """Out of the line, and the seats given back if they were granted meanwhile."""
        try:
            await self.call(limit, Ask(b"leave", lease_id))
        except LimiterUnavailable:
            pass

    def _held_push(self, lease: AsyncRedisLease) -> None:
        self._held.set((*self._held.get(), lease))

    def _held_pop(self) -> AsyncRedisLease:
        held = self._held.get()
        self._held.set(held[:-1])
        return held[-1]


class AsyncRedisConcurrencyLimiter(_AsyncSeats):
    """:class:`~protocol_in_code.qos.distributed.RedisConcurrencyLimiter` on an asyncio client
    (``redis.asyncio.Redis`` or its cluster): every call awaited, waiters cancel-safe."""

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
        super().__init__(client, limit, name, lease_ttl, heartbeat, prefix)
        self._where = Limit.of(self.options)

    async def try_acquire(self, n: int = 1) -> AsyncRedisLease | None:
        """A lease of ``n`` seats now, or None."""
        return await self._take(self._where, n, 0)

    async def acquire(self, n: int = 1, timeout: float | None = None) -> AsyncRedisLease | None:
        """A lease of ``n`` seats, waiting in line up to ``timeout`` seconds."""
        return await self._take(self._where, n, timeout)

    async def in_flight(self) -> int:
        """Seats held now, by every holder (one script call)."""
        return (await self.call(self._where, Ask(b"look"))).held

    async def waiting(self) -> int:
        """Callers in line now, on every host (one script call)."""
        return (await self.call(self._where, Ask(b"look"))).status

    async def resize(self, limit: int) -> None:
        """A new limit for every host, at once, evicting nobody."""
        check_limit(limit)
        self._limit = limit
        await self.call(self._where, Ask(b"resize", set_limit=True))

    async def __aenter__(self) -> AsyncRedisConcurrencyLimiter:
        lease = await self.acquire()
        assert lease is not None  # no timeout: it waits until seated
        self._held_push(lease)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._held_pop().__aexit__(*exc_info)

    def __call__(self, function: _F) -> _F:
        """A decorator of an ``async def``: one seat while each call runs."""

        @functools.wraps(function)
        async def seated(*args: Any, **kwargs: Any) -> Any:
            async with self:
                return await function(*args, **kwargs)

        return cast("_F", seated)

    def __repr__(self) -> str:
        return f"AsyncRedisConcurrencyLimiter(limit={self._limit}, name={self.options.name!r})"


class AsyncRedisKeyedConcurrencyLimiter(_AsyncSeats):
    """:class:`~protocol_in_code.qos.distributed.RedisKeyedConcurrencyLimiter` on an asyncio
    client."""

    keyed = True

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
        super().__init__(client, limit, name, lease_ttl, heartbeat, prefix)

    async def try_acquire(self, key: str | bytes, n: int = 1) -> AsyncRedisLease | None:
        """A lease of ``n`` of ``key``'s seats now, or None."""
        return await self._take(Limit.of(self.options, key), n, 0)

    async def acquire(
        self, key: str | bytes, n: int = 1, timeout: float | None = None
    ) -> AsyncRedisLease | None:
        """A lease of ``n`` of ``key``'s seats, waiting up to ``timeout`` seconds."""
        return await self._take(Limit.of(self.options, key), n, timeout)

    @property
    def in_flight(self) -> int:
        """Seats held now through this limiter object, over every key."""
        return sum(lease.n for lease in list(self._mine) if not lease.released)

    async def in_flight_of(self, key: str | bytes) -> int:
        """Seats of ``key`` held now, by every holder (one script call)."""
        return (await self.call(Limit.of(self.options, key), Ask(b"look"))).held

    def resize(self, limit: int) -> None:
        """A new limit for this limiter's calls from now, evicting nobody."""
        check_limit(limit)
        self._limit = limit

    def __repr__(self) -> str:
        name = self.options.name
        return f"AsyncRedisKeyedConcurrencyLimiter(limit={self._limit}, name={name!r})"
