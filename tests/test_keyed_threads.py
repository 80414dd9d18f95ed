"""``KeyedRateLimiter`` under threads (issue 6).

* Exact totals under contention: 8 threads hammer a table whose rate is so small that nothing
  refills during the test (one token per 10**9 s, a constant explicit ``now_ns``), with str,
  int, bytes and tuple (object-path) keys, several keys shared by every thread: each key allows
  exactly its burst, with ``try_acquire`` and with ``check`` (whose allowed decisions see every
  ``remaining`` exactly once per key), and the stats add up.
* A thread blocked in ``acquire`` on one key does not stop other threads from being served on
  other keys (nor on the same table's object path), nor a refund on its own key.
* ``try_acquire_many`` in one thread, concurrent with ``try_acquire`` in others on the same
  keys: exact totals.

``sys.setswitchinterval(1e-6)`` during the hammering (restored after). Joins have timeouts and
a faulthandler watchdog guards against a wedged process.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy
import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code.qos.keyed import KeyedRateLimiter, LimitOutcome

SECOND = 10**9
THREADS = 8
BURST = 40
NOW = 5 * SECOND
SLOW = Fraction(1, 10**9)  # one token per 10**9 s
HANG_SECONDS = 120  # only a hang detector
JOIN_SECONDS = 60


def run_threads(workers: list[Callable[[], Any]]) -> list[Any]:
    """Run each worker in its own thread, started together; their results, in order."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = workers[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(workers))]
    with qos_support.watchdog(HANG_SECONDS), qos_support.switch_interval(1e-6):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    assert not errors, errors
    return results


KEY_SETS: dict[str, list[Any]] = {
    "str": [f"user-{i}" for i in range(6)],
    "int": [0, 1, -1, 2**40, 2**63 - 1, -(2**63)],
    "bytes": [b"", b"a", b"\x00\xff", b"key-3", bytes(100), b"k" * 9],
    "tuple": [("t", i) for i in range(5)] + [(1, (2, "x"))],
    "mixed": ["m", 12, b"m", ("m",), Fraction(1, 3), 2**70],
}


def worker_keys(shared: list[Any], own: list[Any], seed: int) -> list[Any]:
    """A shuffled list of requests: every shared key and the thread's own keys, each asked
    more than its burst."""
    requests = [k for k in shared for _ in range(BURST // 2 + 3)]
    requests += [k for k in own for _ in range(BURST + 5)]
    random.Random(seed).shuffle(requests)
    return requests


def own_keys(kind: str, thread: int) -> list[Any]:
    return {
        "str": [f"own-{thread}"],
        "int": [10_000 + thread],
        "bytes": [f"own-{thread}".encode()],
        "tuple": [("own", thread)],
        "mixed": [("own", thread), thread + 0.5],
    }[kind]


@pytest.mark.parametrize("kind", sorted(KEY_SETS))
@pytest.mark.parametrize("method", ["try_acquire", "check"])
def test_each_key_allows_exactly_its_burst_under_contention(kind: str, method: str) -> None:
    limiter = KeyedRateLimiter(SLOW, burst=BURST, max_keys=1000)
    shared = KEY_SETS[kind]
    plans = [worker_keys(shared, own_keys(kind, t), seed=t) for t in range(THREADS)]

    def worker(plan: list[Any]) -> Callable[[], list[tuple[Any, Any]]]:
        call = getattr(limiter, method)
        return lambda: [(key, call(key, now_ns=NOW)) for key in plan]

    results = run_threads([worker(plan) for plan in plans])
    per_key: dict[Any, list[Any]] = {}
    for out in results:
        for key, answer in out:
            per_key.setdefault(key, []).append(answer)
    every_key = [*shared, *(k for t in range(THREADS) for k in own_keys(kind, t))]
    assert len(per_key) == len(every_key)
    total_allowed = total_denied = 0
    for key in every_key:
        answers = per_key[key]
        if method == "try_acquire":
            allowed = sum(answers)
            assert all(type(a) is bool for a in answers)
        else:
            granted = [d for d in answers if d.outcome is LimitOutcome.ALLOWED]
            allowed = len(granted)
            assert sorted(d.remaining for d in granted) == list(range(BURST)), (
                f"{key!r}: a balance seen twice"
            )
            assert {d.outcome for d in answers} == {LimitOutcome.ALLOWED, LimitOutcome.DENIED}
        assert allowed == BURST, f"{key!r}: {allowed} allowed, burst {BURST}"
        assert limiter.available(key, now_ns=NOW) == 0
        total_allowed += allowed
        total_denied += len(answers) - allowed
    assert len(limiter) == len(every_key)
    stats = limiter.stats
    assert (stats.allowed, stats.denied, stats.refused, stats.forgotten) == (
        total_allowed,
        total_denied,
        0,
        0,
    )


def test_new_keys_racing_for_the_last_slots_respect_the_bound() -> None:
    """Every thread offers the same new keys at once to a table with room for a few: exactly
    ``capacity`` keys are admitted, each exactly once per token, the rest refused."""
    capacity = 25
    limiter = KeyedRateLimiter(SLOW, burst=2, max_keys=capacity, shards=1)
    keys = [f"k{i}" for i in range(60)] + [("k", i) for i in range(60)]

    def worker(seed: int) -> Callable[[], list[tuple[Any, Any]]]:
        order = keys * 2
        random.Random(seed).shuffle(order)
        return lambda: [(k, limiter.check(k, now_ns=NOW).outcome) for k in order]

    results = run_threads([worker(t) for t in range(THREADS)])
    allowed = Counter(k for out in results for k, outcome in out if outcome is LimitOutcome.ALLOWED)
    assert len(allowed) == capacity == len(limiter), (len(allowed), len(limiter))
    assert set(allowed.values()) == {2}, "an admitted key gave more or less than its burst"
    assert sorted(map(repr, limiter)) == sorted(map(repr, allowed))
    stats = limiter.stats
    assert stats.allowed == 2 * capacity and stats.forgotten == 0
    assert stats.allowed + stats.denied + stats.refused == THREADS * len(keys) * 2


def test_a_blocked_acquire_does_not_stop_other_threads() -> None:
    limiter = KeyedRateLimiter(Fraction(1, 2), burst=1, max_keys=10_000)  # 1 token per 2 s
    assert limiter.try_acquire("slow") is True
    assert limiter.try_acquire(("slow", 2)) is True
    outcome: dict[str, Any] = {}

    def blocked(key: Any, name: str) -> Callable[[], None]:
        # Each reserves its key's next token, due in 2 s, and sleeps until then.
        def run() -> None:
            began = time.monotonic()
            outcome[name] = limiter.acquire(key, timeout=10.0)
            outcome[name + "_elapsed"] = time.monotonic() - began

        return run

    sleepers = [
        threading.Thread(target=blocked("slow", "str"), daemon=True),
        threading.Thread(target=blocked(("slow", 2), "tuple"), daemon=True),
    ]
    served: dict[str, Any] = {}

    def serve() -> None:
        began = time.monotonic()
        served["str"] = sum(limiter.try_acquire(f"other-{i}") for i in range(300))
        served["tuple"] = sum(limiter.try_acquire(("other", i)) for i in range(300))
        served["int"] = sum(limiter.try_acquire(i) for i in range(300))
        served["same"] = [limiter.try_acquire("slow") for _ in range(50)]
        served["many"] = limiter.try_acquire_many(
            list(range(1000, 1100)), [time.monotonic_ns()] * 100
        )
        served["elapsed"] = time.monotonic() - began

    with qos_support.watchdog(HANG_SECONDS):
        for sleeper in sleepers:
            sleeper.start()
        time.sleep(0.1)  # let them reach their sleep
        assert all(s.is_alive() for s in sleepers)
        server = threading.Thread(target=serve, daemon=True)
        server.start()
        server.join(5)
        assert not server.is_alive(), "another thread was not served while two slept in acquire"
        assert all(s.is_alive() for s in sleepers), "the sleepers should still be waiting"
        main_began = time.monotonic()
        assert sum(limiter.try_acquire(("main", i)) for i in range(100)) == 100
        main_elapsed = time.monotonic() - main_began
        for sleeper in sleepers:
            sleeper.join(10)
    assert not any(s.is_alive() for s in sleepers)
    assert served["str"] == served["tuple"] == served["int"] == 300
    assert served["same"] == [False] * 50
    assert list(served["many"]) == [0] * 100
    assert served["elapsed"] < 1.0 and main_elapsed < 0.5, (served["elapsed"], main_elapsed)
    assert outcome["str"] is True and outcome["tuple"] is True
    assert 1.5 <= outcome["str_elapsed"] < 8.0, outcome
    assert 1.5 <= outcome["tuple_elapsed"] < 8.0, outcome


def test_a_refund_wakes_nothing_but_is_taken_by_the_next_attempt() -> None:
    """A thread sleeping in acquire holds no lock: a refund on its key goes through at once,
    and the token is there for the next attempt (the sleeper's own or another thread's)."""
    limiter = KeyedRateLimiter(Fraction(1, 100), burst=1, max_keys=10)
    assert limiter.try_acquire("k") is True
    result: list[bool] = []
    sleeper = threading.Thread(
        target=lambda: result.append(limiter.acquire("k", timeout=0.5)), daemon=True
    )
    with qos_support.watchdog(HANG_SECONDS):
        sleeper.start()
        time.sleep(0.05)
        began = time.monotonic()
        limiter.refund("k")
        assert time.monotonic() - began < 0.1, "refund waited for the sleeping acquire"
        taken_here = limiter.try_acquire("k")
        sleeper.join(5)
    assert not sleeper.is_alive()
    assert [taken_here, *result].count(True) == 1, (taken_here, result)


def test_try_acquire_many_concurrent_with_try_acquire_gives_exact_totals() -> None:
    limiter = KeyedRateLimiter(SLOW, burst=BURST, max_keys=1000)
    int_keys = list(range(20))
    trace = numpy.array([k for k in int_keys for _ in range(3 * BURST)], dtype=numpy.int64)
    numpy.random.default_rng(1).shuffle(trace)
    times = numpy.full(len(trace), NOW, dtype=numpy.int64)

    def batch() -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for start in range(0, len(trace), 200):  # several batches, interleaved with the others
            keys = trace[start : start + 200]
            codes = limiter.try_acquire_many(keys, times[start : start + 200])
            out += [(int(k), c) for k, c in zip(keys, codes, strict=True)]
        return out

    def single(seed: int) -> Callable[[], list[tuple[int, int]]]:
        plan = int_keys * (BURST // 2)
        random.Random(seed).shuffle(plan)
        # Equal keys in other types reach the same buckets.
        kinds: list[Callable[[int], Any]] = [int, float, numpy.int64]
        return lambda: [
            (k, 0 if limiter.try_acquire(kinds[k % 3](k), now_ns=NOW) else 1) for k in plan
        ]

    results = run_threads([batch, *(single(t) for t in range(THREADS - 1))])
    allowed = Counter(k for out in results for k, code in out if code == 0)
    codes = Counter(code for out in results for _, code in out)
    assert set(codes) <= {0, 1}
    assert allowed == Counter({k: BURST for k in int_keys}), allowed
    stats = limiter.stats
    assert stats.allowed == BURST * len(int_keys)
    assert stats.allowed + stats.denied == sum(len(out) for out in results)
    assert stats.refused == 0
