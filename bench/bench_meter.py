"""Metering a whole trace against metering it packet by packet, in one run.

Run from the repository root after installing the package::

    python3 bench/bench_meter.py [--rounds 9] [--packets 100000]

Rows: ``mark`` called with an explicit time (ns per call) beside an empty Python function
called the same way, and ``mark_many`` over a trace (ns per packet) beside ``mark`` in a Python
loop over the same trace. Interleaved rounds, medians, ratios. Read ``mark_many`` against the
core's own cost on the same trace, ``cargo bench --bench meter_floor``; the colour counts each
prints must agree.
"""

from __future__ import annotations

import argparse
import array
import math
import statistics
import time
import timeit

from protocol_in_code.qos.meter import ExcessRateMeter, SingleRateMeter, TwoRateMeter


def empty(nbytes: int, now_ns: int) -> None:
    return None


def trace(packets: int) -> tuple[array.array, array.array]:
    """The trace ``cargo bench --bench meter_floor`` also marks, from the same generator.

    A 64-bit linear congruential generator (Knuth's MMIX constants) from seed 7, two steps a
    packet: the first picks its size (64, 576 or 1500 bytes) from the top bits, the second its
    gap, ``-log(u) * 20,000`` ns for ``u`` in (0, 1] from the top 53 bits, truncated to whole
    nanoseconds: exponential gaps of 20 us on average. Both benchmarks print the colour counts,
    which must agree.
    """
    state = 7
    now = 0
    sizes = array.array("q")
    times = array.array("q")
    for _ in range(packets):
        state = (state * 6_364_136_223_846_793_005 + 1_442_695_040_888_963_407) % 2**64
        sizes.append((64, 576, 1500)[(state >> 33) % 3])
        state = (state * 6_364_136_223_846_793_005 + 1_442_695_040_888_963_407) % 2**64
        u = ((state >> 11) + 1) / 2**53
        now += int(-math.log(u) * 20_000.0)
        times.append(now)
    return sizes, times


def meters() -> dict[str, object]:
    return {
        "srTCM": SingleRateMeter(cir=10_000_000, cbs=30_000, ebs=60_000),
        "trTCM": TwoRateMeter(cir=10_000_000, cbs=30_000, pir=20_000_000, pbs=60_000),
        "RFC 4115": ExcessRateMeter(cir=10_000_000, cbs=30_000, eir=10_000_000, ebs=60_000),
    }


def per_packet_loop(meter: object, sizes: array.array, times: array.array) -> None:
    mark = meter.mark  # type: ignore[attr-defined]
    for size, now in zip(sizes, times, strict=True):
        mark(size, now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--packets", type=int, default=100_000)
    parser.add_argument("--number", type=int, default=20_000)
    options = parser.parse_args()
    sizes, times = trace(options.packets)

    call: dict[str, list[float]] = {"mark": [], "empty def": []}
    trace_rows: dict[str, dict[str, list[float]]] = {
        name: {"mark_many": [], "mark loop": []} for name in meters()
    }
    for _ in range(options.rounds):
        meter = SingleRateMeter(cir=10**12, cbs=10**9, ebs=10**9)
        names = {"m": meter, "f": empty}
        for stmt, key in (("m.mark(1500, 5)", "mark"), ("f(1500, 5)", "empty def")):
            seconds = timeit.timeit(stmt, globals=names, number=options.number)
            call[key].append(seconds / options.number * 1e9)
        for name, meter in meters().items():
            start = time.perf_counter()
            meter.mark_many(sizes, times)  # type: ignore[attr-defined]
            trace_rows[name]["mark_many"].append((time.perf_counter() - start) / len(sizes) * 1e9)
        for name, meter in meters().items():
            start = time.perf_counter()
            per_packet_loop(meter, sizes, times)
            trace_rows[name]["mark loop"].append((time.perf_counter() - start) / len(sizes) * 1e9)

    mark = statistics.median(call["mark"])
    empty_ns = statistics.median(call["empty def"])
    print(f"median of {options.rounds} rounds; {options.packets} packets per trace")
    print(
        f"mark(1500, now):  {mark:6.0f} ns   empty def: {empty_ns:4.0f} ns   "
        f"ratio {mark / empty_ns:.2f}x"
    )
    print(f"trace: {sum(sizes)} bytes over {times[-1] if times else 0} ns")
    for name, rows in trace_rows.items():
        many = statistics.median(rows["mark_many"])
        loop = statistics.median(rows["mark loop"])
        print(
            f"{name}: mark_many {many:6.1f} ns/packet   mark loop {loop:6.0f} ns/packet   "
            f"ratio {loop / many:.0f}x"
        )
    for name, meter in meters().items():
        codes = meter.mark_many(sizes, times)  # type: ignore[attr-defined]
        print(f"{name}: green {codes.count(0)} yellow {codes.count(1)} red {codes.count(2)}")


if __name__ == "__main__":
    main()
