"""Timing shared by the benchmarks: cases timed interleaved, round after round, in one process.

A case is a factory returning ``(statement, globals)`` or ``(statement, globals, per_run)``,
where ``per_run`` is how many calls or decisions one run of the statement makes (default 1). A
factory that raises ImportError (an optional peer not installed) is skipped, with a line saying
so. The result is the median time per call or decision, in nanoseconds: on a shared, noisy
machine only such medians, read as ratios within one run, mean anything.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable
from typing import Any

Case = Callable[[], tuple[Any, ...]]


def median_ns(cases: dict[str, Case], rounds: int, number: int) -> dict[str, float]:
    """Median nanoseconds per call of each case that could be set up, timed interleaved."""
    ready: dict[str, tuple[str, dict[str, object], int]] = {}
    for name, make in cases.items():
        try:
            made = make()
        except ImportError:
            print(f"skipped (not installed): {name}")
            continue
        ready[name] = (made[0], made[1], made[2] if len(made) > 2 else 1)
    samples: dict[str, list[float]] = {name: [] for name in ready}
    for _ in range(rounds):
        for name, (stmt, names, per_run) in ready.items():
            runs = max(1, number // per_run)
            seconds = timeit.timeit(stmt, globals=names, number=runs)
            samples[name].append(seconds / (runs * per_run) * 1e9)
    return {name: statistics.median(values) for name, values in samples.items()}
