"""In-flight limits across hosts, on an asyncio Redis client: every call awaited.

The same script calls as ``_seats.py``, in the same order; only the waiting differs: a waiter's
``BLPOP`` is awaited, and a task cancelled while it waits (or while it is being seated) leaves
the line in a give-back the cancel cannot stop (``_give_backs.run_to_the_end``), so it holds
nothing after and passes its turn on. A waiting task holds one of the client's connections.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from protocol_in_code.qos._give_backs import in_background, run_to_the_end
from protocol_in_code.qos.distributed import _plugin
from protocol_in_code.qos.distributed._client import LimiterUnavailable
from protocol_in_code.qos.distributed._seats import SeatScript
from protocol_in_code.qos.distributed._seats_core import (
    SHA,
    SOURCE,
    Ask,
    KeyedSeats,
    LeaseExpired,
    LeaseState,
    Limit,
    Reply,
    SeatsState,
    Turn,
    blocking_read,
    check_n,
    check_timeout,
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


class AsyncRedisLease(LeaseState):
    """:class:`~protocol_in_code.qos.distributed.RedisLease` whose calls are awaited; an
    asynchronous context manager. With ``heartbeat=True`` a task extends it until released."""

    __slots__ = ("_beat",)
    _owner: _AsyncSeats

    def __init__(
        self, owner: _AsyncSeats, limit: Limit, lease_id: bytes, n: int, token: int
    ) -> None:
        super().__init__(owner, limit, lease_id, n, token)
        self._beat: asyncio.Task[None] | None = None
        if owner.options.heartbeat:
            self._beat = asyncio.ensure_future(owner.beat(limit, lease_id))

    async def release(self) -> None:
        """Give the seats back (once; a second call does nothing). Raises
        :class:`LeaseExpired` if they had lapsed first. A cancel does not stop it half way."""
        ask = self._releasing()
        if ask is not None:
            self._answered(await _to_the_end(self._owner.call(self._limit, ask)), "released")

    async def extend(self, ttl: float | None = None) -> None:
        """Hold the seats ``ttl`` seconds more from now (the limiter's ``lease_ttl`` if None)."""
        self._answered(await self._owner.call(self._limit, self._extending(ttl)), "extended")

    def _stop_beating(self) -> None:
        if self._beat is not None:
            self._beat.cancel()

    async def __aenter__(self) -> AsyncRedisLease:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self.release()
        except LeaseExpired:
            if self._raises_on_exit(exc_info):
                raise


async def _to_the_end(call: Awaitable[Reply]) -> Reply:
    """``call``'s reply; a cancel of the caller lets it go on in the background to its end."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            in_background(cast("Awaitable[None]", task))  # its reply is nobody's now
        raise


class _AsyncSeats(SeatsState[AsyncRedisLease]):
    """What both asyncio in-flight limiters do, for a limit given by its keys."""

    script_kind = AsyncSeatScript
    script: AsyncSeatScript
    # Declared to the layers that take any limiter (see _plugin.py): its calls are awaited.
    awaits = _plugin.AWAITS

    async def call(self, limit: Limit, ask: Ask) -> Reply:
        return self._noted(await self.script.call_async(limit, ask, self._limit, self.keyed))

    def _lease(self, limit: Limit, turn: Turn, token: int) -> AsyncRedisLease:
        return self._kept(AsyncRedisLease(self, limit, turn.lease_id, turn.n, token))

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
        turn = Turn(n, timeout, self.options.lease_ttl_ms)
        try:
            reply = await self.call(limit, turn.ask)
        except asyncio.CancelledError:  # it may have been seated, or put in line
            in_background(self._leave(limit, turn.lease_id))
            raise
        token = turn.first(reply)
        if token is not None:
            return self._lease(limit, turn, token)
        if not turn.join:
            return None
        seated = False
        try:
            while True:
                got = await self._read_until(limit, turn.lease_id, turn.read_until(reply))
                if got is not None:
                    token = turn.granted(got, self._limit)
                elif turn.timed_out():
                    return None
                else:
                    reply = await self.call(limit, turn.ask)
                    token = turn.seated(reply)
                if token is not None:
                    seated = True
                    return self._lease(limit, turn, token)
        finally:
            if not seated:
                await run_to_the_end(self._leave(limit, turn.lease_id))

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


class AsyncRedisConcurrencyLimiter(_AsyncSeats):
    """:class:`~protocol_in_code.qos.distributed.RedisConcurrencyLimiter` on an asyncio client
    (``redis.asyncio.Redis`` or its cluster): every call awaited, waiters cancel-safe."""

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
        self._resized(limit)
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


class AsyncRedisKeyedConcurrencyLimiter(_AsyncSeats, KeyedSeats[AsyncRedisLease]):
    """:class:`~protocol_in_code.qos.distributed.RedisKeyedConcurrencyLimiter` on an asyncio
    client."""

    async def try_acquire(self, key: str | bytes, n: int = 1) -> AsyncRedisLease | None:
        """A lease of ``n`` of ``key``'s seats now, or None."""
        return await self._take(Limit.of(self.options, key), n, 0)

    async def acquire(
        self, key: str | bytes, n: int = 1, timeout: float | None = None
    ) -> AsyncRedisLease | None:
        """A lease of ``n`` of ``key``'s seats, waiting up to ``timeout`` seconds."""
        return await self._take(Limit.of(self.options, key), n, timeout)

    async def in_flight_of(self, key: str | bytes) -> int:
        """Seats of ``key`` held now, by every holder (one script call)."""
        return (await self.call(Limit.of(self.options, key), Ask(b"look"))).held
