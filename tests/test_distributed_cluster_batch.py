"""``try_acquire_many`` on a three-master cluster: one pipelined round trip per node (issue 22,
item 5), each slot still its own script call of at most ``KEYS_PER_CALL`` keys, and every
guarantee of a batch kept: the in-process answers, the answers of the nodes that answered when
one stops, ``MOVED`` and ``ASK`` followed, and a cancelled asyncio batch net zero.

Round trips are counted on the client: each connection's ``send_packed_command`` is one write
of one or more commands, and a pipeline is one such write, so a node's sends during a batch are
its round trips. Script calls are counted on the servers (``INFO commandstats``).
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol_in_code.qos.distributed import (
    Band,
    LimiterUnavailable,
    RedisKeyedRateLimiter,
    _server,
)
from protocol_in_code.qos.keyed import KeyedRateLimiter
from redis_servers import HOST, Cluster, Server

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

_names = itertools.count()
TIMEOUT = 0.3
BURST = 5
KEYS = [f"c{i}" for i in range(120)]  # spread over every master


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}:"


def sync_client(cluster: Cluster, timeout: float | None = None) -> Any:
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

    if timeout is None:
        return RedisCluster(host=HOST, port=cluster.nodes[0].port)
    return RedisCluster(
        host=HOST,
        port=cluster.nodes[0].port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


async def async_client(cluster: Cluster, timeout: float | None = None) -> Any:
    from redis.asyncio.cluster import RedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    if timeout is None:
        client = RedisCluster(host=HOST, port=cluster.nodes[0].port)
    else:
        client = RedisCluster(
            host=HOST,
            port=cluster.nodes[0].port,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
    await client.initialize()
    return client


def defining(cls: type, name: str) -> type:
    """The class in ``cls``'s MRO that defines ``name`` (where a wrapper must go)."""
    return next(base for base in cls.__mro__ if name in vars(base))


class Sends:
    """Each connection's writes, by the port of the node it goes to; ``before(port)`` runs
    before each write (to stop a node as its pipeline goes out, say)."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, asyncio_client: bool, package: str = "redis"
    ) -> None:
        self.counts: collections.Counter[int] = collections.Counter()
        self.before: Callable[[int], None] = lambda port: None
        if asyncio_client:
            connections = importlib.import_module(f"{package}.asyncio.connection")
            cls = defining(connections.Connection, "send_packed_command")
            original = vars(cls)["send_packed_command"]

            async def counted_async(connection: Any, *args: Any, **kwargs: Any) -> Any:
                self.counts[connection.port] += 1
                self.before(connection.port)
                return await original(connection, *args, **kwargs)

            monkeypatch.setattr(cls, "send_packed_command", counted_async)
        else:
            connections = importlib.import_module(f"{package}.connection")
            cls = defining(connections.Connection, "send_packed_command")
            original = vars(cls)["send_packed_command"]

            def counted(connection: Any, *args: Any, **kwargs: Any) -> Any:
                self.counts[connection.port] += 1
                self.before(connection.port)
                return original(connection, *args, **kwargs)

            monkeypatch.setattr(cls, "send_packed_command", counted)

    def reset(self) -> None:
        self.counts.clear()


def script_calls(cluster: Cluster) -> int:
    """Script calls the masters have run so far (EVALSHA and EVAL, NOSCRIPT included)."""
    total = 0
    for node in cluster.masters():
        for line in node.cli("INFO", "commandstats").splitlines():
            if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
                total += int(line.split("calls=", 1)[1].split(",", 1)[0])
    return total


def masters_of(cluster: Cluster) -> set[int]:
    return {node.port for node in cluster.masters()}


def owner(client: Any, limiter: Any, key: str) -> int:
    return int(client.get_node_from_key(limiter.redis_key(key)).port)


def expected_calls(client: Any, limiter: Any, keys: list[str], per_call: int) -> int:
    """Script calls a batch of ``keys`` needs: one per slot and per ``per_call`` keys."""
    slots = collections.Counter(client.keyslot(limiter.redis_key(key)) for key in keys)
    return sum(-(-count // per_call) for count in slots.values())


def in_process(keys: list[str], n: int = 1, now_ns: int = 0) -> list[bool]:
    local = KeyedRateLimiter(1, burst=BURST, per=3600)
    return [local.try_acquire(key, n, now_ns=now_ns) for key in keys]


def warm_up(client: Any) -> None:
    """Connections made to every master, and the script loaded on each: the batches counted
    after this are round trips of script calls only."""
    other = RedisKeyedRateLimiter(client, 1, name="warm", burst=BURST, per=3600)
    other.try_acquire_many(KEYS)


async def warm_up_async(client: Any) -> None:
    other = RedisKeyedRateLimiter(client, 1, name="warm", burst=BURST, per=3600)
    await other.try_acquire_many(KEYS)


@pytest.fixture
def small_calls(monkeypatch: pytest.MonkeyPatch) -> int:
    """At most 2 keys per script call, so that a hot key's slot is several calls in a row."""
    monkeypatch.setattr(_server, "KEYS_PER_CALL", 2)
    return 2


# One round trip per node


def test_a_batch_is_one_round_trip_per_node(
    redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, small_calls: int
) -> None:
    client = sync_client(redis_cluster)
    limiter = RedisKeyedRateLimiter(
        client, 1, name="clients", burst=BURST, per=3600, prefix=unique("trips")
    )
    keys = KEYS + ["hot"] * 7  # "hot": 4 script calls of at most 2 keys, in order
    sends = Sends(monkeypatch, asyncio_client=False)
    warm_up(client)
    sends.reset()
    before = script_calls(redis_cluster)
    answers = limiter.try_acquire_many(keys, now_ns=10**15)
    assert answers == in_process(keys)
    assert dict(sends.counts) == {port: 1 for port in masters_of(redis_cluster)}
    assert script_calls(redis_cluster) - before == expected_calls(client, limiter, keys, 2)
    assert [limiter.available(key, now_ns=10**15) for key in ("hot", "c0")] == [0, BURST - 1]
    client.close()


def test_an_asyncio_batch_is_one_round_trip_per_node(
    redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, small_calls: int
) -> None:
    keys = KEYS + ["hot"] * 7
    sends = Sends(monkeypatch, asyncio_client=True)

    async def main() -> None:
        client = await async_client(redis_cluster)
        limiter = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, prefix=unique("atrips")
        )
        sync = sync_client(redis_cluster)
        await warm_up_async(client)
        sends.reset()
        before = script_calls(redis_cluster)
        answers = await limiter.try_acquire_many(keys)
        assert answers == in_process(keys)
        assert dict(sends.counts) == {port: 1 for port in masters_of(redis_cluster)}
        assert script_calls(redis_cluster) - before == expected_calls(sync, limiter, keys, 2)
        assert await limiter.available("c0") == BURST - 1
        sync.close()
        await client.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("form", ["sync", "asyncio"])
def test_valkey_py_cluster_clients_batch_one_round_trip_per_node(
    redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, small_calls: int, form: str
) -> None:
    """valkey-py's cluster clients (its node's client is ``get_valkey_connection``)."""
    valkey = pytest.importorskip("valkey", reason="pip install valkey to test valkey-py")
    keys = KEYS + ["hot"] * 7
    sends = Sends(monkeypatch, asyncio_client=form == "asyncio", package="valkey")
    port = redis_cluster.nodes[0].port

    def sync() -> tuple[list[bool], dict[int, int], int]:
        client = valkey.cluster.ValkeyCluster(host=HOST, port=port)
        limiter = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, prefix=unique("valkey")
        )
        RedisKeyedRateLimiter(client, 1, name="warm", burst=BURST, per=3600).try_acquire_many(KEYS)
        sends.reset()
        answers = limiter.try_acquire_many(keys)
        counts = dict(sends.counts)
        left = limiter.available("c0")
        client.close()
        return answers, counts, left

    async def asynchronous() -> tuple[list[bool], dict[int, int], int]:
        from valkey.asyncio.cluster import ValkeyCluster

        client = ValkeyCluster(host=HOST, port=port)
        await client.initialize()
        limiter = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, prefix=unique("avalkey")
        )
        await warm_up_async(client)
        sends.reset()
        answers = await limiter.try_acquire_many(keys)
        counts = dict(sends.counts)
        left = await limiter.available("c0")
        await client.aclose()
        return answers, counts, left

    answers, counts, left = sync() if form == "sync" else asyncio.run(asynchronous())
    assert answers == in_process(keys)
    assert left == BURST - 1
    assert counts == {port: 1 for port in masters_of(redis_cluster)}


# The in-process answers

_bands = st.lists(
    st.builds(lambda rate, burst: Band(rate, burst=burst), st.integers(1, 9), st.integers(1, 9)),
    min_size=1,
    max_size=2,
)
_batches = st.lists(
    st.tuples(
        st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), max_size=12),
        st.integers(0, 3),
        st.integers(0, 10**6),
    ),
    max_size=6,
)


def _want(local: KeyedRateLimiter, keys: list[str], n: int, now_ns: int) -> list[bool] | str:
    try:
        return [local.try_acquire(key, n, now_ns=now_ns) for key in keys]
    except ValueError:
        return "never"


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def clients(redis_cluster: Cluster, loop: asyncio.AbstractEventLoop) -> Iterator[Any]:
    sync = sync_client(redis_cluster)
    asynchronous = loop.run_until_complete(async_client(redis_cluster))
    yield sync, asynchronous
    sync.close()
    loop.run_until_complete(asynchronous.aclose())


@pytest.mark.parametrize("form", ["sync", "asyncio"])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(bands=_bands, batches=_batches)
def test_batches_on_the_cluster_answer_as_in_process(
    clients: Any,
    loop: asyncio.AbstractEventLoop,
    small_calls: int,
    form: str,
    bands: list[Band],
    batches: list[tuple[list[str], int, int]],
) -> None:
    """Batches of repeated keys, at most 2 keys per script call, against one ``try_acquire``
    per key in turn in-process, with explicit times."""
    client = clients[0] if form == "sync" else clients[1]
    remote = RedisKeyedRateLimiter(
        client, name="clients", bands=bands, prefix=unique("dbatch"), min_ttl_ms=600_000
    )
    local = KeyedRateLimiter(bands=bands)
    now_us = 10**12
    for keys, n, step in batches:
        now_us += step
        want = _want(local, keys, n, now_us * 1000)
        try:
            asked = remote.try_acquire_many(keys, n, now_ns=now_us * 1000)
            got = asked if form == "sync" else loop.run_until_complete(asked)
        except ValueError:
            got = "never"
        assert got == want


# A node that stops while its pipeline is under way


def test_a_master_stopped_under_its_pipeline_keeps_the_other_answers(
    redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The victim is stopped (SIGSTOP) as its pipeline is written, the others' pipelines
    written around it: the other masters' answers are kept and reported under ``"raise"``; the
    victim's keys are undecided, and take at most once each (the victim, resumed, may still
    run the pipeline it received)."""
    client = sync_client(redis_cluster, TIMEOUT)
    limiter = RedisKeyedRateLimiter(
        client, 1, name="clients", burst=BURST, per=3600, prefix=unique("stopped")
    )
    victim = redis_cluster.masters()[0]
    on_victim = {key for key in KEYS if owner(client, limiter, key) == victim.port}
    assert 0 < len(on_victim) < len(KEYS)
    sends = Sends(monkeypatch, asyncio_client=False)
    warm_up(client)
    sends.reset()

    def stop(port: int) -> None:
        if port == victim.port:
            victim.pause()

    sends.before = stop
    try:
        with pytest.raises(LimiterUnavailable) as raised:
            limiter.try_acquire_many(KEYS)
    finally:
        victim.resume()
    sends.before = lambda port: None
    answers = raised.value.answers
    assert answers == [None if key in on_victim else True for key in KEYS]
    assert dict(sends.counts) == {port: 1 for port in masters_of(redis_cluster)}
    for key in KEYS:
        left = limiter.available(key)
        if key in on_victim:
            assert BURST - 1 <= left <= BURST  # taken once, or not at all: never twice
        else:
            assert left == BURST - 1
    client.close()


def test_an_asyncio_batch_keeps_the_answers_of_the_masters_not_stopped(
    redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = redis_cluster.masters()[1]
    sends = Sends(monkeypatch, asyncio_client=True)

    async def main() -> None:
        client = await async_client(redis_cluster, TIMEOUT)
        limiter = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, prefix=unique("astopped")
        )
        on_victim = {
            key
            for key in KEYS
            if client.get_node_from_key(limiter.redis_key(key)).port == victim.port
        }
        assert 0 < len(on_victim) < len(KEYS)
        await warm_up_async(client)
        sends.reset()

        def stop(port: int) -> None:
            if port == victim.port:
                victim.pause()

        sends.before = stop
        try:
            with pytest.raises(LimiterUnavailable) as raised:
                await limiter.try_acquire_many(KEYS)
        finally:
            victim.resume()
        sends.before = lambda port: None
        assert raised.value.answers == [None if key in on_victim else True for key in KEYS]
        assert dict(sends.counts) == {port: 1 for port in masters_of(redis_cluster)}
        deadline = time.monotonic() + 10
        while True:
            try:
                left = {key: await limiter.available(key) for key in KEYS}
                break
            except LimiterUnavailable:  # the victim's connection, closed on the timeout
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        for key in KEYS:
            if key in on_victim:
                assert BURST - 1 <= left[key] <= BURST
            else:
                assert left[key] == BURST - 1
        await client.aclose()

    asyncio.run(main())


# MOVED and ASK: a slot that moved, or is moving, since the client read the layout


def node_id(node: Server) -> str:
    return node.cli("CLUSTER", "MYID").strip()


def move_slot(cluster: Cluster, slot: int, source: Server, target: Server) -> None:
    """Move ``slot`` and its keys from ``source`` to ``target`` (``redis-cli --cluster
    reshard``'s steps), and tell every master."""
    target.cli("CLUSTER", "SETSLOT", str(slot), "IMPORTING", node_id(source))
    source.cli("CLUSTER", "SETSLOT", str(slot), "MIGRATING", node_id(target))
    keys = source.cli("CLUSTER", "GETKEYSINSLOT", str(slot), "1000").split()
    if keys:
        source.cli("MIGRATE", HOST, str(target.port), "", "0", "5000", "KEYS", *keys)
    assign(cluster, slot, source, target)


def assign(cluster: Cluster, slot: int, source: Server, target: Server) -> None:
    """``slot`` given to ``target``: told to it first, then to ``source``, then the others."""
    others = [node for node in cluster.masters() if node.port not in (source.port, target.port)]
    for node in [target, source, *others]:
        node.cli("CLUSTER", "SETSLOT", str(slot), "NODE", node_id(target))


def holds(node: Server, slot: int, key: bytes) -> bool:
    """Whether ``node`` holds ``key`` (of ``slot``), whoever owns the slot now."""
    return key.decode() in node.cli("CLUSTER", "GETKEYSINSLOT", str(slot), "1000").split()


def moved_slot_case(cluster: Cluster, client: Any, limiter: Any) -> tuple[str, int, Server, Server]:
    """A key of ``KEYS``, its slot, its owner and another master."""
    key = KEYS[7]
    slot = int(client.keyslot(limiter.redis_key(key)))
    source = cluster.node(owner(client, limiter, key))
    target = next(node for node in cluster.masters() if node.port != source.port)
    return key, slot, source, target


@pytest.mark.parametrize("form", ["sync", "asyncio"])
def test_a_batch_follows_a_slot_that_moved(redis_cluster: Cluster, form: str) -> None:
    """The client still maps the slot to its old owner, which answers MOVED: the call is sent
    again through the client, which follows it; every answer is the in-process one, and the
    moved key's token was taken once."""
    sync = sync_client(redis_cluster)
    prefix = unique("moved")
    limiter = RedisKeyedRateLimiter(sync, 1, name="clients", burst=BURST, per=3600, prefix=prefix)
    key, slot, source, target = moved_slot_case(redis_cluster, sync, limiter)
    keys = [*KEYS, key]

    async def main() -> list[bool]:
        client = await async_client(redis_cluster)
        remote = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, prefix=prefix
        )
        assert all(await remote.try_acquire_many(KEYS))  # the layout read
        move_slot(redis_cluster, slot, source, target)
        try:
            return await remote.try_acquire_many(keys)  # type: ignore[no-any-return]
        finally:
            await client.aclose()

    try:
        if form == "sync":
            assert all(limiter.try_acquire_many(KEYS))  # the layout read
            move_slot(redis_cluster, slot, source, target)
            answers = limiter.try_acquire_many(keys)
        else:
            answers = asyncio.run(main())
        assert answers == [True] * len(keys)
        assert holds(target, slot, limiter.redis_key(key)) and not holds(
            source, slot, limiter.redis_key(key)
        )
        assert limiter.available(key) == BURST - 3
        assert limiter.available(KEYS[0]) == BURST - 2
    finally:
        move_slot(redis_cluster, slot, target, source)
        sync.close()


def test_a_batch_follows_a_slot_being_migrated(redis_cluster: Cluster) -> None:
    """A slot halfway through a migration: a key not on the old owner yet is answered ASK,
    and the call goes to the new owner with ASKING, through the client."""
    client = sync_client(redis_cluster)
    limiter = RedisKeyedRateLimiter(
        client, 1, name="clients", burst=BURST, per=3600, prefix=unique("ask")
    )
    key, slot, source, target = moved_slot_case(redis_cluster, client, limiter)
    assert all(limiter.try_acquire_many(KEYS[:3]))  # the layout read; the key not written
    target.cli("CLUSTER", "SETSLOT", str(slot), "IMPORTING", node_id(source))
    source.cli("CLUSTER", "SETSLOT", str(slot), "MIGRATING", node_id(target))
    try:
        answers = limiter.try_acquire_many([*KEYS[10:30], key])
        assert answers == [True] * 21
        assert not holds(source, slot, limiter.redis_key(key))
        assert holds(target, slot, limiter.redis_key(key))
    finally:
        assign(redis_cluster, slot, source, target)  # the migration finished
        move_slot(redis_cluster, slot, target, source)
    assert limiter.available(key) == BURST - 1
    client.close()


# A cancelled asyncio batch


def test_a_cancelled_asyncio_batch_on_the_cluster_gives_back_what_it_took(
    redis_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One master's pipeline is held back while the caller is cancelled: the other masters'
    takes, and the held one's once it lands, are all given back."""
    victim = redis_cluster.masters()[2]

    async def main() -> dict[str, int]:
        client = await async_client(redis_cluster)
        limiter = RedisKeyedRateLimiter(
            client, 1, name="clients", burst=BURST, per=3600, prefix=unique("cancel")
        )
        await warm_up_async(client)
        import redis.asyncio.connection

        cls = defining(redis.asyncio.connection.Connection, "send_packed_command")
        send = vars(cls)["send_packed_command"]

        async def slow(connection: Any, *args: Any, **kwargs: Any) -> Any:
            if connection.port == victim.port:
                await asyncio.sleep(0.5)
            return await send(connection, *args, **kwargs)

        monkeypatch.setattr(cls, "send_packed_command", slow)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(limiter.try_acquire_many(KEYS), 0.2)
        await asyncio.sleep(0.6)  # the held pipeline written, and read
        monkeypatch.setattr(cls, "send_packed_command", send)
        deadline = time.monotonic() + 10
        while True:
            left = {key: await limiter.available(key) for key in KEYS}
            if set(left.values()) == {BURST} or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        await client.aclose()
        return left

    left = asyncio.run(main())
    assert left == {key: BURST for key in KEYS}
