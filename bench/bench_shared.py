"""The shared limiters against the in-process ones, an empty call, and a Redis server.

Run from the repository root after installing the package (with the Redis client for the
Redis row; redis-server on PATH, or ``--port``)::

    python3 bench/bench_shared.py [--rounds 15] [--port PORT] [--seconds 2]

Rows, in one run (medians of interleaved rounds; read the ratios, not the times):

* ``try_acquire()`` of ``SharedRateLimiter`` against ``RateLimiter``'s and an empty method;
* ``try_acquire(key)`` with a str key of ``SharedKeyedRateLimiter`` against
  ``KeyedRateLimiter``'s, over 1,000 keys in turn;
* ``RedisRateLimiter.try_acquire()`` on a loopback server, against ``SharedRateLimiter``'s;
* two processes deciding on one key at once (this machine has two cores): their combined
  decisions per second against one process's alone, each counted over ``--seconds``.

Every limiter is configured so that no request is ever denied during a run, and every table
lives in a temporary folder removed at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from itertools import cycle
from pathlib import Path
from typing import Any

from protocol_in_code.qos import (
    KeyedRateLimiter,
    RateLimiter,
    SharedKeyedRateLimiter,
    SharedRateLimiter,
)
from timing import median_ns

HUGE = 10**12  # tokens per second and burst: never denied during a run
KEYS = [f"client-{i}" for i in range(1000)]


class Empty:
    def try_acquire(self, key: object = None) -> bool:
        return True


def one_key_cases(folder: Path) -> dict[str, Callable[[], tuple[Any, ...]]]:
    shared = SharedRateLimiter("bench-one", HUGE, path=folder)
    return {
        "empty method": lambda: ("limiter.try_acquire()", {"limiter": Empty()}),
        "RateLimiter.try_acquire()": lambda: (
            "limiter.try_acquire()",
            {"limiter": RateLimiter(HUGE)},
        ),
        "SharedRateLimiter.try_acquire()": lambda: (
            "limiter.try_acquire()",
            {"limiter": shared},
        ),
    }


def keyed_cases(folder: Path) -> dict[str, Callable[[], tuple[Any, ...]]]:
    shared = SharedKeyedRateLimiter("bench-keyed", HUGE, max_keys=2 * len(KEYS), path=folder)
    local = KeyedRateLimiter(HUGE, max_keys=2 * len(KEYS))
    return {
        "KeyedRateLimiter.try_acquire(str)": lambda: (
            "limiter.try_acquire(next(keys))",
            {"limiter": local, "keys": cycle(KEYS)},
        ),
        "SharedKeyedRateLimiter.try_acquire(str)": lambda: (
            "limiter.try_acquire(next(keys))",
            {"limiter": shared, "keys": cycle(KEYS)},
        ),
    }


def redis_cases(folder: Path, port: int) -> dict[str, Callable[[], tuple[Any, ...]]]:
    def redis_one() -> tuple[Any, ...]:
        import redis
        from protocol_in_code.qos.distributed import RedisRateLimiter

        client = redis.Redis(port=port)
        return "limiter.try_acquire()", {
            "limiter": RedisRateLimiter(client, 10**9, name="bench-shared")
        }

    shared = SharedRateLimiter("bench-redis", HUGE, path=folder)
    return {
        "SharedRateLimiter.try_acquire() (beside Redis)": lambda: (
            "limiter.try_acquire()",
            {"limiter": shared},
        ),
        "RedisRateLimiter.try_acquire() (loopback)": redis_one,
    }


def decide_for(folder: str, seconds: float, start: Any, counts: Any, index: int) -> None:
    """One process's decisions on the shared key for ``seconds`` from ``start``."""
    limiter = SharedRateLimiter("bench-two", HUGE, path=folder)
    start.wait()
    deadline = time.monotonic() + seconds
    done = 0
    while time.monotonic() < deadline:
        for _ in range(1000):
            limiter.try_acquire()
        done += 1000
    counts[index] = done


def decisions_per_second(folder: Path, processes: int, seconds: float) -> float:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    counts = context.Array("q", processes)
    workers = [
        context.Process(target=decide_for, args=(str(folder), seconds, start, counts, i))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.0)  # every process has opened the table
    start.set()
    for worker in workers:
        worker.join()
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        print("One key, one process (ns per call)")
        one = median_ns(one_key_cases(folder), args.rounds, args.number)
        for name, ns in one.items():
            print(f"  {name:48} {ns:8.1f}")
        ratio = one["SharedRateLimiter.try_acquire()"] / one["RateLimiter.try_acquire()"]
        print(f"  shared / in-process: {ratio:.2f}x (target: at most 2x)")

        print("Keyed, str keys, one process (ns per call)")
        keyed = median_ns(keyed_cases(folder), args.rounds, args.number)
        for name, ns in keyed.items():
            print(f"  {name:48} {ns:8.1f}")
        ratio = (
            keyed["SharedKeyedRateLimiter.try_acquire(str)"]
            / keyed["KeyedRateLimiter.try_acquire(str)"]
        )
        print(f"  shared / in-process: {ratio:.2f}x (target: at most 2x)")

        server = None
        port = args.port
        if port is None:
            from bench_distributed import start_server

            try:
                server, port, _ = start_server()
            except SystemExit as missing:
                print(f"Redis row skipped: {missing}")
        if port is not None:
            print("Against Redis on loopback (ns per call)")
            remote = median_ns(redis_cases(folder, port), max(3, args.rounds // 3), 2000)
            for name, ns in remote.items():
                print(f"  {name:48} {ns:8.1f}")
            if len(remote) == 2:
                values = list(remote.values())
                print(f"  Redis / shared: {values[1] / values[0]:.0f}x (target: at least 50x)")
        if server is not None:
            server.terminate()
            server.wait()

        print(f"Processes on one key (decisions per second, {args.seconds:g} s each)")
        alone = decisions_per_second(folder, 1, args.seconds)
        together = decisions_per_second(folder, 2, args.seconds)
        print(f"  one process alone                                {alone:12,.0f}")
        print(f"  two processes together                           {together:12,.0f}")
        print(f"  together / alone: {together / alone:.2f} (target: at least 1)")


if __name__ == "__main__":
    main()
