"""Bad ``n``, ``now_ns``, clock readings and timeouts (issue 6): the same errors as
``RateLimiter``, and the table untouched."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from keyed_support import (
    SECOND,
    snapshot,
    used_limiter,
)
from limiter_model import FakeClock, TurningClock
from protocol_in_code.qos.limiter import RateLimiter

# ---------------------------------------------------------------------------------------------
# Bad arguments: the same errors as RateLimiter, the table untouched
# ---------------------------------------------------------------------------------------------

BAD_N = [-1, 1.5, 1.0, True, "1", 2**64, Decimal(1)]
BAD_NOW = [1.0, "1", True, 2**63, -(2**63) - 1, Decimal(5)]
KEYS_FOR_ERRORS: list[Any] = ["a", "brand-new", ("t", 1), ("brand", "new"), 2**70, 99]


def single_error(fn: Any) -> BaseException:
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("RateLimiter accepted it")


@pytest.mark.parametrize("key", KEYS_FOR_ERRORS, ids=repr)
@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "acquire"])
@pytest.mark.parametrize("value", BAD_N, ids=repr)
def test_a_bad_n_is_refused_as_rate_limiter_does_and_changes_nothing(
    key: Any, method: str, value: Any
) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    kwargs = {"timeout": 0} if method == "acquire" else {"now_ns": SECOND}
    want = single_error(lambda: getattr(RateLimiter(1), method)(value, **kwargs))
    with pytest.raises(Exception) as caught:
        getattr(limiter, method)(key, value, **kwargs)
    assert type(caught.value) is type(want), (caught.value, want)
    message = str(caught.value)
    assert "n " in message or message.startswith("n"), message
    assert str(value) in message or repr(value) in message, message
    assert snapshot(limiter) == before


@pytest.mark.parametrize("key", KEYS_FOR_ERRORS, ids=repr)
@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "available"])
@pytest.mark.parametrize("value", BAD_NOW, ids=repr)
def test_a_bad_now_ns_is_refused_as_rate_limiter_does_and_changes_nothing(
    key: Any, method: str, value: Any
) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    want = single_error(lambda: getattr(RateLimiter(1), method)(now_ns=value))
    with pytest.raises(Exception) as caught:
        getattr(limiter, method)(key, now_ns=value)
    assert type(caught.value) is type(want), (caught.value, want)
    assert "now_ns" in str(caught.value) and str(value) in str(caught.value)
    assert snapshot(limiter) == before


@pytest.mark.parametrize("reading", [1.5, "5", None, True, 2**63, -(2**63) - 1], ids=repr)
@pytest.mark.parametrize(
    "method", ["try_acquire", "check", "peek", "refund", "available", "acquire"]
)
def test_a_bad_clock_reading_is_refused_as_rate_limiter_does_and_changes_nothing(
    reading: Any, method: str
) -> None:
    limiter = used_limiter(clock=TurningClock(reading))
    before = snapshot(limiter)
    want = single_error(lambda: getattr(RateLimiter(1, clock=TurningClock(reading)), method)())
    for key in ("a", ("brand", "new")):
        with pytest.raises(Exception) as caught:
            getattr(limiter, method)(key)
        assert type(caught.value) is type(want), (caught.value, want)
        assert "clock" in str(caught.value)
    assert snapshot(limiter) == before


def test_a_clock_that_raises_lets_its_exception_through_and_changes_nothing() -> None:
    class ClockError(Exception):
        pass

    limiter = used_limiter(clock=TurningClock(ClockError("no time")))
    before = snapshot(limiter)
    for method in ("try_acquire", "check", "peek", "refund", "available", "acquire"):
        for key in ("a", "new", ("t", 1), ("new",)):
            with pytest.raises(ClockError):
                getattr(limiter, method)(key)
    assert snapshot(limiter) == before


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (float("nan"), ValueError), (-float("inf"), ValueError), ("1", TypeError)],
)
def test_a_bad_timeout_is_refused_and_changes_nothing(value: Any, error: type) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(error, match="timeout"):
        limiter.acquire("a", timeout=value)
    with pytest.raises(error, match="timeout"):
        asyncio.run(limiter.acquire_async("a", timeout=value))
    assert snapshot(limiter) == before
