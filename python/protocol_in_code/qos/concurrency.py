"""How many at once: in-flight limits, for threads and asyncio tasks in one process.

A rate limit says how often; an in-flight limit says how many at once: at most ``limit`` seats
held at any moment, each holder giving its seats back when its work is done. This is what
nginx's ``limit_conn`` and a semaphore do, with four promises more:

* **Weighted.** ``acquire(n)`` takes ``n`` seats at once, all or none.
* **First come, first seated.** Waiters, threads and tasks alike, stand in one line; seats
  given back go to its head first, so a large request is never overtaken by smaller ones.
  A waiter that gives up (a timeout, a cancelled task) holds nothing after, and passes its turn
  on.
* **Fencing tokens.** Every ``Lease`` has a ``token``, strictly increasing per limit.
* **Resizing evicts nobody.** ``resize(limit)`` takes effect at once; holders keep their
  seats.

Usage::

    limiter = ConcurrencyLimiter(4)          # at most 4 at once

    with limiter.acquire() as lease:         # waits for a seat (the GIL released)
        ...
    lease = limiter.try_acquire()            # never waits: a Lease, or None
    with await limiter.acquire_async():      # the asyncio form, in an async def
        ...
    with limiter: ...                        # one seat for the block (async with, too)

    @limiter                                 # one seat while each call runs
    async def call_model(): ...

    per_client = KeyedConcurrencyLimiter(2, max_keys=10_000)
    with per_client.acquire("client-7"): ...

A lease dropped without release (an exception, a cancelled task, a lost reference) gives its
seats back. The rules themselves are ``src/core/seats.rs``.
"""

from __future__ import annotations

from protocol_in_code._native import ConcurrencyLimiter, KeyedConcurrencyLimiter, Lease

__all__ = ["ConcurrencyLimiter", "KeyedConcurrencyLimiter", "Lease"]
