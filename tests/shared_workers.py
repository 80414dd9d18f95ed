"""Worker processes for ``test_shared_processes.py``: what runs in the children.

They live in a module of their own (not the test module) so that a ``spawn`` or ``forkserver``
child can import them by name without importing pytest and the test's own module-level code.
A worker is given either a limiter (inherited across a fork, or pickled: then reopened by name)
or an :class:`Opener`, which opens the table by name in the child.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from protocol_in_code.qos import Band
from protocol_in_code.qos.shared import SharedKeyedRateLimiter, SharedRateLimiter

#: The key the keyed load tests share.
KEY = "k"


@dataclass(frozen=True)
class Opener:
    """How to open a table by name in another process: its class, name, folder and limit."""

    keyed: bool
    name: str
    path: str
    bands: tuple[tuple[int, int, int], ...]  # (tokens, burst, per seconds)
    max_keys: int = 64
    options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> Any:
        bands = [Band(rate, burst=burst, per=per) for rate, burst, per in self.bands]
        if self.keyed:
            return SharedKeyedRateLimiter(
                self.name, bands=bands, max_keys=self.max_keys, path=self.path
            )
        return SharedRateLimiter(self.name, bands=bands, path=self.path)


def limiter_of(given: Any) -> Any:
    """The limiter a worker was given: opened by name here, or the one it received."""
    return given.open() if isinstance(given, Opener) else given


def _deciders(limiter: Any, keyed: bool) -> tuple[Any, Any]:
    """``(try_acquire, check)`` on the load tests' one limit, each with ``now_ns`` optional."""
    if keyed:

        def take(now_ns: int | None = None) -> bool:
            return bool(limiter.try_acquire(KEY, now_ns=now_ns))

        def check(now_ns: int | None = None) -> bool:
            return bool(limiter.check(KEY, now_ns=now_ns).allowed)

    else:

        def take(now_ns: int | None = None) -> bool:
            return bool(limiter.try_acquire(now_ns=now_ns))

        def check(now_ns: int | None = None) -> bool:
            return bool(limiter.check(now_ns=now_ns).allowed)

    return take, check


def timed_load(decide: Any, end: int) -> tuple[int, int, int, int, int, int]:
    """Decide by ``decide(step, now_ns)`` (which says how many it admitted of how many it
    asked) as fast as possible until the monotonic clock reaches ``end``: ``(admitted, asked,
    first_before, first_after, last_before, last_after)``. The first and last decisions lie
    between those readings of ``time.monotonic_ns``, the clock the limiters read."""
    admitted = asked = 0
    first: tuple[int, int] | None = None
    last = (0, 0)
    for step in itertools.count():
        before = time.monotonic_ns()
        if before >= end:
            break
        allowed, count = decide(step, before)
        after = time.monotonic_ns()
        if first is None:
            first = (before, after)
        last = (before, after)
        admitted += allowed
        asked += count
    assert first is not None, "the thread made no decision"
    return (admitted, asked, *first, *last)


def in_threads(threads: int, run: Any, ready: Any) -> None:
    """Run ``run`` in ``threads`` threads; say ``ready`` once they are started; wait for all."""
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    ready.put(True)
    for worker in workers:
        worker.join()


def load(
    given: Any, keyed: bool, threads: int, ready: Any, go: Any, deadline: Any, out: Any
) -> None:
    """Load on the host's clock: ``threads`` threads decide as fast as they can from ``go``
    until the monotonic clock reaches ``deadline``, by ``check`` and ``try_acquire`` in turn;
    each reports what :func:`timed_load` says."""
    limiter = limiter_of(given)
    take, check = _deciders(limiter, keyed)

    def run() -> None:
        assert go.wait(60), "never told to go"
        out.put(timed_load(lambda step, _: (take() if step % 2 else check(), 1), deadline.value))

    in_threads(threads, run, ready)


def counted_load(
    given: Any, keyed: bool, threads: int, counter: Any, calls: int, t0: int, step: int, out: Any
) -> None:
    """Load on a clock the processes share: each decision takes the next number ``i`` of
    ``counter`` and decides at ``now_ns = t0 + i * step``, until ``calls`` numbers are taken;
    each thread reports how many it admitted. The number is taken under the counter's lock, the
    decision outside it: decisions arrive at the table a little out of order, as they do on the
    real clock."""
    limiter = limiter_of(given)
    take, check = _deciders(limiter, keyed)

    def run() -> None:
        admitted = 0
        while True:
            with counter.get_lock():
                i = counter.value
                if i >= calls:
                    break
                counter.value = i + 1
            now = t0 + i * step
            admitted += take(now) if i % 2 else check(now)
        out.put(admitted)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


#: Keys the kill test decides on (ints, so that a batch can take them too).
KILL_KEYS = 4
#: How long an ``acquire`` in the kill test may wait for its token.
ACQUIRE_TIMEOUT = 0.02


def victim(given: Any, counts: Any, row: int, seed: int) -> None:
    """Decide for ever on the kill test's keys, by every call, until killed; after each call,
    add what it admitted per key to ``counts[row * KILL_KEYS + key]``. A kill between a decision
    and its count loses that count: the counts are a lower bound of what was admitted.

    Most calls are batches of 1024 keys: a batch holds a bucket's lock again and again with
    the interpreter released, so a kill lands inside a lock far more often there."""
    from array import array

    limiter = limiter_of(given)
    rng = random.Random(seed)
    batches = [array("q", (rng.randrange(KILL_KEYS) for _ in range(1024))) for _ in range(8)]
    while True:
        op = rng.randrange(16)
        key = rng.randrange(KILL_KEYS)
        if op == 0:
            admitted = limiter.try_acquire(key)
        elif op == 1:
            admitted = limiter.check(key).allowed
        elif op == 2:
            admitted = limiter.acquire(key, timeout=ACQUIRE_TIMEOUT)
        elif op == 3:
            limiter.peek(key)
            admitted = False
        else:
            keys = batches[op % len(batches)]
            codes = limiter.try_acquire_many(keys, array("q", [time.monotonic_ns()]) * len(keys))
            for k, code in zip(keys, codes, strict=True):
                if code == 0:
                    counts[row * KILL_KEYS + k] += 1
            continue
        if admitted:
            counts[row * KILL_KEYS + key] += 1


def survivor(given: Any, stop: Any, progress: Any, index: int, seed: int, out: Any) -> None:
    """Decide until ``stop`` on the kill test's keys; count each call in ``progress[index]``;
    report ``(admitted per key, calls, slowest try_acquire/check/peek, slowest acquire,
    calls slower than 1 ms)`` in seconds."""
    limiter = limiter_of(given)
    rng = random.Random(seed)
    admitted = [0] * KILL_KEYS
    calls = slow = 0
    slowest = slowest_acquire = 0.0
    while not stop.is_set():
        op = rng.randrange(4)
        key = rng.randrange(KILL_KEYS)
        before = time.monotonic()
        if op == 0:
            allowed = limiter.try_acquire(key)
        elif op == 1:
            allowed = limiter.check(key).allowed
        elif op == 2:
            allowed = limiter.acquire(key, timeout=ACQUIRE_TIMEOUT)
        else:
            limiter.peek(key)
            allowed = False
        took = time.monotonic() - before
        if op == 2:
            slowest_acquire = max(slowest_acquire, took)
        else:
            slowest = max(slowest, took)
            slow += took > 0.001
        admitted[key] += bool(allowed)
        calls += 1
        progress[index] = calls
    out.put((admitted, calls, slowest, slowest_acquire, slow))


def flood(given: Any, first_key: int, keys: int, batch: int, now_ns: int, out: Any) -> None:
    """Ask for ``keys`` distinct int keys from ``first_key`` on, ``batch`` at a time, all at
    ``now_ns``; report how many of each outcome code (0 allowed, 1 denied, 2 never, 3 refused)
    came back, and the sizes the table's file had after each batch."""
    import os
    from array import array

    limiter = limiter_of(given)
    tally = [0, 0, 0, 0]
    sizes = set()
    for start in range(first_key, first_key + keys, batch):
        chunk = array("q", range(start, min(start + batch, first_key + keys)))
        codes = limiter.try_acquire_many(chunk, array("q", [now_ns]) * len(chunk))
        for code in range(4):
            tally[code] += codes.count(code)
        sizes.add(os.stat(limiter.path).st_size)
    out.put((tally, sorted(sizes)))


def holds_lengths(given: Any) -> None:
    """Count the table's keys for ever (``len``, then ``in``), deciding nothing, until
    killed."""
    limiter = limiter_of(given)
    while True:
        len(limiter)
        _ = "k" in limiter


def opens(folder: str, names: int, go: Any, out: Any) -> None:
    """From ``go``, open the tables ``race-0``... ``race-<names - 1>`` one after another, taking
    a token from each; report the names it could not open, and why."""
    assert go.wait(60), "never told to go"
    failed = []
    for i in range(names):
        try:
            limiter = SharedRateLimiter(f"race-{i}", 1, burst=100, per=3600, path=folder)
            assert limiter.try_acquire()
        except Exception as error:  # reported, to be seen in the parent
            failed.append(f"race-{i}: {error!r}")
    out.put(failed)


def opens_all(folder: str, names: list[str], go: Any, done: Any, out: Any) -> None:
    """From ``go``, open the tables ``names`` one after another and take a token from each;
    report that, then keep them all open until ``done``, as a server's worker does."""
    assert go.wait(60), "never told to go"
    limiters = [SharedRateLimiter(name, 1, burst=100, per=3600, path=folder) for name in names]
    out.put([limiter.try_acquire() for limiter in limiters])
    done.wait(60)
