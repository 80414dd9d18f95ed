"""What a limiter does that is Python by nature: awaiting in asyncio, and decorating functions.

The limiters themselves are native classes, so that their hot calls (``try_acquire`` above all)
cost one native method call and nothing more. Their ``acquire_async``, ``async with`` and
decorator forms call the functions here: a coroutine, and a wrapper that tells ``def`` from
``async def``, are easiest to write, read and keep right in Python. Every decision they wait for
is still native: a reservation, and the limiter's clock.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Any, Protocol, TypeAlias

from protocol_in_code._native import Lease, _timeout_seconds


class _Blocking(Protocol):
    def acquire(self) -> bool: ...
    def acquire_async(self) -> Awaitable[bool]: ...


class _Reserving(Protocol):
    def _reserve(self, n: int, timeout: float | None) -> int | None: ...
    def _until(self, at_ns: int) -> int: ...
    def _give_back(self, n: int, at_ns: int) -> None: ...


class _ReservingPerKey(Protocol):
    def _reserve(
        self, key: Any, n: int, timeout: float | None, *, plan: str | None = None
    ) -> tuple[bool, int] | None: ...
    def _until(self, at_ns: int) -> int: ...
    def _give_back(self, key: Any, n: int, at_ns: int, *, plan: str | None = None) -> None: ...


#: What one reservation found, as every deadline loop reads it: ``(True, at_ns)`` once reserved
#: (the turn, ``at_ns`` on the limiter's clock), ``(False, retry_ns)`` if refused for now (a
#: full table, or a server that could not answer: try again after that long), None if too late.
Turn: TypeAlias = tuple[bool, int] | None


async def await_reserved(limiter: _Reserving, n: int, timeout: float | None) -> bool:
    """Reserve ``n`` tokens, then sleep until they are there: the limiter books them at the
    moment they arrive, so waiters are served in the order they reserved.

    False, taking nothing, if that moment is more than ``timeout`` seconds away; ValueError if
    ``n`` is more than a band's burst. A waiter cancelled while it sleeps hands its turn back
    if nobody queued behind it, and otherwise forfeits it (see ``Limiter::give_back``).
    """

    async def reserve(left: float | None) -> Turn:
        at_ns = limiter._reserve(n, left)
        return None if at_ns is None else (True, at_ns)

    give_back = functools.partial(limiter._give_back, n)
    return await await_turn(reserve, limiter._until, give_back, timeout)


async def await_reserved_for(
    limiter: _ReservingPerKey, key: Any, n: int, timeout: float | None, plan: str | None = None
) -> bool:
    """``await_reserved`` for one key of a keyed limiter: reserve ``n`` tokens for ``key``, then
    sleep until they are there, so the key's waiters are served in the order they reserved.

    A key the table has no room for is refused, taking nothing: the waiter sleeps until room
    may appear and tries again, as long as ``timeout`` allows. False, taking nothing, once the
    tokens would be there later than ``timeout`` seconds from the start (or room has not come
    by then); ValueError if ``n`` is more than a band's burst. With ``plan``, the key's
    tokens are those of its state under that plan.
    """

    async def reserve(left: float | None) -> Turn:
        return limiter._reserve(key, n, left, plan=plan)

    give_back = functools.partial(limiter._give_back, key, n, plan=plan)
    return await await_turn(reserve, limiter._until, give_back, timeout)


async def await_turn(
    reserve: Callable[[float | None], Awaitable[Turn]],
    until: Callable[[int], int],
    give_back: Callable[[int], object],
    timeout: Any,
) -> bool:
    """The one deadline loop of every ``acquire_async``, native or Redis: the asyncio form of
    the native blocking loop (``wait_for_turn`` in ``src/python/waiting.rs``), over the same
    three questions.

    ``reserve(left)`` reserves with what is left of ``timeout`` (None: no deadline) and says
    what it found (a :data:`Turn`); after a refusal the loop sleeps (at most until the
    deadline) and reserves again, while time is left. Once reserved, it sleeps until the turn
    (``until(at_ns)`` says how far the limiter's clock is from it), calling ``give_back(at_ns)``
    if cancelled meanwhile. ``timeout`` is read first, by the one native check every form uses.
    """
    left = None if timeout is None else seconds(timeout)
    loop = asyncio.get_running_loop()
    deadline = None if left is None else loop.time() + left
    while True:
        reserved = await reserve(left)
        if reserved is None:
            return False
        taken, ns = reserved
        if taken:
            await _sleep_until(until, ns, functools.partial(give_back, ns))
            return True
        delay = ns / 1e9
        if deadline is not None:
            left = deadline - loop.time()
            if left <= 0:
                return False
            delay = min(delay, left)
        await asyncio.sleep(delay)
        if deadline is not None:
            left = max(deadline - loop.time(), 0.0)


async def _sleep_until(
    until: Callable[[int], int], at_ns: int, give_back: Callable[[], object]
) -> None:
    """Sleep until the limiter's clock reaches ``at_ns`` (``until`` says how far it is); a
    waiter cancelled meanwhile calls ``give_back`` before the cancellation goes on."""
    try:
        while left_ns := until(at_ns):
            await asyncio.sleep(left_ns / 1e9)
    except BaseException:
        give_back()
        raise


def seconds(timeout: float) -> float:
    """A timeout as every ``acquire`` form accepts it: a number of seconds, finite and >= 0,
    read by the same native check as the native forms, so that each raises the same error."""
    return _timeout_seconds(timeout)


def decorate(limiter: _Blocking, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, taking one token from ``limiter`` each time its body starts to run.

    The token is taken when the body would begin, so a call that never runs its body takes
    nothing, whatever kind of function it is:

    * ``def``: at the call, blocking as ``acquire()`` does.
    * ``async def``: when the coroutine is first awaited, awaiting ``acquire_async()``.
    * ``async def`` with ``yield`` (an async generator): at the first iteration (the first
      ``__anext__``/``asend``), awaiting ``acquire_async()``, so the event loop runs other tasks
      meanwhile. ``inspect.iscoroutinefunction`` is False for these, which is why they are told
      apart first: a blocking ``acquire`` there would stall the whole loop.
    * ``def`` with ``yield`` (a generator): at the first ``next()``, blocking as ``acquire()``
      does.

    One token per call in every case: the items a generator yields after the first are not
    limited. The wrappers are of the same kind as ``function`` (``inspect`` says so), and a
    generator's ``send``, ``throw`` and ``close`` reach the wrapped one.
    """
    if inspect.isasyncgenfunction(function):

        @functools.wraps(function)
        async def limited_async_generator(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            await limiter.acquire_async()
            # What `yield from` does for a generator, which an async generator has no
            # statement for: every value sent and every exception thrown in goes on to the
            # wrapped generator, and closing this one closes it.
            inner = function(*args, **kwargs)
            try:
                item = await inner.__anext__()
                while True:
                    try:
                        sent = yield item
                    except GeneratorExit:
                        raise
                    except BaseException as thrown:
                        item = await inner.athrow(thrown)
                    else:
                        item = await inner.asend(sent)
            except StopAsyncIteration:
                return
            finally:
                await inner.aclose()

        return limited_async_generator

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def limited_async(*args: Any, **kwargs: Any) -> Any:
            await limiter.acquire_async()
            return await function(*args, **kwargs)

        return limited_async

    if inspect.isgeneratorfunction(function):

        @functools.wraps(function)
        def limited_generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            limiter.acquire()
            return (yield from function(*args, **kwargs))

        return limited_generator

    @functools.wraps(function)
    def limited(*args: Any, **kwargs: Any) -> Any:
        limiter.acquire()
        return function(*args, **kwargs)

    return limited


async def enter_async(limiter: _Blocking) -> Any:
    """``async with limiter``: take one token, awaiting until allowed."""
    await limiter.acquire_async()
    return limiter


async def exit_async() -> None:
    """Leaving ``async with limiter`` gives nothing back: the token was spent."""
    return None


# In-flight limits. Their waiters wait for seats given back, not for a time: a waiter stands in
# the limiter's line, and whoever gives seats back wakes it through its loop.


class _Seating(Protocol):
    def try_acquire(self, *args: Any) -> Any: ...
    def _ask(self, *args: Any) -> Any: ...


def _wake(woken: asyncio.Future[None]) -> None:
    """Run by the task's loop when its place was decided (or room may have appeared)."""
    if not woken.done():
        woken.set_result(None)


async def await_lease(limiter: _Seating, args: tuple[Any, ...], timeout: Any) -> Any:
    """``acquire_async``: a ``Lease`` for ``args`` (``(n,)``, or ``(key, n)``), or None once
    ``timeout`` seconds have passed.

    Seated at once if the seats are free and nobody waits; otherwise the task takes a place in
    the limiter's one line (threads stand in it too) and sleeps until whoever gives seats back
    wakes it, with ``loop.call_soon_threadsafe``, from any thread. A new key in a full keyed
    table is refused for now: the task sleeps until a key is forgotten and asks again.

    Cancel-safe: a task cancelled (or timed out) while in line leaves the line, letting those
    behind it in, and gives back the seats if it was seated meanwhile. A timeout that passes
    just as the seats came gives the lease rather than None.
    """
    left = None if timeout is None else seconds(timeout)
    lease = limiter.try_acquire(*args)
    if lease is not None or left == 0:
        return lease
    loop = asyncio.get_running_loop()
    deadline = None if left is None else loop.time() + left
    while True:
        woken = loop.create_future()
        waiter = limiter._ask(*args, functools.partial(loop.call_soon_threadsafe, _wake, woken))
        if isinstance(waiter, Lease):
            return waiter  # seated at once
        try:
            if deadline is None:
                await woken
            else:
                await asyncio.wait_for(woken, max(deadline - loop.time(), 0.0))
        except asyncio.TimeoutError:
            return None if waiter is None else waiter._leave()
        except BaseException:
            if waiter is not None:
                _give_up(waiter)
            raise
        if waiter is not None:
            return waiter._take()


def _give_up(waiter: Any) -> None:
    """A cancelled waiter's place given up: it holds nothing after, even if it was seated or
    refused meanwhile (the cancellation is what goes on)."""
    try:
        lease = waiter._leave()
    except ValueError:
        return
    if lease is not None:
        lease.release()


def hold_while_running(limiter: Any, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function``, holding one seat of ``limiter`` while its body runs: from the call (a
    ``def``), or from the first await (an ``async def``), to its return or exception; a
    generator holds it from its first iteration to its end. The seat is given back however the
    body ends. An async generator is refused: hold a lease inside it instead, where its own
    code says when the work is done."""
    if inspect.isasyncgenfunction(function):
        raise TypeError(
            f"an in-flight limit cannot decorate the async generator {function.__qualname__}: "
            "hold a lease inside it (async with limiter: or await limiter.acquire_async())"
        )

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def held_async(*args: Any, **kwargs: Any) -> Any:
            with await limiter.acquire_async():
                return await function(*args, **kwargs)

        return held_async

    if inspect.isgeneratorfunction(function):

        @functools.wraps(function)
        def held_generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            with limiter.acquire():
                return (yield from function(*args, **kwargs))

        return held_generator

    @functools.wraps(function)
    def held(*args: Any, **kwargs: Any) -> Any:
        with limiter.acquire():
            return function(*args, **kwargs)

    return held


async def enter_held_async(limiter: Any) -> Any:
    """``async with limiter`` on an in-flight limit: hold one seat for the block, given back by
    ``exit_held_async``."""
    (await limiter.acquire_async())._keep()
    return limiter


async def exit_held_async(limiter: Any) -> None:
    """Leaving ``async with limiter``: the block's seat is given back."""
    limiter._release(1)
