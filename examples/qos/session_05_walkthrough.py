"""Session 05 walkthrough: the toy shaper, isolation through one bucket per class.

The capstone puts the earlier sessions together: classify, refill, spend. A ToyShaper holds a
class tree, one independent token bucket per class (shaper.buckets, by class name), a clock and
a trace. enqueue(class_name, size, now) looks up the packet's own class bucket, asks it with
try_consume (lazy refill, then spend or throttle), appends a line to shaper.trace and returns an
EnqueueResult. Because every class has its own bucket, a class that floods only drains itself:
at the very same instant another class still sails through. tick(seconds) moves the clock, and
the tokens come back on the next enqueue. run_contention(shaper, offered) enqueues each
(class_name, size) pair at the shaper's clock, in order. An unknown class raises KeyError: the
shaper never invents a bucket.

Run it from the repository root:

    PYTHONPATH=src python3 examples/qos/session_05_walkthrough.py

Each check prints one line, [OK] or [NG]; the exit status is 1 if any check is NG.
"""

import sys

from protocol_in_code.qos.classes import ClassTree, TrafficClass
from protocol_in_code.qos.shaper_loop import EnqueueResult, ToyShaper, run_contention
from protocol_in_code.qos.token_bucket import ConsumeOutcome, TokenBucket

ALLOWED = ConsumeOutcome.ALLOWED
THROTTLED = ConsumeOutcome.THROTTLED

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
    """An EnqueueResult equal to `expected`, the very enum member, an int balance."""
    ok = (
        result == expected
        and result.outcome is expected.outcome
        and type(result.tokens_remaining) is int
    )
    report(ok, what, result, expected)


def main():
    tree = ClassTree(
        classes={
            "default": TrafficClass("default", 10),
            "video": TrafficClass("video", 4, parent="default"),
            "voice": TrafficClass("voice", 6, parent="default"),
        }
    )
    # One bucket per class: video holds 3 tokens, voice 5, both refill 1 token per second.
    shaper = ToyShaper(
        tree,
        buckets={
            "video": TokenBucket(capacity=3, tokens=3, rate_per_sec=1),
            "voice": TokenBucket(capacity=5, tokens=5, rate_per_sec=1),
        },
    )

    # Contention at t=0: video floods its own bucket and is throttled, while voice, at the
    # same instant, sails through on its own bucket.
    first, second, third = run_contention(shaper, [("video", 2), ("video", 2), ("voice", 1)])
    check("t=0: video takes 2 of its 3 tokens", first, EnqueueResult("video", ALLOWED, 1))
    check("t=0: video again, only 1 left: throttled", second, EnqueueResult("video", THROTTLED, 1))
    check("t=0: voice at the same instant sails through", third, EnqueueResult("voice", ALLOWED, 4))

    # A retry after the clock moves: two ticks of 1 s refill video's bucket to 1 + 2 = 3.
    shaper.tick(1)
    shaper.tick(1)
    clock = shaper.clock
    report(clock == 2 and type(clock) is int, "tick(1) twice moves the clock to 2", clock, 2)
    check(
        "t=2: video retries after the tick",
        shaper.enqueue("video", 2, shaper.clock),
        EnqueueResult("video", ALLOWED, 1),
    )

    # An unknown class has no bucket: KeyError, and nothing is traced.
    what = "enqueue of an unknown class raises KeyError, nothing traced"
    try:
        shaper.enqueue("bulk", 1, shaper.clock)
    except KeyError as exc:
        report(len(shaper.trace) == 4, what, exc, KeyError("bulk"))
    else:
        report(False, what, None, KeyError("bulk"))

    # The trace: one line per decision, in order.
    expected_trace = [
        "enqueue video size=2 at t=0: Allowed (tokens_remaining=1)",
        "enqueue video size=2 at t=0: Throttled (tokens_remaining=1)",
        "enqueue voice size=1 at t=0: Allowed (tokens_remaining=4)",
        "enqueue video size=2 at t=2: Allowed (tokens_remaining=1)",
    ]
    report(len(shaper.trace) == len(expected_trace), "trace lines", len(shaper.trace), 4)
    for i, (line, expected) in enumerate(zip(shaper.trace, expected_trace, strict=False)):
        report(line == expected, f"trace[{i}]", line, expected)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
