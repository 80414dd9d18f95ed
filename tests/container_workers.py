"""Worker processes for ``test_shared_containers.py``: what runs in the children.

Two kinds of child run this module:

* A group of load workers, started as ``python -m container_workers load ...`` (the tests
  folder on ``PYTHONPATH``) inside the namespaces a test makes with ``unshare``. The group's
  first process forks the workers, says ``ready`` on its standard output, waits for ``go
  <deadline>`` on its standard input, and prints one JSON line of what every thread admitted.
* Processes forked by the test with ``multiprocessing``: a holder doing batch after batch, a
  process that execs ``sleep`` in the middle of a batch, a waiter beside a thread that only
  sleeps, the kill storm's victims and survivors. They report through shared memory
  (``multiprocessing`` values and arrays that the test reads without their help), so a process
  stuck in a call with the interpreter lock held is still seen from outside.

Every table is opened by name here, in the child, in the folder the test gives.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import sys
import threading
import time
from array import array
from typing import Any

from protocol_in_code.qos.shared import SharedKeyedRateLimiter
from shared_workers import in_threads, timed_load

#: The table of the load groups: one key, 1000 tokens a second and a burst of 10^8, which a
#: run never spends: every decision takes a token, so any two decisions made on one state (two
#: processes inside one lock) leave the balance higher than what was taken says.
LOAD_NAME = "containers"
LOAD_KEY = 0  # an int: batches take it too
LOAD_RATE, LOAD_BURST = 1000, 10**8
#: Requests in one of the load workers' batches.
LOAD_BATCH = 32

#: The program an exec'ing worker becomes, and for how long it lives (the test kills it).
SLEEP = [shutil.which("sleep") or "/bin/sleep", "300"]

#: Keys the batches decide on: ints, so that a batch can take them.
BATCH_KEYS = 8
#: Requests in one batch: a batch takes a bucket's lock again and again, the interpreter
#: released, for some milliseconds (it holds the lock about half of that time).
BATCH_LENGTH = 65536


def open_keyed(folder: str, name: str, rate: int, burst: int, max_keys: int) -> Any:
    """The keyed table ``name`` in ``folder``, opened (or made) by this process."""
    return SharedKeyedRateLimiter(name, rate, burst=burst, max_keys=max_keys, path=folder)


# ---------------------------------------------------------------------------------------------
# Load groups, run inside namespaces
# ---------------------------------------------------------------------------------------------


def load_worker(folder: str, threads: int, ready: Any, go: Any, deadline: Any, out: Any) -> None:
    """Open the load table, then ``threads`` threads decide on its one key as fast as they can
    from ``go`` until the monotonic clock reaches ``deadline``, by ``try_acquire``, ``check``
    and batches of ``LOAD_BATCH`` requests in turn (a batch holds the lock, the interpreter
    released, for most of its length); each reports ``(admitted, requests, first_before,
    first_after, last_before, last_after)``: its first and last decisions lie between those
    readings of ``time.monotonic_ns``, the clock the table reads (see
    :func:`shared_workers.timed_load`)."""
    limiter = open_keyed(folder, LOAD_NAME, LOAD_RATE, LOAD_BURST, 64)
    keys = array("q", [LOAD_KEY]) * LOAD_BATCH

    def decide(step: int, now: int) -> tuple[int, int]:
        if step % 3 == 0:
            return int(limiter.try_acquire(LOAD_KEY)), 1
        if step % 3 == 1:
            return int(limiter.check(LOAD_KEY).allowed), 1
        codes = limiter.try_acquire_many(keys, array("q", [now]) * LOAD_BATCH)
        return codes.count(0), LOAD_BATCH

    def run() -> None:
        assert go.wait(60), "never told to go"
        out.put(timed_load(decide, deadline.value))

    in_threads(threads, run, ready)


def load_group(folder: str, processes: int, threads: int) -> None:
    """Fork ``processes`` load workers of ``threads`` threads each; say ``ready`` once every
    one has its table, read ``go <deadline_ns>``, and print every thread's report as one JSON
    list."""
    ctx = multiprocessing.get_context("fork")
    ready, out, go, deadline = ctx.Queue(), ctx.Queue(), ctx.Event(), ctx.Value("q", 0)
    workers = [
        ctx.Process(
            target=load_worker, args=(folder, threads, ready, go, deadline, out), daemon=True
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=60)
    print("ready", flush=True)
    word, value = sys.stdin.readline().split()
    assert word == "go", word
    deadline.value = int(value)
    go.set()
    reports = [out.get(timeout=60) for _ in range(processes * threads)]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0, f"a worker failed: exit code {worker.exitcode}"
    print(json.dumps(reports), flush=True)


def load_available(folder: str) -> None:
    """Print the load key's available tokens and a reading of the monotonic clock taken after
    the call, as a JSON list."""
    limiter = open_keyed(folder, LOAD_NAME, LOAD_RATE, LOAD_BURST, 64)
    tokens = limiter.available(LOAD_KEY)
    print(json.dumps([tokens, time.monotonic_ns()]), flush=True)


# ---------------------------------------------------------------------------------------------
# Batches, exec, stop
# ---------------------------------------------------------------------------------------------


def one_batch(limiter: Any, keys: array[int]) -> array[int]:
    """Decide ``keys`` in one batch, all now: the outcome codes (0 is allowed)."""
    codes: array[int] = limiter.try_acquire_many(
        keys, array("q", [time.monotonic_ns()]) * len(keys)
    )
    return codes


def batch_keys(seed: int) -> array[int]:
    """``BATCH_LENGTH`` keys drawn from ``range(BATCH_KEYS)``."""
    rng = random.Random(seed)
    return array("q", (rng.randrange(BATCH_KEYS) for _ in range(BATCH_LENGTH)))


def batches(folder: str, name: str, rate: int, burst: int, max_keys: int, done: Any) -> None:
    """Decide batch after batch for ever, counting them in ``done``."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)
    keys = batch_keys(os.getpid())
    while True:
        one_batch(limiter, keys)
        done.value += 1


def exec_mid_batch(
    folder: str, name: str, rate: int, burst: int, max_keys: int, done: Any, delay: float
) -> None:
    """A second thread decides batch after batch; once it has done two, and ``delay`` seconds
    later, this (main) thread execs ``sleep``. It gets the interpreter lock to do so only while
    the other thread is inside a batch, the lock released: the exec lands mid-batch."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)
    keys = batch_keys(os.getpid())

    def run() -> None:
        while True:
            one_batch(limiter, keys)
            done.value += 1

    threading.Thread(target=run, daemon=True).start()
    while done.value < 2:
        time.sleep(0.0005)
    time.sleep(delay)
    os.execv(SLEEP[0], SLEEP)


def probe(folder: str, name: str, rate: int, burst: int, max_keys: int) -> None:
    """Decide once on each batch key by each single call, and say ``done``."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)
    for key in range(BATCH_KEYS):
        limiter.try_acquire(key)
        limiter.check(key)
        limiter.peek(key)
    print("done", flush=True)


def waiter(
    folder: str,
    name: str,
    rate: int,
    burst: int,
    max_keys: int,
    asked: Any,
    answered: Any,
    ticks: Any,
) -> None:
    """Two threads. One waits for ``asked`` to go up, then decides once on batch key 0 and sets
    ``answered`` to ``asked``; the other only sleeps 5 ms at a time, counting in ``ticks``."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)

    def tick() -> None:
        while True:
            time.sleep(0.005)
            ticks.value += 1

    threading.Thread(target=tick, daemon=True).start()
    while True:
        wanted = asked.value
        if wanted == answered.value:
            time.sleep(0.001)
            continue
        limiter.try_acquire(0)
        answered.value = wanted


# ---------------------------------------------------------------------------------------------
# The kill storm
# ---------------------------------------------------------------------------------------------

#: Keys the storm decides on.
STORM_KEYS = 4
#: Requests in one of the storm's batches, all for one key: some milliseconds of holding its
#: buckets' locks again and again, the interpreter released.
STORM_BATCH = 16384


def storm_victim(
    folder: str,
    name: str,
    rate: int,
    burst: int,
    max_keys: int,
    counts: Any,
    row: int,
    exec_after: float | None,
) -> None:
    """Decide batch after batch, each on one of the storm's keys, until killed, adding what
    each batch admitted to ``counts[row * STORM_KEYS + key]`` (a kill or an exec between a
    batch and its count loses that count: the counts are a lower bound). With ``exec_after``,
    a second thread does the batches, and this one execs ``sleep`` that many seconds in: it
    gets the interpreter lock to do so while the other thread is inside a batch."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)
    rng = random.Random(row)
    per_key = [array("q", [key]) * STORM_BATCH for key in range(STORM_KEYS)]

    def run() -> None:
        while True:
            key = rng.randrange(STORM_KEYS)
            counts[row * STORM_KEYS + key] += one_batch(limiter, per_key[key]).count(0)

    if exec_after is None:
        run()
        return
    threading.Thread(target=run, daemon=True).start()
    time.sleep(exec_after)
    os.execv(SLEEP[0], SLEEP)


def storm_survivor(
    folder: str,
    name: str,
    rate: int,
    burst: int,
    max_keys: int,
    stop: Any,
    progress: Any,
    admitted: Any,
    index: int,
) -> None:
    """Decide by single calls (``try_acquire``, ``check``, ``peek``) on the storm's keys until
    ``stop``; count each call in ``progress[index]`` and each admission in
    ``admitted[index * STORM_KEYS + key]``, as it happens."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)
    rng = random.Random(1000 + index)
    calls = 0
    while not stop.is_set():
        op = rng.randrange(3)
        key = rng.randrange(STORM_KEYS)
        if op == 0:
            allowed = bool(limiter.try_acquire(key))
        elif op == 1:
            allowed = bool(limiter.check(key).allowed)
        else:
            limiter.peek(key)
            allowed = False
        if allowed:
            admitted[index * STORM_KEYS + key] += 1
        calls += 1
        progress[index] = calls


def available(folder: str, name: str, rate: int, burst: int, max_keys: int) -> None:
    """Print each storm key's available tokens, as a JSON list."""
    limiter = open_keyed(folder, name, rate, burst, max_keys)
    print(json.dumps([limiter.available(key) for key in range(STORM_KEYS)]), flush=True)


def main(argv: list[str]) -> None:
    """``load <folder> <processes> <threads>``; ``load-available <folder>``; ``probe`` or
    ``available`` ``<folder> <name> <rate> <burst> <max_keys>``."""
    command, folder, *rest = argv
    if command == "load":
        processes, threads = map(int, rest)
        load_group(folder, processes, threads)
    elif command == "load-available":
        load_available(folder)
    elif command in ("probe", "available"):
        name, rate, burst, max_keys = rest
        {"probe": probe, "available": available}[command](
            folder, name, int(rate), int(burst), int(max_keys)
        )
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
