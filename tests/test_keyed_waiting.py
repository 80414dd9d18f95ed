"""Blocking ``acquire`` and ``acquire_async`` on a key (issue 6), with short real sleeps only
where the point is to sleep."""

from __future__ import annotations

import asyncio
import time
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from keyed_support import (
    HANG_SECONDS,
    REFUSED,
    SECOND,
    full_table,
    snapshot,
    used_limiter,
)
from limiter_model import FakeClock
from protocol_in_code.qos.keyed import (
    KeyedRateLimiter,
)

# ---------------------------------------------------------------------------------------------
# Blocking acquire and acquire_async
# ---------------------------------------------------------------------------------------------


def test_acquire_with_timeout_zero_when_denied_returns_false_at_once() -> None:
    limiter = KeyedRateLimiter(Fraction(1, 100), burst=1, max_keys=10)
    assert limiter.acquire("k", timeout=0) is True
    began = time.monotonic()
    assert limiter.acquire("k", timeout=0) is False
    assert limiter.acquire("k", timeout=0.0) is False
    assert time.monotonic() - began < 0.5
    assert limiter.available("k") == 0
    refused = full_table(1)
    began = time.monotonic()
    assert refused.peek("new").outcome is REFUSED
    assert refused.acquire("new", timeout=0) is False, "REFUSED with timeout=0: no wait"
    assert time.monotonic() - began < 0.5
    assert refused.stats.refused == 1 and "new" not in refused


def test_acquire_of_more_than_a_burst_raises_and_changes_nothing() -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    for key in ("a", "new", ("t", 1)):
        for kwargs in ({}, {"timeout": 0}, {"timeout": 10}):
            with pytest.raises(ValueError, match=r"n=5"):
                limiter.acquire(key, 5, **kwargs)

            async def main(key: Any = key, kwargs: dict[str, Any] = kwargs) -> None:
                await limiter.acquire_async(key, 5, **kwargs)

            with pytest.raises(ValueError, match=r"n=5"):
                asyncio.run(main())
    assert snapshot(limiter)[:2] == before[:2]
    assert snapshot(limiter)[3:] == before[3:]


def test_acquire_blocks_for_about_the_wait_on_its_own_key() -> None:
    limiter = KeyedRateLimiter(20, burst=1, max_keys=10, shards=1)
    assert limiter.acquire("k") is True
    began = time.monotonic()
    assert limiter.acquire("other", timeout=5) is True
    assert time.monotonic() - began < 0.04, "another key does not wait"
    assert limiter.acquire("k", timeout=5) is True
    elapsed = time.monotonic() - began
    assert 0.04 <= elapsed < 2.0, elapsed


def test_a_refused_acquire_sleeps_for_the_hint_and_tries_again() -> None:
    limiter = KeyedRateLimiter(20, burst=1, max_keys=1, shards=1)
    assert limiter.try_acquire("a")
    assert limiter.peek("b").outcome is REFUSED
    began = time.monotonic()
    with qos_support.watchdog(HANG_SECONDS):
        assert limiter.acquire("b", timeout=5) is True
    elapsed = time.monotonic() - began
    assert 0.03 <= elapsed < 2.0, elapsed
    assert limiter.stats.refused >= 1 and limiter.stats.forgotten == 1
    assert "b" in limiter and "a" not in limiter


def test_acquire_async() -> None:
    async def main() -> dict[str, Any]:
        limiter = KeyedRateLimiter(20, burst=1, max_keys=1, shards=1)
        out: dict[str, Any] = {}
        assert await limiter.acquire_async("a") is True
        out["denied_now"] = await limiter.acquire_async("a", timeout=0)
        out["refused_now"] = await limiter.acquire_async("b", timeout=0)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        began = time.monotonic()
        out["refused_then_allowed"] = await limiter.acquire_async("b", timeout=5)
        out["elapsed"] = time.monotonic() - began
        began = time.monotonic()
        out["timed_out"] = await limiter.acquire_async("b", timeout=0.01)
        out["timeout_elapsed"] = time.monotonic() - began
        task.cancel()
        out["ticks"] = ticks
        out["stats"] = limiter.stats
        return out

    out = asyncio.run(main())
    assert out["denied_now"] is False and out["refused_now"] is False
    assert out["refused_then_allowed"] is True
    assert 0.03 <= out["elapsed"] < 2.0, out["elapsed"]
    assert out["timed_out"] is False and out["timeout_elapsed"] < 1.0
    assert out["ticks"] >= 3, "the event loop kept running while acquire_async waited"
    assert out["stats"].refused >= 2 and out["stats"].allowed == 2
