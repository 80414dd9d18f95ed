"""A full connection pool on a healthy server is not an unreachable server (issue 22, item 2).

A client's pool holds at most ``max_connections``; when every one is in use, redis-py raises
``MaxConnectionsError`` at once, without asking the server. That used to be taken for an
unreachable server, so ``on_error`` answered it: with ``max_connections=2`` and 8 threads,
``"allow"`` admitted tens of thousands against a burst of 50, and ``"deny"`` refused requests
the limit would have allowed. A call now waits for a connection of the pool, and is decided by
the server: exactly the burst is admitted, under either policy, sync and asyncio.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter, RedisKeyedRateLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

BURST = 50
THREADS = 8
CALLS = 40  # per thread: 320 in all, against a burst of 50 refilled at one an hour


@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_threads_sharing_a_small_pool_are_decided_by_the_server(
    own_redis_server: Any, policy: str
) -> None:
    client = own_redis_server.client(max_connections=2)
    limiter = RedisKeyedRateLimiter(
        client, 1, name="clients", burst=BURST, per=3600, on_error=policy
    )
    admitted = [0] * THREADS

    def calls(index: int) -> None:
        for _ in range(CALLS):
            admitted[index] += limiter.try_acquire("one client")

    threads = [threading.Thread(target=calls, args=(i,)) for i in range(THREADS)]
    with qos_support.watchdog(120):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sum(admitted) == BURST


@pytest.mark.parametrize("policy", ["allow", "deny"])
def test_tasks_sharing_a_small_asyncio_pool_are_decided_by_the_server(
    own_redis_server: Any, policy: str
) -> None:
    import redis.asyncio

    async def main() -> int:
        client = redis.asyncio.Redis(port=own_redis_server.port, max_connections=2)
        limiter = AsyncRedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, on_error=policy
        )
        answers = await asyncio.gather(
            *(limiter.try_acquire("one client") for _ in range(THREADS * CALLS))
        )
        await client.aclose()
        return sum(answers)

    with qos_support.watchdog(120):
        assert asyncio.run(main()) == BURST


def test_a_pool_held_for_good_ends_the_call_with_pool_exhausted(own_redis_server: Any) -> None:
    """This thread holds the only connection (a pub/sub subscription): the pool will not
    free up, so the call ends after the client's socket timeout, with ``PoolExhausted`` (a
    ``LimiterUnavailable``) under every ``on_error``, never an answer of ``"allow"``."""
    from protocol_in_code.qos.distributed import LimiterUnavailable, PoolExhausted

    client = own_redis_server.client(max_connections=1, socket_timeout=0.2)
    limiter = RedisKeyedRateLimiter(client, 1, name="clients", burst=5, per=3600, on_error="allow")
    subscription = client.pubsub()
    subscription.subscribe("channel")
    try:
        with qos_support.watchdog(60), pytest.raises(PoolExhausted, match="pool stayed full"):
            limiter.try_acquire("k")
        assert issubclass(PoolExhausted, LimiterUnavailable)
    finally:
        subscription.close()
    assert limiter.try_acquire("k") is True
