"""In-flight limits refuse what no call could use, naming the parameter and the value, and
change nothing when they do."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.concurrency")

from protocol_in_code.qos import ConcurrencyLimiter, KeyedConcurrencyLimiter, Lease, concurrency


@pytest.mark.parametrize(
    ("limit", "error", "message"),
    [
        (0, ValueError, "limit must be at least 1, not 0"),
        (-1, ValueError, "limit must be between 0 and 2\\*\\*64 - 1, not -1"),
        (1.5, TypeError, "limit"),
        (True, TypeError, "limit"),
        ("2", TypeError, "limit"),
    ],
)
def test_a_limit_is_a_count_of_at_least_one(limit: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        ConcurrencyLimiter(limit)
    with pytest.raises(error, match=message):
        KeyedConcurrencyLimiter(limit)
    with pytest.raises(error, match=message):
        ConcurrencyLimiter(1).resize(limit)


def test_n_and_timeout_are_named_with_their_values() -> None:
    limiter = ConcurrencyLimiter(2)
    with pytest.raises(ValueError, match="n must be at least 1, not 0"):
        limiter.try_acquire(0)
    with pytest.raises(ValueError, match="n=3 is more than the limit of 2"):
        limiter.acquire(3)
    with pytest.raises(TypeError, match="n"):
        limiter.try_acquire(1.0)
    with pytest.raises(ValueError, match="timeout"):
        limiter.acquire(timeout=-1)
    with pytest.raises(ValueError, match="timeout"):
        asyncio.run(limiter.acquire_async(timeout=float("nan")))
    with pytest.raises(ValueError, match="n=3 is more than the limit of 2"):
        asyncio.run(limiter.acquire_async(3))
    assert (limiter.in_flight, limiter.waiting, limiter.limit) == (0, 0, 2)


def test_keyed_arguments() -> None:
    with pytest.raises(ValueError, match="max_keys must be at least 1, not 0"):
        KeyedConcurrencyLimiter(1, max_keys=0)
    limiter = KeyedConcurrencyLimiter(2, max_keys=5)
    assert (limiter.limit, limiter.max_keys) == (2, 5)
    with pytest.raises(TypeError, match="key must be a str, bytes, int, float or a tuple"):
        limiter.try_acquire(object())
    with pytest.raises(ValueError, match="n=3 is more than the limit of 2"):
        limiter.try_acquire("a", 3)
    assert len(limiter) == 0


def test_the_classes_live_in_their_module() -> None:
    for cls in (ConcurrencyLimiter, KeyedConcurrencyLimiter, Lease):
        assert cls.__module__ == "protocol_in_code.qos.concurrency"
        assert getattr(concurrency, cls.__name__) is cls
    lease = ConcurrencyLimiter(1).acquire()
    assert repr(lease) == "Lease(n=1, token=1)"
    assert lease is not None
    lease.release()
    assert repr(lease) == "Lease(n=1, token=1, released)"


def test_both_classes_share_their_counts_and_resize() -> None:
    # Written once for both classes: the same docstrings, the same behaviour.
    for name in ("in_flight", "waiting", "limit", "resize"):
        one_doc = getattr(ConcurrencyLimiter, name).__doc__
        assert one_doc and one_doc == getattr(KeyedConcurrencyLimiter, name).__doc__
    one, keyed = ConcurrencyLimiter(3), KeyedConcurrencyLimiter(3)
    leases = [one.try_acquire(2), keyed.try_acquire("a", 2)]
    assert None not in leases
    one.resize(1)
    keyed.resize(1)
    for limiter in (one, keyed):
        assert (limiter.in_flight, limiter.waiting, limiter.limit) == (2, 0, 1)
