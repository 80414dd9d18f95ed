"""The limiters on an asyncio client: a thin shell that awaits what the core says to send.

:class:`AsyncOperations` is :class:`~protocol_in_code.qos.distributed._sync.SyncOperations`
awaited: each operation written once in its key-taking form, every call awaited, none blocking
the event loop, and a take net zero for a caller cancelled meanwhile (``_net_zero``).
:class:`AsyncRedisKeyedRateLimiter` takes the operations as they are, and
:class:`AsyncRedisRateLimiter` each bound to its one key.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from protocol_in_code._native import Decision
from protocol_in_code.qos import _conveniences
from protocol_in_code.qos._give_backs import in_background as _in_background
from protocol_in_code.qos.distributed import _plugin
from protocol_in_code.qos.distributed._batch import Batch
from protocol_in_code.qos.distributed._limits import Key, Limits, ManyKeys, OneKey, its_key
from protocol_in_code.qos.distributed._net_zero import (
    batch_given_back,
    net_zero,
    net_zero_if_taking,
    net_zero_take_with_levels,
)
from protocol_in_code.qos.distributed._replies import (
    QUESTIONS,
    REFUND,
    TAKE_WITH_LEVELS,
    Levels,
    allowed,
    allowed_digits,
    leveled,
)
from protocol_in_code.qos.distributed._server import Call
from protocol_in_code.qos.distributed._waiting import on_asyncio_client

_F = TypeVar("_F", bound=Callable[..., Any])


async def _ask(limiter: Limits, method: str, key: Any, n: Any, now_ns: Any, plan: Any) -> Any:
    """One question of :data:`~protocol_in_code.qos.distributed._replies.QUESTIONS`,
    awaited; a take is net zero for a cancelled caller."""
    op, read = QUESTIONS[method]
    core, keys = limiter._target(key, plan)
    args = core.args(op, n, now_ns)
    try:
        reply = await net_zero_if_taking(core, keys, op, args, n, now_ns)
    except limiter._unavailable as error:
        return limiter._fall_back(error, method, key, n, now_ns, plan, core)
    return read(reply)


class AsyncOperations(Limits):
    """Every operation of a limiter on an asyncio client, in its key-taking form (see
    :class:`~protocol_in_code.qos.distributed._sync.SyncOperations`), awaited."""

    async def try_acquire(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> bool:
        """Take ``n`` tokens if every band holds them: True if taken."""
        answer = await _ask(self, "try_acquire", key, n, now_ns, plan)
        return answer if isinstance(answer, bool) else allowed(answer, n)

    async def check(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        """:meth:`try_acquire`, answering with the whole :class:`Decision`."""
        return await _ask(self, "check", key, n, now_ns, plan)  # type: ignore[no-any-return]

    async def check_levels(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> tuple[Decision, Levels | None]:
        """``check_levels`` of the synchronous limiters, awaited; net zero for a cancelled
        caller."""
        core, keys = self._target(key, plan)
        args = core.args(TAKE_WITH_LEVELS, n, now_ns)
        try:
            reply = await net_zero_take_with_levels(core, keys, args, n, now_ns)
        except self._unavailable as error:
            return self._fall_back_levels(error, key, n, now_ns, plan, core)
        return leveled(reply)

    async def peek(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> Decision:
        """What :meth:`check` would answer, taking nothing."""
        return await _ask(self, "peek", key, n, now_ns, plan)  # type: ignore[no-any-return]

    async def refund(
        self, key: Key, n: int = 1, now_ns: int | None = None, *, plan: str | None = None
    ) -> None:
        """Give ``n`` tokens back to every band, each capped at its burst."""
        await _ask(self, "refund", key, n, now_ns, plan)

    async def settle(
        self,
        key: Key,
        reserved: int,
        actual: int,
        now_ns: int | None = None,
        *,
        plan: str | None = None,
    ) -> None:
        """Settle a cost taken as ``reserved`` tokens, now known to be ``actual`` (see the
        synchronous ``settle``): one script call, none when the two are equal. A caller
        cancelled while it is sent may or may not have settled."""
        core, keys = self._target(key, plan)
        args = core.settle_args(reserved, actual, now_ns)
        if args is None:
            return
        try:
            await core.server.run_async(keys, args)
        except self._unavailable as error:
            self._fall_back_settle(error, key, (reserved, actual), now_ns, plan)

    async def available(
        self, key: Key, now_ns: int | None = None, *, plan: str | None = None
    ) -> int:
        """Whole tokens every band holds now."""
        return await _ask(self, "available", key, 0, now_ns, plan)  # type: ignore[no-any-return]

    async def acquire(
        self, key: Key, n: int = 1, timeout: float | None = None, *, plan: str | None = None
    ) -> bool:
        """Wait until ``n`` tokens are taken (True); False at once if they would only be there
        after ``timeout`` seconds. A waiter cancelled at any point gives back what it
        reserved."""
        return await self._wait(key, n, timeout, plan, on_asyncio_client)

    acquire_async = acquire


class AsyncRedisRateLimiter(OneKey):
    """:class:`RedisRateLimiter` on an asyncio client: every call is awaited, and none blocks
    the event loop. Same arguments, same answers; ``acquire`` and ``acquire_async`` are the
    same coroutine, and the decorator takes ``async def`` functions."""

    # Declared to the layers that take any limiter (see _plugin.py): its calls are awaited.
    awaits = _plugin.AWAITS

    try_acquire = its_key(AsyncOperations.try_acquire)
    check = its_key(AsyncOperations.check)
    check_levels = its_key(AsyncOperations.check_levels)
    peek = its_key(AsyncOperations.peek)
    refund = its_key(AsyncOperations.refund)
    settle = its_key(AsyncOperations.settle)
    available = its_key(AsyncOperations.available)
    acquire = its_key(AsyncOperations.acquire)
    acquire_async = acquire

    def __call__(self, function: _F) -> _F:
        if not inspect.iscoroutinefunction(function):
            raise TypeError("a limiter on an asyncio client decorates async def functions only")
        return _conveniences.decorate(self, function)  # type: ignore[arg-type, return-value]

    async def __aenter__(self) -> AsyncRedisRateLimiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


class AsyncRedisKeyedRateLimiter(ManyKeys, AsyncOperations):
    """:class:`RedisKeyedRateLimiter` on an asyncio client: every call is awaited."""

    # Declared to the layers that take any limiter (see _plugin.py): its calls are awaited.
    awaits = _plugin.AWAITS

    async def try_acquire_many(
        self,
        keys: Iterable[str | bytes],
        n: int = 1,
        now_ns: int | None = None,
        *,
        plan: str | None = None,
    ) -> list[bool]:
        """On a cluster, one pipeline per node, the nodes' awaited together; on one server,
        one round trip per 1,000 keys, awaited in turn. A node (or the single server) found
        unreachable is not asked again within the batch. A caller cancelled meanwhile is net
        zero: what the batch took is given back."""
        core = self._core_of(plan)
        batch = Batch(core, keys, n, now_ns, None if plan is None else {"plan": plan})
        server, refund = core.server, core.args(REFUND, n, now_ns)
        if server.pipelined and batch.keys:
            return await self._pipelined(batch, refund)
        try:
            for group, node in batch.groups():
                try:
                    names = batch.names_of(group, node)

                    async def give_back(reply: Any, names: list[bytes] = names) -> None:
                        for name, taken_here in zip(names, allowed_digits(reply), strict=True):
                            if taken_here:
                                await server.run_async([name], refund)

                    asked = server.run_async(names, batch.args)
                    reply = await net_zero(asked, give_back)
                except self._unavailable as error:
                    batch.failed(group, node, error)
                else:
                    batch.answered(group, reply)
        except asyncio.CancelledError:
            # The groups decided so far took tokens nobody will be told of (the one under
            # way gives its own back): net zero, as for a single call.
            _in_background(batch_given_back(batch, server.run_async))
            raise
        return batch.finished()

    async def _pipelined(self, batch: Batch, refund: list[bytes]) -> list[bool]:
        """:meth:`try_acquire_many` on a cluster: :meth:`RedisKeyedRateLimiter.try_acquire_many`
        awaited, each round (and each call sent on its own) net zero if the caller is cancelled
        while it runs, and the rounds before given back."""
        server = self._core.server

        async def give_back(names: list[bytes], reply: Any) -> None:
            for name, taken_here in zip(names, allowed_digits(reply), strict=True):
                if taken_here:
                    await server.run_async([name], refund)

        async def round_(work: list[tuple[Any, list[Call]]]) -> list[tuple[Any, list[Call]]]:
            await server.pipelines_async(work)
            return work

        async def round_given_back(work: list[tuple[Any, list[Call]]]) -> None:
            for _node, calls in work:
                for call in calls:
                    if call.result is not None and not isinstance(call.result, BaseException):
                        await give_back(call.keys, call.result)

        async def alone(call: Call) -> None:
            try:
                asked = server.send_async(call.keys, call.args)
                reply = await net_zero(asked, functools.partial(give_back, call.keys))
            except self._unavailable as error:
                batch.failed(call.group, None, error)
            else:
                batch.answered(call.group, reply)

        async def layout() -> None:
            """The client's layout of the cluster, read if it is not (at first, and after a
            connection failed: redis-py's asyncio client marks it to be read again then)."""
            initialize = getattr(server.client, "initialize", None)
            if initialize is not None:
                with contextlib.suppress(*self._unavailable):
                    await initialize()

        try:
            await layout()
            calls = batch.calls()
            for _ in range(Batch.ROUNDS):
                work, alone_calls = batch.by_node(calls)
                await net_zero(round_(work), round_given_back)
                calls, resend, reroute = batch.settle(work)
                for call in [*alone_calls, *resend]:
                    await alone(call)
                if reroute:
                    await layout()
                calls += batch.rerouted(reroute)
                if not calls:
                    break
            for call in calls:
                await alone(call)
        except asyncio.CancelledError:
            # The rounds settled so far took tokens nobody will be told of (the one under way
            # gives its own back): net zero, as for a single call.
            _in_background(batch_given_back(batch, server.run_async))
            raise
        return batch.finished()
