"""Fair waiting: waiters are served in the order they arrive, and nobody starves.

A waiter (``acquire``, ``acquire_async``, ``with``, the decorator) reserves its tokens at the
moment they will be there, as GCRA books a request at its theoretical arrival time, then
sleeps until that moment. Whoever comes later is answered from the end of the reservations
already made, so:

* waiters are served in the order they reserved, with threads and with asyncio;
* a large request is never overtaken by a stream of small ones;
* a waiter that would wait longer than its ``timeout`` returns False at once, taking nothing;
* a waiter that is cancelled or interrupted, with nobody queued behind it, gives its turn
  back: nobody gets those tokens before their turn, and none is lost (with others behind it,
  its turn is forfeited: see test_waiters_giving_up.py).

Threads here wait on a clock the test moves (the limiter's clock decides when a reservation
is due), so the order of service is checked exactly, with no timing assertion.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import qos_support
from limiter_model import FakeClock
from protocol_in_code.qos import LimitOutcome, RateLimiter

MS = 10**6
HANG_SECONDS = 60


def test_threads_are_served_in_the_order_they_reserved() -> None:
    clock = FakeClock(0)
    limiter = RateLimiter(1000, burst=1, initial=0, start_ns=0, clock=clock)  # 1 token per ms
    served: list[int] = []
    threads = []
    with qos_support.watchdog(HANG_SECONDS):
        for i in range(8):
            thread = threading.Thread(
                target=lambda i=i: (limiter.acquire(), served.append(i)), daemon=True
            )
            thread.start()
            threads.append(thread)
            # Waiter i has reserved once the next token is due after i + 1 of them.
            qos_support.wait_until(
                lambda i=i: limiter.peek(now_ns=0).wait_ns == (i + 2) * MS, f"waiter {i} reserved"
            )
        for i in range(8):
            clock.advance(MS)  # waiter i's token is due: it, and only it, goes
            qos_support.wait_until(lambda i=i: len(served) == i + 1, f"waiter {i} served")
            assert served == list(range(i + 1))
        for thread in threads:
            thread.join(5)
    assert limiter.check(now_ns=8 * MS).outcome is LimitOutcome.DENIED


def test_asyncio_waiters_are_served_in_the_order_they_arrived() -> None:
    limiter = RateLimiter(400, burst=1, initial=0)  # a token every 2.5 ms
    served: list[int] = []

    async def waiter(i: int) -> None:
        assert await limiter.acquire_async() is True
        served.append(i)

    async def main() -> None:
        await asyncio.gather(*(waiter(i) for i in range(10)))

    with qos_support.watchdog(HANG_SECONDS):
        asyncio.run(main())
    assert served == list(range(10))


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_large_request_is_not_starved_by_small_ones(kind: str) -> None:
    limiter = RateLimiter(200, burst=5, initial=0)  # a token every 5 ms
    results: dict[str, Any] = {"small": 0}
    lock = threading.Lock()
    rounds = 20

    def small_loop() -> None:
        for _ in range(rounds):
            assert limiter.acquire(timeout=10) is True
            with lock:
                results["small"] += 1

    async def small_loop_async() -> None:
        for _ in range(rounds):
            assert await limiter.acquire_async(timeout=10) is True
            results["small"] += 1

    with qos_support.watchdog(HANG_SECONDS):
        if kind == "threads":
            smalls = [threading.Thread(target=small_loop, daemon=True) for _ in range(3)]
            for thread in smalls:
                thread.start()
            time.sleep(0.02)  # the small ones are already streaming
            results["large"] = limiter.acquire(5, timeout=10)
            for thread in smalls:
                thread.join(20)
        else:

            async def main() -> None:
                tasks = [asyncio.create_task(small_loop_async()) for _ in range(3)]
                await asyncio.sleep(0.02)
                results["large"] = await limiter.acquire_async(5, timeout=10)
                await asyncio.gather(*tasks)

            asyncio.run(main())
    assert results["large"] is True
    assert results["small"] == 3 * rounds


def test_a_wait_longer_than_the_timeout_returns_false_at_once_and_reserves_nothing() -> None:
    clock = FakeClock(0)
    limiter = RateLimiter(1, burst=3, initial=0, start_ns=0, clock=clock)
    assert limiter.acquire(2, timeout=1.999) is False
    assert limiter.peek(now_ns=0).wait_ns == 10**9, "nothing was reserved"
    assert limiter.acquire(1, timeout=0) is False
    clock.advance(2 * 10**9)
    assert limiter.acquire(2, timeout=0) is True


def test_a_cancelled_async_waiter_gives_its_turn_back() -> None:
    clock = FakeClock(0)
    limiter = RateLimiter(10, burst=1, initial=0, start_ns=0, clock=clock)  # a token per 100 ms

    async def main() -> tuple[Any, Any]:
        first = asyncio.create_task(limiter.acquire_async())
        await asyncio.sleep(0.01)  # it has reserved the token due at 100 ms, and sleeps
        reserved = limiter.peek(now_ns=0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return reserved, limiter.peek(now_ns=0)

    with qos_support.watchdog(HANG_SECONDS):
        reserved, after = asyncio.run(main())
    assert reserved.wait_ns == 200 * MS  # behind the first waiter's token
    assert after.wait_ns == 100 * MS  # the first waiter's token is free again
    clock.advance(100 * MS)
    assert limiter.try_acquire() is True
    assert limiter.try_acquire() is False, "exactly one token was given back"
