"""In-flight limits under threads: never more than ``limit`` held, waiters seated in the order
they came (threads and asyncio tasks in one line), leases dropped without release given back,
and no Python code run under the limiter's lock."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable

import pytest
import qos_support
from qos_support import watchdog

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.concurrency")

from protocol_in_code.qos import ConcurrencyLimiter, KeyedConcurrencyLimiter

HANG_SECONDS = 60


def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait (bounded) until ``condition`` holds: a waiter has taken its place, say."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def test_many_threads_never_hold_more_than_the_limit() -> None:
    limiter = ConcurrencyLimiter(3)
    lock = threading.Lock()
    now, most, done = [0], [0], [0]

    def work(index: int) -> None:
        for round_ in range(30):
            n = 1 + (index + round_) % 3
            with limiter.acquire(n) as lease:
                with lock:
                    now[0] += lease.n
                    most[0] = max(most[0], now[0])
                time.sleep(0.0001)
                with lock:
                    now[0] -= lease.n
        with lock:
            done[0] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    with watchdog(HANG_SECONDS), qos_support.switch_interval(1e-5):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert done[0] == 8
    assert 1 <= most[0] <= 3
    assert (limiter.in_flight, limiter.waiting) == (0, 0)


def test_waiters_are_seated_in_the_order_they_came_and_nobody_overtakes() -> None:
    limiter = ConcurrencyLimiter(2)
    first = limiter.acquire(2)
    assert first is not None
    seated: list[tuple[int, int]] = []
    wants = [2, 1, 1, 2, 1]  # a small request never overtakes a large one ahead of it

    def wait(index: int) -> None:
        lease = limiter.acquire(wants[index])
        assert lease is not None
        seated.append((index, lease.token))
        time.sleep(0.001)
        lease.release()

    threads = []
    with watchdog(HANG_SECONDS):
        for index in range(len(wants)):
            threads.append(threading.Thread(target=wait, args=(index,)))
            threads[-1].start()
            until(lambda index=index: limiter.waiting == index + 1)
        first.release()
        for thread in threads:
            thread.join()
    # Seated in arrival order: tokens are given as seats are granted (two seated by one release
    # may reach their threads in either order, so the tokens say the order, not the list).
    by_token = sorted(seated, key=lambda seat: seat[1])
    assert [index for index, _ in by_token] == [0, 1, 2, 3, 4]
    assert by_token[0][1] > first.token


def test_threads_and_tasks_share_one_line() -> None:
    limiter = ConcurrencyLimiter(1)
    held = limiter.acquire()
    assert held is not None
    order: list[str] = []

    def thread_waiter(name: str) -> None:
        with limiter.acquire():
            order.append(name)

    async def task_waiter() -> None:
        with await limiter.acquire_async():
            order.append("task")

    loop_thread = threading.Thread(target=asyncio.run, args=(task_waiter(),))
    first = threading.Thread(target=thread_waiter, args=("thread 1",))
    last = threading.Thread(target=thread_waiter, args=("thread 2",))
    with watchdog(HANG_SECONDS):
        first.start()
        until(lambda: limiter.waiting == 1)
        loop_thread.start()
        until(lambda: limiter.waiting == 2)
        last.start()
        until(lambda: limiter.waiting == 3)
        held.release()
        for thread in (first, loop_thread, last):
            thread.join()
    assert order == ["thread 1", "task", "thread 2"]
    assert limiter.in_flight == 0


def test_a_timeout_leaves_the_line_and_passes_the_turn_on() -> None:
    limiter = ConcurrencyLimiter(2)
    held = limiter.acquire()
    assert held is not None
    seated: list[int] = []
    # A large request blocks the line; a small one behind it waits although a seat is free.
    big = threading.Thread(
        target=lambda: seated.append(0 if limiter.acquire(2, timeout=0.2) else -1)
    )
    small = threading.Thread(target=lambda: seated.append(limiter.acquire(1).n))  # type: ignore[union-attr]
    with watchdog(HANG_SECONDS):
        big.start()
        until(lambda: limiter.waiting == 1)
        small.start()
        big.join()  # gave up after its timeout...
        small.join()  # ...and the small one behind it took the free seat
    assert seated == [-1, 1]
    assert limiter.in_flight == 1  # only `held`: the small lease was dropped, so given back
    held.release()
    assert limiter.in_flight == 0


def test_a_lease_dropped_without_release_is_given_back() -> None:
    limiter = ConcurrencyLimiter(2)
    limiter.acquire()  # dropped at once
    assert limiter.in_flight == 0

    with pytest.raises(ZeroDivisionError), limiter.acquire(2):
        1 / 0  # noqa: B018
    assert limiter.in_flight == 0

    class Holder:
        pass

    holder = Holder()
    holder.lease = limiter.acquire()  # type: ignore[attr-defined]
    holder.itself = holder  # type: ignore[attr-defined]  # a cycle: only the collector frees it
    del holder
    assert limiter.in_flight == 1
    gc.collect()
    assert limiter.in_flight == 0


def test_with_and_decorator_hold_one_seat_while_the_body_runs() -> None:
    limiter = ConcurrencyLimiter(2)
    with limiter:
        assert limiter.in_flight == 1
        with limiter:
            assert limiter.in_flight == 2
    assert limiter.in_flight == 0

    @limiter
    def work() -> int:
        return limiter.in_flight

    assert work() == 1
    assert work.__name__ == "work"
    assert limiter.in_flight == 0

    @limiter
    def items() -> object:
        yield limiter.in_flight

    assert list(items()) == [1]
    assert limiter.in_flight == 0


def test_nothing_runs_under_the_lock_when_a_waker_is_let_go_of() -> None:
    """A task's waker let go of may be the last reference to an object whose finalizer uses the
    limiter: it must run once the lock is free, or it would wait for the lock for ever."""
    limiter = ConcurrencyLimiter(1)
    held = limiter.acquire()
    seen: list[int] = []

    class Finalized:
        def __call__(self) -> None:
            pass

        def __del__(self) -> None:
            seen.append(limiter.in_flight)

    waiter = limiter._ask(1, Finalized())
    with watchdog(HANG_SECONDS):
        assert waiter._leave() is None
        del waiter
        gc.collect()
    assert seen == [1]
    assert held is not None


def test_a_keyed_limit_holds_each_key_apart_and_forgets_idle_keys() -> None:
    limiter = KeyedConcurrencyLimiter(1, max_keys=2)
    a = limiter.acquire("a")
    b = limiter.try_acquire(("b", 1))
    assert a is not None and b is not None
    assert limiter.try_acquire("a") is None
    assert limiter.try_acquire("c") is None  # a new key in a full table: refused
    assert len(limiter) == 2

    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(limiter.acquire("c", timeout=10)))
    with watchdog(HANG_SECONDS):
        thread.start()
        time.sleep(0.02)
        assert not got  # waiting for room
        b.release()  # "b" is forgotten: room for "c"
        thread.join()
    lease = got[0]
    assert lease is not None and lease.token > b.token  # type: ignore[attr-defined]
    del lease
    got.clear()
    assert len(limiter) == 1
    a.release()
    assert (len(limiter), limiter.in_flight) == (0, 0)


def test_a_blocking_acquire_in_a_running_loop_is_refused() -> None:
    limiter = ConcurrencyLimiter(1)

    async def main() -> None:
        assert limiter.acquire(timeout=0) is not None  # never waits: let through
        with pytest.raises(RuntimeError, match="acquire_async"):
            limiter.acquire()
        with pytest.raises(RuntimeError, match="running event loop"):
            KeyedConcurrencyLimiter(1).acquire("k", timeout=1)
        with pytest.raises(RuntimeError, match="running event loop"), limiter:
            pass

    asyncio.run(main())


def test_ctrl_c_while_waiting_leaves_the_line() -> None:
    import _thread

    limiter = ConcurrencyLimiter(1)
    held = limiter.acquire()
    timer = threading.Timer(0.05, _thread.interrupt_main)
    with watchdog(HANG_SECONDS):
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            limiter.acquire(timeout=30)
        timer.join()
    assert (limiter.in_flight, limiter.waiting) == (1, 0)
    assert held is not None
    held.release()
    assert limiter.try_acquire() is not None
