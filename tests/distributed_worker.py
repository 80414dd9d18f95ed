"""A worker process for the multi-process tests: hammers one key, prints how many it admitted.

    python distributed_worker.py PORT KEY BANDS MODE THREADS ATTEMPTS SKEW_S [CLUSTER]

``BANDS`` is JSON: a list of ``[rate, burst, per]``. ``MODE`` is ``sync`` (``THREADS`` threads
sharing one client) or ``async`` (``THREADS`` tasks on an asyncio client). ``SKEW_S`` moves this
process's own clocks (``time.time``, ``time.time_ns``, ``time.monotonic``,
``time.monotonic_ns``) by that many seconds, to show that no client clock enters a decision.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any


def skew_clocks(seconds: float) -> None:
    if not seconds:
        return
    offset_ns = int(seconds * 10**9)
    real_time, real_time_ns = time.time, time.time_ns
    real_monotonic, real_monotonic_ns = time.monotonic, time.monotonic_ns
    time.time = lambda: real_time() + seconds  # type: ignore[assignment]
    time.time_ns = lambda: real_time_ns() + offset_ns  # type: ignore[assignment]
    time.monotonic = lambda: real_monotonic() + seconds  # type: ignore[assignment]
    time.monotonic_ns = lambda: real_monotonic_ns() + offset_ns  # type: ignore[assignment]


def main(argv: list[str]) -> int:
    port, key, bands_json, mode, threads, attempts, skew = argv[:7]
    cluster = len(argv) > 7 and argv[7] == "cluster"
    skew_clocks(float(skew))

    from protocol_in_code.qos.distributed import Band, RedisRateLimiter

    bands = [Band(rate, burst=burst, per=per) for rate, burst, per in json.loads(bands_json)]
    if mode == "async":
        import redis.asyncio
        from redis.asyncio.cluster import RedisCluster as AsyncCluster

        async def run() -> int:
            client: Any = (
                AsyncCluster(host="127.0.0.1", port=int(port))
                if cluster
                else redis.asyncio.Redis(host="127.0.0.1", port=int(port))
            )
            limiter: Any = RedisRateLimiter(client, name=key, bands=bands)

            async def task() -> int:
                return sum([await limiter.try_acquire() for _ in range(int(attempts))])

            counts = await asyncio.gather(*(task() for _ in range(int(threads))))
            await client.aclose()
            return sum(counts)

        print(asyncio.run(run()))
        return 0

    import redis
    from redis.cluster import RedisCluster

    client = (
        RedisCluster(host="127.0.0.1", port=int(port))
        if cluster
        else redis.Redis(host="127.0.0.1", port=int(port))
    )
    limiter = RedisRateLimiter(client, name=key, bands=bands)
    counts = [0] * int(threads)

    def hammer(index: int) -> None:
        counts[index] = sum(limiter.try_acquire() for _ in range(int(attempts)))

    workers = [threading.Thread(target=hammer, args=(i,)) for i in range(int(threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    print(sum(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
