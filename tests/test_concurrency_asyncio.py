"""In-flight limits under asyncio: waiters cancelled at random hold nothing after and leave
nobody stuck; timeouts; a smaller limit refusing a waiter; ``async with`` and the decorator."""

from __future__ import annotations

import asyncio
import gc
import random

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.concurrency")

from protocol_in_code.qos import ConcurrencyLimiter, KeyedConcurrencyLimiter


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), limit=st.integers(1, 4))
def test_waiters_cancelled_at_random_leave_nothing_held_and_nobody_stuck(
    seed: int, limit: int
) -> None:
    rng = random.Random(seed)
    limiter = ConcurrencyLimiter(limit)
    now, most, finished = [0], [0], [0]

    async def work(n: int) -> None:
        lease = await limiter.acquire_async(n)
        assert lease is not None
        with lease:
            now[0] += n
            most[0] = max(most[0], now[0])
            try:
                await asyncio.sleep(rng.random() / 1000)
            finally:
                now[0] -= n
        finished[0] += 1

    async def main() -> None:
        tasks = [asyncio.create_task(work(rng.randint(1, limit))) for _ in range(30)]
        for _ in range(10):
            await asyncio.sleep(rng.random() / 2000)
            rng.choice(tasks).cancel()
        done, pending = await asyncio.wait(tasks, timeout=30)
        assert not pending, "a waiter was left stuck"
        cancelled = sum(task.cancelled() for task in done)
        assert finished[0] + cancelled == 30
        for task in done:
            if not task.cancelled():
                assert task.exception() is None

    asyncio.run(main())
    assert most[0] <= limit
    assert (limiter.in_flight, limiter.waiting) == (0, 0)


def test_a_timeout_gives_none_and_passes_the_turn_on() -> None:
    async def main() -> None:
        limiter = ConcurrencyLimiter(2)
        held = await limiter.acquire_async()
        assert held is not None
        big = asyncio.create_task(limiter.acquire_async(2, timeout=0.05))
        await asyncio.sleep(0)
        small = asyncio.create_task(limiter.acquire_async(1))
        await asyncio.sleep(0)
        assert limiter.waiting == 2
        assert await big is None  # gave up: the small one behind it is seated
        lease = await asyncio.wait_for(small, 10)
        assert lease is not None and lease.n == 1
        assert limiter.in_flight == 2
        assert await limiter.acquire_async(timeout=0) is None  # never waits
        lease.release()
        held.release()
        assert (limiter.in_flight, limiter.waiting) == (0, 0)

    asyncio.run(main())


def test_a_cancelled_head_lets_the_next_in() -> None:
    async def main() -> None:
        limiter = ConcurrencyLimiter(3)
        held = limiter.try_acquire(2)
        big = asyncio.create_task(limiter.acquire_async(3))
        await asyncio.sleep(0)
        small = asyncio.create_task(limiter.acquire_async(1))
        await asyncio.sleep(0)
        big.cancel()
        lease = await asyncio.wait_for(small, 10)
        assert lease is not None and limiter.in_flight == 3
        with pytest.raises(asyncio.CancelledError):
            await big
        assert held is not None

    asyncio.run(main())


def test_a_smaller_limit_refuses_a_waiter_that_could_never_fit() -> None:
    async def main() -> None:
        limiter = ConcurrencyLimiter(3)
        held = limiter.try_acquire(3)
        waiter = asyncio.create_task(limiter.acquire_async(3))
        await asyncio.sleep(0)
        limiter.resize(2)
        with pytest.raises(ValueError, match="n=3 is more than the limit of 2"):
            await asyncio.wait_for(waiter, 10)
        assert limiter.in_flight == 3  # nobody evicted
        assert held is not None
        held.release()
        assert (limiter.in_flight, limiter.waiting) == (0, 0)

    asyncio.run(main())


def test_async_with_and_the_decorator_hold_one_seat() -> None:
    limiter = ConcurrencyLimiter(1)

    @limiter
    async def work() -> int:
        await asyncio.sleep(0)
        return limiter.in_flight

    async def main() -> None:
        async with limiter:
            assert limiter.in_flight == 1
        assert limiter.in_flight == 0
        assert await asyncio.gather(work(), work(), work()) == [1, 1, 1]
        assert limiter.in_flight == 0

    asyncio.run(main())

    async def generator() -> object:
        yield 1

    with pytest.raises(TypeError, match="async generator"):
        limiter(generator)


def test_a_keyed_task_waits_for_room_and_its_key() -> None:
    async def main() -> None:
        limiter = KeyedConcurrencyLimiter(1, max_keys=1)
        a = await limiter.acquire_async("a")
        assert a is not None
        waiting_b = asyncio.create_task(limiter.acquire_async("b", timeout=10))
        waiting_a = asyncio.create_task(limiter.acquire_async("a", timeout=10))
        await asyncio.sleep(0.01)
        assert not waiting_b.done()
        a.release()
        first = await asyncio.wait_for(waiting_a, 10)  # "a" had a line: seated first
        assert first is not None
        first.release()
        b = await asyncio.wait_for(waiting_b, 10)  # then "a" is forgotten: room for "b"
        assert b is not None
        assert await limiter.acquire_async("c", timeout=0.01) is None
        b.release()
        assert (len(limiter), limiter.in_flight) == (0, 0)

    asyncio.run(main())


def test_a_task_cancelled_while_holding_a_lease_gives_it_back() -> None:
    async def main() -> None:
        limiter = ConcurrencyLimiter(1)
        started = asyncio.Event()

        async def holder() -> None:
            lease = await limiter.acquire_async()  # no `with`: only the lease's drop releases
            started.set()
            await asyncio.sleep(30)
            assert lease is not None

        task = asyncio.create_task(holder())
        await started.wait()
        assert limiter.in_flight == 1
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        del task  # its cancellation's traceback held the frame, and so the lease
        gc.collect()
        assert limiter.in_flight == 0

    asyncio.run(main())
