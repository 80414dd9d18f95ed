"""Session 03 walkthrough: leaky and token buckets are cousins.

Both keep the same two variables, an amount and the time it was last settled, and both settle
lazily: nothing drains or refills in the background, the time owed is paid in one step by the
next call that brings a `now`. They just run in opposite directions:

                      token bucket (session 01)        leaky bucket (this session)
    what it stores    tokens: credit you may spend     level: traffic already let in
    time              refills: + elapsed * rate        drains: - elapsed * leak_per_sec
    the clamp         min(grown, capacity)             max(drained, 0)
    a request         takes n tokens if there are n    adds n if level + n <= capacity
    if it does not    THROTTLED, balance kept          OVERFLOWED, dropped (never queued)
    "full" means      a burst may go through           a burst is dropped

offer(bucket, n, now) leaks first (stored on the bucket even when the offer then overflows),
then accepts n if it fits under capacity or drops it.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/session_03_walkthrough.py

Each check prints one line, [OK] or [NG]; the exit status is 1 if any check is NG.
"""

import sys

from protocol_in_code.qos.leaky_bucket import (
    LeakyBucket,
    OfferOutcome,
    OfferResult,
    leak,
    offer,
)
from protocol_in_code.qos.token_bucket import (
    ConsumeOutcome,
    ConsumeResult,
    TokenBucket,
    try_consume,
)

ACCEPTED = OfferOutcome.ACCEPTED
OVERFLOWED = OfferOutcome.OVERFLOWED

failures = 0


def report(ok, what, shown, expected):
    """Print one [OK]/[NG] line with the repr of what was checked."""
    global failures
    if ok:
        print(f"[OK] {what} -> {shown!r}")
    else:
        failures += 1
        print(f"[NG] {what} -> {shown!r} (expected {expected!r})")


def check(what, result, expected):
    """An OfferResult (or ConsumeResult): equal to `expected`, the very enum member, int values."""
    value = result.level if isinstance(result, OfferResult) else result.tokens_remaining
    ok = result == expected and result.outcome is expected.outcome and type(value) is int
    report(ok, what, result, expected)


def check_bucket(what, bucket, expected):
    """A bucket: equal to `expected`, with every field an int as it went in."""
    fields = type(expected).__match_args__
    ok = bucket == expected and all(type(getattr(bucket, f)) is int for f in fields)
    report(ok, what, bucket, expected)


def main():
    # Capacity 10, empty, drains 2 per second; last_leak_at defaults to 0.
    bucket = LeakyBucket(capacity=10, level=0, leak_per_sec=2)

    # Fill the level at t=0: arrivals add to it while they fit under the capacity.
    check("t=0: offer 4 to an empty bucket", offer(bucket, 4, now=0), OfferResult(ACCEPTED, 4))
    check("t=0: offer 6 more, exactly full", offer(bucket, 6, now=0), OfferResult(ACCEPTED, 10))

    # Too much with no time to drain: 10 + 1 > 10, so the 1 is dropped and the level kept.
    check(
        "t=0: offer 1 to a full bucket, no time to drain",
        offer(bucket, 1, now=0),
        OfferResult(OVERFLOWED, 10),
    )

    # 3 seconds later the leak has drained 3 * 2 = 6: the level is 4, so 5 fits (4 + 5 = 9).
    check(
        "t=3: the leak opened room (10 - 3 s * 2/s = 4), offer 5",
        offer(bucket, 5, now=3),
        OfferResult(ACCEPTED, 9),
    )

    # Idle long enough: 9 - 97 * 2 would be -185, but the level floors at the int 0.
    leak(bucket, now=100)
    check_bucket(
        "t=100: long idle, the level floors at 0 and the leak time moves",
        bucket,
        LeakyBucket(capacity=10, level=0, leak_per_sec=2, last_leak_at=100),
    )

    # The same burst against two "full" buckets of the same size and rate, full since t=0.
    # The token bucket is full of credit: the 2 s idle refill is capped, and the burst goes.
    # The leaky bucket is full of traffic: it drained only 2 of its 5, so the burst is dropped.
    tokens = TokenBucket(capacity=5, tokens=5, rate_per_sec=1)
    level = LeakyBucket(capacity=5, level=5, leak_per_sec=1)
    check(
        "t=2: a burst of 4 against a full token bucket (capacity 5, 1/s)",
        try_consume(tokens, 4, now=2),
        ConsumeResult(ConsumeOutcome.ALLOWED, 1),
    )
    check(
        "t=2: the same burst of 4 against a full leaky bucket (capacity 5, 1/s)",
        offer(level, 4, now=2),
        OfferResult(OVERFLOWED, 3),
    )
    check_bucket(
        "the overflowed offer still stored its leak",
        level,
        LeakyBucket(capacity=5, level=3, leak_per_sec=1, last_leak_at=2),
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
