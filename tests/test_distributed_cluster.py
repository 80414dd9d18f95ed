"""The Redis limiters on a three-master cluster: every decision in one slot, no CROSSSLOT.

(The exact multi-process totals on the cluster are in ``test_distributed_processes.py``.)
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
import qos_support
from hypothesis import given
from hypothesis import strategies as st
from protocol_in_code.qos.distributed import (
    Band,
    LimiterUnavailable,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster_client(redis_cluster: Any) -> Any:
    client = redis_cluster.client()
    yield client
    client.close()


def test_keys_spread_over_the_masters_and_batches_split_by_slot(cluster_client: Any) -> None:
    limiter = RedisKeyedRateLimiter(
        cluster_client, 1, name="clients", burst=2, per=3600, prefix="spread:"
    )
    keys = [f"client{i}" for i in range(300)] * 3
    local = KeyedRateLimiter(1, burst=2, per=3600)
    answers = limiter.try_acquire_many(keys)
    assert answers == [local.try_acquire(key, now_ns=0) for key in keys]
    owners = {cluster_client.get_node_from_key(limiter.redis_key(key)).name for key in keys}
    assert len(owners) == 3


@given(
    bands=st.lists(
        st.builds(
            lambda rate, burst: Band(rate, burst=burst), st.integers(1, 9), st.integers(1, 9)
        ),
        min_size=1,
        max_size=2,
    ),
    trace=st.lists(
        st.tuples(st.sampled_from(["x", "y", "z"]), st.integers(0, 4), st.integers(0, 10**6)),
        max_size=20,
    ),
)
def test_answers_on_the_cluster_are_the_in_process_ones(
    cluster_client: Any, bands: list[Band], trace: list[tuple[str, int, int]]
) -> None:
    prefix = f"diff{next(_names)}:"
    remote = RedisKeyedRateLimiter(
        cluster_client, name="clients", bands=bands, prefix=prefix, min_ttl_ms=600_000
    )
    local = KeyedRateLimiter(bands=bands)
    now_us = 10**12
    for key, n, step in trace:
        now_us += step
        got = remote.check(key, n, now_ns=now_us * 1000)
        want = local.check(key, n, now_ns=now_us * 1000)
        assert (got.outcome, got.remaining) == (want.outcome, want.remaining)
        if want.wait_ns is not None:
            assert got.wait_ns == -(-want.wait_ns // 1000) * 1000


def test_a_script_flush_on_every_master_is_invisible(
    redis_cluster: Any, cluster_client: Any
) -> None:
    limiter = RedisKeyedRateLimiter(
        cluster_client, 1, name="clients", burst=3, per=3600, prefix="flush:"
    )
    keys = [f"k{i}" for i in range(30)]
    assert all(limiter.try_acquire_many(keys))
    for node in redis_cluster.nodes:
        node.cli("SCRIPT", "FLUSH")
    assert all(limiter.try_acquire_many(keys))
    for node in redis_cluster.nodes:
        node.cli("SCRIPT", "FLUSH")
    assert [limiter.check(key).remaining for key in keys] == [0] * 30
    single = RedisRateLimiter(cluster_client, 1, name="single", burst=1, per=3600)
    assert single.try_acquire() and not single.try_acquire()


def test_keys_on_the_cluster_expire_when_full(cluster_client: Any) -> None:
    limiter = RedisKeyedRateLimiter(cluster_client, 1000, name="clients", burst=5, prefix="exp:")
    keys = [f"e{i}" for i in range(50)]
    assert all(limiter.try_acquire_many(keys, 2))
    ttls = [cluster_client.pttl(limiter.redis_key(key)) for key in keys]
    assert all(-2 <= ttl <= 3 and ttl != -1 for ttl in ttls)  # 2 ms to full, never no TTL
    local = RateLimiter(1000, burst=5)
    assert limiter.available("e0") <= local.available()


def test_a_stopped_master_denies_its_keys_only_and_service_resumes(redis_cluster: Any) -> None:
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

    timeout = 0.3
    client = RedisCluster(
        host="127.0.0.1",
        port=redis_cluster.nodes[0].port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    limiter = RedisKeyedRateLimiter(
        client, 1, name="clients", burst=5, per=3600, prefix="stop:", on_error="deny"
    )
    keys = [f"s{i}" for i in range(60)]
    assert all(limiter.try_acquire_many(keys))
    victim = redis_cluster.nodes[1]
    on_victim = {
        key for key in keys if client.get_node_from_key(limiter.redis_key(key)).port == victim.port
    }
    assert on_victim and len(on_victim) < len(keys)
    victim.pause()
    try:
        for key in keys[:10]:
            start = time.monotonic()
            assert limiter.try_acquire(key) is (key not in on_victim)
            assert time.monotonic() - start <= timeout + 0.1
        start = time.monotonic()
        answers = limiter.try_acquire_many(keys)
        assert time.monotonic() - start <= timeout + 0.1  # one timeout for the node, not per slot
        assert answers == [key not in on_victim for key in keys]
    finally:
        victim.resume()
    deadline = time.monotonic() + 10
    while not limiter.try_acquire(min(on_victim)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limiter.check(min(on_victim)).remaining < 5
    client.close()


def test_an_asyncio_cluster_client_batches_by_slot(redis_cluster: Any) -> None:
    import asyncio

    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    keys = [f"a{i}" for i in range(40)] * 3
    local = KeyedRateLimiter(1, burst=2, per=3600)
    want = [local.try_acquire(key, now_ns=0) for key in keys]

    async def main() -> list[bool]:
        client = AsyncRedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port)
        limiter = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=2, per=3600, prefix="async:"
        )
        answers = await limiter.try_acquire_many(keys)
        assert (await limiter.check("a0")).remaining == 0
        await client.aclose()
        return answers  # type: ignore[no-any-return]

    assert asyncio.run(main()) == want


def test_a_batch_under_raise_keeps_the_answers_of_the_nodes_that_answered(
    redis_cluster: Any,
) -> None:
    """A stopped master under ``on_error="raise"``: the batch still asks the other masters,
    and the error carries their answers, whose tokens were taken; only the stopped master's
    keys are ``None``."""
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

    timeout = 0.3
    client = RedisCluster(
        host="127.0.0.1",
        port=redis_cluster.nodes[0].port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )
    limiter = RedisKeyedRateLimiter(client, 1, name="clients", burst=5, per=3600, prefix="raise:")
    keys = [f"r{i}" for i in range(60)]
    victim = redis_cluster.nodes[2]
    on_victim = {
        key for key in keys if client.get_node_from_key(limiter.redis_key(key)).port == victim.port
    }
    assert on_victim and len(on_victim) < len(keys)
    victim.pause()
    try:
        with pytest.raises(LimiterUnavailable) as raised:
            limiter.try_acquire_many(keys)
        answers = raised.value.answers
        assert answers == [None if key in on_victim else True for key in keys]
        assert f"{len(on_victim)} of {len(keys)} keys" in str(raised.value)
        for key in keys:
            if key not in on_victim:
                assert limiter.check(key).remaining == 3, "the token was taken, and reported"
    finally:
        victim.resume()
    client.close()
