"""The shared in-flight limiters' surface in one process: asyncio waiters cancelled at random,
threads, ``with``, ``async with`` and the decorator, errors that name the value, and the
interfaces they declare (checked by mypy)."""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
from pathlib import Path

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")

from protocol_in_code.qos import (
    KeyedConcurrencyLimiter,
    SharedConcurrencyLimiter,
    SharedKeyedConcurrencyLimiter,
)

NAMES = itertools.count()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seats-api")
    path.chmod(0o700)
    return path


def one(folder: Path, limit: int) -> SharedConcurrencyLimiter:
    return SharedConcurrencyLimiter(f"api-{next(NAMES)}", limit, path=folder)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), limit=st.integers(1, 4))
def test_waiters_cancelled_at_random_leave_nothing_held_and_nobody_stuck(
    folder: Path, seed: int, limit: int
) -> None:
    rng = random.Random(seed)
    limiter = one(folder, limit)
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
        tasks = [asyncio.create_task(work(rng.randint(1, limit))) for _ in range(20)]
        for _ in range(8):
            await asyncio.sleep(rng.random() / 2000)
            rng.choice(tasks).cancel()
        done, pending = await asyncio.wait(tasks, timeout=60)
        assert not pending, "a waiter was left stuck"
        assert finished[0] + sum(task.cancelled() for task in done) == 20

    asyncio.run(main())
    assert most[0] <= limit
    assert (limiter.in_flight, limiter.waiting) == (0, 0)


def test_a_timeout_gives_none_holding_nothing_and_passes_the_turn_on(folder: Path) -> None:
    limiter = one(folder, 2)
    held = limiter.try_acquire()
    assert held is not None

    async def main() -> None:
        assert await limiter.acquire_async(2, timeout=0.01) is None
        assert limiter.waiting == 0
        small = await limiter.acquire_async(1, timeout=1)  # the big one no longer ahead
        assert small is not None
        small.release()

    asyncio.run(main())
    assert limiter.acquire(2, timeout=0.01) is None
    held.release()
    assert limiter.in_flight == 0


def test_threads_are_seated_in_the_order_they_came(folder: Path) -> None:
    limiter = one(folder, 1)
    first = limiter.try_acquire()
    assert first is not None
    order: list[int] = []

    def wait(i: int) -> None:
        lease = limiter.acquire(timeout=60)
        assert lease is not None
        order.append(i)
        lease.release()

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=wait, args=(i,)))
        threads[-1].start()
        while limiter.waiting != i + 1:  # in line before the next one comes
            threading.Event().wait(0.001)
    first.release()
    for thread in threads:
        thread.join(60)
    assert order == [0, 1, 2, 3]


def test_with_async_with_and_the_decorator_hold_one_seat(folder: Path) -> None:
    limiter = one(folder, 2)
    with limiter:
        assert limiter.in_flight == 1
    seen: list[int] = []

    @limiter
    def call() -> None:
        seen.append(limiter.in_flight)

    @limiter
    async def call_async() -> None:
        seen.append(limiter.in_flight)

    async def main() -> None:
        async with limiter:
            seen.append(limiter.in_flight)
        await call_async()

    call()
    asyncio.run(main())
    assert seen == [1, 1, 1]
    assert limiter.in_flight == 0


def test_errors_name_the_value(folder: Path) -> None:
    limiter = one(folder, 2)
    with pytest.raises(ValueError, match="n=3 is more than the limit of 2"):
        limiter.try_acquire(3)
    with pytest.raises(ValueError, match="limit must be at least 1, not 0"):
        SharedConcurrencyLimiter("zero", 0, path=folder)
    with pytest.raises(ValueError, match="cannot name a table"):
        SharedConcurrencyLimiter("no/slash", 1, path=folder)
    keyed = SharedKeyedConcurrencyLimiter("keys", 1, max_keys=2, path=folder)
    with pytest.raises(TypeError, match="cannot tell an object apart"):
        keyed.try_acquire(object())
    with pytest.raises(ValueError, match="max_keys must be from 1"):
        SharedKeyedConcurrencyLimiter("keys", 1, max_keys=0, path=folder)


def test_a_new_key_in_a_full_table_waits_for_room(folder: Path) -> None:
    keyed = SharedKeyedConcurrencyLimiter("room", 1, max_keys=1, path=folder)
    held = keyed.try_acquire("a")
    assert held is not None and len(keyed) == 1
    assert keyed.try_acquire("b") is None
    threading.Timer(0.05, held.release).start()
    lease = keyed.acquire("b", timeout=60)
    assert lease is not None and lease.token > held.token
    assert repr(keyed).startswith('SharedKeyedConcurrencyLimiter("room", limit=1')


CHECKED = """
from collections.abc import Hashable

from protocol_in_code.qos import (
    KeyedConcurrencyLimiter,
    SharedConcurrencyLimiter,
    SharedKeyedConcurrencyLimiter,
)
from protocol_in_code.qos.interfaces import (
    AsyncInFlightLimiter,
    InFlightLimiter,
    KeyedInFlightLimiter,
    SeatLease,
)

one: InFlightLimiter = SharedConcurrencyLimiter("one", 1)
keyed: KeyedInFlightLimiter[Hashable] = SharedKeyedConcurrencyLimiter("keys", 1)
lease: SeatLease | None = one.try_acquire()

# Each is its own kind only.
wrong_1: InFlightLimiter = SharedKeyedConcurrencyLimiter("k", 1)  # type: ignore[assignment]
any_key = KeyedInFlightLimiter[Hashable]
wrong_2: any_key = SharedConcurrencyLimiter("o", 1)  # type: ignore[assignment]
wrong_3: AsyncInFlightLimiter = SharedConcurrencyLimiter("o", 1)  # type: ignore[assignment]
"""


def test_mypy_finds_each_shared_limiter_of_its_own_interface(tmp_path: Path) -> None:
    qos_support.mypy_strict(CHECKED, tmp_path)


def test_a_keyed_shared_limiter_is_no_decorator_as_the_in_process_keyed_one_is_not(
    tmp_path: Path,
) -> None:
    """A decorator takes no key, so a keyed limiter has none to seat the call under: like
    KeyedConcurrencyLimiter, the shared keyed form is not callable."""
    limiter = SharedKeyedConcurrencyLimiter("no-decorator", 2, path=tmp_path)
    assert not callable(limiter)
    assert not callable(KeyedConcurrencyLimiter(2))
