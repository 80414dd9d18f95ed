"""A client that re-sends a call takes once, however many callers share the key (issues 22 §3
and 33 §2).

redis-py re-sends a command that timed out (its default ``retry``). The first sending is not
lost: it waits in the server's socket buffer, and the server runs it once it reads it. So one
``try_acquire`` on a client with ``socket_timeout=0.1`` used to take a token for every sending
that reached the server: two, or more while the server was slow. Every call now has a random
token, and names after its keys a record of its own, in their slot; a call that changes a
balance (a take, a batch, a refund, a reservation, a give-back, a stack) writes its record, kept
a minute, and a sending that finds it changes nothing again: a take answers ALLOWED without
taking twice, a refund gives back once.

The memory used to be the last 8 calls that changed each key, in the key's own hash: with 16
callers re-sending through one stall, 16 takes took 28 to 30 tokens, since more than 8 other
calls ran between a call's first sending and its second. A record is now the call's own key,
kept for a time, not among a count.

The server is made slow by stopping it (SIGSTOP) for longer than the client's timeout, then
letting it run (SIGCONT): every sending queued meanwhile is then run. (``CLIENT PAUSE`` would
not show it: a paused server runs one sending of each call, the queued commands of the
connections the client closed meanwhile being dropped.)
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter
from protocol_in_code.qos.distributed._replies import MANY, REFUND, TAKE
from protocol_in_code.qos.distributed._server import new_record
from redis_servers import HOST

SECOND = 10**9


def sent(args: list[bytes], keys: list[bytes]) -> list[bytes]:
    """A call's arguments on ``keys`` as the client sends them: with a record of the call's own."""
    return [*args, new_record(keys)]


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


#: Callers, each making one call while the server is stopped.
CALLERS = 32


def open_connections(client: Any, count: int) -> None:
    """Open ``count`` connections in ``client``'s pool before the server stops: each caller's
    first sending then goes out at once, and its re-sendings follow, each once its new
    connection's handshake is answered (a fresh connection's handshake would wait for the
    server too, and nothing would be re-sent)."""
    pool = client.connection_pool
    held = [pool.get_connection() for _ in range(count)]
    for connection in held:
        connection.connect()
    for connection in held:
        pool.release(connection)


def script_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


@pytest.mark.parametrize("call", ["take", "refund", "keyed take"])
def test_32_callers_re_sent_through_one_stall_count_once_each(
    own_redis_server: Any, call: str
) -> None:
    """Before: with 16 callers, 16 takes took 28 to 30 tokens and 16 refunds gave back 27 to 28;
    with 32, 62 to 64 either way: a key remembered its last 8 calls only."""
    client = retrying_client(own_redis_server)
    limiter = RedisRateLimiter(client, 1, burst=1000, per=3600, name="global")
    keyed = RedisKeyedRateLimiter(client, 1, burst=1000, per=3600, name="api")
    calls: dict[str, Any] = {
        "take": limiter.try_acquire,
        "refund": limiter.refund,
        "keyed take": lambda: keyed.try_acquire("k"),
    }
    available = (lambda: keyed.available("k")) if call == "keyed take" else limiter.available
    if call == "refund":
        assert limiter.try_acquire(500)
    before = available()
    open_connections(client, CALLERS)
    client.config_resetstat()
    answers: list[Any] = []
    own_redis_server.pause()
    try:
        callers = [
            threading.Thread(target=lambda: answers.append(calls[call]())) for _ in range(CALLERS)
        ]
        for caller in callers:
            caller.start()
        time.sleep(0.35)
    finally:
        own_redis_server.resume()
    for caller in callers:
        caller.join(10)
    assert not any(caller.is_alive() for caller in callers)
    assert len(answers) == CALLERS
    assert script_calls(client) > CALLERS  # calls were sent more than once
    if call == "refund":
        assert available() == before + CALLERS
    else:
        assert answers == [True] * CALLERS
        assert available() == before - CALLERS


def test_a_call_is_remembered_for_a_minute_however_many_calls_run_between(
    redis_client: Any,
) -> None:
    limiter = RedisRateLimiter(redis_client, 1, burst=10_000, per=3600, name="global")
    server, name = limiter._core.server, limiter.redis_key
    first = sent(limiter._core.args(TAKE, 1, None), [name])
    assert server.send([name], first) == 4 * 9_999  # ALLOWED, 9,999 left
    record = first[-1]
    assert record.startswith(b"qos:{global}::")  # in the slot of the key it decides
    assert 50_000 < redis_client.pttl(record) <= 60_000  # kept a minute, not among a count
    for _ in range(1_000):
        assert limiter.try_acquire()
    # Sent again after a thousand other calls: ALLOWED (with what is left now), nothing taken.
    assert server.send([name], first) == 4 * 8_999
    assert limiter.available() == 8_999
    # Once its minute is over (its record expired: deleted here), a sending is a call of its own.
    redis_client.delete(record)
    assert server.send([name], first) == 4 * 8_998
    assert limiter.available() == 8_998


def test_a_refund_sent_again_after_its_key_expired_full_gives_nothing(redis_client: Any) -> None:
    """A refund that fills its key deletes it (a full key is not stored); the call's record
    stays, so the refund sent again, once others have taken, still gives nothing. (Before, the
    key's own hash held the memory, and went with it.)"""
    limiter = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=3600, name="api")
    server, name = limiter._core.server, limiter.redis_key("k")
    assert limiter.try_acquire("k", 2)
    refund = sent(limiter._core.args(REFUND, 2, None), [name])
    server.send([name], refund)
    assert redis_client.exists(name) == 0  # full: not stored
    assert limiter.try_acquire("k", 3)
    server.send([name], refund)  # a client's retry of the refund
    assert limiter.available("k") == 0


def test_a_call_on_a_slot_being_migrated_is_decided_on_either_node(redis_cluster: Any) -> None:
    """A record is not among a call's KEYS: a cluster answers TRYAGAIN to a call whose keys a
    node holds in part while their slot is being migrated, and a record never exists before its
    call, so every call on the slot would wait out the migration. The script reads and writes
    the record itself: on the node the slot moves to (after ASK) it is written; on the node it
    moves from, the cluster refuses a key the node does not hold, and the call is decided
    without a record."""
    from test_distributed_cluster_batch import assign, move_slot, node_id, sync_client, unique

    client = sync_client(redis_cluster)
    prefix = unique("migrating")
    here = RedisKeyedRateLimiter(client, 1, burst=5, per=3600, name="here", prefix=prefix)
    there = RedisKeyedRateLimiter(client, 1, burst=5, per=3600, name="there", prefix=prefix)
    assert here.try_acquire("k")  # written before the migration: held by the slot's owner
    slot = int(client.keyslot(here.redis_key("k")))
    assert slot == client.keyslot(there.redis_key("k"))  # one hash tag, one slot
    source = redis_cluster.node(client.get_node_from_key(here.redis_key("k")).port)
    target = next(node for node in redis_cluster.masters() if node.port != source.port)

    def records(node: Any) -> set[str]:
        keys = node.cli("CLUSTER", "GETKEYSINSLOT", str(slot), "1000").split()
        return {key for key in keys if "}::" in key}

    before = records(source)
    assert len(before) == 1
    target.cli("CLUSTER", "SETSLOT", str(slot), "IMPORTING", node_id(source))
    source.cli("CLUSTER", "SETSLOT", str(slot), "MIGRATING", node_id(target))
    try:
        assert here.try_acquire("k")  # decided by the node it moves from: no record
        assert records(source) == before
        assert there.try_acquire("k")  # ASK: decided by the node it moves to, recorded there
        assert len(records(target)) == 1
    finally:
        keys = source.cli("CLUSTER", "GETKEYSINSLOT", str(slot), "1000").split()
        source.cli("MIGRATE", HOST, str(target.port), "", "0", "5000", "KEYS", *keys)
        assign(redis_cluster, slot, source, target)
        move_slot(redis_cluster, slot, target, source)
    assert (here.available("k"), there.available("k")) == (3, 4)
    client.close()


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
    limiter = RedisKeyedRateLimiter(redis_client, 1, burst=burst, per=3600, name="api")
    server = limiter._core.server
    names = [limiter.redis_key(key) for key in keys]
    args = sent(limiter._core.args(MANY, 1, 10**15), names)
    assert server.send(names, args) == first.encode()
    state = {name: redis_client.hgetall(name) for name in names}
    # The same sending again (a client's retry): the same answers, the same state.
    assert server.send(names, args) == first.encode()
    assert {name: redis_client.hgetall(name) for name in names} == state
    # A new call is a new take: what is left is taken now.
    fresh = sent(limiter._core.args(MANY, 1, 10**15), names)
    again = server.send(names, fresh).decode()
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
