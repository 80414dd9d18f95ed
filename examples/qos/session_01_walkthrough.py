"""Session 01 walkthrough: a token bucket that refills itself.

A TokenBucket holds a balance of tokens. try_consume(bucket, n, now) first settles the refill
up to `now` (elapsed seconds * rate_per_sec, capped at capacity) and stores it on the bucket,
then allows the request and takes n tokens, or throttles it and takes nothing. There is no
background timer: time only "passes" for the bucket when you call it with a later `now`.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/session_01_walkthrough.py

Each check prints one line, [OK] or [NG]; the exit status is 1 if any check is NG.
"""

import sys

from protocol_in_code.qos.token_bucket import (
    ConsumeOutcome,
    ConsumeResult,
    TokenBucket,
    try_consume,
)

ALLOWED = ConsumeOutcome.ALLOWED
THROTTLED = ConsumeOutcome.THROTTLED

failures = 0


def check(what, result, expected):
    """Print one [OK]/[NG] line: the result must equal `expected`, with an int balance."""
    global failures
    same_outcome = result.outcome is expected.outcome
    if result == expected and same_outcome and type(result.tokens_remaining) is int:
        print(f"[OK] {what} -> {result!r}")
    else:
        failures += 1
        print(f"[NG] {what} -> {result!r} (expected {expected!r})")


def main():
    global failures
    # Capacity 5, starts full, refills 1 token per second; last_refill_at defaults to 0.
    bucket = TokenBucket(capacity=5, tokens=5, rate_per_sec=1)

    # Drain it at t=0: five requests of 1 token each are allowed.
    for left in (4, 3, 2, 1, 0):
        check("t=0: take 1", try_consume(bucket, 1, now=0), ConsumeResult(ALLOWED, left))

    # Ask again with no time passed: nothing has refilled, so it is throttled.
    check(
        "t=0 again: take 1 from an empty bucket",
        try_consume(bucket, 1, now=0),
        ConsumeResult(THROTTLED, 0),
    )

    # 3 seconds later the bucket has refilled 3 tokens by itself; take 2 of them.
    check(
        "t=3: 3 s refilled 3 tokens, take 2",
        try_consume(bucket, 2, now=3),
        ConsumeResult(ALLOWED, 1),
    )

    # 1 second more: 1 + 1 = 2 tokens, not enough for 3. Throttled, the balance is kept.
    check(
        "t=4: 1 s more makes 2, take 3",
        try_consume(bucket, 3, now=4),
        ConsumeResult(THROTTLED, 2),
    )

    # A long idle period: 2 + 96 * 1 would be 98, but the balance is capped at capacity 5.
    check(
        "t=100: long idle, capped at 5, take 1",
        try_consume(bucket, 1, now=100),
        ConsumeResult(ALLOWED, 4),
    )
    expected_bucket = TokenBucket(capacity=5, tokens=4, rate_per_sec=1, last_refill_at=100)
    if bucket == expected_bucket and type(bucket.tokens) is int:
        print(f"[OK] the bucket stored the refill and the new time -> {bucket!r}")
    else:
        failures += 1
        print(f"[NG] the bucket stored the refill and the new time -> {bucket!r}")

    # Asking for more than capacity can never succeed, however long you wait.
    check(
        "t=1000: take 6 from a capacity of 5",
        try_consume(bucket, 6, now=1000),
        ConsumeResult(THROTTLED, 5),
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
