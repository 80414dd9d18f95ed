"""The Redis limiters against a bare EVALSHA through the same client, and against the peers.

Run from the repository root after installing the package with the Redis client (and, for the
peers' rows, ``pip install '.[bench]'``)::

    python3 bench/bench_distributed.py [--rounds 15] [--port PORT]

Without ``--port`` it starts its own redis-server (which must be on PATH) on a free loopback
port in a temporary folder, and stops it at the end. Every limiter is configured so that the
timed call is always allowed; every row is one decision on one key through one connection,
except the batch rows (per decision) and the last line (eight processes at once on one key).
Interleaved rounds in one run; medians and ratios, not absolute times.

The "cluster" rows time the same 100 keys through a ``RedisCluster`` client on a three-master
cluster (started with ``redis-cli --cluster create`` in a temporary folder, or an existing one
given by ``--cluster-port``; ``--no-cluster`` leaves them out): ``try_acquire`` in a loop
against ``try_acquire_many``, per decision.

Then the waiting cases (``--waiting`` runs only these): 50 waiters (threads, then asyncio
tasks) on one key at 20/s with a burst of 1, reaching the server one after another, counted in
script calls per admission, with the time to admit all 50 (the rate alone allows 2.45 s) and
how far admissions stray from the arrival order; and ``acquire(10)`` among five ``acquire(1)``
loops at 10/s with a burst of 10, the time until it is admitted (or False after 5 s), beside
the in-process ``RateLimiter`` in the same race.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from protocol_in_code.qos import RateLimiter
from protocol_in_code.qos.distributed import (
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from timing import median_ns

HUGE = 10**9  # tokens per second and burst: never denied during a run, within 2**53
TRIVIAL = "return 1"
BATCH = [f"client{i}" for i in range(100)]


def start_server() -> tuple[subprocess.Popen[bytes], int, str]:
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not on PATH (apt-get install -y redis-server), or pass --port")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    folder = tempfile.mkdtemp(prefix="bench-redis-")
    where = ["--bind", "127.0.0.1", "--port", str(port), "--dir", folder]
    server = subprocess.Popen(
        ["redis-server", *where, "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    client.close()
    return server, port, folder


def start_cluster() -> tuple[list[subprocess.Popen[bytes]], int, str]:
    """Three cluster-enabled redis-servers made one cluster of three masters; the first port."""
    ports = []
    while len(ports) < 3:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + 10000 < 65536 and port not in ports:
            ports.append(port)
    folder = tempfile.mkdtemp(prefix="bench-cluster-")
    servers = []
    for port in ports:
        os.makedirs(f"{folder}/{port}")
        where = ["--bind", "127.0.0.1", "--port", str(port), "--dir", f"{folder}/{port}"]
        cluster = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        servers.append(
            subprocess.Popen(
                ["redis-server", *where, *cluster, "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
            )
        )
    for port in ports:
        for _ in range(100):
            ping = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True)
            if ping.stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
    addresses = [f"127.0.0.1:{port}" for port in ports]
    subprocess.run(
        ["redis-cli", "--cluster", "create", *addresses, "--cluster-yes"],
        capture_output=True,
        check=True,
    )
    for _ in range(200):
        states = [
            subprocess.run(["redis-cli", "-p", str(port), "CLUSTER", "INFO"], capture_output=True)
            for port in ports
        ]
        if all(b"cluster_state:ok" in state.stdout for state in states):
            break
        time.sleep(0.05)
    return servers, ports[0], folder


def cluster_cases(port: int) -> dict[str, Callable[[], tuple[Any, ...]]]:
    from redis.cluster import RedisCluster

    client = RedisCluster(host="127.0.0.1", port=port)

    def loop() -> tuple[Any, ...]:
        limiter = RedisKeyedRateLimiter(client, HUGE, name="clients")
        statement = "for key in keys: limiter.try_acquire(key)"
        return statement, {"limiter": limiter, "keys": BATCH}, len(BATCH)

    def many() -> tuple[Any, ...]:
        limiter = RedisKeyedRateLimiter(client, HUGE, name="clients")
        return "limiter.try_acquire_many(keys)", {"limiter": limiter, "keys": BATCH}, len(BATCH)

    return {
        CLUSTER_LOOP: loop,
        CLUSTER_MANY: many,
    }


BARE = "bare EVALSHA of `return 1`"
CLUSTER_LOOP = "cluster: try_acquire(key) x 100 keys, per decision"
CLUSTER_MANY = "cluster: try_acquire_many(100 keys), per decision"


def cases(port: int) -> dict[str, Callable[[], tuple[Any, ...]]]:
    import redis

    client = redis.Redis(port=port)
    url = f"redis://127.0.0.1:{port}"
    trivial_sha = client.script_load(TRIVIAL)

    def bare_evalsha() -> tuple[Any, ...]:
        return "client.evalsha(sha, 1, b'k')", {"client": client, "sha": trivial_sha}

    def ping() -> tuple[Any, ...]:
        return "client.ping()", {"client": client}

    def single() -> tuple[Any, ...]:
        limiter = RedisRateLimiter(client, HUGE, name="bench")
        return "limiter.try_acquire()", {"limiter": limiter}

    def keyed() -> tuple[Any, ...]:
        limiter = RedisKeyedRateLimiter(client, HUGE, name="clients")
        return "limiter.try_acquire('bench')", {"limiter": limiter}

    def keyed_loop() -> tuple[Any, ...]:
        limiter = RedisKeyedRateLimiter(client, HUGE, name="clients")
        statement = "for key in keys: limiter.try_acquire(key)"
        return statement, {"limiter": limiter, "keys": BATCH}, len(BATCH)

    def keyed_many() -> tuple[Any, ...]:
        limiter = RedisKeyedRateLimiter(client, HUGE, name="clients")
        return "limiter.try_acquire_many(keys)", {"limiter": limiter, "keys": BATCH}, len(BATCH)

    def limits_case(strategy: str) -> Callable[[], tuple[Any, ...]]:
        def make() -> tuple[Any, ...]:
            module = importlib.import_module("limits")
            storage = module.storage.RedisStorage(url)
            limiter = getattr(module.strategies, strategy)(storage)
            item = module.parse(f"{HUGE}/second")
            # One identifier per strategy: their keys would collide, with different types.
            statement = f"limiter.hit(item, {strategy!r})"
            return statement, {"limiter": limiter, "item": item}

        return make

    def pyrate() -> tuple[Any, ...]:
        module = importlib.import_module("pyrate_limiter")
        rates = [module.Rate(HUGE, module.Duration.SECOND)]
        bucket = module.RedisBucket.init(rates, redis.Redis(port=port), "pyrate-bench")
        limiter = module.Limiter(bucket)
        return "limiter.try_acquire('k', blocking=False)", {"limiter": limiter}

    def throttled_case(using: str) -> Callable[[], tuple[Any, ...]]:
        def make() -> tuple[Any, ...]:
            module = importlib.import_module("throttled")
            quota = module.rate_limiter.per_sec(HUGE, burst=HUGE)
            store = module.RedisStore(server=url)
            limiter = module.Throttled(key=using, quota=quota, using=using, store=store)
            return f"limiter.limit({using!r})", {"limiter": limiter}

        return make

    return {
        BARE: bare_evalsha,
        "PING": ping,
        "RedisRateLimiter.try_acquire()": single,
        "RedisKeyedRateLimiter.try_acquire(key)": keyed,
        "limits FixedWindowRateLimiter.hit": limits_case("FixedWindowRateLimiter"),
        "limits MovingWindowRateLimiter.hit": limits_case("MovingWindowRateLimiter"),
        "limits SlidingWindowCounterRateLimiter.hit": limits_case(
            "SlidingWindowCounterRateLimiter"
        ),
        "pyrate-limiter RedisBucket try_acquire": pyrate,
        "throttled-py token bucket": throttled_case("token_bucket"),
        "throttled-py GCRA": throttled_case("gcra"),
        "try_acquire(key) x 100 keys, per decision": keyed_loop,
        "try_acquire_many(100 keys), per decision": keyed_many,
    }


WORKER = """
import sys, time, redis
from protocol_in_code.qos.distributed import RedisRateLimiter
limiter = RedisRateLimiter(redis.Redis(port=int(sys.argv[1])), 10**9, name="bench-processes")
limiter.try_acquire()
deadline = time.monotonic() + float(sys.argv[2])
count = 0
while time.monotonic() < deadline:
    for _ in range(100):
        limiter.try_acquire()
    count += 100
print(count)
"""


def processes_rate(port: int, processes: int = 8, seconds: float = 3.0) -> float:
    """Decisions per second of ``processes`` processes on one key, all at once."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(port), str(seconds)], stdout=subprocess.PIPE
        )
        for _ in range(processes)
    ]
    return sum(int(worker.communicate()[0]) for worker in workers) / seconds


WAITERS = 50


class _Counted:
    """Counts the script calls of a limiter (its ``Server.run`` and ``run_async``)."""

    def __init__(self, limiter: Any) -> None:
        self.calls = 0
        self.seen: set[Any] = set()
        server = limiter._core.server
        run, run_async = server.run, server.run_async
        lock = threading.Lock()

        def counted(keys: Any, args: Any) -> Any:
            try:
                return run(keys, args)
            finally:
                with lock:
                    self.calls += 1
                    self.seen.add(threading.current_thread().name)

        async def counted_async(keys: Any, args: Any) -> Any:
            try:
                return await run_async(keys, args)
            finally:
                self.calls += 1
                self.seen.add(_waiter.get())

        server.run, server.run_async = counted, counted_async


_waiter: Any = None  # a ContextVar, made in waiting_async (contextvars is imported there)


def waiting_threads(port: int) -> tuple[float, float, int]:
    """(script calls per admission, seconds to admit all, the furthest any waiter was admitted
    from its place in the arrival order) for 50 blocking waiters."""
    import redis

    client = redis.Redis(port=port)
    client.flushall()
    limiter = RedisRateLimiter(client, 20, name="bench-waiting", burst=1)
    counted = _Counted(limiter)
    admitted: list[int] = []
    threads = [
        threading.Thread(target=lambda i=i: (limiter.acquire(), admitted.append(i)), name=f"w{i}")
        for i in range(WAITERS)
    ]
    start = time.monotonic()
    for thread in threads:
        thread.start()
        while thread.name not in counted.seen:
            time.sleep(0.0005)
    for thread in threads:
        thread.join()
    took = time.monotonic() - start
    client.close()
    stray = max(abs(place - who) for place, who in enumerate(admitted))
    return counted.calls / WAITERS, took, stray


def waiting_async(port: int) -> tuple[float, float, int]:
    """:func:`waiting_threads` for 50 asyncio tasks on an asyncio client."""
    import contextvars

    import redis.asyncio

    global _waiter
    _waiter = contextvars.ContextVar("waiter", default="")

    async def main() -> tuple[float, float, int]:
        client = redis.asyncio.Redis(port=port)
        await client.flushall()
        limiter = AsyncRedisRateLimiter(client, 20, name="bench-waiting", burst=1)
        counted = _Counted(limiter)
        admitted: list[int] = []

        async def waiter(i: int) -> None:
            _waiter.set(i)
            await limiter.acquire()
            admitted.append(i)

        start = time.monotonic()
        tasks = []
        for i in range(WAITERS):
            tasks.append(asyncio.create_task(waiter(i)))
            while i not in counted.seen:
                await asyncio.sleep(0.0005)
        await asyncio.gather(*tasks)
        took = time.monotonic() - start
        await client.aclose()
        stray = max(abs(place - who) for place, who in enumerate(admitted))
        return counted.calls / WAITERS, took, stray

    return asyncio.run(main())


def large_among_small(make: Callable[[], Any], timeout: float = 5.0) -> tuple[bool, float]:
    """Whether ``acquire(10)`` among five ``acquire(1)`` loops was admitted, and after how long
    (10/s, burst 10, the burst taken before it asks)."""
    limiter = make()
    stop = threading.Event()

    def small() -> None:
        while not stop.is_set():
            limiter.acquire()

    loops = [threading.Thread(target=small) for _ in range(5)]
    for loop in loops:
        loop.start()
    while limiter.available() > 0:
        time.sleep(0.01)
    start = time.monotonic()
    admitted = limiter.acquire(10, timeout=timeout)
    took = time.monotonic() - start
    stop.set()
    for loop in loops:
        loop.join()
    return admitted, took


def waiting(port: int) -> None:
    import redis

    print(f"{WAITERS} waiters on one key, 20/s, burst 1 (the rate alone: 2.45 s)")
    print(f"{'waiters':24} {'calls/admission':>16} {'all admitted':>13} {'out of order':>13}")
    for name, run in (("threads", waiting_threads), ("asyncio tasks", waiting_async)):
        per, took, stray = run(port)
        print(f"{name:24} {per:16.2f} {took:12.2f}s {stray:13}")
    client = redis.Redis(port=port, socket_timeout=5)
    client.flushall()
    print("acquire(10) among five acquire(1) loops, 10/s, burst 10 (timeout 5 s)")
    for name, make in (
        ("RedisRateLimiter", lambda: RedisRateLimiter(client, 10, name="bench-large", burst=10)),
        ("in-process RateLimiter", lambda: RateLimiter(10, burst=10)),
    ):
        admitted, took = large_among_small(make)
        print(f"{name:24} {'admitted' if admitted else 'False':>9} after {took:.2f} s")
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=2_000)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--cluster-port", type=int, default=None)
    parser.add_argument("--no-cluster", action="store_true")
    parser.add_argument("--only", default=None, help="only the rows whose name holds this text")
    parser.add_argument("--waiting", action="store_true", help="only the waiting cases")
    options = parser.parse_args()

    server = None
    port = options.port
    if port is None:
        server, port, folder = start_server()
    cluster: list[subprocess.Popen[bytes]] = []
    cluster_port = options.cluster_port
    if cluster_port is None and not options.no_cluster and not options.waiting:
        cluster, cluster_port, cluster_folder = start_cluster()
    try:
        if options.waiting:
            waiting(port)
            return
        timed = cases(port)
        if cluster_port is not None:
            timed.update(cluster_cases(cluster_port))
        if options.only is not None:
            timed = {name: make for name, make in timed.items() if options.only in name}
        timed.setdefault(BARE, cases(port)[BARE])
        medians = median_ns(timed, options.rounds, options.number)
        bare = medians[BARE]
        print(f"median of {options.rounds} rounds x {options.number} decisions, us per decision")
        width = max(map(len, medians))
        print(f"{'call':{width}} {'us':>8} {'/ bare EVALSHA':>15}")
        for name, ns in medians.items():
            print(f"{name:{width}} {ns / 1000:8.1f} {ns / bare:14.2f}x")
        loop = medians.get("try_acquire(key) x 100 keys, per decision")
        many = medians.get("try_acquire_many(100 keys), per decision")
        if loop and many:
            print(f"try_acquire_many is {loop / many:.1f}x cheaper per decision than a loop")
        loop, many = medians.get(CLUSTER_LOOP), medians.get(CLUSTER_MANY)
        if loop and many:
            print(
                f"on the cluster, try_acquire_many is {loop / many:.1f}x cheaper per decision "
                f"than a loop"
            )
        if options.only is None:
            rate = processes_rate(port)
            print(f"8 processes on one key: {rate:,.0f} decisions per second in all")
            waiting(port)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            shutil.rmtree(folder, ignore_errors=True)
        for node in cluster:
            node.terminate()
            node.wait()
        if cluster:
            shutil.rmtree(cluster_folder, ignore_errors=True)


if __name__ == "__main__":
    main()
