"""What a limiter does that is Python by nature: awaiting in asyncio, and decorating functions.

The limiters themselves are native classes, so that their hot calls (``try_acquire`` above all)
cost one native method call and nothing more. Their ``acquire_async``, ``async with`` and
decorator forms call the functions here: a coroutine, and a wrapper that tells ``def`` from
``async def``, are easiest to write, read and keep right in Python. Every decision they wait for
is still the native ``check``.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from protocol_in_code._native import Decision, LimitOutcome


class _Blocking(Protocol):
    def acquire(self) -> bool: ...
    def acquire_async(self) -> Awaitable[bool]: ...


async def await_allowed(
    check: Callable[..., Decision], args: tuple[Any, ...], n: int, timeout: float | None
) -> bool:
    """Call ``check(*args)`` (which takes if allowed) until it allows, sleeping for its wait.

    False if ``timeout`` seconds pass first; ValueError if the answer is NEVER.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + seconds(timeout)
    while True:
        decision = check(*args)
        if decision.outcome is LimitOutcome.ALLOWED:
            return True
        if decision.wait_ns is None:  # NEVER
            raise ValueError(f"n={n} is more than a band's burst: it can never be acquired")
        delay = decision.wait_ns / 1e9
        if deadline is not None:
            left = deadline - loop.time()
            if left <= 0:
                return False
            delay = min(delay, left)
        await asyncio.sleep(delay)


class _Reserving(Protocol):
    def _reserve(self, n: int, timeout: float | None) -> int | None: ...
    def _until(self, at_ns: int) -> int: ...
    def _give_back(self, n: int) -> None: ...


async def await_reserved(limiter: _Reserving, n: int, timeout: float | None) -> bool:
    """Reserve ``n`` tokens, then sleep until they are there: the limiter books them at the
    moment they arrive, so waiters are served in the order they reserved.

    False, taking nothing, if that moment is more than ``timeout`` seconds away; ValueError if
    ``n`` is more than a band's burst. A waiter cancelled while it sleeps gives its tokens back.
    """
    at_ns = limiter._reserve(n, timeout)
    if at_ns is None:
        return False
    try:
        while left_ns := limiter._until(at_ns):
            await asyncio.sleep(left_ns / 1e9)
    except BaseException:
        limiter._give_back(n)
        raise
    return True


def seconds(timeout: float) -> float:
    """A timeout as ``acquire`` accepts it: a number of seconds, finite and >= 0."""
    if isinstance(timeout, (bool, str, bytes)):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}") from None
    if not 0 <= value < float("inf"):
        raise ValueError(
            f"timeout must be a finite number of seconds >= 0 (None waits for ever), "
            f"not {timeout!r}"
        )
    return value


def decorate(limiter: _Blocking, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` (``def`` or ``async def``), taking one token from ``limiter`` per call."""
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def limited_async(*args: Any, **kwargs: Any) -> Any:
            await limiter.acquire_async()
            return await function(*args, **kwargs)

        return limited_async

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
