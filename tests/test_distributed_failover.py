"""A Redis Cluster with replicas: a master killed (SIGKILL), failed over by hand, restarted.

The cluster (``replicated_cluster``) has three masters with one replica each and a
``cluster-node-timeout`` of 1 s, so a killed master's replica is promoted within a few seconds.
The clients' retries are off and their socket timeout short (as in ``test_distributed_faults``),
so every failed call reaches the ``on_error`` policy at once instead of being retried for
seconds inside redis-py.

What may be lost. Redis replicates asynchronously: a master answers a write before its replica
has it, and Redis Cluster's specification says plainly that a write acknowledged to the client
can be lost when the master dies before the replica received it and the replica is then
promoted; ``WAIT`` narrows that window but does not close it. Replication is in order, so the
promoted replica holds a prefix of the dead master's writes: for a limit, some tokens taken
just before the kill are forgotten (the key holds more than it should), never the other way
round, and never a take the replica had already received. A manual ``CLUSTER FAILOVER`` is
different by design: the master stops taking writes, the replica catches up to the master's
replication offset, and only then takes over, so nothing is lost. (Sources: the "Write
safety" part of https://redis.io/topics/cluster-spec, and the pages of the WAIT and CLUSTER
FAILOVER commands.)

Observed here, on loopback, in five runs of the kill test: between 107 and 138 takes were
acknowledged on the dead master's keys after the replica was last seen caught up and before the
SIGKILL, and none was forgotten (on loopback a replica receives each write at about the time
the client receives its reply, so the window is tiny, though not nil); none of the 500 to 700
calls that raised had run either. A replica held behind (stopped, the master's socket buffers
to it full) forgets exactly the takes the master acknowledged after that point, which the test
of forgotten takes pins.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterable
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos.distributed import (
    LimiterUnavailable,
    RedisKeyedRateLimiter,
)
from protocol_in_code.qos.distributed._server import SHA
from protocol_in_code.qos.keyed import KeyedRateLimiter
from redis_servers import HOST, Cluster, Server, wait_until

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

SOCKET_TIMEOUT = 0.3
BURST = 100_000  # never reached: every answer of the server is True, so a tally is exact
RATE = dict(rate=1, burst=BURST, per=3600)  # refills less than a token during a test
KEYS = [f"k{i}" for i in range(240)]  # spread over every master
FAILOVER_SECONDS = 20  # a bound on a failover with a 1 s node timeout (about 3 s here)


def quick_client(cluster: Cluster, timeout: float = SOCKET_TIMEOUT) -> Any:
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.retry import Retry

    return RedisCluster(
        host=HOST,
        port=cluster.nodes[0].port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


def owner_of(client: Any, limiter: Any, key: str) -> int:
    return int(client.get_node_from_key(limiter.redis_key(key)).port)


def offset(node: Server, field: str) -> int:
    info = node.cli("INFO", "replication")
    return int(info.split(f"{field}:", 1)[1].split()[0])


def caught_up(master: Server, replica: Server) -> bool:
    """Whether ``replica`` has processed every write ``master`` has made so far."""
    return offset(replica, "slave_repl_offset") >= offset(master, "master_repl_offset")


def promoted(cluster: Cluster, replica: Server) -> bool:
    return cluster.role(replica) == "master"


def serving(cluster: Cluster, replica: Server) -> bool:
    """Whether every live node says ``cluster_state:ok`` and sees ``replica`` as a master."""
    live = [node for node in cluster.nodes if node.process is not None]
    for node in live:
        if "cluster_state:ok" not in node.cli("CLUSTER", "INFO"):
            return False
        rows = cluster.table(node)
        if not any(row["port"] == replica.port and "master" in row["flags"] for row in rows):
            return False
    return True


def set_full_coverage(cluster: Cluster, value: str) -> None:
    for node in cluster.nodes:
        if node.process is not None:
            node.cli("CONFIG", "SET", "cluster-require-full-coverage", value)


class Tally:
    """What each key was answered: taken (True), denied (False), unavailable (raised
    ``LimiterUnavailable``, by the type of its cause); any other exception escapes the test."""

    def __init__(self) -> None:
        self.taken: collections.Counter[str] = collections.Counter()
        self.denied: collections.Counter[str] = collections.Counter()
        self.unavailable: collections.Counter[str] = collections.Counter()
        self.causes: collections.Counter[tuple[str, str]] = collections.Counter()

    def note(self, key: str, answer: bool | BaseException) -> bool:
        if isinstance(answer, LimiterUnavailable):
            self.unavailable[key] += 1
            self.causes[key, type(answer.__cause__).__name__] += 1
            return False
        if answer is True:
            self.taken[key] += 1
        else:
            self.denied[key] += 1
        return True

    def round(self, limiter: Any, keys: Iterable[str]) -> bool:
        """One take on each key; True if every call was decided (no LimiterUnavailable)."""
        decided = True
        for key in keys:
            try:
                answer: bool | BaseException = limiter.try_acquire(key)
            except LimiterUnavailable as error:
                answer = error
            decided = self.note(key, answer) and decided
        return decided


def used(limiter: Any, key: str) -> int:
    """Tokens the cluster remembers taken from ``key``, asked until it answers."""
    deadline = time.monotonic() + FAILOVER_SECONDS
    while True:
        try:
            return BURST - int(limiter.available(key))
        except LimiterUnavailable:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def run_until_failed_over(
    cluster: Cluster, replica: Server, limiter: Any, tally: Tally, keys: list[str]
) -> int:
    """Rounds of takes until ``replica`` is a master and a whole round was decided; the rounds
    run."""
    deadline = time.monotonic() + FAILOVER_SECONDS
    rounds = 0
    while True:
        decided = tally.round(limiter, keys)
        rounds += 1
        if decided and promoted(cluster, replica):
            return rounds
        assert time.monotonic() < deadline, "no failover within the bound"


def test_a_killed_master_raises_on_its_slots_until_its_replica_is_promoted(
    replicated_cluster: Cluster,
) -> None:
    cluster = replicated_cluster
    client = quick_client(cluster)
    limiter = RedisKeyedRateLimiter(client, name="clients", **RATE, prefix="kill:")
    victim = cluster.masters()[0]
    replica = cluster.replica_of(victim)
    on_victim = {key for key in KEYS if owner_of(client, limiter, key) == victim.port}
    assert 0 < len(on_victim) < len(KEYS)
    tally = Tally()
    assert tally.round(limiter, KEYS)
    wait_until(lambda: caught_up(victim, replica), 5, "the replica caught up")
    replicated = dict(tally.taken)  # the replica has these: no failover may forget them
    replica.cli("SCRIPT", "FLUSH")  # the promoted replica answers NOSCRIPT first
    killer = threading.Timer(0.05, victim.kill)  # mid-round, while calls are in flight
    killer.start()
    try:
        run_until_failed_over(cluster, replica, limiter, tally, KEYS)
    finally:
        killer.join()

    # The dead master's slots raised LimiterUnavailable, and nothing else escaped. The other
    # masters' slots were decided, except while the cluster was down: with Redis's default
    # cluster-require-full-coverage yes, every master answers CLUSTERDOWN from the moment the
    # dead one is marked failed until its replica is promoted (about a second here).
    assert sum(tally.unavailable[key] for key in on_victim) > 0
    for (key, cause), _ in tally.causes.items():
        if key not in on_victim:
            assert cause == "ClusterDownError"
    assert not tally.denied

    # Every key is decided by the cluster again, on the promoted replica for the dead master's.
    assert tally.round(limiter, KEYS)
    assert replica.cli("SCRIPT", "EXISTS", SHA).split() == ["1"]  # EVAL after NOSCRIPT cached it
    for key in KEYS:
        remembered = used(limiter, key)
        if key in on_victim:
            # A call that raised may or may not have run before the kill; a take the replica
            # had received is never forgotten. (Observed: nothing forgotten at all.)
            assert replicated[key] <= remembered <= tally.taken[key] + tally.unavailable[key]
        else:
            assert remembered == tally.taken[key]  # CLUSTERDOWN: the script never ran
    client.close()


@pytest.mark.parametrize("policy", ["deny", "fallback"])
def test_deny_or_a_local_fallback_answers_while_a_master_fails_over(
    replicated_cluster: Cluster, policy: str
) -> None:
    cluster = replicated_cluster
    set_full_coverage(cluster, "no")  # the surviving masters serve their slots throughout
    client = quick_client(cluster)
    fallback = KeyedRateLimiter(**RATE)
    on_error: Any = "deny" if policy == "deny" else fallback
    limiter = RedisKeyedRateLimiter(
        client, name="clients", **RATE, prefix=f"{policy}:", on_error=on_error
    )
    victim = cluster.masters()[1]
    replica = cluster.replica_of(victim)
    on_victim = {key for key in KEYS if owner_of(client, limiter, key) == victim.port}
    tally = Tally()
    try:
        assert tally.round(limiter, KEYS)
        victim.kill()
        deadline = time.monotonic() + FAILOVER_SECONDS
        while True:  # until a round after the promotion neither denies nor falls back
            fallen_back = [fallback.available(key) for key in KEYS]
            denied = sum(tally.denied.values())
            tally.round(limiter, KEYS)
            clean = sum(tally.denied.values()) == denied
            clean = clean and [fallback.available(key) for key in KEYS] == fallen_back
            if clean and promoted(cluster, replica):
                break
            assert time.monotonic() < deadline, "no failover within the bound"
    finally:
        set_full_coverage(cluster, "yes")

    # No exception escaped (Tally.round lets any through), and no LimiterUnavailable either.
    assert not tally.unavailable
    untouched = BURST
    if policy == "deny":
        # Only the dead master's keys were denied; the others were decided by the cluster.
        assert set(tally.denied) and set(tally.denied) <= on_victim
    else:
        assert not tally.denied
        # The fallback answered for the dead master's keys only.
        assert all(fallback.available(key) == untouched for key in KEYS if key not in on_victim)
        assert any(fallback.available(key) < untouched for key in on_victim)

    # Decisions are the cluster's again: a round consults no fallback and denies nobody.
    before = {key: fallback.available(key) for key in KEYS}
    answers = limiter.try_acquire_many(KEYS)
    assert all(answers)
    assert {key: fallback.available(key) for key in KEYS} == before
    for key in KEYS:
        if key not in on_victim:
            assert used(limiter, key) == tally.taken[key] + 1
    client.close()


def test_takes_the_replica_never_received_are_forgotten(replicated_cluster: Cluster) -> None:
    """Redis's asynchronous replication, made deterministic: the replica is stopped and the
    master's buffer to it filled, so takes the master then acknowledges cannot have left the
    master's memory when it is killed. After the failover the key holds exactly those tokens
    again; the takes replicated before are kept."""
    cluster = replicated_cluster
    client = quick_client(cluster)
    limiter = RedisKeyedRateLimiter(client, name="clients", **RATE, prefix="lost:")
    victim = cluster.masters()[2]
    replica = cluster.replica_of(victim)
    key = next(key for key in KEYS if owner_of(client, limiter, key) == victim.port)
    replicated, unreplicated = 10, 7
    for _ in range(replicated):
        assert limiter.try_acquire(key)
    wait_until(lambda: caught_up(victim, replica), 5, "the replica caught up")

    def unsent() -> int:
        """Bytes of the replication stream still in the master's memory: the most that any
        replica connection the master lists holds, not the first one listed."""
        lines = victim.cli("CLIENT", "LIST", "TYPE", "replica").splitlines()
        return max(
            (
                int(field[len("omem=") :])
                for line in lines
                for field in line.split()
                if field.startswith("omem=")
            ),
            default=0,
        )

    direct = victim.client()
    replica.pause()
    try:
        junk = b"x" * (1 << 20)
        for _ in range(64):  # 1 MiB at a time, until the kernel's socket buffers are full
            if unsent() >= 1 << 20:
                break
            direct.set(f"junk{{{key}}}", junk)
        assert unsent() >= 1 << 20
        for _ in range(unreplicated):
            assert limiter.try_acquire(key)  # acknowledged, but behind the unsent bytes
        victim.kill()
    finally:
        replica.resume()
    direct.close()
    wait_until(lambda: promoted(cluster, replica), FAILOVER_SECONDS, "the replica promoted")
    assert used(limiter, key) == replicated  # the unreplicated takes are forgotten
    client.close()


def test_a_manual_failover_fails_no_call_and_loses_nothing(replicated_cluster: Cluster) -> None:
    """``CLUSTER FAILOVER`` on a replica: the master pauses writes until the replica has caught
    up, then hands over. Calls wait out the pause (hence a socket timeout of seconds here) and
    follow the MOVED to the new master: none fails, and no take is forgotten."""
    cluster = replicated_cluster
    client = quick_client(cluster, timeout=5)
    limiter = RedisKeyedRateLimiter(client, name="clients", **RATE, prefix="manual:")
    master = cluster.masters()[0]
    replica = cluster.replica_of(master)
    tally = Tally()
    assert tally.round(limiter, KEYS)
    assert replica.cli("CLUSTER", "FAILOVER").strip() == "OK"
    rounds = run_until_failed_over(cluster, replica, limiter, tally, KEYS)
    assert tally.round(limiter, KEYS)
    assert not tally.unavailable and not tally.denied
    assert rounds >= 1
    assert cluster.role(master) == "slave"
    assert all(used(limiter, key) == tally.taken[key] for key in KEYS)
    client.close()


def test_a_killed_master_restarted_rejoins_as_a_replica_and_limits_stay_exact(
    replicated_cluster: Cluster,
) -> None:
    cluster = replicated_cluster
    client = quick_client(cluster)
    limiter = RedisKeyedRateLimiter(client, name="clients", **RATE, prefix="rejoin:")
    victim = cluster.masters()[1]
    replica = cluster.replica_of(victim)
    on_victim = [key for key in KEYS if owner_of(client, limiter, key) == victim.port]
    tally = Tally()
    assert tally.round(limiter, on_victim)
    wait_until(lambda: caught_up(victim, replica), 5, "the replica caught up")
    victim.kill()  # between calls, after the replica caught up: nothing to lose
    run_until_failed_over(cluster, replica, limiter, tally, on_victim)
    taken_before_restart = sum(tally.taken.values())

    victim.start()  # same port, same nodes.conf, no data (nothing is persisted)
    wait_until(cluster.settled, 30, "the cluster settled with the old master back")
    assert cluster.role(victim) == "slave"
    assert cluster.replica_of(replica) is victim
    assert tally.round(limiter, on_victim)
    assert sum(tally.taken.values()) == taken_before_restart + len(on_victim)

    # Handing its slots back to it, gracefully: it serves the state it synced from the
    # promoted replica, and every take made on either is there.
    wait_until(lambda: caught_up(replica, victim), 5, "the old master caught up")
    assert victim.cli("CLUSTER", "FAILOVER").strip() == "OK"
    run_until_failed_over(cluster, victim, limiter, tally, on_victim)
    assert sum(tally.unavailable[key] for key in on_victim) > 0  # from the kill only
    assert all(used(limiter, key) == tally.taken[key] for key in on_victim)
    client.close()


def test_an_asyncio_cluster_client_through_a_killed_master(replicated_cluster: Cluster) -> None:
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    cluster = replicated_cluster
    victim = cluster.masters()[2]
    replica = cluster.replica_of(victim)

    async def main() -> None:
        client = AsyncRedisCluster(
            host=HOST,
            port=cluster.nodes[0].port,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )
        limiter = RedisKeyedRateLimiter(client, name="clients", **RATE, prefix="async:")
        await client.initialize()
        on_victim = {
            key
            for key in KEYS
            if client.get_node_from_key(limiter.redis_key(key)).port == victim.port
        }
        tally = Tally()

        async def round_() -> bool:
            decided = True
            for key in KEYS:
                try:
                    answer: bool | BaseException = await limiter.try_acquire(key)
                except LimiterUnavailable as error:
                    answer = error
                decided = tally.note(key, answer) and decided
            return decided

        assert await round_()
        wait_until(lambda: caught_up(victim, replica), 5, "the replica caught up")
        replica.cli("SCRIPT", "FLUSH")
        victim.kill()
        deadline = time.monotonic() + FAILOVER_SECONDS
        while not (await round_() and promoted(cluster, replica)):
            assert time.monotonic() < deadline, "no failover within the bound"
        assert sum(tally.unavailable[key] for key in on_victim) > 0
        # Unlike the synchronous client, redis-py's asyncio one re-reads the cluster's layout
        # after a CLUSTERDOWN by asking the default node too, which may be the dead master:
        # a call on a live master's slot may then fail with that ConnectionError, once.
        for (key, cause), _ in tally.causes.items():
            if key not in on_victim:
                assert cause in ("ClusterDownError", "ConnectionError")
        assert all(await limiter.try_acquire_many(KEYS))
        for key in KEYS:
            remembered = BURST - await limiter.available(key)
            assert remembered == tally.taken[key] + 1  # killed between calls: nothing lost
        await client.aclose()

    asyncio.run(main())


def test_a_batch_after_a_promotion_asks_the_promoted_replica(replicated_cluster: Cluster) -> None:
    """The first batch after a promotion, from a client that still maps the dead master's
    slots to it: the first of those slots fails (and the client re-reads the layout), and the
    batch's other slots go to the promoted replica, which answers them. The node found
    unreachable is the one the call went to, not the slot's owner read after the failure."""
    cluster = replicated_cluster
    client = quick_client(cluster)
    limiter = RedisKeyedRateLimiter(
        client, name="clients", **RATE, prefix="batch:", on_error="deny"
    )
    victim = cluster.masters()[0]
    replica = cluster.replica_of(victim)
    on_victim = [key for key in KEYS if owner_of(client, limiter, key) == victim.port]
    assert all(limiter.try_acquire_many(KEYS))
    victim.kill()
    wait_until(lambda: promoted(cluster, replica), FAILOVER_SECONDS, "the replica promoted")
    wait_until(lambda: serving(cluster, replica), 10, "every node sees the promotion")
    answers = dict(zip(KEYS, limiter.try_acquire_many(KEYS), strict=True))
    denied = [key for key in KEYS if not answers[key]]
    assert denied and set(denied) <= set(on_victim)
    assert len({client.keyslot(limiter.redis_key(key)) for key in denied}) == 1
    client.close()


def test_an_asyncio_batch_after_a_promotion_asks_the_promoted_replica(
    replicated_cluster: Cluster,
) -> None:
    """:func:`test_a_batch_after_a_promotion_asks_the_promoted_replica` on an asyncio client:
    the dead master's pipeline fails, one of its calls is sent again through the client (which
    re-reads the layout), and its other slots follow to the promoted replica, in one pipeline.
    Every key but those of one slot is decided, and each take is remembered once."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    cluster = replicated_cluster
    victim = cluster.masters()[1]
    replica = cluster.replica_of(victim)

    async def main() -> None:
        client = AsyncRedisCluster(
            host=HOST,
            port=cluster.nodes[0].port,
            socket_timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=SOCKET_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )
        limiter = RedisKeyedRateLimiter(
            client, name="clients", **RATE, prefix="abatch:", on_error="deny"
        )
        await client.initialize()
        on_victim = [
            key
            for key in KEYS
            if client.get_node_from_key(limiter.redis_key(key)).port == victim.port
        ]
        assert all(await limiter.try_acquire_many(KEYS))
        wait_until(lambda: caught_up(victim, replica), 5, "the replica caught up")
        victim.kill()
        wait_until(lambda: promoted(cluster, replica), FAILOVER_SECONDS, "the replica promoted")
        wait_until(lambda: serving(cluster, replica), 10, "every node sees the promotion")
        answers = dict(zip(KEYS, await limiter.try_acquire_many(KEYS), strict=True))
        denied = [key for key in KEYS if not answers[key]]
        assert set(denied) <= set(on_victim)
        assert len({client.keyslot(limiter.redis_key(key)) for key in denied}) <= 1
        assert len(denied) < len(on_victim)
        for key in KEYS:
            remembered = BURST - await limiter.available(key)
            assert remembered == (1 if key in denied else 2)
        await client.aclose()

    asyncio.run(main())
