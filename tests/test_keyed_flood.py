"""``KeyedRateLimiter`` under a flood of distinct keys (issue 6).

* A million distinct int keys (``try_acquire_many``) and 200,000 distinct str keys
  (``try_acquire``) against ``max_keys=10_000``: ``len()`` never exceeds the bound (checked after
  every chunk), the stats add up to the requests, and a key drained before the flood is still
  throttled after it (an LRU table would have evicted it and served it again, full).
* Memory: in a fresh interpreter (after a warm-up table of the same size, so the growth is what
  does not fit in memory already used once), the peak RSS growth of a flood of 1,000,000
  distinct int keys is within a few MiB of that of 100,000 keys (same ``max_keys``), and that
  of 200,000 str or tuple keys within a few MiB of 20,000: what is refused is not kept anywhere
  (neither in the table nor in the object registry). The same with "churn": keys one second
  apart, each admitted, refilled and later forgotten to make room; what is forgotten is let go.
* After the flood, once the remembered keys have refilled, new keys are served again
  (forgetting makes room) and ``stats.forgotten`` counts the keys dropped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy
import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code.qos.keyed import Decision, KeyedRateLimiter, KeyedStats, LimitOutcome

SECOND = 10**9
MAX_KEYS = 10_000
INT_FLOOD = 1_000_000
STR_FLOOD = 200_000
CHUNK = 50_000
# One token per 1000 s: nothing a key took comes back during the flood (which spans 1 s).
SLOW = Fraction(1, 1000)
# Measured here: differences of -0.0 to 0.8 MiB for int keys, 0.0 to 4 MiB for str and tuple
# keys (the most with churn: 2.7, 5.3, 6.5 MiB of growth for 20k, 200k, 600k tuple keys, far
# below linear). A table or registry keeping the refused or forgotten keys would need at least
# 900,000 x 8 bytes (bare 64-bit ints in a hash set: ~9 MiB) or 180,000 x ~250 bytes (the
# distinct 209-character strs: ~43 MiB).
MEMORY_BOUND_MIB = {"int": 8, "str": 20, "object": 20}


def test_a_flood_of_distinct_keys_keeps_the_bound_and_the_throttled_keys() -> None:
    limiter = KeyedRateLimiter(SLOW, burst=3, max_keys=MAX_KEYS)
    # Throttled before the flood: one drained, one half drained, one object-path key drained.
    assert limiter.check("victim", 3, now_ns=0) == Decision(LimitOutcome.ALLOWED, 0, 0)
    assert limiter.check(-7, 2, now_ns=0).outcome is LimitOutcome.ALLOWED
    assert limiter.check(("victim", 2), 3, now_ns=0).outcome is LimitOutcome.ALLOWED
    requests = 3
    allowed = 3

    # A million distinct int keys, in chunks, over one second.
    keys = numpy.arange(CHUNK, dtype=numpy.int64)
    times = numpy.linspace(0, SECOND // 2, CHUNK, dtype=numpy.int64)
    max_len = 0
    for chunk in range(INT_FLOOD // CHUNK):
        codes = limiter.try_acquire_many(keys + chunk * CHUNK, times + chunk * 10)
        assert len(codes) == CHUNK
        counts = numpy.bincount(numpy.frombuffer(codes, dtype=numpy.uint8), minlength=4)
        assert counts[1] == counts[2] == 0, "a new key is full: never DENIED or NEVER"
        allowed += int(counts[0])
        requests += CHUNK
        max_len = max(max_len, len(limiter))
        assert len(limiter) <= MAX_KEYS, f"{len(limiter)} keys after chunk {chunk}"
    assert max_len == MAX_KEYS, "16 shards of 625 keys fill up under a million keys"

    # 200,000 distinct str keys, one call each, from 0.5 s to 1 s.
    for i in range(STR_FLOOD):
        limiter.try_acquire(f"client-{i}", now_ns=SECOND // 2 + i * 2500)
        if i % 20_000 == 0:
            assert len(limiter) <= MAX_KEYS
    requests += STR_FLOOD
    assert len(limiter) == MAX_KEYS

    stats = limiter.stats
    assert stats.allowed == allowed == len(limiter), (stats, allowed)
    assert stats.denied == 0 and stats.forgotten == 0, stats
    assert stats.allowed + stats.denied + stats.refused == requests, (stats, requests)
    assert stats.refused == requests - MAX_KEYS
    assert sum(1 for _ in limiter) == MAX_KEYS

    # The throttled keys are still remembered and still throttled.
    now = SECOND + 1
    for key in ("victim", -7, ("victim", 2)):
        assert key in limiter, f"the throttled key {key!r} was forgotten"
    assert limiter.check("victim", now_ns=now).outcome is LimitOutcome.DENIED, (
        "a drained key was served after a flood of new keys (evicted and re-created full)"
    )
    assert limiter.available("victim", now_ns=now) == 0
    assert limiter.available(-7, now_ns=now) == 1
    assert limiter.check(-7, 2, now_ns=now).outcome is LimitOutcome.DENIED
    assert limiter.check(("victim", 2), now_ns=now).outcome is LimitOutcome.DENIED


def test_after_the_flood_refilled_keys_are_forgotten_and_new_keys_served() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=MAX_KEYS, shards=4)
    keys = numpy.arange(200_000, dtype=numpy.int64)
    codes = limiter.try_acquire_many(keys, numpy.zeros(len(keys), dtype=numpy.int64))
    assert codes.count(0) == MAX_KEYS == len(limiter)
    assert limiter.check("late", now_ns=0).outcome is LimitOutcome.REFUSED
    assert limiter.check("throttled-late", now_ns=SECOND - 1).outcome is LimitOutcome.REFUSED
    assert limiter.stats.forgotten == 0
    # A key drained to 0 takes 2 s to refill; one at 1 token left takes 1 s: at 1 s every
    # remembered key (1 left) is full again, so any of them may be forgotten to make room.
    new = numpy.arange(10**6, 10**6 + 5000, dtype=numpy.int64)
    served = limiter.try_acquire_many(new, numpy.full(len(new), SECOND, dtype=numpy.int64))
    assert served.count(0) == len(new), "new keys were refused although old ones refilled"
    assert limiter.check("late", now_ns=SECOND) == Decision(LimitOutcome.ALLOWED, 0, 1)
    stats = limiter.stats
    assert stats.forgotten > 0, stats
    assert len(limiter) <= MAX_KEYS
    assert stats.forgotten >= len(new) + 1, "each new key needed room in a full table"
    # The counts add up: every key ever remembered is remembered now or was forgotten.
    assert stats.allowed - stats.forgotten == len(limiter)
    assert stats == KeyedStats(
        allowed=MAX_KEYS + len(new) + 1,
        denied=0,
        refused=len(keys) - MAX_KEYS + 2,
        forgotten=stats.forgotten,
    )
    # Much later every remembered key has refilled: new keys take the whole table again (and
    # then, taken at that instant, cannot be forgotten: the rest are refused).
    later = numpy.arange(2 * 10**6, 2 * 10**6 + 50_000, dtype=numpy.int64)
    codes = limiter.try_acquire_many(later, numpy.full(len(later), 10 * SECOND, numpy.int64))
    assert codes.count(0) == MAX_KEYS == len(limiter)
    assert codes.count(3) == len(later) - MAX_KEYS
    assert all(int(k) in limiter for k in later[numpy.frombuffer(codes, numpy.uint8) == 0])
    assert limiter.stats.forgotten == limiter.stats.allowed - MAX_KEYS


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------

FLOOD_SCRIPT = textwrap.dedent(
    """
    import gc, json, sys
    import numpy
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    def hwm_kib():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    kind, total, max_keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    chunk = 50_000
    keys = numpy.arange(chunk, dtype=numpy.int64)
    times = numpy.zeros(chunk, dtype=numpy.int64)
    pad = "x" * 200

    # "-churn": one call per second, so every key is admitted, refills, and is forgotten to
    # make room for later ones; otherwise all at time 0, so all but max_keys are refused.
    churn = kind.endswith("-churn")
    kind = kind.removesuffix("-churn")
    step = 10**9 if churn else 0

    def key(i):
        # A distinct 200-odd character str each time: kept, it would cost ~250 bytes.
        text = f"{i:09d}{pad}"
        return text if kind == "str" else (text, i)

    # Warm up the allocator and the code paths on a throwaway table.
    warm = KeyedRateLimiter(1, burst=2, max_keys=max_keys)
    warm.try_acquire_many(keys, times)
    for i in range(2 * max_keys):
        warm.try_acquire(key(i), now_ns=0)
    del warm
    gc.collect()
    before = hwm_kib()
    limiter = KeyedRateLimiter(1, burst=2, max_keys=max_keys)
    if kind == "int":
        for start in range(0, total, chunk):
            limiter.try_acquire_many(keys + start, (keys + start) * step)
    else:
        for i in range(total):
            limiter.try_acquire(key(i), now_ns=i * step)
    gc.collect()
    after = hwm_kib()
    s = limiter.stats
    print(json.dumps({"before_kib": before, "after_kib": after, "len": len(limiter),
                      "allowed": s.allowed, "refused": s.refused, "forgotten": s.forgotten}))
    """
)


def flood_growth_kib(kind: str, total: int) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", FLOOD_SCRIPT, kind, str(total), str(MAX_KEYS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parent,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["len"] <= MAX_KEYS
    assert result["allowed"] + result["refused"] == total
    if kind.endswith("-churn"):
        assert result["refused"] == 0 and result["forgotten"] >= total - MAX_KEYS, result
    else:
        assert result["allowed"] == MAX_KEYS and result["forgotten"] == 0, result
    result["growth_kib"] = result["after_kib"] - result["before_kib"]
    return result


@pytest.mark.parametrize(
    ("kind", "small", "large"),
    [
        ("int", 100_000, INT_FLOOD),
        ("str", 20_000, STR_FLOOD),
        ("object", 20_000, STR_FLOOD),
        ("int-churn", 100_000, INT_FLOOD),
        ("str-churn", 20_000, STR_FLOOD),
        ("object-churn", 20_000, STR_FLOOD),
    ],
)
def test_memory_does_not_grow_with_the_number_of_distinct_keys(
    kind: str, small: int, large: int
) -> None:
    few = flood_growth_kib(kind, small)
    many = flood_growth_kib(kind, large)
    difference_mib = (many["growth_kib"] - few["growth_kib"]) / 1024
    print(
        f"\n{kind} keys, max_keys={MAX_KEYS}: peak RSS growth {few['growth_kib'] / 1024:.1f} MiB "
        f"for {small:,} distinct keys (VmHWM {few['before_kib'] / 1024:.1f} -> "
        f"{few['after_kib'] / 1024:.1f} MiB), {many['growth_kib'] / 1024:.1f} MiB for {large:,} "
        f"(VmHWM {many['before_kib'] / 1024:.1f} -> {many['after_kib'] / 1024:.1f} MiB); "
        f"difference {difference_mib:.1f} MiB"
    )
    assert difference_mib < MEMORY_BOUND_MIB[kind.removesuffix("-churn")], (few, many)
