"""A blocking acquire on a thread running an event loop is refused (issue 23).

``acquire()``, ``with limiter:`` and a decorated ``def`` sleep the calling thread until their
tokens are there. On the thread of a running asyncio loop that sleep stalls every task, for the
whole wait, and only once tokens run out: a mistake that shows only under load. So it is
refused every time, with a ``RuntimeError`` that names the async forms, whether or not this
call would have waited. ``acquire(timeout=0)`` never sleeps, and is let through; the same
calls in a worker thread (``asyncio.to_thread``) are fine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from protocol_in_code.qos import KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter


def with_block(limiter: RateLimiter) -> None:
    with limiter:
        pass


def decorated(limiter: RateLimiter) -> None:
    @limiter
    def call() -> None:
        pass

    call()


BLOCKING: dict[str, Callable[[], Any]] = {
    "RateLimiter.acquire": lambda: RateLimiter(10).acquire(),
    "RateLimiter.acquire(timeout=1)": lambda: RateLimiter(10).acquire(timeout=1),
    "with RateLimiter": lambda: with_block(RateLimiter(10)),
    "decorated def": lambda: decorated(RateLimiter(10)),
    "KeyedRateLimiter.acquire": lambda: KeyedRateLimiter(10).acquire("k"),
    "RedisRateLimiter.acquire": lambda: RedisRateLimiter(
        qos_support.NoServer(), 1, name="k"
    ).acquire(),
    "RedisKeyedRateLimiter.acquire": lambda: RedisKeyedRateLimiter(
        qos_support.NoServer(), 1, name="clients"
    ).acquire("k"),
}


@pytest.mark.parametrize("call", BLOCKING)
def test_a_blocking_acquire_in_a_running_loop_is_refused(call: str) -> None:
    async def main() -> None:
        BLOCKING[call]()

    with pytest.raises(RuntimeError, match="running event loop") as raised:
        asyncio.run(main())
    assert "acquire_async()" in str(raised.value)


@pytest.mark.parametrize("call", [c for c in BLOCKING if "Redis" not in c])
def test_the_same_call_in_a_worker_thread_or_without_a_loop_is_fine(call: str) -> None:
    async def main() -> None:
        await asyncio.to_thread(BLOCKING[call])

    asyncio.run(main())
    BLOCKING[call]()


def test_a_call_that_never_waits_is_let_through() -> None:
    async def main() -> tuple[bool, bool]:
        limiter, keyed = RateLimiter(1), KeyedRateLimiter(1)
        return (
            limiter.acquire(timeout=0) and not limiter.acquire(timeout=0),
            keyed.acquire("k", timeout=0) and not keyed.acquire("k", timeout=0),
        )

    assert asyncio.run(main()) == (True, True)
