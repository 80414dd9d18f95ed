"""A client that re-sends a call takes once (issue 22 §3).

redis-py re-sends a command that timed out (its default ``retry``). The first sending is not
lost: it waits in the server's socket buffer, and the server runs it once it reads it. So one
``try_acquire`` on a client with ``socket_timeout=0.1`` used to take a token for every sending
that reached the server: two, or more while the server was slow. Every call that changes a
balance (a take, a batch, a refund) now carries a random token; the script remembers, in the
key's own hash, the tokens of the last calls that changed it, and a sending it has already run
changes nothing again: a take answers ALLOWED without taking twice, a refund gives back once.

The server is made slow by stopping it (SIGSTOP) for longer than the client's timeout, then
letting it run (SIGCONT): every sending queued meanwhile is then run, in order.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter
from protocol_in_code.qos.distributed._server import TOKEN_BYTES

SECOND = 10**9


def sent(args: list[bytes]) -> list[bytes]:
    """A call's arguments as the client sends them: with a token of the call's own."""
    return [*args, os.urandom(TOKEN_BYTES)]


def retrying_client(server: Any) -> Any:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return server.client(
        socket_timeout=0.1, socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 10)
    )


def while_stopped(server: Any, seconds: float, call: Any) -> Any:
    """``call()`` with the server stopped for its first ``seconds``: the client times out and
    re-sends, and every sending reaches the server once it runs again."""
    answers: list[Any] = []
    server.pause()
    try:
        worker = threading.Thread(target=lambda: answers.append(call()))
        worker.start()
        time.sleep(seconds)
    finally:
        server.resume()
    worker.join(10)
    assert not worker.is_alive()
    return answers[0]


@pytest.mark.parametrize("kind", ["one key", "keyed"])
def test_a_take_sent_several_times_takes_once(own_redis_server: Any, kind: str) -> None:
    client = retrying_client(own_redis_server)
    if kind == "one key":
        limiter: Any = RedisRateLimiter(client, 1, burst=10, per=3600, name="global")
        take = limiter.try_acquire
        available = limiter.available
    else:
        limiter = RedisKeyedRateLimiter(client, 1, burst=10, per=3600, name="api")
        take = lambda: limiter.try_acquire("k")  # noqa: E731
        available = lambda: limiter.available("k")  # noqa: E731
    assert take()
    assert while_stopped(own_redis_server, 0.35, take) is True
    # Two calls, two tokens: not one per sending that reached the server.
    assert available() == 8


def test_a_batch_sent_several_times_takes_once(own_redis_server: Any) -> None:
    client = retrying_client(own_redis_server)
    limiter = RedisKeyedRateLimiter(client, 1, burst=3, per=3600, name="api")
    answers = while_stopped(
        own_redis_server, 0.35, lambda: limiter.try_acquire_many(["a", "b", "a"])
    )
    assert answers == [True, True, True]
    assert [limiter.available(key) for key in ("a", "b")] == [1, 2]


def test_a_refund_sent_several_times_gives_back_once(own_redis_server: Any) -> None:
    client = retrying_client(own_redis_server)
    limiter = RedisRateLimiter(client, 1, burst=10, per=3600, name="global")
    assert all(limiter.try_acquire() for _ in range(5))
    while_stopped(own_redis_server, 0.35, lambda: limiter.refund(2))
    assert limiter.available() == 7


def test_a_new_call_with_the_same_arguments_is_a_new_take(redis_client: Any) -> None:
    # The token is per call, not per argument list: equal calls in a row each take.
    limiter = RedisRateLimiter(redis_client, 1, burst=3, per=3600, name="global")
    assert [limiter.try_acquire() for _ in range(4)] == [True, True, True, False]
    keyed = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=3600, name="api")
    assert [keyed.try_acquire("k", now_ns=0) for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize(
    ("keys", "burst", "first"),
    [
        (["a", "a", "b"], 1, "010"),
        (["a", "b", "a", "a", "c"], 2, "00010"),
        (["a"], 1, "0"),
        (["a", "a"], 5, "00"),
    ],
)
def test_a_batch_sent_again_answers_as_it_did_and_changes_nothing(
    redis_client: Any, keys: list[str], burst: int, first: str
) -> None:
    from protocol_in_code.qos.distributed._server import SOURCE
    from protocol_in_code.qos.distributed.limiters import MANY

    limiter = RedisKeyedRateLimiter(redis_client, 1, burst=burst, per=3600, name="api")
    names = [limiter.redis_key(key) for key in keys]
    args = sent(limiter._core.args(MANY, 1, 10**15))
    assert redis_client.eval(SOURCE, len(names), *names, *args) == first.encode()
    state = {name: redis_client.hgetall(name) for name in names}
    # The same sending again (a client's retry): the same answers, the same state.
    assert redis_client.eval(SOURCE, len(names), *names, *args) == first.encode()
    assert {name: redis_client.hgetall(name) for name in names} == state
    # A new call is a new take: what is left is taken now.
    fresh = sent(limiter._core.args(MANY, 1, 10**15))
    again = redis_client.eval(SOURCE, len(names), *names, *fresh).decode()
    left = {key: burst - taken for key, taken in taken_per_key(keys, first).items()}
    expected = []
    for key in keys:
        expected.append("0" if left[key] > 0 else "1")
        left[key] -= left[key] > 0
    assert again == "".join(expected)


def taken_per_key(keys: list[str], answers: str) -> dict[str, int]:
    taken = dict.fromkeys(keys, 0)
    for key, answer in zip(keys, answers, strict=True):
        taken[key] += answer == "0"
    return taken


def test_a_key_remembers_its_last_calls_only(redis_client: Any) -> None:
    from protocol_in_code.qos.distributed._server import SOURCE
    from protocol_in_code.qos.distributed.limiters import TAKE

    limiter = RedisRateLimiter(redis_client, 1, burst=100, per=3600, name="global")
    name = limiter.redis_key
    calls = [sent(limiter._core.args(TAKE, 1, 10**15)) for _ in range(9)]
    for args in calls:
        redis_client.eval(SOURCE, 1, name, *args)
    assert limiter.available(now_ns=10**15) == 91
    # The last eight are remembered: sent again, they take nothing ...
    for args in calls[1:]:
        redis_client.eval(SOURCE, 1, name, *args)
    assert limiter.available(now_ns=10**15) == 91
    # ... and the oldest, forgotten, takes again: the memory is bounded (12 bytes a call).
    redis_client.eval(SOURCE, 1, name, *calls[0])
    assert limiter.available(now_ns=10**15) == 90
    assert len(redis_client.hget(name, "c")) == 8 * 12


def test_an_asyncio_take_sent_several_times_takes_once(own_redis_server: Any) -> None:
    import asyncio

    import redis.asyncio
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    async def main() -> int:
        client = redis.asyncio.Redis(
            host="127.0.0.1",
            port=own_redis_server.port,
            socket_timeout=0.1,
            socket_connect_timeout=1.0,
            retry=Retry(NoBackoff(), 10),
        )
        limiter = RedisRateLimiter(client, 1, burst=10, per=3600, name="global")
        assert await limiter.try_acquire()
        own_redis_server.pause()
        try:
            take = asyncio.ensure_future(limiter.try_acquire())
            await asyncio.sleep(0.35)
        finally:
            own_redis_server.resume()
        assert await take is True
        left = await limiter.available()
        await client.aclose()
        return int(left)

    # Two calls, two tokens: not one per sending that reached the server.
    assert asyncio.run(main()) == 8
