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

from protocol_in_code._native import Band, Decision, LimitOutcome, RateLimiter

__all__ = ["Band", "Decision", "LimitOutcome", "RateLimiter"]
