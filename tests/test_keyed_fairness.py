"""Fair waiting per key: a keyed limiter's waiters on one key are served in the order they
arrive, and nobody starves.

As with ``RateLimiter`` (see ``test_limiter_fairness``), a waiter (``acquire``,
``acquire_async``) reserves its key's tokens at the moment they will be there, then sleeps until
that moment, so:

* a key's waiters are served in the order they reserved, with threads and with asyncio;
* a large request is never overtaken by a stream of small ones for the same key;
* a waiter that would wait longer than its ``timeout`` returns False at once, taking nothing;
* a waiter that is cancelled gives its turn back;
* a new key the full table has no room for still waits for room, then reserves;
* a table with a key reserved ahead of its clock pickles and comes back the same.

Threads here wait on a clock the test moves, so the order of service is checked exactly, with
no timing assertion.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from typing import Any

import pytest
import qos_support
from limiter_model import FakeClock
from protocol_in_code.qos import KeyedRateLimiter, LimitOutcome

MS = 10**6
SECOND = 10**9
HANG_SECONDS = 60


def emptied(limiter: KeyedRateLimiter, key: Any, burst: int) -> KeyedRateLimiter:
    assert limiter.try_acquire(key, burst) is True
    return limiter


def test_threads_are_served_in_the_order_they_reserved() -> None:
    clock = FakeClock(0)
    limiter = emptied(KeyedRateLimiter(1000, burst=1, clock=clock), "k", 1)  # 1 token per ms
    served: list[int] = []
    threads = []
    with qos_support.watchdog(HANG_SECONDS):
        for i in range(8):
            thread = threading.Thread(
                target=lambda i=i: (limiter.acquire("k"), served.append(i)), daemon=True
            )
            thread.start()
            threads.append(thread)
            # Waiter i has reserved once the next token is due after i + 1 of them.
            qos_support.wait_until(
                lambda i=i: limiter.peek("k", now_ns=0).wait_ns == (i + 2) * MS,
                f"waiter {i} reserved",
            )
        # Another key is not held up by this one's queue.
        assert limiter.acquire("other", timeout=0) is True
        for i in range(8):
            clock.advance(MS)  # waiter i's token is due: it, and only it, goes
            qos_support.wait_until(lambda i=i: len(served) == i + 1, f"waiter {i} served")
            assert served == list(range(i + 1))
        for thread in threads:
            thread.join(5)
    assert limiter.check("k", now_ns=8 * MS).outcome is LimitOutcome.DENIED
    assert limiter.stats.allowed == 1 + 8 + 1


def test_asyncio_waiters_are_served_in_the_order_they_arrived() -> None:
    limiter = emptied(KeyedRateLimiter(400, burst=1), ("user", 7), 1)  # a token every 2.5 ms
    served: list[int] = []

    async def waiter(i: int) -> None:
        assert await limiter.acquire_async(("user", 7)) is True
        served.append(i)

    async def main() -> None:
        await asyncio.gather(*(waiter(i) for i in range(10)))

    with qos_support.watchdog(HANG_SECONDS):
        asyncio.run(main())
    assert served == list(range(10))


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_large_request_is_not_starved_by_small_ones(kind: str) -> None:
    limiter = emptied(KeyedRateLimiter(200, burst=5), "k", 5)  # a token every 5 ms
    results: dict[str, Any] = {"small": 0}
    lock = threading.Lock()
    rounds = 20

    def small_loop() -> None:
        for _ in range(rounds):
            assert limiter.acquire("k", timeout=10) is True
            with lock:
                results["small"] += 1

    async def small_loop_async() -> None:
        for _ in range(rounds):
            assert await limiter.acquire_async("k", timeout=10) is True
            results["small"] += 1

    with qos_support.watchdog(HANG_SECONDS):
        if kind == "threads":
            smalls = [threading.Thread(target=small_loop, daemon=True) for _ in range(3)]
            for thread in smalls:
                thread.start()
            time.sleep(0.02)  # the small ones are already streaming
            results["large"] = limiter.acquire("k", 5, timeout=10)
            for thread in smalls:
                thread.join(20)
        else:

            async def main() -> None:
                tasks = [asyncio.create_task(small_loop_async()) for _ in range(3)]
                await asyncio.sleep(0.02)
                results["large"] = await limiter.acquire_async("k", 5, timeout=10)
                await asyncio.gather(*tasks)

            asyncio.run(main())
    assert results["large"] is True
    assert results["small"] == 3 * rounds


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_wait_longer_than_the_timeout_returns_false_at_once_and_reserves_nothing(
    kind: str,
) -> None:
    clock = FakeClock(0)
    limiter = emptied(KeyedRateLimiter(1, burst=3, clock=clock), "k", 3)

    def acquire(n: int, timeout: float) -> bool:
        if kind == "threads":
            return limiter.acquire("k", n, timeout=timeout)
        return asyncio.run(limiter.acquire_async("k", n, timeout=timeout))

    with qos_support.watchdog(HANG_SECONDS):
        assert acquire(2, 1.999) is False
        assert limiter.peek("k", now_ns=0).wait_ns == SECOND, "nothing was reserved"
        assert acquire(1, 0) is False
        with pytest.raises(ValueError, match="burst"):
            acquire(4, 10)
        clock.advance(2 * SECOND)
        assert acquire(2, 0) is True
    assert limiter.stats.denied == 3


def test_a_cancelled_async_waiter_gives_its_turn_back() -> None:
    clock = FakeClock(0)
    key = ("user", 1)
    limiter = emptied(KeyedRateLimiter(10, burst=1, clock=clock), key, 1)  # a token per 100 ms

    async def main() -> tuple[Any, Any]:
        first = asyncio.create_task(limiter.acquire_async(key))
        await asyncio.sleep(0.01)  # it has reserved the token due at 100 ms, and sleeps
        reserved = limiter.peek(key, now_ns=0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return reserved, limiter.peek(key, now_ns=0)

    with qos_support.watchdog(HANG_SECONDS):
        reserved, after = asyncio.run(main())
    assert reserved.wait_ns == 200 * MS  # behind the first waiter's token
    assert after.wait_ns == 100 * MS  # the first waiter's token is free again
    clock.advance(100 * MS)
    assert limiter.try_acquire(key) is True
    assert limiter.try_acquire(key) is False, "exactly one token was given back"


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_new_key_refused_by_a_full_table_waits_for_room_then_reserves(kind: str) -> None:
    clock = FakeClock(0)
    limiter = emptied(KeyedRateLimiter(10, burst=1, max_keys=1, clock=clock), "a", 1)
    assert limiter.acquire("b", timeout=0) is False, "no room, and no time to wait for it"
    assert limiter.stats.refused == 1
    done: list[bool] = []

    def waiter() -> None:
        if kind == "threads":
            done.append(limiter.acquire("b", timeout=30))
        else:
            done.append(asyncio.run(limiter.acquire_async("b", timeout=30)))

    with qos_support.watchdog(HANG_SECONDS):
        thread = threading.Thread(target=waiter, daemon=True)
        thread.start()
        qos_support.wait_until(lambda: limiter.stats.refused >= 2, "the waiter was refused")
        assert not done
        clock.advance(100 * MS)  # "a" is full again: its room is the waiter's
        qos_support.wait_until(lambda: bool(done), "the waiter got in")
        thread.join(5)
    assert done == [True]
    assert list(limiter) == ["b"]


def test_a_table_with_a_waiting_key_pickles_and_comes_back_the_same() -> None:
    clock = FakeClock(0)
    limiter = emptied(KeyedRateLimiter(1, burst=2, clock=clock), "k", 2)
    done: list[bool] = []
    with qos_support.watchdog(HANG_SECONDS):
        thread = threading.Thread(target=lambda: done.append(limiter.acquire("k", 2)), daemon=True)
        thread.start()
        qos_support.wait_until(
            lambda: limiter.peek("k", now_ns=0).wait_ns == 3 * SECOND, "the waiter reserved"
        )
        copy = pickle.loads(pickle.dumps(limiter))
        clock.advance(2 * SECOND)
        thread.join(10)
    assert done == [True]
    for table in (limiter, copy):
        assert table.peek("k", now_ns=0).wait_ns == 3 * SECOND
        assert table.check("k", now_ns=3 * SECOND).outcome is LimitOutcome.ALLOWED
