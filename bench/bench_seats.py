"""In-flight limits on Redis against a bare EVALSHA through the same client, in one run.

Run from the repository root after installing the package with the Redis client::

    python3 bench/bench_seats.py [--rounds 15] [--port PORT]

Without ``--port`` it starts its own redis-server (on PATH) on a free loopback port, and stops
it at the end. The rows: a bare ``EVALSHA`` of ``return 1``; ``try_acquire()`` and
``release()`` of a ``RedisConcurrencyLimiter`` (one script call each, so about two bare calls
is the floor); the same through the one-key ``with`` form; and the in-process
``ConcurrencyLimiter`` for scale. Then the waiting case: 20 threads on a limit of 2, each
holding its seat a moment, counted in script calls per admission (acquire and release both
counted, so 2 is the least). Medians and ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import shutil
import threading
import time
from typing import Any

import redis
from bench_distributed import BARE, TRIVIAL, start_server
from protocol_in_code.qos import ConcurrencyLimiter
from protocol_in_code.qos.distributed import RedisConcurrencyLimiter
from timing import median_ns


def cases(client: Any) -> dict[str, Any]:
    sha = client.script_load(TRIVIAL)
    seats = RedisConcurrencyLimiter(client, 10**6, name="bench-seats")
    local = ConcurrencyLimiter(10**6)
    return {
        BARE: lambda: ("client.evalsha(sha, 1, b'k')", {"client": client, "sha": sha}),
        "try_acquire() + release()": lambda: (
            "limiter.try_acquire().release()",
            {"limiter": seats},
        ),
        "with limiter: (acquire + release)": lambda: ("with limiter: pass", {"limiter": seats}),
        "in-process ConcurrencyLimiter, the same": lambda: (
            "limiter.try_acquire().release()",
            {"limiter": local},
        ),
    }


class Counting:
    """The client, with its script calls counted."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.scripts = 0

    def evalsha(self, *args: Any) -> Any:
        self.scripts += 1
        return self._client.evalsha(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def waiting(port: int, threads: int = 20, limit: int = 2) -> tuple[float, float]:
    """Script calls per admission, and seconds for all, with ``threads`` threads on ``limit``."""
    counting = Counting(redis.Redis(port=port))
    limiter = RedisConcurrencyLimiter(counting, limit, name="bench-waiting")

    def work() -> None:
        with limiter.acquire(timeout=60) as _lease:
            time.sleep(0.01)

    started = time.perf_counter()
    running = [threading.Thread(target=work) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return counting.scripts / threads, time.perf_counter() - started


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
        medians = median_ns(cases(redis.Redis(port=port)), options.rounds, options.number)
        bare = medians[BARE]
        print(f"median of {options.rounds} rounds x {options.number} calls, us per call")
        width = max(map(len, medians))
        print(f"{'call':{width}} {'us':>8} {'/ bare EVALSHA':>15}")
        for name, ns in medians.items():
            print(f"{name:{width}} {ns / 1000:8.1f} {ns / bare:14.2f}x")
        per, took = waiting(port)
        print(f"20 threads on a limit of 2: {per:.2f} script calls per admission, {took:.2f} s")
    finally:
        if server is not None:
            server.terminate()
            server.wait()
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
