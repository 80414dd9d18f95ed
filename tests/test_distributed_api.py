"""The Redis limiters' API on a real server: bad input, the script cache, expiry, the forms.

Bad input raises what in-process raises, before any round trip (checked with a client that
records every call). Expiry: every key written has a TTL equal to its time to full (within the
millisecond of rounding), and the database empties once every key has refilled.
"""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    Band,
    LimiterUnavailable,
    LimitOutcome,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")


BAD_CONFIGURATIONS = [
    {"rate": 0},
    {"rate": -1},
    {"rate": "fast"},
    {"rate": 1, "burst": 0},
    {"rate": 1, "burst": 1.5},
    {"rate": None},
    {"rate": 1, "per": 0},
    {"rate": 2, "initial": 3},
    {"bands": []},
    {"rate": 1, "bands": [Band(1)]},
]


@pytest.mark.parametrize("kwargs", BAD_CONFIGURATIONS)
def test_bad_configuration_raises_as_in_process(kwargs: dict[str, Any]) -> None:
    with pytest.raises((ValueError, TypeError)) as local:
        RateLimiter(**kwargs)
    with pytest.raises(local.type) as remote:
        RedisRateLimiter(qos_support.NoServer(), name="k", **kwargs)
    assert str(remote.value) == str(local.value)


BAD_CALLS = [
    {"n": -1},
    {"n": 1.0},
    {"n": True},
    {"n": "1"},
    {"n": 2**64},
    {"now_ns": 1.5},
    {"now_ns": "0"},
    {"now_ns": 2**63},
]


@pytest.mark.parametrize("kwargs", BAD_CALLS)
@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund"])
def test_bad_arguments_raise_as_in_process_before_any_round_trip(
    kwargs: dict[str, Any], method: str
) -> None:
    with pytest.raises((ValueError, TypeError)) as local:
        getattr(RateLimiter(5), method)(**kwargs)
    remote = RedisRateLimiter(qos_support.NoServer(), 5, name="k")
    with pytest.raises(local.type) as raised:
        getattr(remote, method)(**kwargs)
    assert str(raised.value) == str(local.value)
    keyed = RedisKeyedRateLimiter(qos_support.NoServer(), 5, name="clients")
    with pytest.raises(local.type):
        getattr(keyed, method)("key", **kwargs)


@pytest.mark.parametrize("key", [1, 1.0, None, ("a",), bytearray(b"a")])
def test_a_key_neither_str_nor_bytes_is_a_type_error(key: Any) -> None:
    keyed = RedisKeyedRateLimiter(qos_support.NoServer(), 5, name="clients")
    with pytest.raises(TypeError, match="key must be str or bytes"):
        keyed.try_acquire(key)
    with pytest.raises(TypeError, match="name must be a str"):
        RedisRateLimiter(qos_support.NoServer(), 5, name=key)


def test_times_must_be_whole_microseconds_within_the_bound() -> None:
    remote = RedisRateLimiter(qos_support.NoServer(), 5, name="k")
    with pytest.raises(ValueError, match="whole number of microseconds"):
        remote.check(now_ns=1_500)
    with pytest.raises(ValueError, match=r"2\*\*52"):
        remote.check(now_ns=(2**52 + 1) * 1000)


def test_the_exactness_bound_is_refused_naming_it() -> None:
    # 1 token per second: units of 10^-6 token; 2^53 / 10^6 is about 9.0e9 tokens.
    RedisRateLimiter(qos_support.NoServer(), 1, name="k", burst=9_007_199_254)
    with pytest.raises(ValueError, match=r"exceeds 2\*\*53"):
        RedisRateLimiter(qos_support.NoServer(), 1, name="k", burst=9_007_199_255)
    with pytest.raises(ValueError, match=r"exceeds 2\*\*53"):
        RedisKeyedRateLimiter(
            qos_support.NoServer(), Fraction(1, 10**6), name="clients", burst=10**4
        )


def test_on_error_is_checked() -> None:
    with pytest.raises(ValueError, match="on_error"):
        RedisRateLimiter(qos_support.NoServer(), 5, name="k", on_error="ignore")
    with pytest.raises(TypeError, match="on_error"):
        RedisRateLimiter(qos_support.NoServer(), 5, name="k", on_error=KeyedRateLimiter(5))
    with pytest.raises(TypeError, match="on_error"):
        RedisKeyedRateLimiter(qos_support.NoServer(), 5, name="clients", on_error=RateLimiter(5))


def test_rates_are_read_exactly(redis_client: Any) -> None:
    for rate in (Decimal("0.1"), "0.1", 0.1, Fraction(1, 10)):
        remote = RedisRateLimiter(redis_client, rate, name=f"r{rate!r}", burst=1)
        assert qos_support.band_pairs(remote) == ((Fraction(1, 10), 1),)
        assert remote.check(now_ns=0).allowed
        assert remote.check(now_ns=0).wait_ns == 10 * 10**9
        assert not remote.check(now_ns=10 * 10**9 - 1000).allowed
        assert remote.check(now_ns=10 * 10**9).allowed


def test_bands_are_taken_all_or_nothing(redis_client: Any) -> None:
    remote = RedisRateLimiter(
        redis_client, name="both", bands=[Band(10, burst=10), Band(1, burst=3)]
    )
    assert [remote.try_acquire(now_ns=0) for _ in range(4)] == [True, True, True, False]
    hash_ = redis_client.hgetall(remote.redis_key)
    assert int(hash_[b"1"]) == 7 * 10**6  # the denied request took nothing from band 1
    assert remote.check(11, now_ns=0).outcome is LimitOutcome.NEVER


def test_a_script_flush_is_invisible(redis_client: Any) -> None:
    remote = RedisRateLimiter(redis_client, 1, name="flushed", burst=5)
    assert remote.try_acquire()
    for _ in range(3):
        redis_client.script_flush()
        assert remote.try_acquire()
    assert remote.available() == 1


def test_the_server_clock_decides_and_keys_expire_when_full(redis_client: Any) -> None:
    remote = RedisRateLimiter(redis_client, 1000, name="ttl", burst=10)
    assert remote.try_acquire(4)
    ttl = redis_client.pttl(remote.redis_key)
    assert 0 < ttl <= 5  # 4 tokens at 1000/s: full 4 ms from now, rounded up to the ms
    time.sleep(0.02)
    assert redis_client.exists(remote.redis_key) == 0
    assert remote.available() == 10


def test_a_full_key_is_not_stored(redis_client: Any) -> None:
    remote = RedisKeyedRateLimiter(redis_client, 5, name="clients")
    assert remote.peek("a").allowed
    assert remote.available("a") == 5
    assert redis_client.dbsize() == 0
    assert remote.check("a", 0).allowed
    remote.refund("a")
    # No state: only the records of the two calls that could change it, which a client may
    # send again (see docs/distributed.md, "Re-sent calls").
    assert redis_client.exists(remote.redis_key("a")) == 0
    assert qos_support.only_call_records(redis_client) == 2


def test_many_keys_each_with_its_time_to_full_and_all_gone_once_refilled(
    redis_client: Any,
) -> None:
    # A token every 4 s, burst 3: a key that took k tokens is full 4k seconds later.
    remote = RedisKeyedRateLimiter(redis_client, 1, name="clients", burst=3, per=4)
    keys = [f"user{i}" for i in range(100_000)]
    takes = [1 + i % 2 for i in range(len(keys))]

    def server_us() -> int:
        seconds, micros = redis_client.time()
        return int(seconds) * 10**6 + int(micros)

    started_us = server_us()
    for n in (1, 2):
        batch = [key for key, k in zip(keys, takes, strict=True) if k == n]
        for start in range(0, len(batch), 1000):
            assert all(remote.try_acquire_many(batch[start : start + 1000], n))
    pipe = redis_client.pipeline(transaction=False)
    for key in keys:
        pipe.execute_command("PEXPIRETIME", remote.redis_key(key))
        pipe.hget(remote.redis_key(key), "t")
    replies = pipe.execute()
    read_us = server_us()
    for index, k in enumerate(takes):
        expires_ms, settled = replies[2 * index], replies[2 * index + 1]
        if settled is None:
            # Gone already (a slow machine): only once it could have refilled, 4k seconds
            # after a settlement that was no earlier than the start.
            assert read_us >= started_us + 4 * k * 10**6 - 1000, f"key {index} gone early"
            continue
        settled_us = int(settled)
        assert expires_ms > 0  # every key has a TTL (-1 would be none)
        # It expires when it is full again: 4k seconds after its settlement point (the TTL
        # being rounded up to the millisecond).
        full_ms = (settled_us + 4 * k * 10**6) / 1000
        assert full_ms - 1 <= expires_ms <= full_ms + 1
    # Every key gone once refilled; the records of the batches' calls (one per call, not per
    # key) stay for their minute.
    records = len(list(redis_client.scan_iter(match=b"*}::*", count=10_000)))
    assert 0 < records <= 2 * 50  # 100 calls of 1,000 keys, each with n=1 or n=2
    deadline = time.monotonic() + 30
    while redis_client.dbsize() > records and time.monotonic() < deadline:
        time.sleep(0.2)
    assert qos_support.only_call_records(redis_client) <= records


def test_blocking_acquire_decorator_and_context_manager(redis_client: Any) -> None:
    remote = RedisRateLimiter(redis_client, 100, name="block", burst=1)
    assert remote.acquire()
    assert remote.acquire(timeout=1)  # waits about 10 ms
    slow = RedisRateLimiter(redis_client, "1/hour", name="slow", burst=1)
    assert slow.acquire()
    assert not slow.acquire(timeout=0)  # the next token is an hour away
    calls = []

    @remote
    def call() -> None:
        calls.append(1)

    call()
    with remote:
        pass
    assert calls == [1]
    with pytest.raises(ValueError, match="never"):
        remote.acquire(2)


def test_acquire_async_on_a_synchronous_client(redis_client: Any) -> None:
    remote = RedisKeyedRateLimiter(redis_client, 100, name="clients", burst=1)

    async def main() -> list[bool]:
        return [await remote.acquire_async("a"), await remote.acquire_async("a", timeout=1)]

    assert asyncio.run(main()) == [True, True]


def test_an_asyncio_client_gives_awaitables(redis_server: Any) -> None:
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        await client.flushall()
        single = RedisRateLimiter(client, 2, name="async", burst=2)  # a token per 0.5 s
        assert isinstance(single, AsyncRedisRateLimiter)
        assert await single.try_acquire()
        assert (await single.check()).allowed
        assert not (await single.peek()).allowed
        assert await single.available() == 0
        await single.refund()
        assert await single.available() == 1
        assert await single.acquire(2, timeout=1)
        async with single:
            pass

        keyed = RedisKeyedRateLimiter(client, 1, name="clients", burst=2)
        assert isinstance(keyed, AsyncRedisKeyedRateLimiter)
        assert await keyed.try_acquire_many(["x", "x", "x", "y"]) == [True, True, False, True]
        assert (await keyed.check("y")).remaining == 0
        await client.script_flush()
        assert (await keyed.peek("z")).allowed
        await client.aclose()

    asyncio.run(main())


def unreachable_client() -> Any:
    """A client of a port nobody listens on, which reports at once: redis-py retries a
    connection error with backoff by default, which took most of a minute here."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis_servers import free_port

    return redis.Redis(
        host="127.0.0.1", port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )


def test_on_error_policies_when_nothing_answers() -> None:
    client = unreachable_client()
    with pytest.raises(LimiterUnavailable) as raised:
        RedisRateLimiter(client, 5, name="k").try_acquire()
    assert raised.value.__cause__ is not None
    allow = RedisRateLimiter(client, 5, name="k", on_error="allow")
    assert allow.try_acquire() and allow.check().allowed and allow.available() == 5
    deny = RedisKeyedRateLimiter(client, 5, name="clients", on_error="deny")
    assert not deny.try_acquire("a")
    assert deny.check("a").outcome is LimitOutcome.DENIED
    assert deny.try_acquire_many(["a", "b"]) == [False, False]
    local = RedisKeyedRateLimiter(
        client, 5, name="clients", burst=2, on_error=KeyedRateLimiter(5, burst=2)
    )
    assert [local.try_acquire("a", now_ns=0) for _ in range(3)] == [True, True, False]
    assert local.try_acquire_many(["b", "b", "b"], now_ns=0) == [True, True, False]


def test_a_large_batch_is_split_so_that_no_script_call_holds_the_server_long(
    redis_client: Any,
) -> None:
    """At most 1,000 keys per script call, in order, with the answers of one call per key."""
    from protocol_in_code.qos.distributed._server import KEYS_PER_CALL

    sizes: list[int] = []
    evalsha = redis_client.evalsha

    def counted(sha: str, numkeys: int, *rest: Any) -> Any:
        sizes.append(numkeys)
        return evalsha(sha, numkeys, *rest)

    redis_client.evalsha = counted
    batched = RedisKeyedRateLimiter(
        redis_client, 1, name="clients", burst=2, per=3600, prefix="split:"
    )
    one_by_one = RedisKeyedRateLimiter(
        redis_client, 1, name="clients", burst=2, per=3600, prefix="single:"
    )
    keys = [f"k{i % 1500}" for i in range(3500)]  # each key 2 or 3 times: the third is denied
    answers = batched.try_acquire_many(keys)
    assert sizes == [KEYS_PER_CALL] * 3 + [500]
    assert answers == [one_by_one.try_acquire(key) for key in keys]
    assert answers.count(False) == 500
