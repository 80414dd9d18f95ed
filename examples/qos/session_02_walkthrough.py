"""Session 02 walkthrough: refill is lazy.

Nothing ticks in the background. A token bucket's balance is only brought up to date when
someone calls compute_refill() with the current time `now`: the growth since last_refill_at is
settled right then, capped at capacity. This script walks the two branches of that pure
function (elapsed <= 0 leaves everything untouched; otherwise tokens + elapsed * rate_per_sec,
capped) using plain integers, and no bucket object anywhere.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/session_02_walkthrough.py

Each check prints one line, [OK] or [NG]; the exit status is 1 if any check is NG.
"""

import sys

from protocol_in_code.qos.refill import RefillResult, compute_refill

failures = 0


def field_types(pair):
    return type(pair.tokens), type(pair.last_refill_at)


def check(what, result, expected):
    """Print one [OK]/[NG] line: the result must equal `expected`, field types included."""
    global failures
    if result == expected and field_types(result) == field_types(expected):
        print(f"[OK] {what} -> {result!r}")
    else:
        failures += 1
        print(f"[NG] {what} -> {result!r} (expected {expected!r})")


def main():
    # elapsed = 8 - 5 = 3 seconds at 2 tokens/s: 10 + 3 * 2 = 16, and the clock moves to 8.
    check(
        "plain growth: 10 tokens + (8 - 5) s * 2/s",
        compute_refill(tokens=10, capacity=100, rate_per_sec=2, last_refill_at=5, now=8),
        RefillResult(tokens=16, last_refill_at=8),
    )

    # elapsed = 0: no growth, and last_refill_at does not move either.
    check(
        "zero elapsed (now == last_refill_at == 5): both fields unchanged",
        compute_refill(tokens=10, capacity=100, rate_per_sec=2, last_refill_at=5, now=5),
        RefillResult(tokens=10, last_refill_at=5),
    )

    # The clock seems to have gone backwards: same branch as zero elapsed, no error.
    check(
        "negative elapsed (now=3 before last_refill_at=5): balance untouched",
        compute_refill(tokens=10, capacity=100, rate_per_sec=2, last_refill_at=5, now=3),
        RefillResult(tokens=10, last_refill_at=5),
    )

    # A long idle period would grow 0 + 1000 * 1 = 1000 tokens; min(grown, capacity) caps it.
    check(
        "cap from empty: 1000 s idle at 1/s, capacity 10",
        compute_refill(tokens=0, capacity=10, rate_per_sec=1, last_refill_at=0, now=1000),
        RefillResult(tokens=10, last_refill_at=1000),
    )

    # The cap is applied after the growth is added: 7 + 60 * 2 = 127, capped to 10.
    check(
        "cap from a partial balance: 7 tokens + 60 s * 2/s, capacity 10",
        compute_refill(tokens=7, capacity=10, rate_per_sec=2, last_refill_at=0, now=60),
        RefillResult(tokens=10, last_refill_at=60),
    )

    # Five plain scalars in, a frozen pair of scalars out: no bucket anywhere in sight.
    tokens, capacity, rate_per_sec, last_refill_at, now = 4, 20, 3, 100, 102
    result = compute_refill(tokens, capacity, rate_per_sec, last_refill_at, now)
    check(
        "plain scalars in (4, 20, 3, 100, 102), a pair out",
        result,
        RefillResult(tokens=10, last_refill_at=102),
    )

    # No hidden state: the same five inputs give the same answer every time.
    check(
        "the same call again gives the same answer",
        compute_refill(tokens, capacity, rate_per_sec, last_refill_at, now),
        result,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
