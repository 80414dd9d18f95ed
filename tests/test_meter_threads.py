"""Meters shared between threads: nothing lost, nothing made up, no one starved.

* ``test_no_refill_conserves_bytes``: several threads ``mark`` and ``mark_many`` one meter at a
  single instant (so nothing refills), blind and colour-aware. No exception, and the bytes
  given each colour are exactly what left the buckets: srTCM and RFC 4115 green = CBS - Tc and
  yellow = EBS - Te; trTCM green = CBS - Tc and green + yellow = PBS - Tp. In particular green
  never exceeds CBS.
* ``test_real_clock_green_is_bounded``: the same with the meter's own monotonic clock: green
  bytes never exceed CBS plus what CIR refills over the run.
* ``test_another_thread_runs_while_mark_many_marks``: a thread waiting for the GIL gets to run
  while a long trace is being marked, and sees the call still in progress. The switch interval
  is set far beyond the test's length, so the interpreter never takes the GIL from the caller:
  the waiting thread can only run if ``mark_many`` lets the GIL go.
* ``test_mark_many_is_not_starved_by_marks``: a long ``mark_many`` finishes while other
  threads keep calling ``mark``. (An earlier build ran the trace on a copy with the GIL
  released and started over whenever a ``mark`` landed meanwhile, with no bound on the
  retries: a 1,000,000-packet trace then never finished while the marks went on.)

Timeouts only detect hangs; nothing is asserted about speed beyond the starvation bound.
"""

from __future__ import annotations

import array
import random
import sys
import threading
import time
from typing import Any

import pytest
import qos_support
from qos_support import switch_interval, watchdog

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.meter")

from protocol_in_code.qos.meter import (
    COLORS,
    Color,
    ExcessRateMeter,
    SingleRateMeter,
    TwoRateMeter,
)

THREADS = 4
ROUNDS = 400
HANG_SECONDS = 120
T = 123_456_789  # the one instant of the no-refill test
NEVER_SWITCH = 100.0  # a switch interval no test here lasts: the GIL changes hands only if let go
TRACES = 20  # traces marked, at most, while waiting for the other thread to run


def run_threads(worker: Any, n: int = THREADS) -> None:
    """Run ``worker(i, barrier)`` on ``n`` threads; re-raise the first exception."""
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def wrapped(i: int) -> None:
        try:
            worker(i, barrier)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(n)]
    with watchdog(HANG_SECONDS), switch_interval(1e-6):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]


def hammer(meter: Any, now: Any, seed: int) -> dict[Color, int]:
    """Mark from all threads; return the bytes given each colour. ``now(k)`` gives the time of
    a call (``None`` for the meter's clock) and a trace of ``k`` packets' times."""
    totals = [{colour: 0 for colour in Color} for _ in range(THREADS)]

    def worker(i: int, barrier: threading.Barrier) -> None:
        rng = random.Random(seed * 100 + i)
        mine = totals[i]
        barrier.wait()
        for _ in range(ROUNDS):
            aware = rng.random() < 0.3
            if rng.random() < 0.5:
                nbytes = rng.randint(0, 60)
                arrived = rng.choice(COLORS) if aware else None
                mine[meter.mark(nbytes, now(0), arrived)] += nbytes
            else:
                k = rng.randint(1, 40)
                sizes = array.array("q", (rng.randint(0, 60) for _ in range(k)))
                codes = array.array("B", (rng.randint(0, 2) for _ in range(k))) if aware else None
                for nbytes, code in zip(sizes, meter.mark_many(sizes, now(k), codes), strict=True):
                    mine[COLORS[code]] += nbytes

    run_threads(worker)
    return {colour: sum(t[colour] for t in totals) for colour in Color}


def constant(k: int) -> Any:
    return T if k == 0 else array.array("q", [T] * k)


METERS = {
    # Sizes such that the buckets run dry part way through (~4 x 400 x 20 x 30 bytes offered).
    "srtcm": lambda: SingleRateMeter(1000, 100_000, 50_000),
    "trtcm": lambda: TwoRateMeter(1000, 100_000, 2000, 150_000),
    "rfc4115": lambda: ExcessRateMeter(1000, 100_000, 500, 50_000),
}


@pytest.mark.parametrize("kind", sorted(METERS))
def test_no_refill_conserves_bytes(kind: str) -> None:
    meter = METERS[kind]()
    given = hammer(meter, constant, seed=len(kind))
    if isinstance(meter, TwoRateMeter):
        assert given[Color.GREEN] == 100_000 - meter.tc
        assert given[Color.GREEN] + given[Color.YELLOW] == 150_000 - meter.tp
    else:
        assert given[Color.GREEN] == 100_000 - meter.tc
        assert given[Color.YELLOW] == 50_000 - meter.te
    assert given[Color.GREEN] <= 100_000
    assert given[Color.RED] > 0, "the buckets were meant to run dry"


@pytest.mark.parametrize("kind", sorted(METERS))
def test_real_clock_green_is_bounded(kind: str) -> None:
    meter = METERS[kind]()

    def now(k: int) -> Any:
        if k == 0:
            return None  # the meter's monotonic clock
        return array.array("q", [time.monotonic_ns()] * k)

    start = time.monotonic_ns()
    given = hammer(meter, now, seed=7 + len(kind))
    elapsed_s = (time.monotonic_ns() - start) / 1e9
    # CIR is 1000 B/s for all three; allow one extra byte for the float of elapsed_s.
    assert given[Color.GREEN] <= 100_000 + 1000 * elapsed_s + 1


@pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="without a GIL there is nothing for mark_many to let go",
)
def test_another_thread_runs_while_mark_many_marks() -> None:
    """A thread that waits for the GIL runs during ``mark_many``, and sees it still marking.

    With a switch interval longer than the test, the interpreter never asks this thread to give
    up the GIL: between ``go.set()`` and the end of the loop, the other thread can run only
    while this one has let the GIL go, and the only call here that may do so is ``mark_many``.
    The other thread records whether a trace was being marked when it ran. Were the GIL held for
    the whole trace, it would run only at the ``join``, and record False. (Several traces, in
    case the other thread is slow to wake; nothing about speed is asserted.)
    """
    n = 1_000_000
    sizes = array.array("B", [1]) * n
    times = array.array("q", [0]) * n
    meter = SingleRateMeter(1, 10**12, 0)
    go = threading.Event()
    marking = [False]
    seen: list[bool] = []

    def other() -> None:
        go.wait()
        seen.append(marking[0])

    worker = threading.Thread(target=other)
    with watchdog(HANG_SECONDS), switch_interval(NEVER_SWITCH):
        worker.start()
        go.set()
        for _ in range(TRACES):
            marking[0] = True
            meter.mark_many(sizes, times)
            marking[0] = False
            if seen:
                break
        worker.join()
    assert seen == [True], (
        "the other thread got no turn while mark_many marked a trace: the GIL was held "
        f"throughout ({seen=}: it ran only once the traces were done)"
    )


def test_mark_many_is_not_starved_by_marks() -> None:
    """Two threads mark in a loop; a 1,000,000-packet mark_many (~20 ms alone) must finish."""
    n = 1_000_000
    sizes = array.array("q", [1]) * n
    times = array.array("q", [0]) * n
    alone = SingleRateMeter(100, 10**9, 10**9)
    t0 = time.perf_counter()
    alone.mark_many(sizes, times)
    budget = max(2.0, 100 * (time.perf_counter() - t0))

    meter = SingleRateMeter(100, 10**9, 10**9)
    stop, done = threading.Event(), threading.Event()

    def marker() -> None:
        while not stop.is_set():
            meter.mark(1, 0)

    def tracer() -> None:
        meter.mark_many(sizes, times)
        done.set()

    with watchdog(HANG_SECONDS):
        threads = [threading.Thread(target=marker) for _ in range(2)]
        threads.append(threading.Thread(target=tracer))
        for thread in threads[:-1]:
            thread.start()
        time.sleep(0.01)
        threads[-1].start()
        finished = done.wait(budget)
        stop.set()
        for thread in threads:
            thread.join()
    assert finished, (
        f"mark_many of {n} packets did not finish in {budget:.1f} s while another thread "
        "called mark (it finished only once the marks stopped)"
    )
