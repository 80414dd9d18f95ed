"""From the toy to the real thing: an exact rate limiter on a nanosecond clock.

The course's token bucket settles lazily: nothing runs between calls, and each call first
settles the balance for the time elapsed, then decides. :class:`RateLimiter` keeps that idea and
removes the toy's three limits:

* **A real clock.** Time is integer nanoseconds from ``time.monotonic_ns`` (read natively), or
  from any clock you inject, or given explicitly to every call as ``now_ns``. A new limiter is
  full and starts counting at its first call, unless given ``start_ns``.
* **Exact arithmetic.** A rate is an exact fraction of tokens per second (an int, ``Fraction``,
  ``Decimal`` or numeric string; a float is read through its shortest repr, so ``0.1`` means
  exactly 1/10). Balances are integers in units of a fraction of a token chosen so that accrual
  never leaves a remainder: many small steps settle to exactly what one step gives, forever,
  with no float anywhere in a decision.
* **No trust in the caller.** A clock that goes backwards adds nothing and never moves the
  settlement point back; idle for centuries, a balance is simply full; bad configuration or
  arguments raise ``ValueError``/``TypeError`` naming the parameter, and change nothing.

A decision is one of three, never confused: ALLOWED (taken), DENIED with the exact ``wait_ns``
until the same request would pass (one nanosecond earlier it would not), or NEVER (more than a
band can ever hold). Several bands (say, 10 per second and 1000 per hour) are consumed
all-or-nothing.

Usage::

    limiter = RateLimiter(10)            # 10 per second, bursts of up to 10

    if limiter.try_acquire():            # non-blocking
        ...
    limiter.acquire()                    # sleeps (without holding the GIL) until allowed
    await limiter.acquire_async()        # the same, for asyncio

    @limiter                             # a decorator, for def and async def
    def call_api(): ...

    with limiter: ...                    # a context manager (async with, too)

    both = RateLimiter(bands=[Band(10, burst=10), Band(1000, per=3600)])
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from protocol_in_code._native import Decision, LimitOutcome, NativeRateLimiter

__all__ = ["Band", "Decision", "LimitOutcome", "RateLimiter"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Band:
    """One limit: ``rate`` tokens per ``per`` seconds, holding at most ``burst`` tokens.

    ``burst`` defaults to the rate rounded up (the tokens one period brings).
    """

    rate: Any
    burst: int | None = None
    per: Any = 1


class _PicklesAttributes:
    """Pickles a native limiter's own state, plus any attributes set on the instance."""

    def __reduce__(self) -> tuple[Any, ...]:
        # The native class's (rebuild, args, state), beside which this class sits in the MRO.
        rebuild, args, state = cast("tuple[Any, Any, Any]", super().__reduce__())
        return rebuild, args, (state, dict(vars(self)))

    def __setstate__(self, state: Any) -> None:
        native_state, attributes = state
        super().__setstate__(native_state)  # type: ignore[misc]
        vars(self).update(attributes)


class RateLimiter(_PicklesAttributes, NativeRateLimiter):
    """An exact rate limiter of one or more bands.

    ``RateLimiter(rate, burst=None, *, per=1, bands=None, initial=None, start_ns=None,
    clock=None)``: either one band from ``rate``/``burst``/``per``, or ``bands``, a list of
    :class:`Band` (or ``(rate, burst)`` / ``(rate, burst, per)`` tuples). ``initial`` is the
    starting number of tokens (default: full); ``clock`` a callable returning int nanoseconds
    (default: ``time.monotonic_ns``).

    Methods (each takes ``now_ns=`` to override the clock): ``try_acquire(n=1) -> bool``,
    ``check(n=1) -> Decision`` (takes if allowed), ``peek(n=1) -> Decision`` (takes nothing),
    ``refund(n=1)``, ``available() -> int``, blocking ``acquire(n=1, timeout=None) -> bool`` and
    ``await acquire_async(n=1, timeout=None)``. Thread-safe: decisions are exact under any
    contention, and a thread sleeping in ``acquire`` holds neither the GIL nor the limiter.
    """

    async def acquire_async(self, n: int = 1, timeout: float | None = None) -> bool:
        """Take ``n`` tokens, awaiting until allowed; False if ``timeout`` seconds pass first.

        Raises ValueError if ``n`` exceeds a band's burst (no wait would ever be enough).
        """
        return await _await_allowed(lambda: self.check(n), n, timeout)

    def __call__(self, function: F) -> F:
        """Decorate a function (``def`` or ``async def``) to take one token before each call."""
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def limited_async(*args: Any, **kwargs: Any) -> Any:
                await self.acquire_async()
                return await function(*args, **kwargs)

            return limited_async  # type: ignore[return-value]

        @functools.wraps(function)
        def limited(*args: Any, **kwargs: Any) -> Any:
            self.acquire()
            return function(*args, **kwargs)

        return limited  # type: ignore[return-value]

    def __enter__(self) -> RateLimiter:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None

    async def __aenter__(self) -> RateLimiter:
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        return None


async def _await_allowed(check: Callable[[], Decision], n: int, timeout: float | None) -> bool:
    """Call ``check`` (which takes if allowed) until it allows, sleeping for the wait it gives.

    False if ``timeout`` seconds pass first; ValueError if the answer is NEVER.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + _seconds(timeout)
    while True:
        decision = check()
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


def _seconds(timeout: float) -> float:
    """A timeout as ``acquire`` accepts it: a number of seconds, finite and >= 0."""
    if isinstance(timeout, (bool, str, bytes)):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}") from None
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"timeout must be a finite number of seconds >= 0, not {timeout!r}")
    return seconds
