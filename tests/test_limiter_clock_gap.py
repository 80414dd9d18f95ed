"""A limiter refuses a time read on another clock, as a keyed table does (issue 21).

``RateLimiter(2, start_ns=time.time_ns())`` on the default monotonic clock used to answer a
wait of about 57 years, and ``acquire()`` never returned. A call's time more than ten years (of
365.25 days) from the limiter's clock (the latest time a call used, or ``start_ns`` before the
first) now raises ValueError naming where the time came from, and changes nothing.

A restored limiter is the exception, once: a pickle of a limiter driven by explicit ``now_ns``
restored where time reads otherwise would wait until the old clock's time came round. Its
first call, if earlier than the saved settlement, re-anchors it instead, so the saved balances
take up refilling from then.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from limiter_model import FakeClock
from protocol_in_code.qos import LimitOutcome, RateLimiter

SECOND = 1_000_000_000
#: Ten years of 365.25 days: the farthest a call's time may be from the limiter's clock.
GAP_NS = 10 * 31_557_600 * SECOND
MONOTONIC = 86_400 * SECOND
WALL_CLOCK = 1_764_547_200 * SECOND

CALLS = {
    "try_acquire": lambda lim, now: lim.try_acquire(now_ns=now),
    "check": lambda lim, now: lim.check(now_ns=now),
    "peek": lambda lim, now: lim.peek(now_ns=now),
    "refund": lambda lim, now: lim.refund(now_ns=now),
    "available": lambda lim, now: lim.available(now_ns=now),
}


def test_start_ns_on_the_wall_clock_with_the_monotonic_clock_is_refused() -> None:
    limiter = RateLimiter(2, start_ns=time.time_ns())
    with pytest.raises(ValueError, match="the clock's reading") as caught:
        limiter.try_acquire()
    assert "behind this limiter's clock" in str(caught.value)
    with pytest.raises(ValueError, match="the clock's reading"):
        limiter.acquire()  # used to sleep for 57 years


@pytest.mark.parametrize("call", CALLS)
def test_a_wall_clock_time_on_a_monotonic_limiter_is_refused_and_changes_nothing(
    call: str,
) -> None:
    limiter = RateLimiter(1, burst=2)
    assert limiter.try_acquire(2, now_ns=MONOTONIC)
    before = pickle.dumps(limiter)
    with pytest.raises(ValueError, match="now_ns") as caught:
        CALLS[call](limiter, WALL_CLOCK)
    message = str(caught.value)
    assert str(WALL_CLOCK) in message and "ahead of" in message and "another clock" in message
    assert pickle.dumps(limiter) == before
    assert limiter.check(now_ns=MONOTONIC + 1).outcome is LimitOutcome.DENIED


def test_the_bound_is_ten_years_either_way_and_inclusive() -> None:
    limiter = RateLimiter(1, burst=2, start_ns=MONOTONIC)
    assert limiter.try_acquire(now_ns=MONOTONIC + GAP_NS)
    with pytest.raises(ValueError, match="behind"):
        limiter.peek(now_ns=MONOTONIC - 1)
    assert limiter.peek(now_ns=MONOTONIC).outcome is LimitOutcome.ALLOWED
    with pytest.raises(ValueError, match="ahead of"):
        limiter.peek(now_ns=MONOTONIC + 2 * GAP_NS + 1)


def test_a_clock_callable_reading_another_clock_is_named() -> None:
    clock = FakeClock(MONOTONIC)
    limiter = RateLimiter(1, clock=clock)
    assert limiter.try_acquire()
    clock.now = WALL_CLOCK
    with pytest.raises(ValueError, match="the clock's reading"):
        limiter.try_acquire()


def restored(limiter: Any) -> Any:
    return pickle.loads(pickle.dumps(limiter))


def test_a_restored_limiter_first_asked_before_its_settlement_refills_from_then() -> None:
    saved = RateLimiter(1, burst=5)
    assert saved.try_acquire(4, now_ns=10**15)
    again = restored(saved)
    # Asked at now_ns=5: one token is left, and the next comes a second later, not 11.6 days.
    decision = again.check(2, now_ns=5)
    assert decision.outcome is LimitOutcome.DENIED
    assert decision.wait_ns == SECOND
    assert again.available(now_ns=5 + 4 * SECOND) == 5
    # Only the first call re-anchors: a clock going back afterwards adds nothing.
    assert again.try_acquire(5, now_ns=5 + 4 * SECOND)
    assert again.peek(now_ns=5).wait_ns == 4 * SECOND + SECOND


def test_a_restored_limiter_first_asked_after_its_settlement_is_as_it_was() -> None:
    saved = RateLimiter(1, burst=5)
    assert saved.try_acquire(4, now_ns=10**15)
    again = restored(saved)
    for limiter in (saved, again):
        assert limiter.available(now_ns=10**15 + 2 * SECOND) == 3


def test_a_refused_first_call_leaves_a_restored_limiter_to_re_anchor_at_the_next() -> None:
    saved = RateLimiter(1, burst=5)
    assert saved.try_acquire(4, now_ns=10**15)
    again = restored(saved)
    with pytest.raises(ValueError, match="ahead of"):
        again.check(now_ns=10**15 + GAP_NS + 1)
    assert again.check(2, now_ns=5).wait_ns == SECOND
