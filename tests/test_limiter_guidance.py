"""A newcomer's first mistakes: rates as people write them, and errors that say what to write.

* Rates may say their period, as users of other limiters write them: ``"100/minute"``,
  ``"10/second"``, ``"1000/hour"``, ``"5 per second"``, ``"300 per 5 minutes"``. Such a rate
  is its count per that period, with the default burst of any rate given with ``per``: the
  count, the tokens one period brings.
* ``"100/60"`` could be 100 per 60 seconds (burst 100) or the fraction 5/3 per second (burst
  2): it is refused, and the message shows how to write each.
* ``try_acquire(n)`` with ``n`` above a band's burst raises ValueError, as ``acquire`` does:
  no wait would ever be enough, and a retry loop on ``False`` would spin for ever.
* ``Band``, ``bands=`` and ``clock=`` are checked when made, and the errors say what to write
  instead (``per=60``, ``time.monotonic_ns``, ``None`` to wait for ever).
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from limiter_model import model_from
from protocol_in_code.qos import Band, KeyedRateLimiter, LimitOutcome, RateLimiter

SECOND = 10**9


@pytest.mark.parametrize(
    ("text", "rate", "per"),
    [
        ("100/minute", 100, 60),
        ("10/second", 10, 1),
        ("1000/hour", 1000, 3600),
        ("5 per second", 5, 1),
        ("300 per 5 minutes", 300, 300),
        ("2.5/min", Fraction(5, 2), 60),
        ("86400/day", 86400, 86400),
        ("10/s", 10, 1),
    ],
)
@pytest.mark.parametrize("limiter_type", [RateLimiter, KeyedRateLimiter])
def test_a_rate_may_say_its_period(limiter_type: type, text: str, rate: Any, per: int) -> None:
    expected = RateLimiter(rate, per=per).bands
    assert limiter_type(text).bands == expected
    assert limiter_type(bands=[Band(text)]).bands == expected
    assert limiter_type(bands=[(text, None)]).bands == expected
    assert model_from(text).band_pairs() == qos_support.band_pairs(RateLimiter(rate, per=per))


def test_one_hundred_a_minute_admits_its_burst_then_one_every_six_tenths_of_a_second() -> None:
    limiter = RateLimiter("100/minute", start_ns=0)
    assert sum(limiter.try_acquire(now_ns=0) for _ in range(150)) == 100
    decision = limiter.check(now_ns=0)
    assert decision.outcome is LimitOutcome.DENIED and decision.wait_ns == 600_000_000
    assert limiter.try_acquire(now_ns=600_000_000)


@pytest.mark.parametrize("text", ["100/60", "1/3", "5 per 2", "100 / 60.5"])
def test_two_numbers_around_a_slash_are_refused_showing_both_spellings(text: str) -> None:
    count, divisor = (part.strip() for part in text.replace(" per ", "/").split("/"))
    for make in (RateLimiter, KeyedRateLimiter, Band):
        with pytest.raises(ValueError) as caught:
            make(text)
        message = str(caught.value)
        assert repr(text) in message
        assert f"rate={count}, per={divisor}" in message, message
        fraction = (
            f"Fraction({count}, {divisor})"
            if (count + divisor).isdigit()
            else f'Fraction("{count}") / Fraction("{divisor}")'
        )
        assert fraction in message, message


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("100/month", "days"),
        ("100/year", "days"),
        ("100 per fortnight", "minute"),
        ("100/", "minute"),
        ("1 per 0 minutes", "positive"),
    ],
)
def test_a_period_that_cannot_be_used_is_refused_saying_what_to_write(text: str, hint: str) -> None:
    with pytest.raises(ValueError, match="rate") as caught:
        RateLimiter(text)
    assert hint in str(caught.value)


def test_a_period_given_twice_is_refused() -> None:
    with pytest.raises(TypeError, match="per="):
        RateLimiter("100/minute", per=60)
    with pytest.raises(TypeError, match="per="):
        Band("100/minute", per=60)


def test_plain_numeric_strings_are_still_rates_per_second() -> None:
    assert qos_support.band_pairs(RateLimiter("2.5")) == ((Fraction(5, 2), 3),)
    assert qos_support.band_pairs(RateLimiter("1e3")) == ((1000, 1000),)


@pytest.mark.parametrize("limiter_type", [RateLimiter, KeyedRateLimiter])
def test_try_acquire_of_more_than_the_burst_raises_like_acquire(limiter_type: type) -> None:
    limiter = limiter_type(10, burst=10)
    args = ("client",) if limiter_type is KeyedRateLimiter else ()
    with pytest.raises(ValueError, match="burst") as caught:
        limiter.try_acquire(*args, 11, now_ns=0)
    with pytest.raises(ValueError) as from_acquire:
        limiter.acquire(*args, 11)
    assert str(caught.value) == str(from_acquire.value)
    assert limiter.try_acquire(*args, 10, now_ns=0) is True  # nothing was taken before


def test_a_band_is_checked_when_it_is_made() -> None:
    with pytest.raises(ValueError, match="burst must be an int from 1 to 2\\*\\*64 - 1, not 0"):
        Band(10, burst=0)
    with pytest.raises(ValueError, match="rate"):
        Band("ten")
    with pytest.raises(ValueError, match="per must be positive"):
        Band(10, per=0)


@pytest.mark.parametrize("burst", [0, -1, 2**64])
def test_every_burst_message_says_the_same_range(burst: int) -> None:
    with pytest.raises(ValueError) as caught:
        RateLimiter(10, burst=burst)
    assert str(caught.value) == f"burst must be an int from 1 to 2**64 - 1, not {burst}"


def test_bands_of_plain_numbers_say_how_to_write_bands() -> None:
    with pytest.raises(TypeError) as caught:
        RateLimiter(bands=[10, 1000])
    message = str(caught.value)
    assert "bands must hold Band objects or (rate, burst[, per]) tuples, not 10" in message
    assert "RateLimiter(rate)" in message and "Band(1000, per=3600)" in message


@pytest.mark.parametrize("limiter_type", [RateLimiter, KeyedRateLimiter])
def test_a_clock_of_seconds_is_refused_when_the_limiter_is_made(limiter_type: type) -> None:
    with pytest.raises(TypeError) as caught:
        limiter_type(10, clock=time.time)
    message = str(caught.value)
    assert "clock()" in message and "time.monotonic_ns" in message
    reads = []

    def clock() -> int:
        reads.append(1)
        return 0

    limiter_type(10, clock=clock)
    assert reads == [1]  # called once, to check it


def test_now_ns_in_seconds_gets_a_hint() -> None:
    limiter = RateLimiter(10)
    with pytest.raises(TypeError) as caught:
        limiter.try_acquire(now_ns=time.time())
    assert "now_ns must be int nanoseconds" in str(caught.value)
    assert "time.monotonic_ns()" in str(caught.value)


def test_a_negative_timeout_says_none_waits_for_ever() -> None:
    limiter = RateLimiter(10)
    with pytest.raises(ValueError, match="None waits for ever"):
        limiter.acquire(timeout=-1)
