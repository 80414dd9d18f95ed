"""validate_tree on deep chains and on flat trees: native against the course's code, in one run.

Run from the repository root after installing the package::

    python3 bench/bench_classes.py [--rounds 5] [--depths 10,100,1000,4000,8000,16000]

Two shapes of valid tree, each built once per size for both implementations:

* **chain**: ``c0 <- c1 <- ... <- c(d-1)``, listed root first, every class guaranteed ``1``.
  The course's cycle pass walks from every class to the root with a fresh visited set, so it
  takes ``d * (d + 1) / 2`` steps: quadratic in the depth.
* **flat**: one root and ``d - 1`` children under it. Every walk is two steps long, so this row
  is linear for both and shows what reading the tree costs per class.

Each round times the native call and the reference call back to back (interleaved, so machine
noise hits both alike), as many calls per sample as fill about 50 ms (at least one). The table
shows the median microseconds per call and how many times slower the reference is.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import protocol_in_code.qos.classes as native

# The course's pure-Python package, as the tests compare against it, lives in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
ref = importlib.import_module("reference_qos.classes")


def chain(qos: types.ModuleType, depth: int) -> object:
    """``c0`` at the root, each ``c(i)`` under ``c(i-1)``, root first in the dict."""
    classes = {"c0": qos.TrafficClass("c0", 1)}
    for i in range(1, depth):
        classes[f"c{i}"] = qos.TrafficClass(f"c{i}", 1, f"c{i - 1}")
    return qos.ClassTree(classes)


def flat(qos: types.ModuleType, size: int) -> object:
    """One root guaranteed ``size``, and ``size - 1`` children guaranteed ``1`` each."""
    classes = {"root": qos.TrafficClass("root", size)}
    for i in range(1, size):
        classes[f"c{i}"] = qos.TrafficClass(f"c{i}", 1, "root")
    return qos.ClassTree(classes)


def seconds_per_call(fn: Callable[[object], object], tree: object, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(tree)
    return (time.perf_counter() - start) / calls


def calls_for(fn: Callable[[object], object], tree: object, budget: float = 0.05) -> int:
    """How many calls fill about ``budget`` seconds (one call, timed, to find out)."""
    return max(1, int(budget / seconds_per_call(fn, tree, 1)))


def time_pair(
    make: Callable[[types.ModuleType, int], object], size: int, rounds: int
) -> tuple[float, float]:
    """Median seconds per call, native and reference, over interleaved rounds."""
    sides = {
        "native": (native.validate_tree, make(native, size)),
        "reference": (ref.validate_tree, make(ref, size)),
    }
    # Both answer the same before anything is timed.
    answers = {side: fn(tree).outcome.value for side, (fn, tree) in sides.items()}
    assert answers["native"] == answers["reference"] == "Valid", answers
    calls = {side: calls_for(fn, tree) for side, (fn, tree) in sides.items()}
    samples: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(rounds):
        for side, (fn, tree) in sides.items():
            samples[side].append(seconds_per_call(fn, tree, calls[side]))
    return statistics.median(samples["native"]), statistics.median(samples["reference"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--depths", default="10,100,1000,4000,8000,16000")
    parser.add_argument("--shapes", default="chain,flat")
    options = parser.parse_args()
    depths = [int(d) for d in options.depths.split(",")]
    shapes = {"chain": chain, "flat": flat}
    print(f"validate_tree, median of {options.rounds} rounds, microseconds per call")
    print(f"{'tree':7} {'classes':>8} {'native':>13} {'reference':>14} {'ref/native':>11}")
    for shape in options.shapes.split(","):
        for depth in depths:
            n, r = time_pair(shapes[shape], depth, options.rounds)
            print(f"{shape:7} {depth:8,} {n * 1e6:13,.1f} {r * 1e6:14,.1f} {r / n:10.2f}x")


if __name__ == "__main__":
    main()
