"""Native core against the pure-Python reference and an empty Python function, in one run.

Run from the repository root after installing the package::

    python3 bench/bench_core.py [--rounds 15]

Every row is timed in interleaved rounds (one batch of each case per round, so machine noise
hits all cases alike); the table shows the median nanoseconds per call and the ratios the
project's targets are stated in. Read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import statistics
import sys
import timeit
import types
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import protocol_in_code.qos as native
from protocol_in_code.qos.token_bucket import try_consume as native_try_consume

# The pure-Python model the tests compare against lives in tests/reference_qos.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
ref = importlib.import_module("reference_qos")


def empty5(tokens, capacity, rate_per_sec, last_refill_at, now):  # type: ignore[no-untyped-def]
    return None


def empty3(bucket, n, now):  # type: ignore[no-untyped-def]
    return None


# A case is a statement and the names it runs with: timed as compiled code, with no wrapper
# call around it, so the empty-function row costs exactly one call.
Case = tuple[str, Callable[[], dict[str, object]]]

REFILL_KW = "f(tokens=10, capacity=100, rate_per_sec=2, last_refill_at=5, now=8)"


def refill_kw(fn: Callable[..., object]) -> Case:
    return REFILL_KW, lambda: {"f": fn}


def refill_fraction(fn: Callable[..., object]) -> Case:
    args = (Fraction(1, 3), Fraction(100), Fraction(2, 7), Fraction(5), Fraction(8))
    return "f(*args)", lambda: {"f": fn, "args": args}


def consume(fn: Callable[..., object], bucket_type: type, start: object) -> Case:
    def names() -> dict[str, object]:
        bucket = bucket_type(capacity=start, tokens=start, rate_per_sec=1, last_refill_at=0)
        return {"f": fn, "bucket": bucket, "clock": itertools.count(1)}

    # The clock advances on every call, so the refill math runs every time.
    return "f(bucket, 1, next(clock))", names


def offer(fn: Callable[..., object], bucket_type: type) -> Case:
    def names() -> dict[str, object]:
        # Drains as fast as it fills: every offer is accepted, forever.
        bucket = bucket_type(capacity=10, level=0, leak_per_sec=1, last_leak_at=0)
        return {"f": fn, "bucket": bucket, "clock": itertools.count()}

    return "f(bucket, 1, next(clock))", names


def enqueue(qos: types.ModuleType) -> Case:
    def names() -> dict[str, object]:
        tree = qos.ClassTree({"video": qos.TrafficClass("video", 10)})
        bucket = qos.TokenBucket(capacity=10, tokens=10, rate_per_sec=1, last_refill_at=0)
        shaper = qos.ToyShaper(tree, {"video": bucket})
        return {"shaper": shaper, "clock": itertools.count()}

    # The trace grows by a line per call, in both implementations alike.
    return 'shaper.enqueue("video", 1, next(clock))', names


def time_rows(rows: dict[str, dict[str, Case]], rounds: int, number: int) -> dict:
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for row, cases in rows.items():
            for name, (stmt, names) in cases.items():
                seconds = timeit.timeit(stmt, globals=names(), number=number)
                samples.setdefault((row, name), []).append(seconds / number * 1e9)
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=20_000)
    options = parser.parse_args()

    big = 10**15
    rows: dict[str, dict[str, Case]] = {
        "compute_refill, 5 int keywords": {
            "native": refill_kw(native.compute_refill),
            "reference": refill_kw(ref.compute_refill),
            "empty def": refill_kw(empty5),
        },
        "try_consume(bucket, 1, now), ints": {
            "native": consume(native_try_consume, native.TokenBucket, big),
            "reference": consume(ref.token_try_consume, ref.TokenBucket, big),
            "empty def": consume(empty3, native.TokenBucket, big),
        },
        "compute_refill, 5 Fractions": {
            "native": refill_fraction(native.compute_refill),
            "reference": refill_fraction(ref.compute_refill),
        },
        "try_consume, Fraction balance": {
            "native": consume(native_try_consume, native.TokenBucket, Fraction(big)),
            "reference": consume(ref.token_try_consume, ref.TokenBucket, Fraction(big)),
        },
        "offer(bucket, 1, now), ints": {
            "native": offer(native.leaky_offer, native.LeakyBucket),
            "reference": offer(ref.leaky_offer, ref.LeakyBucket),
            "empty def": offer(empty3, native.LeakyBucket),
        },
        "ToyShaper.enqueue(name, 1, now)": {
            "native": enqueue(native),
            "reference": enqueue(ref),
        },
    }
    medians = time_rows(rows, options.rounds, options.number)

    print(f"median of {options.rounds} rounds x {options.number} calls, ns per call")
    header = f"{'row':36} {'native':>8} {'reference':>10} {'empty def':>10} "
    print(header + f"{'ref/native':>11} {'native/empty':>13}")
    for row in rows:
        n = medians[(row, "native")]
        r = medians[(row, "reference")]
        e = medians.get((row, "empty def"))
        empty = f"{e:10.0f}" if e is not None else f"{'-':>10}"
        vs_empty = f"{n / e:12.2f}x" if e is not None else f"{'-':>13}"
        print(f"{row:36} {n:8.0f} {r:10.0f} {empty} {r / n:10.1f}x {vs_empty}")


if __name__ == "__main__":
    main()
