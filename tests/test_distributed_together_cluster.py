"""Stacked limits on a three-master cluster: the parts whose keys share a hash slot are one
script call, atomically; parts in several slots are decided slot by slot, in order, those taken
given back when a later one refuses, and the rest only peeked.

A key's hash tag is its limiter's name (a one-key limiter) or the key a call names (a keyed
limiter), so keyed limiters asked with the same key, and a one-key limiter named as that key,
share a slot. The random stacks of ``test_distributed_together.py`` are played here too, against
the same model: with a single caller the answers are the same whether a stack is decided in one
call or slot by slot, and every key's state is the model's once both are settled to the same
moment (a key taken and given back is stored settled at the give-back). Time runs forward there:
a call from an earlier time than a give-back gains nothing on that key for the time in between,
where the model, which only peeked, lets it accrue (the one difference, and never in the
caller's favour).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import qos_support
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos import LimitOutcome
from protocol_in_code.qos.distributed import (
    RedisKeyedRateLimiter,
    RedisRateLimiter,
    check_together,
    check_together_async,
)
from redis_servers import HOST, Cluster
from test_distributed_together import (
    CLIENTS,
    GLOBAL,
    HOUR,
    PER_CLIENT,
    configs,
    forward_traces,
    hammer,
    names,
    play,
)


def script_calls(cluster: Cluster) -> int:
    """Script calls the masters have run so far (EVALSHA and EVAL, NOSCRIPT included)."""
    total = 0
    for node in cluster.masters():
        for line in node.cli("INFO", "commandstats").splitlines():
            if line.startswith(("cmdstat_evalsha:", "cmdstat_eval:")):
                total += int(line.split("calls=", 1)[1].split(",", 1)[0])
    return total


def sync_client(cluster: Cluster) -> Any:
    from redis.cluster import RedisCluster

    return RedisCluster(host=HOST, port=cluster.nodes[0].port)


def prefix() -> str:
    return f"s{next(names)}:"


def test_a_stack_in_one_slot_is_one_script_call(redis_cluster: Cluster) -> None:
    client = sync_client(redis_cluster)
    common: dict[str, Any] = {"per": HOUR, "prefix": prefix()}
    tenant = RedisRateLimiter(client, 1, burst=3, name="tenant-7", **common)
    route = RedisKeyedRateLimiter(client, 1, burst=5, name="route", **common)
    per_client = RedisKeyedRateLimiter(client, 1, burst=2, name="client", **common)
    stack = [
        (tenant, None, 1, None),
        (route, "tenant-7", 1, None),
        (per_client, "tenant-7", 1, None),
    ]
    slots = {client.keyslot(name) for name in (tenant.redis_key, route.redis_key("tenant-7"))}
    assert slots == {client.keyslot(per_client.redis_key("tenant-7"))}
    tenant.available()  # the script loaded on the slot's master
    before = script_calls(redis_cluster)
    answers = [check_together(stack) for _ in range(3)]
    assert [[d.outcome for d in row] for row in answers] == [
        [LimitOutcome.ALLOWED] * 3,
        [LimitOutcome.ALLOWED] * 3,
        [LimitOutcome.ALLOWED, LimitOutcome.ALLOWED, LimitOutcome.DENIED],
    ]
    assert script_calls(redis_cluster) - before == 3
    assert (tenant.available(), route.available("tenant-7")) == (1, 3)
    client.close()


@pytest.mark.parametrize("key", ["", "}x", "}"])
def test_a_stack_asked_with_any_key_is_one_slot(redis_cluster: Cluster, key: str) -> None:
    """Before: ``""`` and keys starting with ``}`` left the hash tag empty (``...:{}x}``), so each
    part's whole key was hashed: two slots, a take given back when the second refused, and no
    atomicity. Now the tag is the key escaped (``%``, ``%7Dx``), never empty."""
    client = sync_client(redis_cluster)
    common: dict[str, Any] = {"per": HOUR, "prefix": prefix()}
    route = RedisKeyedRateLimiter(client, 1, burst=2, name="route", **common)
    per_client = RedisKeyedRateLimiter(client, 1, burst=1, name="client", **common)
    stack = [(route, key, 1, None), (per_client, key, 1, None)]
    names = [route.redis_key(key), per_client.redis_key(key)]
    # The servers' own slots of the two keys, as CLUSTER KEYSLOT reads them.
    node = redis_cluster.nodes[0]
    assert len({node.cli("CLUSTER", "KEYSLOT", name.decode()) for name in names}) == 1
    route.available(key)  # the script loaded on the slot's master
    before = script_calls(redis_cluster)
    answers = [check_together(stack) for _ in range(2)]
    assert [[d.outcome for d in row] for row in answers] == [
        [LimitOutcome.ALLOWED] * 2,
        [LimitOutcome.ALLOWED, LimitOutcome.DENIED],
    ]
    assert script_calls(redis_cluster) - before == 2  # one script call per stack
    assert (route.available(key), per_client.available(key)) == (1, 0)
    client.close()


def test_a_stack_across_slots_is_given_back_when_a_later_slot_refuses(
    redis_cluster: Cluster,
) -> None:
    client = sync_client(redis_cluster)
    common: dict[str, Any] = {"per": HOUR, "prefix": prefix()}
    everyone = RedisRateLimiter(client, 1, burst=5, name="global", **common)
    per_client = RedisKeyedRateLimiter(client, 1, burst=1, name="client", **common)
    key = next(
        f"c{i}"
        for i in range(100)
        if client.keyslot(per_client.redis_key(f"c{i}")) != client.keyslot(everyone.redis_key)
    )
    assert per_client.try_acquire(key)
    everyone.available()
    before = script_calls(redis_cluster)
    # The global limit is taken first, then the client's refuses: given back.
    answers = check_together([(everyone, None, 2, None), (per_client, key, 1, None)])
    assert [(d.outcome, d.remaining) for d in answers] == [
        (LimitOutcome.ALLOWED, 5),
        (LimitOutcome.DENIED, 0),
    ]
    assert script_calls(redis_cluster) - before == 3  # two slots, and the give-back
    assert everyone.available() == 5
    # The client's refuses first: the global limit is only peeked.
    before = script_calls(redis_cluster)
    answers = check_together([(per_client, key, 1, None), (everyone, None, 2, None)])
    assert [d.outcome for d in answers] == [LimitOutcome.DENIED, LimitOutcome.ALLOWED]
    assert script_calls(redis_cluster) - before == 2
    assert everyone.available() == 5
    # Both allow: both taken.
    other = "d0"
    assert all(
        d.allowed for d in check_together([(everyone, None, 2, None), (per_client, other, 1, None)])
    )
    assert (everyone.available(), per_client.available(other)) == (3, 0)
    client.close()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configs, trace=forward_traces, start=st.integers(0, 10**12))
def test_a_stack_on_a_cluster_answers_and_settles_as_the_model(
    redis_cluster: Cluster, config: tuple[Any, ...], trace: Any, start: int
) -> None:
    client = cluster_client(redis_cluster)
    play(client, config, trace, start, exact=False)


_clients: dict[int, Any] = {}


def cluster_client(cluster: Cluster) -> Any:
    """One client per cluster for the property's examples."""
    if cluster.nodes[0].port not in _clients:
        _clients[cluster.nodes[0].port] = sync_client(cluster)
    return _clients[cluster.nodes[0].port]


def test_threads_stacking_across_slots_never_over_admit_and_lose_nothing(
    redis_cluster: Cluster,
) -> None:
    client = sync_client(redis_cluster)
    common: dict[str, Any] = {"per": HOUR, "prefix": prefix()}
    everyone = RedisRateLimiter(client, 1, burst=GLOBAL, name="global", **common)
    per_client = RedisKeyedRateLimiter(client, 1, burst=PER_CLIENT, name="client", **common)
    tallies: list[dict[str, int]] = [{} for _ in range(8)]
    threads = [
        threading.Thread(target=hammer, args=(check_together, everyone, per_client, i, tallies[i]))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    admitted = {f"c{i}": sum(t.get(f"c{i}", 0) for t in tallies) for i in range(CLIENTS)}
    total = sum(admitted.values())
    assert total <= GLOBAL
    # Every take of a refused stack was given back: what the limits hold taken is exactly what
    # was admitted.
    assert GLOBAL - everyone.available() == total
    for key, count in admitted.items():
        assert PER_CLIENT - per_client.available(key) == count
    client.close()


def test_an_asyncio_stack_on_a_cluster(redis_cluster: Cluster) -> None:
    from redis.asyncio.cluster import RedisCluster

    async def main() -> None:
        client = RedisCluster(host=HOST, port=redis_cluster.nodes[0].port)
        await client.initialize()
        common: dict[str, Any] = {"per": HOUR, "prefix": prefix()}
        everyone = RedisRateLimiter(client, 1, burst=5, name="global", **common)
        per_client = RedisKeyedRateLimiter(client, 1, burst=1, name="client", **common)
        route = RedisKeyedRateLimiter(client, 1, burst=3, name="route", **common)
        # One slot: the client's and the route's limits asked with the same key.
        await route.available("k")
        before = script_calls(redis_cluster)
        answers = await check_together_async([(per_client, "k", 1, None), (route, "k", 1, None)])
        assert all(d.allowed for d in answers)
        assert script_calls(redis_cluster) - before == 1
        # Across slots, refused by the second: the first given back.
        assert client.keyslot(everyone.redis_key) != client.keyslot(per_client.redis_key("k"))
        answers = await check_together_async(
            [(everyone, None, 1, None), (per_client, "k", 1, None)]
        )
        assert [(d.outcome, d.remaining) for d in answers[:1]] == [(LimitOutcome.ALLOWED, 5)]
        assert answers[1].outcome is LimitOutcome.DENIED
        assert await everyone.available() == 5
        await client.aclose()

    asyncio.run(main())


@pytest.fixture(autouse=True, scope="module")
def _close_clients() -> Any:
    yield
    for client in _clients.values():
        client.close()
    _clients.clear()
