"""The Redis limiters against a bare EVALSHA through the same client, and against the peers.

Run from the repository root after installing the package with the Redis client (and, for the
peers' rows, ``pip install '.[bench]'``)::

    python3 bench/bench_distributed.py [--rounds 15] [--port PORT]

Without ``--port`` it starts its own redis-server (which must be on PATH) on a free loopback
port in a temporary folder, and stops it at the end. Every limiter is configured so that the
timed call is always allowed; every row is one decision on one key through one connection,
except the batch rows (per decision) and the last line (eight processes at once on one key).
Interleaved rounds in one run; medians and ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter
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
        "bare EVALSHA of `return 1`": bare_evalsha,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=2_000)
    parser.add_argument("--port", type=int, default=None)
    options = parser.parse_args()

    server = None
    port = options.port
    if port is None:
        server, port, folder = start_server()
    try:
        medians = median_ns(cases(port), options.rounds, options.number)
        bare = medians["bare EVALSHA of `return 1`"]
        print(f"median of {options.rounds} rounds x {options.number} decisions, us per decision")
        print(f"{'call':44} {'us':>8} {'/ bare EVALSHA':>15}")
        for name, ns in medians.items():
            print(f"{name:44} {ns / 1000:8.1f} {ns / bare:14.2f}x")
        loop = medians.get("try_acquire(key) x 100 keys, per decision")
        many = medians.get("try_acquire_many(100 keys), per decision")
        if loop and many:
            print(f"try_acquire_many is {loop / many:.1f}x cheaper per decision than a loop")
        print(f"8 processes on one key: {processes_rate(port):,.0f} decisions per second in all")
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
