"""Three-colour meters on one bursty trace: who gets green, yellow and red, and why.

A synthetic trace (seeded, so every run is the same): bursts at 4 Mbit/s separated by silences,
about 1.4 Mbit/s on average, offered to three meters that all commit to 1 Mbit/s:

* srTCM (RFC 2697): CIR 1 Mbit/s into C (CBS 12 kB); only C's overflow reaches E (EBS 24 kB).
* trTCM (RFC 2698): C at 1 Mbit/s (CBS 12 kB) and a peak bucket P at 2 Mbit/s (PBS 24 kB).
* RFC 4115: C at 1 Mbit/s (CBS 12 kB) and E at its own 0.5 Mbit/s (EBS 24 kB).

Each meter colours the whole trace with one ``mark_many`` call; the script prints how many
packets and bytes got each colour. With matplotlib installed it also draws a timeline, one
panel per meter: both bucket levels over time (sampled by replaying the trace packet by packet
on a twin meter, which must agree with ``mark_many``) over the packets, coloured as marked.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/meter_trace.py [picture.png]

The picture goes to ``meter_trace.png`` in the current directory unless a path is given.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from array import array
from pathlib import Path

from protocol_in_code.qos.meter import (
    COLORS,
    Color,
    ExcessRateMeter,
    SingleRateMeter,
    TwoRateMeter,
)

SEED = 2698
NS = 1_000_000_000
MBIT = 125_000  # bytes per second in one Mbit/s
DURATION_NS = 3 * NS
PEAK = 4 * MBIT  # the rate inside a burst


def bursty_trace(seed: int = SEED) -> tuple[array, array]:
    """(sizes in bytes, arrival times in ns): bursts at PEAK, silences between them."""
    rng = random.Random(seed)
    sizes, times = array("q"), array("q")
    now = 0
    while True:
        burst_end = now + rng.randint(40, 200) * 1_000_000  # a 40..200 ms burst
        while now < burst_end and now < DURATION_NS:
            size = rng.choices((1500, 576, 64), weights=(70, 20, 10))[0]
            sizes.append(size)
            times.append(now)
            now += size * NS // PEAK  # back to back at the peak rate
        now += rng.randint(80, 400) * 1_000_000  # then 80..400 ms of silence
        if now >= DURATION_NS:
            return sizes, times


# name, factory, (label of the first level, attribute), (label of the second, attribute)
METERS = [
    (
        "srTCM (RFC 2697)",
        "CIR 1 Mbit/s, CBS 12 kB, EBS 24 kB: C's overflow spills into E",
        lambda: SingleRateMeter(cir=MBIT, cbs=12_000, ebs=24_000),
        (("C (committed)", "tc"), ("E (excess)", "te")),
    ),
    (
        "trTCM (RFC 2698)",
        "CIR 1 Mbit/s, CBS 12 kB; PIR 2 Mbit/s, PBS 24 kB: P caps everything",
        lambda: TwoRateMeter(cir=MBIT, cbs=12_000, pir=2 * MBIT, pbs=24_000),
        (("C (committed)", "tc"), ("P (peak)", "tp")),
    ),
    (
        "RFC 4115",
        "CIR 1 Mbit/s, CBS 12 kB; EIR 0.5 Mbit/s, EBS 24 kB: C and E fill independently",
        lambda: ExcessRateMeter(cir=MBIT, cbs=12_000, eir=MBIT // 2, ebs=24_000),
        (("C (committed)", "tc"), ("E (excess)", "te")),
    ),
]


def colour_table(results: list[tuple[str, array]], sizes: array) -> str:
    """Packets and bytes per colour, one row per meter."""
    total_bytes = sum(sizes)
    head = f"{'meter':<18}" + "".join(
        f"{colour.value + ' pkts':>14}{colour.value + ' bytes':>18}" for colour in COLORS
    )
    lines = [head, "-" * len(head)]
    for name, codes in results:
        cells = []
        for code in range(3):
            packets = sum(1 for c in codes if c == code)
            nbytes = sum(s for s, c in zip(sizes, codes, strict=True) if c == code)
            cells.append(f"{packets:>14,}{nbytes:>11,} ({100 * nbytes / total_bytes:4.1f}%)")
        lines.append(f"{name:<18}" + "".join(cells))
    return "\n".join(lines)


def sample_levels(factory, sizes: array, times: array, attrs, codes: array):
    """Replay the trace one packet at a time on a fresh meter, reading both levels just before
    and just after each packet and every 5 ms in between (a zero-byte packet settles the
    buckets and takes nothing). Checks the colours against ``mark_many``'s."""
    twin = factory()
    t_out: list[float] = []
    levels: list[list[float]] = [[], []]

    def record(now: int) -> None:
        t_out.append(now / NS)
        for k, attr in enumerate(attrs):
            levels[k].append(float(getattr(twin, attr)) / 1000)

    grid = iter(range(0, DURATION_NS + 1, 5_000_000))
    tick = next(grid)
    for i, (size, now) in enumerate(zip(sizes, times, strict=True)):
        while tick < now:
            twin.mark(0, tick)
            record(tick)
            tick = next(grid, DURATION_NS + 1)
        twin.mark(0, now)
        record(now)
        colour = twin.mark(size, now)
        assert colour is COLORS[codes[i]], f"packet {i}: mark {colour} != mark_many"
        record(now)
    for rest in grid:
        twin.mark(0, rest)
        record(rest)
    return t_out, levels


def draw(path: str, sizes: array, times: array, results: list[tuple[str, array]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shades = {Color.GREEN: "#2ca02c", Color.YELLOW: "#e6b800", Color.RED: "#d62728"}
    level_shades = ["#1f77b4", "#9467bd"]
    fig = plt.figure(figsize=(13, 11), layout="constrained")
    outer = fig.add_gridspec(len(METERS), 1, hspace=0.08)
    seconds = [t / NS for t in times]
    first_axis = None
    for row, ((name, detail, factory, buckets), (_, codes)) in enumerate(
        zip(METERS, results, strict=True)
    ):
        inner = outer[row].subgridspec(2, 1, height_ratios=(3, 1), hspace=0.0)
        ax = fig.add_subplot(inner[0], sharex=first_axis)
        strip = fig.add_subplot(inner[1], sharex=ax)
        first_axis = first_axis or ax
        attrs = [attr for _, attr in buckets]
        t_levels, levels = sample_levels(factory, sizes, times, attrs, codes)
        meter = factory()
        for (label, attr), series, shade in zip(buckets, levels, level_shades, strict=True):
            capacity = float(getattr(meter, attr)) / 1000
            ax.plot(t_levels, series, color=shade, linewidth=1.1)
            ax.axhline(capacity, color=shade, linestyle=":", linewidth=1)
            ax.annotate(
                f"{label}\nlevel (size {capacity:g} kB)",
                (1.0, capacity),
                xycoords=("axes fraction", "data"),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                fontsize=9,
                color=shade,
                fontweight="bold",
            )
        ax.set_ylim(-1, 26.5)
        ax.set_ylabel("bucket level (kB)")
        ax.set_title(f"{name}: {detail}", loc="left", fontsize=11, fontweight="bold")
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelbottom=False)
        labels = []
        for code, colour in enumerate(COLORS):
            xs = [t for t, c in zip(seconds, codes, strict=True) if c == code]
            nbytes = sum(s for s, c in zip(sizes, codes, strict=True) if c == code)
            strip.scatter(
                xs, [2 - code] * len(xs), s=60, color=shades[colour], marker="|", linewidths=1.0
            )
            labels.append(f"{colour.value}: {len(xs)} pkts, {nbytes / 1000:,.0f} kB")
        strip.set_ylim(-0.6, 2.6)
        strip.set_yticks([2, 1, 0], labels, fontsize=8)
        for tick, colour in zip(strip.get_yticklabels(), COLORS, strict=True):
            tick.set_color(shades[colour])
        strip.grid(True, axis="x", alpha=0.3)
        if row == len(METERS) - 1:
            strip.set_xlabel("time (s)")
        else:
            strip.tick_params(labelbottom=False)
    offered = sum(sizes) * 8 / (DURATION_NS / NS) / 1e6
    fig.suptitle(
        "Three-colour meters on one bursty trace "
        f"({len(sizes):,} packets in 4 Mbit/s bursts, {offered:.1f} Mbit/s on average)\n"
        "Upper plots: the two bucket levels (dotted: their sizes). "
        "Lower strips: one tick per packet at its arrival, on the row of the colour it got.",
        fontsize=12,
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else "meter_trace.png"
    sizes, times = bursty_trace()
    seconds = DURATION_NS / NS
    print(
        f"trace: {len(sizes):,} packets, {sum(sizes):,} bytes in {seconds:g} s "
        f"({sum(sizes) * 8 / seconds / 1e6:.2f} Mbit/s on average, bursts at "
        f"{PEAK * 8 / 1e6:g} Mbit/s; seed {SEED})"
    )
    results = []
    for name, detail, factory, _ in METERS:
        meter = factory()
        results.append((name, meter.mark_many(sizes, times)))
        print(f"  {name}: {detail}")
    print()
    print(colour_table(results, sizes))
    print()
    if importlib.util.find_spec("matplotlib") is None:
        print(f"matplotlib is not installed: the picture ({path}) was skipped")
        return 0
    draw(path, sizes, times, results)
    print(f"picture: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
