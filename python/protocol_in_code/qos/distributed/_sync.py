"""The limiters on a synchronous client: a thin shell that sends what the core says.

Each operation is written once, here, in its key-taking form (:class:`SyncOperations`): it
asks :meth:`~Limits._target` for the core and the Redis keys, the core for the script's
arguments (``_core``), sends them, and hands the reply to ``_replies``; a server that cannot
answer goes to the ``on_error`` policy (``_policy``). :class:`RedisKeyedRateLimiter` takes the
operations as they are; :class:`RedisRateLimiter` takes each bound to its one key
(:func:`~protocol_in_code.qos.distributed._limits.its_key`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from protocol_in_code._native import Decision
from protocol_in_code.qos import _conveniences
from protocol_in_code.qos.distributed import _plugin
from protocol_in_code.qos.distributed._async import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
)
from protocol_in_code.qos.distributed._batch import Batch
from protocol_in_code.qos.distributed._limits import Key, Limits, ManyKeys, OneKey, its_key
from protocol_in_code.qos.distributed._options import KeyedKeywords, OneKeyKeywords
from protocol_in_code.qos.distributed._replies import (
    QUESTIONS,
    RESERVE,
    TAKE,
    TAKE_WITH_LEVELS,
    Levels,
    leveled,
    taken,
)
from protocol_in_code.qos.distributed._server import Call, Server
from protocol_in_code.qos.distributed._shapes import constructors
from protocol_in_code.qos.distributed._waiting import blocking_acquire, on_threads

if TYPE_CHECKING:
    from typing_extensions import Unpack

_F = TypeVar("_F", bound=Callable[..., Any])


def _ask(limiter: Limits, method: str, key: Any, n: Any, now_ns: Any, plan: Any) -> Any:
    """One question of :data:`~protocol_in_code.qos.distributed._replies.QUESTIONS`: one
    script call, its reply read, or the ``on_error`` answer."""
    op, read = QUESTIONS[method]
    core, keys = limiter._target(key, plan)
    args = core.args(op, n, now_ns)
    try:
        reply = core.server.run(keys, args)
    except limiter._unavailable as error:
        return limiter._fall_back(error, method, key, n, now_ns, plan, core)
    return read(reply)


class SyncOperations(Limits):
    """Every operation of a limiter on a synchronous client, in its key-taking form: ``key``
    names the limit of a keyed limiter (under ``plan``, for one with plans); a one-key limiter
    is called without either."""

    def try_acquire(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> bool:
        """Take ``n`` tokens if every band holds them: True if taken."""
        core, keys = self._target(key, plan)
        if type(n) is int and n == 1 and now_ns is None:
            args = core.take_one
        else:
            args = core.args(TAKE, n, now_ns)
        try:
            reply = core.server.run(keys, args)
        except self._unavailable as error:
            return bool(self._fall_back(error, "try_acquire", key, n, now_ns, plan, core))
        return taken(reply, n)

    def check(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        """:meth:`try_acquire`, answering with the whole :class:`Decision`."""
        return _ask(self, "check", key, n, now_ns, plan)  # type: ignore[no-any-return]

    def check_levels(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> tuple[Decision, Levels | None]:
        """:meth:`check`, and each band's level right after it, in the same script call: what
        ``check`` then ``band_levels`` say in-process, ``[(whole tokens, ns until one more),
        ...]`` in the order of the bands (the ns rounded up to the microsecond; with plans, of
        ``plan``'s bands). When the server cannot answer, ``on_error`` decides as for
        :meth:`check`, and the levels are a local fallback limiter's ``band_levels``, or None
        under ``"allow"`` and ``"deny"``."""
        core, keys = self._target(key, plan)
        args = core.args(TAKE_WITH_LEVELS, n, now_ns)
        try:
            reply = core.server.run(keys, args)
        except self._unavailable as error:
            return self._fall_back_levels(error, key, n, now_ns, plan, core)
        return leveled(reply)

    def peek(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        """What :meth:`check` would answer, taking nothing."""
        return _ask(self, "peek", key, n, now_ns, plan)  # type: ignore[no-any-return]

    def refund(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> None:
        """Give ``n`` tokens back to every band, each capped at its burst."""
        _ask(self, "refund", key, n, now_ns, plan)

    def settle(
        self,
        key: Key,
        reserved: int,
        actual: int,
        now_ns: int | None = None,
        *,
        plan: str | None = None,
    ) -> None:
        """Settle a cost taken as ``reserved`` tokens, now known to be ``actual``: less gives
        the difference back (as :meth:`refund`), more takes it from every band even beyond
        its balance, a debt that later calls wait out exactly. One script call (none when the
        two are equal)."""
        core, keys = self._target(key, plan)
        args = core.settle_args(reserved, actual, now_ns)
        if args is None:
            return
        try:
            core.server.run(keys, args)
        except self._unavailable as error:
            self._fall_back_settle(error, key, (reserved, actual), now_ns, plan)

    def available(self, key: Key, now_ns: int | None = None, *, plan: str | None = None) -> int:
        """Whole tokens every band holds now."""
        return _ask(self, "available", key, 0, now_ns, plan)  # type: ignore[no-any-return]

    def acquire(
        self, key: Key, n: int = 1, timeout: float | None = None, *, plan: str | None = None
    ) -> bool:
        """Block until ``n`` tokens are taken (True); False at once if they would only be there
        after ``timeout`` seconds. Waiters are served in the order they reach the server: each
        reserves its tokens there at the moment they will be there, then sleeps until then, so
        a large request is never starved by small ones (one script call per admission). A
        waiter interrupted while it sleeps gives its reservation back."""
        core, keys = self._target(key, plan)
        core.args(RESERVE, n, None)
        return blocking_acquire(
            core,
            keys,
            n,
            timeout,
            type(self).__name__,
            lambda e: self._fall_back(e, "check", key, n, None, plan, core),
        )

    async def acquire_async(
        self, key: Key, n: int = 1, timeout: float | None = None, *, plan: str | None = None
    ) -> bool:
        """:meth:`acquire` for asyncio; the round trip runs on threads of the server's own,
        never on the event loop's default executor (see ``_waits``). A waiter
        cancelled at any point gives back what it reserved."""
        return await self._wait(key, n, timeout, plan, on_threads)


@constructors(OneKeyKeywords)
class RedisRateLimiter(OneKey):
    """One limit shared by every process, on every host, that uses ``name`` on one Redis.

    ``RedisRateLimiter(client, 10, name="global")``: the rate alone by position, everything
    else by keyword. ``name`` (a non-empty ``str``) is the limit's identity: limiters of the
    same name, ``prefix`` and bands share one limit, kept in the hash ``prefix{name}:fingerprint``;
    limiters of different names never share anything, and a change of bands starts afresh (see
    the module's docs).

    Takes the arguments of :class:`~protocol_in_code.qos.limiter.RateLimiter` (read by it: the
    same rates, bursts and bands, the same errors) and answers its questions the same way:
    ``try_acquire``, ``check``, ``peek``, ``refund``, ``available``, ``acquire(timeout=)``,
    ``acquire_async``, the decorator and ``with``/``async with``. The differences:

    * Time is the server's ``TIME``, in whole microseconds; an explicit ``now_ns`` replaces it
      and must be a whole number of microseconds. A ``wait_ns`` is the in-process wait rounded
      up to the microsecond.
    * ``on_error`` decides what a call answers when the server cannot decide (unreachable, or
      answering with an error: OOM, BUSY, READONLY, NOREPLICAS, a failed script): ``"raise"``
      (:class:`LimiterUnavailable`), ``"allow"``, ``"deny"`` (a DENIED with a ``wait_ns`` of
      100 ms) or a local :class:`RateLimiter` that is asked instead.
    * ``min_ttl_ms`` keeps each written key at least that long (default 0: exactly until it is
      full again). Replays whose explicit times run slower than real time need it, since a
      key's TTL runs on the server's real clock.
    * ``initial`` is what a key that does not exist holds: at first, and again once it has
      refilled completely and expired.
    * ``acquire`` reserves on the server, as in-process: waiters are admitted in the order their
      reservations reach it, one script call each, and a waiter that gives up hands its turn
      back (forfeited if others queue behind it, so nobody is let in early). The bands of a key
      share one settlement point there, so a give-back on a key of several bands may give back
      a little less than in-process, never more.
    * There is no ``band_levels`` (a second round trip): :meth:`check_levels` answers ``check``
      and each band's level in one script call, as ``check`` then ``band_levels`` would.

    Given an asyncio client, construct :class:`AsyncRedisRateLimiter` instead (this class does
    it for you: ``RedisRateLimiter(asyncio_client, ...)`` returns one).
    """

    # Declared to the layers that take any limiter (see _plugin.py): its calls block.
    blocks = _plugin.BLOCKS

    def __new__(
        cls, client: Any, rate: Any = None, **options: Unpack[OneKeyKeywords]
    ) -> RedisRateLimiter:
        if cls is RedisRateLimiter and Server(client).is_async:
            return AsyncRedisRateLimiter(client, rate, **options)  # type: ignore[return-value]
        return super().__new__(cls)

    try_acquire = its_key(SyncOperations.try_acquire)
    check = its_key(SyncOperations.check)
    check_levels = its_key(SyncOperations.check_levels)
    peek = its_key(SyncOperations.peek)
    refund = its_key(SyncOperations.refund)
    settle = its_key(SyncOperations.settle)
    available = its_key(SyncOperations.available)
    acquire = its_key(SyncOperations.acquire)
    acquire_async = its_key(SyncOperations.acquire_async)

    def __call__(self, function: _F) -> _F:
        """Decorate ``function`` (``def`` or ``async def``) to take one token per call."""
        return _conveniences.decorate(self, function)  # type: ignore[return-value]

    def __enter__(self) -> RedisRateLimiter:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    async def __aenter__(self) -> RedisRateLimiter:
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


@constructors(KeyedKeywords)
class RedisKeyedRateLimiter(ManyKeys, SyncOperations):
    """One shared limit per key: :class:`RedisRateLimiter` for every key at once.

    ``RedisKeyedRateLimiter(client, 5, burst=10, name="login")``: the arguments and answers of
    :class:`~protocol_in_code.qos.keyed.KeyedRateLimiter`, with a ``key`` (``str`` or ``bytes``)
    first in every call, and a ``name`` that is the limiter's identity: a key's limit is the
    hash ``prefix{key}:fingerprint:name``, so limiters of different names (a login limit
    and an API limit, both keyed by client address) never share a key's limit, and none shares
    anything with a :class:`RedisRateLimiter`. Memory is the server's and bounded by expiry: a
    key lives exactly until it is full again, so there is no ``max_keys`` and nothing is ever
    refused. ``on_error`` may name a local :class:`KeyedRateLimiter`.
    ``plans={"free": ..., "pro": ...}`` in place of ``rate``/``bands`` limits each key by its
    plan (``plan=`` on every per-key call, required), as in-process: a plan's keys are those of
    its bands' fingerprint, so a call under a plan is still one script call.
    :meth:`try_acquire_many` decides many keys at once: one round trip per cluster node.

    Unlike the in-process table, each key has its own clock: a call at a time before a key's
    settlement point gains nothing on that key (the server's clock is one clock anyway).
    """

    # Declared to the layers that take any limiter (see _plugin.py): its calls block.
    blocks = _plugin.BLOCKS

    def __new__(
        cls, client: Any, rate: Any = None, **options: Unpack[KeyedKeywords]
    ) -> RedisKeyedRateLimiter:
        if cls is RedisKeyedRateLimiter and Server(client).is_async:
            return AsyncRedisKeyedRateLimiter(client, rate, **options)  # type: ignore[return-value]
        return super().__new__(cls)

    def try_acquire_many(
        self,
        keys: Iterable[str | bytes],
        n: int = 1,
        now_ns: int | None = None,
        *,
        plan: str | None = None,
    ) -> list[bool]:
        """:meth:`try_acquire` for each key in turn: the same answers as one call per key, in
        the same order. One script call per hash slot and per 1,000 keys (so that none holds
        the server long); on a single server they are sent in turn (one in all for up to 1,000
        keys), and on a cluster the calls of all the slots one node owns go in one pipeline:
        one round trip per node, the nodes' in parallel. A node (or the single server) found
        unreachable is not asked again within the batch: its calls not sent yet go straight to
        ``on_error``, so a batch waits for at most one timeout per unreachable node, not one
        per slot or per 1,000 keys."""
        core = self._core_of(plan)
        batch = Batch(core, keys, n, now_ns, None if plan is None else {"plan": plan})
        server = core.server
        if server.pipelined and batch.keys:
            calls = batch.calls()
            for _ in range(Batch.ROUNDS):
                work, alone = batch.by_node(calls)
                server.pipelines(work)
                calls, resend, reroute = batch.settle(work)
                for call in [*alone, *resend]:
                    self._alone(batch, call)
                calls += batch.rerouted(reroute)
                if not calls:
                    break
            for call in calls:
                self._alone(batch, call)
            return batch.finished()
        for group, node in batch.groups():
            try:
                reply = server.run(batch.names_of(group, node), batch.args)
            except self._unavailable as error:
                batch.failed(group, node, error)
            else:
                batch.answered(group, reply)
        return batch.finished()

    def _alone(self, batch: Batch, call: Call) -> None:
        """One call of a batch sent on its own through the client, its record unchanged."""
        try:
            reply = self._core.server.send(call.keys, call.args)
        except self._unavailable as error:
            batch.failed(call.group, None, error)
        else:
            batch.answered(call.group, reply)
