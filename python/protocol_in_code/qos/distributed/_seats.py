"""In-flight limits across hosts, on a synchronous Redis client: the limiters and their leases.

Each operation is one call of ``seats.lua`` (see ``_seats_core`` for what a call sends): taking
seats, giving them back, extending a lease, leaving the line. A waiter is woken by the server:
the script that gives seats back seats the line's head in the same step and pushes its token
onto that waiter's own list, which the waiter reads with ``BLPOP``, a blocking read that holds
one of the client's connections while it waits. So a process has at most as many waiters as its
pool gives connections (redis-py's default pool opens one per waiting thread; a
``BlockingConnectionPool`` of N connections lets N waiters block everyone else's calls).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from protocol_in_code.qos.distributed import _plugin
from protocol_in_code.qos.distributed._client import (
    ClientErrors,
    LimiterUnavailable,
    asyncio_module,
)
from protocol_in_code.qos.distributed._client import socket_timeout as socket_timeout_of
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

_F = TypeVar("_F", bound=Callable[..., Any])
_log = logging.getLogger("protocol_in_code.qos.distributed")

#: What a waiter whose asyncio task was cancelled finds in its grant list (see
#: :meth:`_Seats.acquire_async`).
CANCELLED = b"cancelled"


class SeatScript:
    """The caller's client and the seats' script: one call, and one blocking read."""

    #: Whether the client's calls are awaited (the asyncio forms' script).
    awaited = False

    def __init__(self, client: Any, limiter: str) -> None:
        evalsha = getattr(client, "evalsha", None)
        if not callable(evalsha):
            raise TypeError(
                "client must be a Redis client (redis.Redis, redis.cluster.RedisCluster, their "
                f"asyncio forms, or valkey-py's), not {type(client).__name__}"
            )
        awaited = inspect.iscoroutinefunction(evalsha) or asyncio_module(client)
        if awaited != self.awaited:
            other = "Async" + limiter if awaited else limiter.removeprefix("Async")
            kind = "an asyncio" if awaited else "a synchronous"
            raise TypeError(
                f"{limiter} takes a client of the other kind: for {kind} "
                f"client ({type(client).__name__}), use {other}"
            )
        self.client = client
        self.errors = ClientErrors(client)
        self.socket_timeout = socket_timeout_of(client)

    def unavailable(self, error: BaseException) -> LimiterUnavailable:
        """The error a caller sees when the server could not answer."""
        failed = LimiterUnavailable(f"the in-flight limit cannot be decided: {error}")
        failed.__cause__ = error
        return failed

    def call(self, limit: Limit, ask: Ask, asked_limit: int, keyed: bool) -> Reply:
        """The script's reply to ``ask`` on ``limit``."""
        args = ask.args(limit, asked_limit, keyed)
        try:
            try:
                raw = self.client.evalsha(SHA, len(limit.keys), *limit.keys, *args)
            except self.errors.no_script:
                raw = self.client.eval(SOURCE, len(limit.keys), *limit.keys, *args)
        except self.errors.unavailable as error:
            raise self.unavailable(error) from error
        return Reply.read(raw)

    def read_grant(self, key: bytes, seconds: float) -> bytes | None:
        """What arrives in the grant list ``key`` within ``seconds``, or None."""
        timeout = blocking_read(seconds, self.socket_timeout)
        try:
            got = self.client.blpop([key], timeout=timeout)
        except self.errors.unavailable as error:
            raise self.unavailable(error) from error
        return None if got is None else bytes(got[1])


class RedisLease(LeaseState):
    """Seats held on the server until :meth:`release`, or until ``lease_ttl`` passes without
    :meth:`extend` (a holder that died gives its seats back so). A context manager.

    ``token`` is the fencing token, strictly increasing per limit. Releasing twice is harmless;
    releasing or extending a lease that had lapsed raises :class:`LeaseExpired`.
    """

    __slots__ = ()
    _owner: _Seats

    def __init__(self, owner: _Seats, limit: Limit, lease_id: bytes, n: int, token: int) -> None:
        super().__init__(owner, limit, lease_id, n, token)
        if owner.options.heartbeat:
            owner.heart().keep(self)

    def release(self) -> None:
        """Give the seats back (once; a second call does nothing). Raises
        :class:`LeaseExpired` if they had lapsed first."""
        ask = self._releasing()
        if ask is not None:
            self._answered(self._owner.call(self._limit, ask), "released")

    def extend(self, ttl: float | None = None) -> None:
        """Hold the seats ``ttl`` seconds more from now (the limiter's ``lease_ttl`` if None).
        Raises :class:`LeaseExpired` if they had lapsed, ``ValueError`` if released."""
        self._answered(self._owner.call(self._limit, self._extending(ttl)), "extended")

    def __enter__(self) -> RedisLease:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.release()
        except LeaseExpired:
            if self._raises_on_exit(exc_info):
                raise


class Heart:
    """The heartbeat of one limiter's leases: a daemon thread that extends each lease still
    held every :attr:`~._seats_core.SeatOptions.heartbeat_interval` (a third of
    ``lease_ttl``, so two beats may fail in a row before a lease lapses), one script call per
    lease. One thread for all of a limiter's leases: started when a lease is kept and none
    runs, ending when it finds none left, so a lease costs no thread of its own.

    It holds its leases weakly: a lease dropped unreleased stops being extended, and lapses
    on the server as every dropped lease does. A forked child keeps none of its parent's (the
    parent's thread is not in the child): its own leases start a thread of its own.
    """

    def __init__(self, owner: _Seats) -> None:
        self.owner = owner
        self.start_here()
        _HEARTS.add(self)

    def start_here(self) -> None:
        """No lease kept yet, and no thread: in a new heart, and in a forked child (its
        parent's lock, leases and thread are not the child's), before any of its threads
        runs."""
        self.lock = threading.Lock()
        self.leases: weakref.WeakSet[RedisLease] = weakref.WeakSet()
        self.beating = False

    def keep(self, lease: RedisLease) -> None:
        """Extend ``lease`` at every beat from now until it is released (or dropped)."""
        with self.lock:
            self.leases.add(lease)
            if self.beating:
                return
            self.beating = True
        name = self.owner.options.name.decode("utf-8", "replace")
        threading.Thread(target=self.beat, name=f"qos-seats-heartbeat {name}", daemon=True).start()

    def beat(self) -> None:
        """Extend every lease still held, each beat, until none is left. A lease whose
        extension fails is tried again at the next beat; whatever its failure, the others are
        still extended, and a thread that ends for any reason lets the next lease kept start
        another."""
        options = self.owner.options
        try:
            while True:
                time.sleep(options.heartbeat_interval)
                with self.lock:
                    held = [lease for lease in self.leases if not lease.released]
                    if not held:
                        self.beating = False  # under the lock that keep() takes
                        return
                for lease in held:
                    self._extend(lease, options.lease_ttl_ms)
        except BaseException:
            with self.lock:
                self.beating = False
            raise

    def _extend(self, lease: RedisLease, ttl_ms: int) -> None:
        try:
            reply = self.owner.call(lease._limit, Ask(b"extend", lease.lease_id, ttl_ms=ttl_ms))
        except LimiterUnavailable:
            return  # tried again at the next beat
        except Exception:
            _log.exception("a heartbeat failed to extend lease %d; tried again", lease.token)
            return
        if reply.status == 0:  # lapsed: its holder's release or extend says so
            with self.lock:
                self.leases.discard(lease)


#: Every heart of this process, started again in a forked child.
_HEARTS: weakref.WeakSet[Heart] = weakref.WeakSet()


def _start_hearts_again() -> None:
    for heart in list(_HEARTS):
        heart.start_here()


os.register_at_fork(after_in_child=_start_hearts_again)


class _Seats(SeatsState[RedisLease]):
    """What both synchronous in-flight limiters do, for a limit given by its keys."""

    script_kind = SeatScript
    script: SeatScript
    # Declared to the layers that take any limiter (see _plugin.py): its calls block.
    blocks = _plugin.BLOCKS

    def call(self, limit: Limit, ask: Ask) -> Reply:
        return self._noted(self.script.call(limit, ask, self._limit, self.keyed))

    def _lease(self, limit: Limit, turn: Turn, token: int) -> RedisLease:
        return self._kept(RedisLease(self, limit, turn.lease_id, turn.n, token))

    def heart(self) -> Heart:
        """The one thread's work that keeps this limiter's leases alive (``heartbeat=True``)."""
        heart: Heart | None = self.__dict__.get("_heart")
        if heart is None:
            heart = self.__dict__.setdefault("_heart", Heart(self))
        return heart

    def _try(self, limit: Limit, n: int) -> RedisLease | None:
        check_n(n)
        return self._take(limit, Turn(n, 0, self.options.lease_ttl_ms), None)

    def _acquire(self, limit: Limit, n: int, timeout: float | None) -> RedisLease | None:
        check_n(n)
        check_timeout(timeout)
        if timeout != 0 and _loop_running():
            raise RuntimeError(
                f"a blocking {type(self).__name__}.acquire() (also `with limiter:` and a "
                "decorated def) would stall this thread's running event loop for as long as it "
                "waits: in async code, use `await limiter.acquire_async()` (try_acquire() "
                "never waits)"
            )
        return self._take(limit, Turn(n, timeout, self.options.lease_ttl_ms), None)

    def _take(
        self, limit: Limit, turn: Turn, cancelled: threading.Event | None
    ) -> RedisLease | None:
        """Seats now, or in line until granted or the timeout: one script call to ask, a
        ``BLPOP`` to wait, one more to ask again only when something lapses that nobody
        announces, and one to leave if the wait ends unseated."""
        reply = self.call(limit, turn.ask)
        token = turn.first(reply)
        if token is not None:
            return self._lease(limit, turn, token)
        if not turn.join:
            return None
        seated = False
        try:
            while cancelled is None or not cancelled.is_set():
                got = self._read_until(limit, turn.lease_id, turn.read_until(reply))
                if got == CANCELLED:
                    return None
                if got is not None:
                    token = turn.granted(got, self._limit)
                elif turn.timed_out():
                    return None
                else:
                    reply = self.call(limit, turn.ask)
                    token = turn.seated(reply)
                if token is not None:
                    seated = True
                    return self._lease(limit, turn, token)
            return None
        finally:
            if not seated:
                self._leave(limit, turn.lease_id)

    def _read_until(self, limit: Limit, lease_id: bytes, until: float) -> bytes | None:
        """The grant, if it arrives before ``until`` (in reads the socket timeout allows)."""
        key = limit.grant_key(lease_id)
        while True:
            left = until - time.monotonic()
            got = self.script.read_grant(key, left)
            if got is not None or time.monotonic() >= until:
                return got

    def _leave(self, limit: Limit, lease_id: bytes) -> None:
        """Out of the line, and the seats given back if they were granted meanwhile. A server
        that cannot be reached lets the place lapse instead, within ``lease_ttl``."""
        try:
            self.call(limit, Ask(b"leave", lease_id))
        except LimiterUnavailable:
            pass

    async def _acquire_async(
        self, limit: Limit, n: int, timeout: float | None
    ) -> RedisLease | None:
        """:meth:`_acquire` on a thread of its own, awaited: the event loop never blocks on the
        synchronous client. A cancelled task pushes a word to its grant list, so the thread's
        ``BLPOP`` returns at once, and the thread leaves the line (or gives back seats it was
        granted as the cancel came)."""
        check_n(n)
        check_timeout(timeout)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[RedisLease | None] = loop.create_future()
        cancelled = threading.Event()
        turn = Turn(n, timeout, self.options.lease_ttl_ms)

        def run() -> None:
            try:
                result: Any = self._take(limit, turn, cancelled)
            except BaseException as error:  # carried to the awaiting task
                result = error
            if cancelled.is_set() and isinstance(result, RedisLease):
                _give_back(result)
                return
            loop.call_soon_threadsafe(_settle, done, result)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            return await done
        except asyncio.CancelledError:
            cancelled.set()
            threading.Thread(target=self._wake, args=(limit, turn.lease_id), daemon=True).start()
            raise

    def _wake(self, limit: Limit, lease_id: bytes) -> None:
        """Wake a waiter's ``BLPOP`` with :data:`CANCELLED` (kept no longer than its lease
        time, if nobody reads it)."""
        key = limit.grant_key(lease_id)
        try:
            self.script.client.rpush(key, CANCELLED)
            self.script.client.pexpire(key, self.options.lease_ttl_ms)
        except self.script.errors.unavailable:
            pass  # the waiter's own reads end within its next ask


def _give_back(lease: RedisLease) -> None:
    """Release a lease nobody will use: one that lapsed or a server gone changes nothing."""
    with contextlib.suppress(LeaseExpired, LimiterUnavailable):
        lease.release()


def _loop_running() -> bool:
    """Whether this thread runs an event loop now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _settle(done: asyncio.Future[Any], result: Any) -> None:
    """Hand ``result`` to the awaiting task; if it was cancelled meanwhile, a lease is given
    back on a thread (this runs on the event loop, which a synchronous call would block)."""
    if done.cancelled():
        if isinstance(result, RedisLease):
            threading.Thread(target=_give_back, args=(result,), daemon=True).start()
        return
    if isinstance(result, BaseException):
        done.set_exception(result)
    else:
        done.set_result(result)


class RedisConcurrencyLimiter(_Seats):
    """At most ``limit`` seats held at once, across every process and host that uses the
    limit named ``name`` on one Redis (or Valkey) server.

    ``lease_ttl`` (seconds, default 30) is how long a lease holds its seats unless extended:
    a holder that dies gives them back then, by the server's clock. ``heartbeat=True`` extends
    every lease this limiter gives, from a daemon thread, every third of ``lease_ttl``, until
    it is released. The limit is stored on the server: the first limiter of a name sets it,
    :meth:`resize` changes it for every host, and a limiter made later with another ``limit``
    takes the stored one (its own is used only if the state is new).
    """

    def try_acquire(self, n: int = 1) -> RedisLease | None:
        """A lease of ``n`` seats now, or None; one script call, never waits."""
        return self._try(self._where, n)

    def acquire(self, n: int = 1, timeout: float | None = None) -> RedisLease | None:
        """A lease of ``n`` seats, waiting in line (first come, first seated) up to
        ``timeout`` seconds (None: for ever); None if the timeout passed."""
        return self._acquire(self._where, n, timeout)

    async def acquire_async(self, n: int = 1, timeout: float | None = None) -> RedisLease | None:
        """:meth:`acquire` awaited: the wait runs on a thread of its own (the client is
        synchronous), and a cancelled task holds nothing after."""
        return await self._acquire_async(self._where, n, timeout)

    @property
    def in_flight(self) -> int:
        """Seats held now, by every holder of the limit (one script call)."""
        return self.call(self._where, Ask(b"look")).held

    @property
    def waiting(self) -> int:
        """Callers in line now, on every host (one script call)."""
        return self.call(self._where, Ask(b"look")).status

    def resize(self, limit: int) -> None:
        """A new limit for every host, at once, evicting nobody; waiters that now fit are
        seated, and those asking more than it are refused."""
        self._resized(limit)
        self.call(self._where, Ask(b"resize", set_limit=True))

    def __enter__(self) -> RedisConcurrencyLimiter:
        self._held_push(_sure(self.acquire()))
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._held_pop().__exit__(*exc_info)

    def __call__(self, function: _F) -> _F:
        """A decorator: one seat while each call of ``function`` runs."""

        @functools.wraps(function)
        def seated(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)

        return seated  # type: ignore[return-value]


class RedisKeyedConcurrencyLimiter(_Seats, KeyedSeats[RedisLease]):
    """At most ``limit`` seats held at once per key (``str`` or ``bytes``), across hosts.

    Each key's state is kept only while someone holds or waits for its seats. Its keys are
    spread over a cluster's slots, so no one place can hold the limit for all of them: every
    call sends this limiter's own ``limit``, and :meth:`resize` changes it for this limiter's
    calls (resize the limiters of every host alike). ``in_flight`` counts the seats this
    limiter object holds now; :meth:`in_flight_of` asks the server about one key.
    """

    def try_acquire(self, key: str | bytes, n: int = 1) -> RedisLease | None:
        """A lease of ``n`` of ``key``'s seats now, or None."""
        return self._try(Limit.of(self.options, key), n)

    def acquire(
        self, key: str | bytes, n: int = 1, timeout: float | None = None
    ) -> RedisLease | None:
        """A lease of ``n`` of ``key``'s seats, waiting up to ``timeout`` seconds."""
        return self._acquire(Limit.of(self.options, key), n, timeout)

    async def acquire_async(
        self, key: str | bytes, n: int = 1, timeout: float | None = None
    ) -> RedisLease | None:
        """:meth:`acquire` awaited, on a thread of its own."""
        return await self._acquire_async(Limit.of(self.options, key), n, timeout)

    def in_flight_of(self, key: str | bytes) -> int:
        """Seats of ``key`` held now, by every holder (one script call)."""
        return self.call(Limit.of(self.options, key), Ask(b"look")).held


def _sure(lease: RedisLease | None) -> RedisLease:
    assert lease is not None  # acquire without a timeout waits until it is seated
    return lease
