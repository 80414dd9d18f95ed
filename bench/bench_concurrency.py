"""In-flight limits: a seat taken and given back, uncontended, against the standard library's
semaphores, and the limit every process of a host shares against the in-process one.

Run from the repository root after installing the package::

    python3 bench/bench_concurrency.py [--rounds 15]

Rows, in one run (medians of interleaved rounds; read the ratios, not the times):

* ``limiter.acquire().release()`` against ``threading.Semaphore``'s ``acquire()`` and
  ``release()`` (the goal: within 3x), with ``try_acquire()`` and ``with limiter:`` beside;
* in a running loop, ``(await limiter.acquire_async()).release()`` against ``await
  sem.acquire()`` and ``sem.release()`` of an ``asyncio.Semaphore`` (the goal: within 2x), 1000
  to a run so that the loop's own cost is spread;
* ``SharedConcurrencyLimiter``'s ``acquire().release()`` (and its keyed form's) against
  ``ConcurrencyLimiter``'s (the goal: within 2x), on a table in a temporary folder.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading

from protocol_in_code.qos import (
    ConcurrencyLimiter,
    KeyedConcurrencyLimiter,
    SharedConcurrencyLimiter,
    SharedKeyedConcurrencyLimiter,
)
from timing import median_ns

#: Where the shared tables of this run live (removed at exit).
FOLDER = tempfile.TemporaryDirectory()

PER_LOOP_RUN = 1000


def native_blocking() -> tuple[str, dict[str, object]]:
    return "limiter.acquire().release()", {"limiter": ConcurrencyLimiter(4)}


def native_try() -> tuple[str, dict[str, object]]:
    return "limiter.try_acquire().release()", {"limiter": ConcurrencyLimiter(4)}


def native_with() -> tuple[str, dict[str, object]]:
    return "with limiter: pass", {"limiter": ConcurrencyLimiter(4)}


def keyed_blocking() -> tuple[str, dict[str, object]]:
    return "limiter.acquire(key).release()", {
        "limiter": KeyedConcurrencyLimiter(4),
        "key": "203.0.113.9",
    }


def shared_blocking() -> tuple[str, dict[str, object]]:
    limiter = SharedConcurrencyLimiter("bench", 4, path=FOLDER.name)
    return "limiter.acquire().release()", {"limiter": limiter}


def shared_keyed_blocking() -> tuple[str, dict[str, object]]:
    limiter = SharedKeyedConcurrencyLimiter("bench-keys", 4, path=FOLDER.name)
    return "limiter.acquire('client').release()", {"limiter": limiter}


def threading_semaphore() -> tuple[str, dict[str, object]]:
    return "sem.acquire(); sem.release()", {"sem": threading.Semaphore(4)}


def in_a_loop(body: str, names: dict[str, object]) -> tuple[str, dict[str, object], int]:
    """``body`` run PER_LOOP_RUN times in a coroutine, on one loop kept for the whole run."""
    loop = asyncio.new_event_loop()
    source = f"async def many():\n    for _ in range({PER_LOOP_RUN}):\n        {body}\n"
    exec(source, names)
    names["loop"] = loop
    return "loop.run_until_complete(many())", names, PER_LOOP_RUN


def native_async() -> tuple[str, dict[str, object], int]:
    return in_a_loop(
        "(await limiter.acquire_async()).release()", {"limiter": ConcurrencyLimiter(4)}
    )


def asyncio_semaphore() -> tuple[str, dict[str, object], int]:
    return in_a_loop("await sem.acquire(); sem.release()", {"sem": asyncio.Semaphore(4)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    cases = {
        "ConcurrencyLimiter: acquire().release()": native_blocking,
        "ConcurrencyLimiter: try_acquire().release()": native_try,
        "ConcurrencyLimiter: with limiter": native_with,
        "KeyedConcurrencyLimiter: acquire(key).release()": keyed_blocking,
        "SharedConcurrencyLimiter: acquire().release()": shared_blocking,
        "SharedKeyedConcurrencyLimiter: acquire(key).release()": shared_keyed_blocking,
        "threading.Semaphore: acquire(); release()": threading_semaphore,
        "ConcurrencyLimiter: await acquire_async(), release()": native_async,
        "asyncio.Semaphore: await acquire(); release()": asyncio_semaphore,
    }
    medians = median_ns(cases, args.rounds, args.number)
    width = max(map(len, medians))
    for name, ns in medians.items():
        print(f"{name:<{width}}  {ns:8.0f} ns")
    threads = (
        medians["ConcurrencyLimiter: acquire().release()"]
        / medians["threading.Semaphore: acquire(); release()"]
    )
    tasks = (
        medians["ConcurrencyLimiter: await acquire_async(), release()"]
        / medians["asyncio.Semaphore: await acquire(); release()"]
    )
    shared = (
        medians["SharedConcurrencyLimiter: acquire().release()"]
        / medians["ConcurrencyLimiter: acquire().release()"]
    )
    print(f"acquire + release against threading.Semaphore: {threads:.2f}x (goal: within 3x)")
    print(f"shared acquire + release against in-process: {shared:.2f}x (goal: within 2x)")
    print(f"acquire_async + release against asyncio.Semaphore: {tasks:.2f}x (goal: within 2x)")


if __name__ == "__main__":
    main()
