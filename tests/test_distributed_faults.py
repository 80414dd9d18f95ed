"""Faults: a server stopped (SIGSTOP) or killed mid-run, then restarted.

The client's retries are off, so each call gives up after its own socket timeout; the
``on_error`` policy then answers (``"deny"`` admits nothing, a local fallback limits locally),
and once the server is back the next calls are decided by it again, with no restart of
anything on the client's side.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos.distributed import (
    LimiterUnavailable,
    LimitOutcome,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.keyed import KeyedRateLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

SOCKET_TIMEOUT = 0.3
SLACK = 0.1  # what a call may take beyond the socket timeout


def quick_client(server: Any) -> Any:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return server.client(
        socket_timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=SOCKET_TIMEOUT,
        retry=Retry(NoBackoff(), 0),
    )


def timed(call: Any, *args: Any) -> Any:
    start = time.monotonic()
    answer = call(*args)
    assert time.monotonic() - start <= SOCKET_TIMEOUT + SLACK
    return answer


@pytest.mark.parametrize("fault", ["SIGSTOP", "kill"])
def test_deny_admits_nothing_while_the_server_is_gone_and_service_resumes(
    own_redis_server: Any, fault: str
) -> None:
    client = quick_client(own_redis_server)
    limiter = RedisKeyedRateLimiter(client, 1, name="clients", burst=100, per=3600, on_error="deny")
    assert all(limiter.try_acquire("a") for _ in range(5))
    if fault == "SIGSTOP":
        own_redis_server.pause()
    else:
        own_redis_server.kill()
    for _ in range(3):
        assert not timed(limiter.try_acquire, "a")
        decision = timed(limiter.check, "b")
        assert decision.outcome is LimitOutcome.DENIED
    assert timed(limiter.try_acquire_many, ["a", "b", "c"]) == [False, False, False]
    if fault == "SIGSTOP":
        own_redis_server.resume()
    else:
        own_redis_server.start()
    deadline = time.monotonic() + 5
    while not limiter.try_acquire("c") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limiter.check("c").remaining < 100
    client.close()


def test_a_local_fallback_limits_while_the_server_is_gone(own_redis_server: Any) -> None:
    client = quick_client(own_redis_server)
    fallback = KeyedRateLimiter(1, burst=3, per=3600)
    limiter = RedisKeyedRateLimiter(client, 1, name="clients", burst=3, per=3600, on_error=fallback)
    assert limiter.try_acquire("a")
    own_redis_server.kill()
    assert [timed(limiter.try_acquire, "a") for _ in range(4)] == [True, True, True, False]
    own_redis_server.start()
    # The restarted server remembers nothing (no persistence here): a full burst again.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if limiter.check("a").remaining == 2:
                break
        except LimiterUnavailable:  # pragma: no cover (the policy answers instead)
            pass
        time.sleep(0.05)
    assert limiter.available("a") == 2
    client.close()


def test_raise_chains_the_clients_error_and_recovers(own_redis_server: Any) -> None:
    client = quick_client(own_redis_server)
    limiter = RedisRateLimiter(client, 5, name="r")
    assert limiter.try_acquire()
    own_redis_server.pause()
    with pytest.raises(LimiterUnavailable) as raised:
        timed(limiter.try_acquire)
    assert raised.value.__cause__ is not None
    own_redis_server.resume()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            limiter.peek()
            break
        except LimiterUnavailable:
            time.sleep(0.05)
    assert limiter.try_acquire()
    client.close()


def test_a_script_flush_mid_run_is_invisible(redis_client: Any) -> None:
    limiter = RedisRateLimiter(redis_client, 1, name="flush-mid-run", burst=500, per=3600)
    admitted = 0
    for i in range(600):
        if i % 50 == 0:
            redis_client.script_flush()
        admitted += limiter.try_acquire()
    assert admitted == 500


@pytest.mark.parametrize("asyncio_client", [True, False], ids=["asyncio client", "sync client"])
def test_an_awaited_acquire_with_a_timeout_returns_at_its_deadline_from_a_stopped_server(
    own_redis_server: Any, asyncio_client: bool
) -> None:
    """A client with no socket timeout (redis-py's default) waits for ever on a stopped
    server; ``acquire_async(timeout=0.5)`` still returns False, near its deadline. The bound
    here (5 s, against a wait with no end) only detects a hang: it is not a speed target."""
    import asyncio

    import redis.asyncio

    own_redis_server.client().ping()

    async def main() -> tuple[bool, bool]:
        if asyncio_client:
            client = redis.asyncio.Redis(port=own_redis_server.port)
            limiter: Any = RedisKeyedRateLimiter(client, 1, name="clients", burst=1, per=3600)
        else:
            limiter = RedisKeyedRateLimiter(
                own_redis_server.client(), 1, name="clients", burst=1, per=3600
            )
        assert await limiter.acquire_async("k", timeout=0.5) is True  # connected, script loaded
        own_redis_server.pause()
        try:
            denied = await asyncio.wait_for(limiter.acquire_async("k", timeout=0.5), 5)
        finally:
            own_redis_server.resume()
        return True, denied

    with qos_support.watchdog(60):
        returned, answer = asyncio.run(main())
    assert returned and answer is False


def test_a_blocking_acquire_with_a_timeout_returns_at_its_deadline_from_a_stopped_server(
    own_redis_server: Any,
) -> None:
    """redis-py's default client waits 5 s for each answer, and retries: against a stopped
    server ``acquire(timeout=0.5)`` used to block for many seconds. Its question now runs in a
    worker thread, waited for what is left of the timeout, so the call returns False near its
    deadline (the 3 s bound here only detects a hang), and the question, answered once the
    server is back, gives back what it took."""
    import threading

    client = own_redis_server.client()  # the client's defaults: socket_timeout=5, retries
    limiter = RedisKeyedRateLimiter(client, 1, name="clients", burst=2, per=3600)
    assert limiter.acquire("k", timeout=0.5) is True  # connected, and the script loaded
    answers: list[bool] = []
    own_redis_server.pause()
    try:
        caller = threading.Thread(target=lambda: answers.append(limiter.acquire("k", timeout=0.5)))
        caller.start()
        caller.join(3)
        assert answers == [False], "still blocked: the deadline was not kept"
    finally:
        own_redis_server.resume()
    deadline = time.monotonic() + 10
    while limiter.available("k") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert limiter.available("k") == 1, "the late question gave back what it took"


def test_a_blocking_acquire_with_a_timeout_needs_a_client_socket_timeout(
    own_redis_server: Any,
) -> None:
    client = own_redis_server.client(socket_timeout=None)
    limiter = RedisKeyedRateLimiter(client, 1, name="clients", burst=2, per=3600)
    with pytest.raises(ValueError, match="socket_timeout"):
        limiter.acquire("k", timeout=0.5)
    assert limiter.acquire("k") is True  # no timeout: nothing to keep
