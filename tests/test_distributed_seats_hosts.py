"""In-flight limits across processes and servers: processes sharing one limit, a holder killed,
asyncio waiters cancelled at random, a cluster, and a server restarted without its data."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos.distributed import (
    AsyncRedisConcurrencyLimiter,
    AsyncRedisKeyedConcurrencyLimiter,
    LeaseExpired,
    RedisConcurrencyLimiter,
    RedisKeyedConcurrencyLimiter,
)
from redis_servers import HOST, Server, wait_until

#: A process that takes the limit ``rounds`` times; inside each lease it counts itself in and
#: out on the server, and records the lease's token, all under the lease.
WORKER = """
import sys, redis
from protocol_in_code.qos.distributed import RedisConcurrencyLimiter
port, limit, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
client = redis.Redis(host="127.0.0.1", port=port)
limiter = RedisConcurrencyLimiter(client, limit, name="processes", lease_ttl=30)
for _ in range(rounds):
    with limiter.acquire(timeout=60) as lease:
        inside = client.incr("inside")
        client.rpush("most", inside)
        client.rpush("tokens", lease.token)
        client.decr("inside")
"""

#: A process that takes a seat, says so, and sleeps until it is killed.
HOLDER = """
import sys, time, redis
from protocol_in_code.qos.distributed import RedisConcurrencyLimiter
client = redis.Redis(host="127.0.0.1", port=int(sys.argv[1]))
lease = RedisConcurrencyLimiter(client, 1, name="killed", lease_ttl=1.0).acquire()
print(lease.token, flush=True)
time.sleep(600)
"""


def environment() -> dict[str, str]:
    paths = [p for p in sys.path if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.mark.parametrize("limit", [1, 2])
def test_processes_sharing_a_limit_never_exceed_it(redis_server: Server, limit: int) -> None:
    client = redis_server.client()
    client.flushall()
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(redis_server.port), str(limit), "25"],
            env=environment(),
        )
        for _ in range(4)
    ]
    for worker in workers:
        assert worker.wait(timeout=120) == 0
    most = [int(x) for x in client.lrange("most", 0, -1)]
    assert len(most) == 100 and max(most) <= limit
    if limit == 1:  # one at a time: the tokens were recorded in the order they were given
        tokens = [int(x) for x in client.lrange("tokens", 0, -1)]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert RedisConcurrencyLimiter(client, limit, name="processes").in_flight == 0


def test_a_killed_holders_seat_is_taken_after_its_lease_time(redis_server: Server) -> None:
    client = redis_server.client()
    client.flushall()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(redis_server.port)],
        env=environment(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        killed_token = int(holder.stdout.readline())
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        limiter = RedisConcurrencyLimiter(client, 1, name="killed", lease_ttl=1.0)
        assert limiter.try_acquire() is None  # still held by the dead process's lease
        lease = limiter.acquire(timeout=20)  # woken when the lease lapses
        assert lease is not None and lease.token > killed_token
        lease.release()
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_asyncio_waiters_cancelled_at_random_leave_nothing_held(redis_server: Server) -> None:
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis(host=HOST, port=redis_server.port)
        await client.flushall()
        limiter = AsyncRedisConcurrencyLimiter(client, 2, name="cancelled")
        most = inside = 0
        rng = random.Random(7)

        async def work() -> None:
            nonlocal inside, most
            lease = await limiter.acquire(rng.choice([1, 1, 2]), timeout=30)
            assert lease is not None
            async with lease:
                inside += lease.n
                most = max(most, inside)
                try:
                    await asyncio.sleep(rng.random() * 0.02)
                finally:
                    inside -= lease.n

        for _ in range(3):
            tasks = [asyncio.ensure_future(work()) for _ in range(20)]
            await asyncio.sleep(rng.random() * 0.05)
            for task in rng.sample(tasks, 8):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0.05)  # the last give-backs run in the background
        for _ in range(100):
            if await limiter.in_flight() == 0 and await limiter.waiting() == 0:
                break
            await asyncio.sleep(0.05)
        assert await limiter.in_flight() == 0 and await limiter.waiting() == 0
        assert most <= 2
        keyed = AsyncRedisKeyedConcurrencyLimiter(client, 1, name="per-task")
        async with await keyed.acquire("a") as lease:
            assert await keyed.try_acquire("a") is None and lease.n == 1
            assert await keyed.in_flight_of("a") == 1
        await client.aclose()

    asyncio.run(main())


def test_a_cluster_keeps_each_limit_in_one_slot(redis_cluster: Any) -> None:
    client = redis_cluster.client()
    limiter = RedisConcurrencyLimiter(client, 1, name="cluster-one")
    first = limiter.acquire()
    assert first is not None
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(limiter.acquire(timeout=20)))
    thread.start()
    wait_until(lambda: limiter.waiting == 1, 10, "the waiter in line")
    first.release()
    thread.join(20)
    assert got and got[0] is not None and got[0].token > first.token
    got[0].release()
    keyed = RedisKeyedConcurrencyLimiter(client, 1, name="cluster-keyed")
    leases = [keyed.try_acquire(f"client-{i}") for i in range(20)]  # over many slots
    assert all(leases) and keyed.try_acquire("client-3") is None
    for lease in leases:
        assert lease is not None
        lease.release()
    assert keyed.in_flight == 0


def test_a_server_restarted_without_its_data_forgets_holders_not_token_order(
    own_redis_server: Server,
) -> None:
    """What a failover to a replica that had not received the leases can lose (the holders,
    so the limit is exceeded until they finish), and what it cannot (tokens keep increasing,
    as they never fall below the server's clock in microseconds)."""
    client = own_redis_server.client()
    limiter = RedisConcurrencyLimiter(client, 1, name="restarted")
    before = limiter.acquire()
    assert before is not None
    own_redis_server.stop()
    own_redis_server.start()
    after = limiter.try_acquire()  # the first holder is forgotten: two hold a limit of one
    assert after is not None and after.token > before.token
    with pytest.raises(LeaseExpired):
        before.release()
    after.release()


def test_a_promoted_replica_keeps_the_leases_it_received(tmp_path: Any) -> None:
    """A replica promoted after it received a lease keeps it (the limit holds), answers the
    script it never saw (``NOSCRIPT``, then the source), and gives later tokens."""
    master = Server(tmp_path / "master").start()
    replica = Server(tmp_path / "replica", options=("--replicaof", HOST, str(master.port)))
    try:
        replica.start()
        wait_until(
            lambda: "master_link_status:up" in replica.cli("INFO", "replication"),
            20,
            "the replica to follow its master",
        )
        client = master.client()
        limiter = RedisConcurrencyLimiter(client, 1, name="failover")
        held = limiter.acquire()
        assert held is not None
        assert client.execute_command("WAIT", 1, 5000) == 1  # the replica has the lease
        replica.cli("REPLICAOF", "NO", "ONE")
        master.stop()
        # The client's connections now go to the promoted server, as a Sentinel client's do.
        client.connection_pool = replica.client().connection_pool
        assert limiter.in_flight == 1 and limiter.try_acquire() is None
        held.release()
        after = limiter.try_acquire()
        assert after is not None and after.token > held.token
        after.release()
    finally:
        replica.stop()
        master.stop()


def test_the_asyncio_forms_leases_context_managers_and_heartbeat(redis_server: Server) -> None:
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis(host=HOST, port=redis_server.port)
        await client.flushall()
        limiter = AsyncRedisConcurrencyLimiter(client, 2, name="async-forms", lease_ttl=0.3)
        async with limiter:
            assert await limiter.in_flight() == 1

        @limiter
        async def inside() -> int:
            return await limiter.in_flight()

        assert await inside() == 1 and await limiter.in_flight() == 0
        lapsing = await limiter.acquire()
        assert lapsing is not None
        await asyncio.sleep(0.6)
        with pytest.raises(LeaseExpired):
            await lapsing.extend()
        await limiter.resize(1)
        assert limiter.limit == 1
        beating = AsyncRedisConcurrencyLimiter(
            client, 1, name="async-beat", lease_ttl=2.0, heartbeat=True
        )
        kept = await beating.acquire()
        assert kept is not None
        await asyncio.sleep(3.0)  # longer than a lease lives: only the heartbeat keeps it
        assert await beating.try_acquire() is None
        await kept.release()
        await kept.release()  # the second time: nothing
        assert await beating.in_flight() == 0
        await client.aclose()

    asyncio.run(main())
