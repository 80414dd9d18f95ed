"""Every acquire form reads ``timeout`` the same way (issue 21): a number of seconds, finite
and >= 0, or None to wait for ever. A bad one is a ``TypeError`` or ``ValueError`` naming
``timeout``, raised before anything is taken or asked of a server, and the same for every
form: blocking and asyncio, one limit and keyed, in-process and Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from protocol_in_code.qos import KeyedRateLimiter, RateLimiter
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)


def run(awaitable: Any) -> Any:
    return asyncio.run(awaitable)


FORMS: dict[str, Callable[[Any], Any]] = {
    "RateLimiter.acquire": lambda t: RateLimiter(1).acquire(timeout=t),
    "RateLimiter.acquire_async": lambda t: run(RateLimiter(1).acquire_async(timeout=t)),
    "KeyedRateLimiter.acquire": lambda t: KeyedRateLimiter(1).acquire("k", timeout=t),
    "KeyedRateLimiter.acquire_async": lambda t: run(
        KeyedRateLimiter(1).acquire_async("k", timeout=t)
    ),
    "RedisRateLimiter.acquire": lambda t: RedisRateLimiter(
        qos_support.NoServer(), 1, name="k"
    ).acquire(timeout=t),
    "RedisKeyedRateLimiter.acquire": lambda t: RedisKeyedRateLimiter(
        qos_support.NoServer(), 1, name="clients"
    ).acquire("k", timeout=t),
    "AsyncRedisRateLimiter.acquire": lambda t: run(
        AsyncRedisRateLimiter(qos_support.NoServer(), 1, name="k").acquire(timeout=t)
    ),
    "AsyncRedisKeyedRateLimiter.acquire": lambda t: run(
        AsyncRedisKeyedRateLimiter(qos_support.NoServer(), 1, name="clients").acquire(
            "k", timeout=t
        )
    ),
}

BAD = [
    (10**400, ValueError),  # an int beyond any float: OverflowError before
    (-(10**400), ValueError),
    (-1, ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    ("1", TypeError),
    (True, TypeError),
    (object(), TypeError),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("timeout", "error"), BAD, ids=[repr(t)[:12] for t, _ in BAD])
def test_a_bad_timeout_is_refused_naming_timeout(form: str, timeout: Any, error: type) -> None:
    with pytest.raises(error, match=r"^timeout must be"):
        FORMS[form](timeout)


@pytest.mark.parametrize("form", FORMS)
def test_every_form_gives_the_same_message(form: str) -> None:
    with pytest.raises(ValueError) as raised:
        FORMS[form](10**400)
    with pytest.raises(ValueError) as native:
        RateLimiter(1).acquire(timeout=10**400)
    assert str(raised.value) == str(native.value)


@pytest.mark.parametrize("form", [f for f in FORMS if "Redis" not in f])
@pytest.mark.parametrize("timeout", [2.0**64, 1e30, 10**30])
def test_a_finite_timeout_beyond_any_duration_waits_for_ever(form: str, timeout: Any) -> None:
    """2**64 seconds is one past what a wait can hold (Duration::MAX, read as a float, rounds
    up to it): such a timeout, and any longer finite one, means no deadline, and the asyncio
    forms, which pass what is left of it back to the limiter, read it the same way."""
    assert FORMS[form](timeout) is True
