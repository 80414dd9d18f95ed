"""A keyed table refuses a time read on another clock (issue 14).

The table has one clock that never goes backwards. One call at ``time.time_ns()`` (since 1970)
on a table of ``time.monotonic_ns()`` readings (since boot) used to move that clock decades
ahead, and with it every key: each throttled key was full again, a whole table of clients let
off by one call. A call's time more than ten years (of 365.25 days) from the table's clock,
ahead or behind, now raises ValueError naming the time, and changes nothing. No two calls on
one clock are that far apart; two clocks are decades apart.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from limiter_model import FakeClock
from protocol_in_code.qos.keyed import KeyedRateLimiter, LimitOutcome

SECOND = 1_000_000_000
#: Ten years of 365.25 days: the farthest a call's time may be from the table's clock.
GAP_NS = 10 * 31_557_600 * SECOND
#: A monotonic reading (a day after boot) and a wall-clock one (late 2025).
MONOTONIC = 86_400 * SECOND
WALL_CLOCK = 1_764_547_200 * SECOND


def throttled_table(**kwargs: Any) -> KeyedRateLimiter:
    """Three clients, each having spent its whole burst at MONOTONIC."""
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, **kwargs)
    for client in ("a", "b", "c"):
        assert limiter.try_acquire(client, 2, now_ns=MONOTONIC)
    return limiter


def snapshot(limiter: KeyedRateLimiter) -> tuple[Any, ...]:
    return (sorted(limiter), limiter.stats, pickle.dumps(limiter))


@pytest.mark.parametrize(
    "call",
    [
        lambda t, now: t.try_acquire("a", now_ns=now),
        lambda t, now: t.try_acquire("new", now_ns=now),
        lambda t, now: t.check("a", now_ns=now),
        lambda t, now: t.peek("a", now_ns=now),
        lambda t, now: t.refund("a", now_ns=now),
        lambda t, now: t.available("a", now_ns=now),
        lambda t, now: t.try_acquire_many([1, 2], [MONOTONIC, now]),
    ],
    ids=["try_acquire", "try_acquire-new-key", "check", "peek", "refund", "available", "many"],
)
def test_a_wall_clock_time_on_a_monotonic_table_is_refused_and_changes_nothing(call: Any) -> None:
    limiter = throttled_table()
    before = snapshot(limiter)
    with pytest.raises(ValueError, match="now_ns") as caught:
        call(limiter, WALL_CLOCK)
    message = str(caught.value)
    assert str(WALL_CLOCK) in message and "ahead of" in message and "another clock" in message
    assert snapshot(limiter) == before
    # Every client is still throttled, as before the bad call.
    for client in ("a", "b", "c"):
        assert limiter.check(client, now_ns=MONOTONIC + 1).outcome is LimitOutcome.DENIED


def test_the_trace_names_the_index_of_the_bad_time() -> None:
    limiter = throttled_table()
    with pytest.raises(ValueError, match=r"now_ns\[2\]"):
        limiter.try_acquire_many([1, 2, 3], [MONOTONIC, MONOTONIC + 1, WALL_CLOCK])
    # Checked against the clock as the trace moves it: each step is within the bound.
    steps = [MONOTONIC + GAP_NS, MONOTONIC + 2 * GAP_NS]
    assert list(limiter.try_acquire_many([1, 2], steps)) == [0, 0]


def test_the_bound_is_ten_years_either_way_and_inclusive() -> None:
    limiter = throttled_table()
    with pytest.raises(ValueError, match="ahead of"):
        limiter.check("a", now_ns=MONOTONIC + GAP_NS + 1)
    with pytest.raises(ValueError, match="behind"):
        limiter.check("a", now_ns=MONOTONIC - GAP_NS - 1)
    assert limiter.check("a", now_ns=MONOTONIC - GAP_NS).outcome is LimitOutcome.DENIED
    # Ten years idle is still one clock: the key is full again, as it should be.
    assert limiter.check("a", 2, now_ns=MONOTONIC + GAP_NS).outcome is LimitOutcome.ALLOWED


def test_a_clock_that_jumps_decades_is_refused_too() -> None:
    clock = FakeClock(MONOTONIC)
    limiter = throttled_table(clock=clock)
    clock.now = WALL_CLOCK
    with pytest.raises(ValueError, match="the clock's reading"):
        limiter.try_acquire("a")
    with pytest.raises(ValueError, match="the clock's reading"):
        limiter.acquire("a", timeout=0)
    clock.now = MONOTONIC + SECOND
    assert limiter.try_acquire("a")


def test_the_first_call_sets_the_clock_and_a_restored_table_keeps_it() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10)
    assert limiter.try_acquire("a", 2, now_ns=WALL_CLOCK), "a new table takes any clock"
    with pytest.raises(ValueError, match="behind"):
        limiter.try_acquire("a", now_ns=MONOTONIC)
    copy = pickle.loads(pickle.dumps(limiter))
    with pytest.raises(ValueError, match="behind"):
        copy.try_acquire("a", now_ns=MONOTONIC)
    assert copy.check("a", now_ns=WALL_CLOCK).outcome is LimitOutcome.DENIED
