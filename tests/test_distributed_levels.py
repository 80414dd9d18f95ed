"""``check_levels``: a Redis limiter's ``check`` and each band's level in one script call.

Against the in-process limiters: ``check`` followed by ``band_levels`` at the same explicit time
(whole microseconds) says the same decision and, band by band, the same whole tokens and the same
nanoseconds until one more, rounded up to the microsecond (the script's grain), as a wait is.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
import qos_support
from hypothesis import given
from hypothesis import strategies as st
from protocol_in_code.qos import LimitOutcome
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import Band, RateLimiter
from test_distributed_differential import KEEP_MS, apply, bands, same_decision, steps

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

_names = itertools.count()
SECOND = 10**9

# check_levels among the other questions, so that it meets every state they leave.
ops = st.sampled_from(
    ["check_levels", "check_levels", "check_levels", "try_acquire", "check", "peek", "refund"]
)


def up_to_micro(ns: int) -> int:
    return -(-ns // 1000) * 1000


def same_levels(remote: Any, local: list[tuple[int, int]]) -> None:
    assert remote == [(tokens, up_to_micro(next_ns)) for tokens, next_ns in local]


def script_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


@given(
    bands=bands,
    trace=st.lists(st.tuples(ops, st.integers(0, 25), steps), min_size=1, max_size=30),
    start=st.integers(0, 10**12),
)
def test_check_levels_says_what_check_then_band_levels_say_in_process(
    shared_redis_client: Any, bands: list[Band], trace: list[tuple[str, int, int]], start: int
) -> None:
    local = RateLimiter(bands=bands)
    remote = RedisRateLimiter(
        shared_redis_client, name=f"l{next(_names)}", bands=bands, min_ttl_ms=KEEP_MS
    )
    now_us = start
    for op, n, step in trace:
        now_us = max(0, now_us + step)
        now_ns = now_us * 1000
        if op == "check_levels":
            decision, levels = remote.check_levels(n, now_ns=now_ns)
            same_decision(decision, local.check(n, now_ns=now_ns))
            same_levels(levels, local.band_levels(now_ns=now_ns))
            continue
        got = apply(remote, op, n=n, now_ns=now_ns)
        want = apply(local, op, n=n, now_ns=now_ns)
        if op in ("check", "peek"):
            same_decision(got, want)
        else:
            assert got == want, (op, n, now_ns)


@given(
    bands=bands,
    trace=st.lists(
        st.tuples(ops, st.sampled_from(["a", "b", b"c"]), st.integers(0, 25), steps),
        min_size=1,
        max_size=40,
    ),
)
def test_a_keyed_check_levels_says_what_the_in_process_table_says(
    shared_redis_client: Any, bands: list[Band], trace: list[tuple[str, Any, int, int]]
) -> None:
    # Time moves forward only: the in-process table decides a call from the past at its own
    # latest time, a Redis key at the call's (see test_distributed_differential).
    local = KeyedRateLimiter(bands=bands)
    remote = RedisKeyedRateLimiter(
        shared_redis_client,
        name="clients",
        bands=bands,
        min_ttl_ms=KEEP_MS,
        prefix=f"lk{next(_names)}:",
    )
    now_us = 10**9
    for op, key, n, step in trace:
        now_us += abs(step)
        now_ns = now_us * 1000
        if op == "check_levels":
            decision, levels = remote.check_levels(key, n, now_ns=now_ns)
            same_decision(decision, local.check(key, n, now_ns=now_ns))
            same_levels(levels, local.band_levels(key, now_ns=now_ns))
            continue
        got = apply(remote, op, key, n=n, now_ns=now_ns)
        want = apply(local, op, key, n=n, now_ns=now_ns)
        if op in ("check", "peek"):
            same_decision(got, want)
        else:
            assert got == want, (op, key, n, now_ns)


def test_check_levels_with_plans_reads_the_plan_s_bands(redis_client: Any) -> None:
    plans = {"free": [Band(1, burst=2), Band("6/minute", burst=5)], "pro": 100}
    local = KeyedRateLimiter(plans=plans)
    remote = RedisKeyedRateLimiter(redis_client, plans=plans, name="clients", min_ttl_ms=KEEP_MS)
    now_ns = 10**15
    for plan in ("free", "pro", "free", "free"):
        decision, levels = remote.check_levels("k", now_ns=now_ns, plan=plan)
        same_decision(decision, local.check("k", now_ns=now_ns, plan=plan))
        same_levels(levels, local.band_levels("k", now_ns=now_ns, plan=plan))
    with pytest.raises(TypeError, match="plan= is required"):
        remote.check_levels("k")


def test_check_levels_is_one_script_call_that_takes_like_check(redis_client: Any) -> None:
    bands = [Band(1, burst=2), Band("6/minute", burst=5)]
    limiter = RedisRateLimiter(redis_client, bands=bands, name="levels")
    before = script_calls(redis_client)
    decision, levels = limiter.check_levels()
    assert script_calls(redis_client) == before + 1
    assert decision.allowed and decision.remaining == 1
    assert levels is not None
    (first, first_next), (second, second_next) = levels
    assert (first, second) == (1, 4)
    # The server's clock: the next token comes within its refill time, rounded to the micro.
    assert 0 < first_next <= SECOND and 0 < second_next <= 10 * SECOND
    assert limiter.check().remaining == 0
    decision, levels = limiter.check_levels()
    assert decision.outcome is LimitOutcome.DENIED and levels is not None
    assert [tokens for tokens, _ in levels] == [0, 3]
    # More than a burst: NEVER, as check says, and the levels all the same.
    decision, levels = limiter.check_levels(6)
    assert decision.outcome is LimitOutcome.NEVER and levels is not None


def test_check_levels_checks_its_arguments_as_check_does() -> None:
    limiter = RedisRateLimiter(qos_support.NoServer(), 1, name="x")
    with pytest.raises(ValueError, match="whole number of microseconds"):
        limiter.check_levels(1, now_ns=1)
    with pytest.raises((TypeError, ValueError)):
        limiter.check_levels(-1)
    keyed = RedisKeyedRateLimiter(qos_support.NoServer(), 1, name="x")
    with pytest.raises(TypeError, match="key must be str or bytes"):
        keyed.check_levels(42)  # type: ignore[arg-type]


def _down() -> Any:
    """A client whose every script call fails as an unreachable server's does."""
    import redis
    import redis.exceptions

    def failing(*args: Any) -> Any:
        raise redis.exceptions.ConnectionError("down")

    client = redis.Redis(port=1)  # never connected
    client.evalsha = client.eval = failing  # type: ignore[method-assign]
    return client


def test_on_error_decides_check_levels_as_it_decides_check() -> None:
    bands = [Band(1, burst=2), Band("6/minute", burst=5)]
    now_ns = 10**12
    fallback = RateLimiter(bands=bands)
    limiter = RedisRateLimiter(_down(), bands=bands, name="x", on_error=fallback)
    decision, levels = limiter.check_levels(1, now_ns=now_ns)
    twin = RateLimiter(bands=bands)
    assert decision == twin.check(1, now_ns=now_ns)
    assert levels == twin.band_levels(now_ns=now_ns) == fallback.band_levels(now_ns=now_ns)
    for policy, allowed in (("allow", True), ("deny", False)):
        limiter = RedisRateLimiter(_down(), bands=bands, name="x", on_error=policy)
        decision, levels = limiter.check_levels()
        assert decision == limiter.check() and bool(decision.allowed) is allowed
        assert levels is None
    from protocol_in_code.qos.distributed import LimiterUnavailable

    with pytest.raises(LimiterUnavailable):
        RedisRateLimiter(_down(), bands=bands, name="x").check_levels()

    plans = {"free": bands, "pro": 100}
    keyed_fallback = KeyedRateLimiter(plans=plans)
    keyed = RedisKeyedRateLimiter(_down(), plans=plans, name="x", on_error=keyed_fallback)
    decision, levels = keyed.check_levels("k", 2, now_ns=now_ns, plan="free")
    assert decision.remaining == 0
    assert levels == keyed_fallback.band_levels("k", now_ns=now_ns, plan="free")
    assert levels is not None and [tokens for tokens, _ in levels] == [0, 3]


def test_the_asyncio_limiters_check_levels_as_the_synchronous_ones(redis_server: Any) -> None:
    import redis.asyncio

    bands = [Band(1, burst=2), Band("6/minute", burst=5)]

    async def run() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            await client.flushall()
            one = AsyncRedisRateLimiter(client, bands=bands, name="async", min_ttl_ms=KEEP_MS)
            keyed = AsyncRedisKeyedRateLimiter(
                client, bands=bands, name="clients", min_ttl_ms=KEEP_MS
            )
            local, local_keyed = RateLimiter(bands=bands), KeyedRateLimiter(bands=bands)
            now_ns = 10**15
            for n in (1, 1, 0, 1, 6):
                decision, levels = await one.check_levels(n, now_ns=now_ns)
                same_decision(decision, local.check(n, now_ns=now_ns))
                same_levels(levels, local.band_levels(now_ns=now_ns))
                decision, levels = await keyed.check_levels("k", n, now_ns=now_ns)
                same_decision(decision, local_keyed.check("k", n, now_ns=now_ns))
                same_levels(levels, local_keyed.band_levels("k", now_ns=now_ns))
                now_ns += 300_000_000
        finally:
            await client.aclose()

    asyncio.run(run())


def test_a_cancelled_check_levels_is_net_zero(redis_server: Any) -> None:
    import redis.asyncio

    async def run() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            await client.flushall()
            limiter = AsyncRedisRateLimiter(client, 1, burst=3, per=3600, name="cancel")
            call = asyncio.ensure_future(limiter.check_levels(2))
            await asyncio.sleep(0)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            for _ in range(200):
                if await limiter.available() == 3:
                    break
                await asyncio.sleep(0.005)
            assert await limiter.available() == 3
        finally:
            await client.aclose()

    asyncio.run(run())
