"""The API of ``protocol_in_code.qos.limiter`` (issue 4), with explicit values.

* Configuration: exact rates (int, Fraction, Decimal, str; a float through its shortest repr),
  ``per``, default bursts, bands as ``Band`` objects or tuples, ``initial``.
* Clocks: an injected fake clock drives every operation with no sleeping; ``now_ns`` overrides
  the clock; the default clock is ``time.monotonic_ns``; ``start_ns``; timestamps from 0;
  centuries of idleness at the ends of the 64-bit range.
* The sync decorator and ``with``; ``acquire(timeout=0)``; ``acquire`` of more than a burst.
* Bad input: the right exception type, naming the parameter (and the value), and the limiter's
  state untouched.
* ``Decision`` and ``LimitOutcome``; ``repr``; pickle and copy (with clocks and subclasses).
* Known bugs, each in its own test with a message that says what is wrong.
"""

from __future__ import annotations

import copy
import pickle
import threading
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

import limiter_model as lm
from limiter_model import FakeClock, TurningClock
from protocol_in_code.qos.limiter import (
    Band,
    Decision,
    LimitOutcome,
    RateLimiter,
)

SECOND = 10**9
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
ALLOWED, DENIED, NEVER = LimitOutcome.ALLOWED, LimitOutcome.DENIED, LimitOutcome.NEVER


class MyLimiter(RateLimiter):
    """A user's subclass."""


def as_tuple(decision: Any) -> tuple:
    if isinstance(decision, lm.ModelDecision):
        return (decision.outcome, decision.wait_ns, decision.remaining)
    return (decision.outcome.value, decision.wait_ns, decision.remaining)


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "bands"),
    [
        ({"rate": 10}, ((10, 10),)),
        ({"rate": 0.1}, ((Fraction(1, 10), 1),)),
        ({"rate": 2.5}, ((Fraction(5, 2), 3),)),
        ({"rate": 1e-3}, ((Fraction(1, 1000), 1),)),
        ({"rate": 1 / 3}, ((Fraction(3333333333333333, 10**16), 1),)),
        ({"rate": Decimal("0.1")}, ((Fraction(1, 10), 1),)),
        ({"rate": Decimal("12.50")}, ((Fraction(25, 2), 13),)),
        ({"rate": "0.1"}, ((Fraction(1, 10), 1),)),
        ({"rate": "2/minute"}, ((Fraction(1, 30), 2),)),
        ({"rate": " 7 "}, ((7, 7),)),
        ({"rate": Fraction(10, 4)}, ((Fraction(5, 2), 3),)),
        ({"rate": 10, "per": 60}, ((Fraction(1, 6), 10),)),
        ({"rate": 1, "per": 0.5}, ((2, 1),)),
        ({"rate": 3, "burst": 1, "per": Fraction(1, 2)}, ((6, 1),)),
        ({"rate": 1000, "per": 3600}, ((Fraction(5, 18), 1000),)),
        (
            {"bands": [Band(10, burst=10), Band(1000, per=3600)]},
            ((10, 10), (Fraction(5, 18), 1000)),
        ),
        (
            {"bands": [(1, 2), (3, None, 60), ("0.5", 4, 1)]},
            ((1, 2), (Fraction(1, 20), 3), (Fraction(1, 2), 4)),
        ),
    ],
)
def test_rates_are_exact_and_bursts_default_to_the_rate_rounded_up(
    kwargs: dict[str, Any], bands: tuple
) -> None:
    limiter = RateLimiter(**kwargs)
    assert qos_support.band_pairs(limiter) == bands
    for (rate, burst), (want_rate, want_burst) in zip(
        qos_support.band_pairs(limiter), bands, strict=True
    ):
        assert type(rate) is type(want_rate) and type(burst) is int
        assert burst == want_burst
    assert lm.model_from(**kwargs).band_pairs() == bands  # the model reads them the same way


def test_a_float_rate_is_its_shortest_repr_so_point_one_is_one_tenth() -> None:
    limiter = RateLimiter(0.1, burst=1, initial=0, start_ns=0)
    # Exactly 1/10 token per second: the token is there at 10 s, not one nanosecond before.
    assert limiter.peek(now_ns=10 * SECOND - 1).outcome is DENIED
    assert limiter.peek(now_ns=10 * SECOND - 1).wait_ns == 1
    assert limiter.check(now_ns=10 * SECOND).outcome is ALLOWED


class ReprFloat(float):
    """A float subclass with its own repr (as numpy.float64 has: 'np.float64(0.1)')."""

    def __repr__(self) -> str:
        return f"ReprFloat({float(self)!r})"


def float_subclasses() -> list[float]:
    values: list[float] = [ReprFloat(0.1)]
    try:
        import numpy
    except ImportError:
        return values
    return [*values, numpy.float64(0.1)]


@pytest.mark.parametrize("value", float_subclasses(), ids=lambda v: type(v).__name__)
def test_a_float_subclass_is_read_as_its_float(value: float) -> None:
    assert isinstance(value, float) and float(value) == 0.1
    try:
        bands = qos_support.band_pairs(RateLimiter(value))
        per_bands = qos_support.band_pairs(RateLimiter(1, per=value))
    except (TypeError, ValueError) as exc:
        pytest.fail(
            f"BUG: a float subclass {value!r} is refused as a rate/per ({type(exc).__name__}: "
            f"{exc}): exact_fraction reads a float through repr(value), which a subclass (e.g. "
            "numpy.float64, whose repr is 'np.float64(0.1)') overrides; float.__repr__ would "
            "give the documented shortest repr"
        )
    assert bands == ((Fraction(1, 10), 1),)
    assert per_bands == ((10, 1),)


def test_a_new_limiter_is_full_or_holds_initial() -> None:
    assert RateLimiter(5).available(now_ns=0) == 5
    assert RateLimiter(5, initial=2).available(now_ns=0) == 2
    assert RateLimiter(bands=[(5, 5), (1, 3)]).available(now_ns=0) == 3
    assert RateLimiter(bands=[(5, 5), (1, 3)], initial=0).available(now_ns=0) == 0


def test_several_bands_wait_for_the_slowest_and_take_from_all() -> None:
    limiter = RateLimiter(bands=[Band(10, burst=10), Band(1000, per=3600)], start_ns=0)
    assert sum(limiter.try_acquire(now_ns=0) for _ in range(20)) == 10
    decision = limiter.check(now_ns=0)
    assert decision == Decision(DENIED, SECOND // 10, 0)
    assert limiter.peek(11, now_ns=0).outcome is NEVER
    # After an hour both are full again: the per-second band limits to 10.
    assert limiter.available(now_ns=3600 * SECOND) == 10
    assert limiter.check(1001, now_ns=3600 * SECOND).outcome is NEVER


def test_refund_is_capped_at_each_burst() -> None:
    limiter = RateLimiter(bands=[(1, 3), (1, 5)], initial=1, start_ns=0)
    limiter.refund(10, now_ns=0)
    assert limiter.available(now_ns=0) == 3
    assert limiter.check(3, now_ns=0).remaining == 0
    limiter.refund(now_ns=0)
    assert limiter.available(now_ns=0) == 1


# ---------------------------------------------------------------------------------------------
# Clocks
# ---------------------------------------------------------------------------------------------


def test_an_injected_clock_drives_every_operation_without_sleeping() -> None:
    clock = FakeClock(now=7 * SECOND)
    limiter = RateLimiter(bands=[(4, 4), (Fraction(1, 3), 10)], clock=clock)
    model = lm.model_from(bands=[(4, 4), (Fraction(1, 3), 10)])
    began = time.monotonic()
    for round_ in range(3):
        for _ in range(5):
            assert limiter.try_acquire() == model.try_acquire(1, clock.now)
        assert as_tuple(limiter.check(2)) == as_tuple(model.check(2, clock.now))
        assert as_tuple(limiter.peek(3)) == as_tuple(model.peek(3, clock.now))
        assert limiter.available() == model.available(clock.now)
        limiter.refund(1)
        model.refund(1, clock.now)
        assert limiter.available() == model.available(clock.now)
        clock.advance(SECOND // 4 + round_)
    # The blocking and the sugar forms read the same clock: with tokens there, no sleep.
    clock.advance(30 * SECOND)  # both bands full: 4 and 10
    with qos_support.watchdog(60):
        assert limiter.acquire() is True and model.try_acquire(1, clock.now)
        assert limiter.acquire(timeout=0) is True and model.try_acquire(1, clock.now)
        with limiter as entered:
            assert entered is limiter
        assert model.try_acquire(1, clock.now)
        assert limiter.acquire(2, timeout=0) is False, "1 left: timeout=0 does not wait"
    assert limiter.available() == model.available(clock.now) == 1
    assert time.monotonic() - began < 1.0, "an injected clock must not make anything sleep"
    assert clock.reads > 0


def test_now_ns_overrides_the_clock() -> None:
    clock = TurningClock(AssertionError("the clock must not be read when now_ns is given"))
    limiter = RateLimiter(2, clock=clock)
    assert limiter.try_acquire(now_ns=5) is True
    assert limiter.check(now_ns=5).outcome is ALLOWED
    assert limiter.peek(now_ns=5).wait_ns == SECOND // 2
    limiter.refund(now_ns=5)
    assert limiter.available(now_ns=5) == 1


def test_the_default_clock_is_time_monotonic_ns() -> None:
    limiter = RateLimiter(1, initial=0)
    before = time.monotonic_ns()
    first = limiter.check()  # anchors at the native monotonic reading, between before and after
    after = time.monotonic_ns()
    assert first.outcome is DENIED and first.wait_ns == SECOND
    assert limiter.peek(now_ns=before + SECOND - 1).outcome is DENIED
    assert limiter.peek(now_ns=after + SECOND).outcome is ALLOWED
    assert limiter.available() == 0
    assert limiter.try_acquire() is False


def test_timestamps_may_start_at_zero() -> None:
    limiter = RateLimiter(10)
    assert [limiter.try_acquire(now_ns=0) for _ in range(11)] == [True] * 10 + [False]
    assert limiter.check(now_ns=0) == Decision(DENIED, SECOND // 10, 0)
    assert limiter.check(now_ns=SECOND // 10 - 1).outcome is DENIED
    assert limiter.check(now_ns=SECOND // 10) == Decision(ALLOWED, 0, 0)


def test_a_new_limiter_is_anchored_at_its_first_call_unless_given_start_ns() -> None:
    late = 10**15  # eleven days of monotonic clock
    anchored = RateLimiter(1, initial=0)
    assert anchored.check(now_ns=late).wait_ns == SECOND, "nothing accrues before the first call"
    started = RateLimiter(1, initial=0, start_ns=late - SECOND)
    assert started.check(now_ns=late).outcome is ALLOWED, "one second accrued since start_ns"
    from_zero = RateLimiter(1, burst=5, initial=0, start_ns=0)
    assert from_zero.available(now_ns=3 * SECOND) == 3


def test_a_time_centuries_from_the_clock_is_refused_and_the_ends_of_the_range_still_work() -> None:
    # Centuries of idleness are one clock no more (see test_limiter_clock_gap.py); the
    # arithmetic for such spans is pinned by the core's own tests (settle.rs).
    slow = RateLimiter(Fraction(1, 10**9), burst=10**6, initial=0, start_ns=I64_MIN)
    with pytest.raises(ValueError, match="now_ns"):
        slow.available(now_ns=I64_MAX)
    fast = RateLimiter(10**18, burst=2**64 - 1, initial=0, start_ns=I64_MAX - 20 * SECOND)
    assert fast.available(now_ns=I64_MAX) == 2**64 - 1
    assert fast.check(2**64 - 1, now_ns=I64_MAX) == Decision(ALLOWED, 0, 0)
    assert fast.check(now_ns=I64_MAX) == Decision(DENIED, 1, 0)
    never = RateLimiter(1, burst=2**64 - 1)
    assert never.check(2**64 - 1, now_ns=I64_MIN).outcome is ALLOWED


def test_a_backwards_clock_adds_nothing() -> None:
    limiter = RateLimiter(1, burst=10, initial=0, start_ns=0)
    assert limiter.check(0, now_ns=5 * SECOND).remaining == 5
    assert limiter.available(now_ns=2 * SECOND) == 5
    assert limiter.check(5, now_ns=SECOND).outcome is ALLOWED
    assert limiter.available(now_ns=5 * SECOND) == 0, "going back did not move the settlement"
    assert limiter.available(now_ns=6 * SECOND) == 1


# ---------------------------------------------------------------------------------------------
# Known bugs (each test states what is wrong when it fails)
# ---------------------------------------------------------------------------------------------


def test_a_first_peek_or_available_anchors_the_limiter() -> None:
    peeked = RateLimiter(1, initial=0)
    first = peeked.peek(now_ns=0)
    assert first == Decision(DENIED, SECOND, 0)
    later = peeked.check(now_ns=SECOND)
    assert later.outcome is ALLOWED, (
        "BUG: peek() on a new limiter does not anchor it (Limiter::peek settles a clone), so "
        f"peek at 0 said wait {first.wait_ns} ns but check at {SECOND} answered {later}: the "
        "first check anchored the limiter there instead. Issue 4: a new limiter is anchored "
        "at its first call's time."
    )
    polled = RateLimiter(1, burst=5, initial=0)
    seen = [polled.available(now_ns=t * SECOND) for t in range(6)]
    assert seen == [0, 1, 2, 3, 4, 5], (
        f"BUG: a new limiter that is only polled with available() never fills: {seen} "
        "(available() does not anchor a new limiter, so every call re-anchors a clone)"
    )


def test_wait_counts_from_now_when_the_clock_is_behind_the_settlement() -> None:
    ahead = RateLimiter(1, initial=0, start_ns=SECOND)
    first = ahead.check(now_ns=0)
    retry = ahead.check(now_ns=0 + first.wait_ns)
    assert retry.outcome is ALLOWED, (
        f"BUG: start_ns=1 s, check at 0 said wait {first.wait_ns} ns, but check at "
        f"{first.wait_ns} answered {retry}: the wait is counted from the settlement point, not "
        "from now_ns (it should be 2 s here). Issue 4: 'exactly then it is allowed'."
    )
    back = RateLimiter(1, initial=0, start_ns=0)
    back.check(0, now_ns=SECOND // 2)  # settled at 0.5 s holding half a token
    first = back.check(now_ns=0)  # the clock went back to 0
    assert first.wait_ns == SECOND, (
        f"BUG: after the clock went back from 0.5 s to 0, the wait for the token due at 1 s is "
        f"1 s from now, not {first.wait_ns} ns (counted from the settlement point)"
    )


def test_acquire_with_a_huge_finite_timeout_does_not_panic() -> None:
    limiter = RateLimiter(1)
    try:
        result = limiter.acquire(timeout=1e19)
    except ValueError as exc:
        assert "timeout" in str(exc)
    except BaseException as exc:
        pytest.fail(
            f"BUG: acquire(timeout=1e19) on a full limiter raised {type(exc).__qualname__}: "
            f"{exc} (Instant::now() + timeout overflows and panics; a deadline beyond the "
            "clock's range should mean no deadline, or a ValueError)"
        )
    else:
        assert result is True


# ---------------------------------------------------------------------------------------------
# Sync sugar: decorator, with, acquire
# ---------------------------------------------------------------------------------------------


def test_the_decorator_takes_one_token_per_call_and_keeps_the_function() -> None:
    clock = FakeClock(now=0)
    limiter = RateLimiter(20, burst=2, clock=clock)
    calls: list[tuple] = []

    @limiter
    def work(a: int, b: int = 0) -> int:
        """Adds."""
        calls.append((a, b))
        if a < 0:
            raise KeyError(a)
        return a + b

    assert work.__name__ == "work" and work.__doc__ == "Adds."
    assert work(1, b=2) == 3
    with pytest.raises(KeyError):
        work(-1)
    assert limiter.available() == 0 and calls == [(1, 2), (-1, 0)]
    # The third call waits for a token: it runs once the clock has moved on.
    done = threading.Event()
    worker = threading.Thread(target=lambda: (work(5), done.set()), daemon=True)
    worker.start()
    time.sleep(0.1)
    assert not done.is_set() and len(calls) == 2, "the third call ran without a token"
    clock.advance(SECOND // 20)
    assert done.wait(5), "the third call never ran after a token came"
    worker.join(5)
    assert calls[-1] == (5, 0)


def test_with_takes_one_token_and_lets_exceptions_through() -> None:
    limiter = RateLimiter(1, burst=3, clock=FakeClock(now=0))
    with limiter as entered:
        assert entered is limiter
    assert limiter.available() == 2
    with pytest.raises(ZeroDivisionError), limiter:
        raise ZeroDivisionError
    assert limiter.available() == 1


def test_acquire_with_timeout_zero_on_an_empty_limiter_returns_false_at_once() -> None:
    real = RateLimiter(Fraction(1, 100), initial=0)
    began = time.monotonic()
    assert real.acquire(timeout=0) is False
    assert real.acquire(timeout=0.0) is False
    assert time.monotonic() - began < 0.5
    assert real.available() == 0
    frozen = RateLimiter(Fraction(1, 100), initial=0, start_ns=0, clock=FakeClock(0))
    before = snapshot(frozen, 0)
    assert frozen.acquire(timeout=0) is False
    assert snapshot(frozen, 0) == before, "a failed acquire took something"


def test_acquire_blocks_for_about_the_wait() -> None:
    limiter = RateLimiter(20, burst=1)
    assert limiter.acquire() is True
    began = time.monotonic()
    assert limiter.acquire(timeout=5) is True
    elapsed = time.monotonic() - began
    assert 0.04 <= elapsed < 2.0, elapsed


def test_acquire_of_more_than_a_burst_raises_and_changes_nothing() -> None:
    limiter = RateLimiter(bands=[(2, 5), (1, 3)], initial=2, start_ns=0, clock=FakeClock(0))
    before = snapshot(limiter, 0)
    for kwargs in ({}, {"timeout": 0}, {"timeout": 10}):
        with pytest.raises(ValueError, match=r"n=4"):
            limiter.acquire(4, **kwargs)
    assert snapshot(limiter, 0) == before
    assert limiter.check(4, now_ns=0) == Decision(NEVER, None, 2)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"rate": 0}, ValueError, "rate"),
        ({"rate": -1}, ValueError, "rate"),
        ({"rate": Fraction(-1, 3)}, ValueError, "rate"),
        ({"rate": "0"}, ValueError, "rate"),
        ({"rate": NAN}, ValueError, "rate"),
        ({"rate": INF}, ValueError, "rate"),
        ({"rate": -INF}, ValueError, "rate"),
        ({"rate": Decimal("NaN")}, ValueError, "rate"),
        ({"rate": Decimal("Infinity")}, ValueError, "rate"),
        ({"rate": True}, TypeError, "rate"),
        ({"rate": "abc"}, ValueError, "rate"),
        ({"rate": None}, TypeError, "rate"),
        ({"rate": 1j}, TypeError, "rate"),
        ({"rate": [1]}, TypeError, "rate"),
        ({"rate": 1e-300}, ValueError, "rate"),
        ({"rate": 1, "burst": 0}, ValueError, "burst"),
        ({"rate": 1, "burst": -1}, ValueError, "burst"),
        ({"rate": 1, "burst": 2.0}, TypeError, "burst"),
        ({"rate": 1, "burst": True}, TypeError, "burst"),
        ({"rate": 1, "burst": "2"}, TypeError, "burst"),
        ({"rate": 1, "burst": 2**64}, ValueError, "burst"),
        ({"rate": 1, "per": 0}, ValueError, "per"),
        ({"rate": 1, "per": -1}, ValueError, "per"),
        ({"rate": 1, "per": NAN}, ValueError, "per"),
        ({"rate": 1, "per": True}, TypeError, "per"),
        ({"rate": 1, "initial": 2}, ValueError, "initial"),
        ({"bands": [(5, 5), (1, 3)], "initial": 4}, ValueError, "initial"),
        ({"rate": 1, "initial": -1}, ValueError, "initial"),
        ({"rate": 1, "initial": 0.5}, TypeError, "initial"),
        ({"rate": 1, "initial": False}, TypeError, "initial"),
        ({"rate": 1, "start_ns": 1.0}, TypeError, "start_ns"),
        ({"rate": 1, "start_ns": 2**63}, ValueError, "start_ns"),
        ({"rate": 1, "clock": 3}, TypeError, "clock"),
        ({"rate": 1, "clock": "time.monotonic_ns"}, TypeError, "clock"),
        ({"rate": 1, "bands": [(1, 1)]}, TypeError, "bands"),
        ({}, TypeError, "bands"),
        ({"bands": []}, ValueError, "bands"),
        ({"bands": [(1, 1)], "burst": 2}, TypeError, "burst"),
        ({"bands": [(1,)]}, TypeError, "band"),
        ({"bands": [(0, 1)]}, ValueError, "rate"),
        ({"bands": [(1, 0)]}, ValueError, "burst"),
        ({"bands": [("x", None)]}, ValueError, "rate"),
    ],
)
def test_bad_configuration_is_refused_naming_the_parameter(
    kwargs: dict[str, Any], error: type, name: str
) -> None:
    with pytest.raises(error) as caught:
        RateLimiter(**kwargs)
    assert type(caught.value) is error
    assert name in str(caught.value), f"{error.__name__} without {name!r}: {caught.value}"


def test_a_huge_rate_is_refused_naming_the_rate() -> None:
    with pytest.raises(ValueError) as caught:
        RateLimiter(1e300)
    # Observed: "burst must be between 0 and 2**64 - 1, not 1000...000" (the default burst,
    # ceil(rate), is what overflows): the user passed no burst, so the message misleads.
    assert "rate" in str(caught.value) or "burst" in str(caught.value)


def snapshot(limiter: RateLimiter, now: int) -> tuple:
    """What can be seen of the limiter at ``now``; the pickle state is read last, once the
    reads at ``now`` have moved the limiter's clock there (the state records it)."""
    seen = (
        limiter.available(now_ns=now),
        [limiter.peek(n, now_ns=now) for n in range(7)],
        repr(limiter),
    )
    return (*seen, limiter.__reduce__()[2])


def used_limiter(**kwargs: Any) -> RateLimiter:
    limiter = RateLimiter(bands=[(3, 5), (Fraction(7, 3), 4)], initial=2, start_ns=0, **kwargs)
    limiter.check(1, now_ns=SECOND // 3)  # fractional balances in both bands
    return limiter


BAD_N = [
    (-1, ValueError),
    (1.5, TypeError),
    (1.0, TypeError),
    (True, TypeError),
    ("1", TypeError),
    (2**64, ValueError),
    (Decimal(1), TypeError),
]
BAD_NOW = [
    (1.0, TypeError),
    ("1", TypeError),
    (True, TypeError),
    (2**63, ValueError),
    (-(2**63) - 1, ValueError),
]


@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "acquire"])
@pytest.mark.parametrize(("value", "error"), BAD_N)
def test_a_bad_n_is_refused_and_changes_nothing(method: str, value: Any, error: type) -> None:
    limiter = used_limiter()
    before = snapshot(limiter, SECOND)
    kwargs = {} if method == "acquire" else {"now_ns": SECOND}
    with pytest.raises(error) as caught:
        getattr(limiter, method)(value, **kwargs)
    assert type(caught.value) is error
    message = str(caught.value)
    assert "n " in message or message.startswith("n"), message
    assert str(value) in message or repr(value) in message, message
    assert snapshot(limiter, SECOND) == before


@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "available"])
@pytest.mark.parametrize(("value", "error"), BAD_NOW)
def test_a_bad_now_ns_is_refused_and_changes_nothing(method: str, value: Any, error: type) -> None:
    limiter = used_limiter()
    before = snapshot(limiter, SECOND)
    with pytest.raises(error) as caught:
        getattr(limiter, method)(now_ns=value)
    assert type(caught.value) is error
    assert "now_ns" in str(caught.value) and str(value) in str(caught.value)
    assert snapshot(limiter, SECOND) == before


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (NAN, ValueError), (-INF, ValueError), ("1", TypeError)]
)
def test_a_bad_timeout_is_refused_and_changes_nothing(value: Any, error: type) -> None:
    limiter = used_limiter()
    before = snapshot(limiter, SECOND)
    with pytest.raises(error, match="timeout"):
        limiter.acquire(timeout=value)
    assert snapshot(limiter, SECOND) == before


@pytest.mark.parametrize(
    ("reading", "error"),
    [(1.5, TypeError), ("5", TypeError), (None, TypeError), (True, TypeError), (2**63, ValueError)],
)
@pytest.mark.parametrize(
    "method", ["try_acquire", "check", "peek", "refund", "available", "acquire"]
)
def test_a_clock_returning_a_non_int_is_refused_and_changes_nothing(
    reading: Any, error: type, method: str
) -> None:
    limiter = used_limiter(clock=TurningClock(reading))
    before = snapshot(limiter, SECOND)
    with pytest.raises(error, match=r"clock"):
        getattr(limiter, method)()
    assert snapshot(limiter, SECOND) == before


def test_a_clock_that_raises_lets_its_exception_through_and_changes_nothing() -> None:
    class ClockError(Exception):
        pass

    limiter = used_limiter(clock=TurningClock(ClockError("no time")))
    before = snapshot(limiter, SECOND)
    for method in ("try_acquire", "check", "peek", "refund", "available", "acquire"):
        with pytest.raises(ClockError):
            getattr(limiter, method)()
    assert snapshot(limiter, SECOND) == before


# ---------------------------------------------------------------------------------------------
# Decision, LimitOutcome, repr
# ---------------------------------------------------------------------------------------------


def test_limit_outcome_is_a_str_enum_of_four() -> None:
    # REFUSED is the keyed limiter's (a full table); a single limiter never answers it.
    assert [m.name for m in LimitOutcome] == ["ALLOWED", "DENIED", "NEVER", "REFUSED"]
    assert [m.value for m in LimitOutcome] == ["Allowed", "Denied", "Never", "Refused"]
    assert isinstance(ALLOWED, str) and ALLOWED == "Allowed"
    assert LimitOutcome("Denied") is DENIED


def test_decision_is_a_frozen_record() -> None:
    limiter = RateLimiter(2, start_ns=0)
    allowed = limiter.check(now_ns=0)
    assert allowed == Decision(ALLOWED, 0, 1)
    assert allowed.allowed is True and bool(allowed) is True
    limiter.check(now_ns=0)
    denied = limiter.check(now_ns=0)
    assert denied == Decision(DENIED, SECOND // 2, 0)
    assert denied.allowed is False and not denied
    never = limiter.check(3, now_ns=0)
    assert never == Decision(NEVER, None, 0) and not never
    assert hash(never) == hash(Decision(NEVER, None, 0))
    assert denied != Decision(DENIED, SECOND // 2 + 1, 0)
    with pytest.raises(AttributeError):
        denied.wait_ns = 0  # type: ignore[misc]
    match denied:
        case Decision(LimitOutcome.DENIED, wait, remaining):
            assert (wait, remaining) == (SECOND // 2, 0)
        case _:
            pytest.fail("Decision does not match positionally")
    assert "DENIED" in repr(denied) and "wait_ns=500000000" in repr(denied)


def test_repr_shows_the_bands_as_written_and_no_stale_balance() -> None:
    limiter = MyLimiter(bands=[Band(10, burst=10), Band(0.1, burst=2)], start_ns=0)
    shown = "MyLimiter(bands=[Band(rate=10, burst=10), Band(rate=Fraction(1, 10), burst=2)])"
    assert repr(limiter) == shown
    limiter.check(now_ns=0)
    assert repr(limiter) == shown, "a repr shows no balance, which would be stale"
    assert (
        repr(RateLimiter(100, per=60)) == "RateLimiter(bands=[Band(rate=100, burst=100, per=60)])"
    )
    assert repr(RateLimiter("100/minute")) == repr(RateLimiter(100, per=60))
    assert repr(RateLimiter("2.5", per=Decimal("0.5"))) == (
        "RateLimiter(bands=[Band(rate=Fraction(5, 2), burst=3, per=Fraction(1, 2))])"
    )
    # The repr is the limiter's configuration, written as it can be typed back in.
    again = eval(repr(RateLimiter(100, per=60)), {"RateLimiter": RateLimiter, "Band": Band})
    assert again.bands == RateLimiter(100, per=60).bands


# ---------------------------------------------------------------------------------------------
# Pickle and copy
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [RateLimiter, MyLimiter])
@pytest.mark.parametrize(
    "clone",
    [
        lambda x: pickle.loads(pickle.dumps(x)),
        lambda x: pickle.loads(pickle.dumps(x, protocol=0)),
        copy.copy,
        copy.deepcopy,
    ],
    ids=["pickle", "pickle0", "copy", "deepcopy"],
)
def test_pickle_and_copy_keep_bands_balances_clock_and_type(cls: type, clone: Any) -> None:
    clock = FakeClock(now=3 * SECOND)
    original = cls(bands=[(3, 5), (Fraction(7, 3), 4, 2)], initial=2, clock=clock)
    original.check(1)
    clock.advance(SECOND // 3)
    original.refund(0)
    restored = clone(original)
    assert type(restored) is cls
    assert restored.bands == original.bands
    assert qos_support.band_pairs(restored) == ((3, 5), (Fraction(7, 6), 4))
    assert repr(restored) == repr(original)
    # The restored limiter reads its own copy of the clock, at the same time as the original's.
    for _ in range(6):
        assert restored.check() == original.check()
        assert restored.peek(2) == original.peek(2)
    for t in (4 * SECOND, 5 * SECOND, 5 * SECOND - 1, 9 * SECOND):
        assert restored.check(2, now_ns=t) == original.check(2, now_ns=t)
        assert restored.available(now_ns=t) == original.available(now_ns=t)


def test_pickle_keeps_a_limiter_not_yet_anchored_and_the_default_clock() -> None:
    original = RateLimiter(1, burst=3, initial=1)
    restored = pickle.loads(pickle.dumps(original))
    assert restored.check(1, now_ns=50 * SECOND) == original.check(1, now_ns=50 * SECOND)
    assert restored.check(now_ns=50 * SECOND).wait_ns == SECOND, "anchored at its first call"
    default = pickle.loads(pickle.dumps(RateLimiter(1000)))
    assert default.try_acquire() is True  # reads the monotonic clock


def test_a_corrupt_pickle_state_is_refused() -> None:
    limiter = RateLimiter(1, burst=2)
    rebuild, args, (balances, attributes, _origin, _clock) = limiter.__reduce__()
    fresh = rebuild(*args)
    with pytest.raises(ValueError, match="number of bands"):
        fresh.__setstate__(([*balances, *balances], attributes))
    with pytest.raises(ValueError, match="exceeds"):
        fresh.__setstate__(([(10**30, None)], attributes))  # more units than the burst holds
    with pytest.raises(OverflowError):
        fresh.__setstate__(([(10**40, None)], attributes))  # beyond 128 bits
    with pytest.raises(TypeError):
        fresh.__setstate__(balances)  # the attributes are missing
    assert fresh.available(now_ns=0) == 2, "a refused state changed nothing"
