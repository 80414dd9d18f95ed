"""An empty ``KeyedRateLimiter`` is true (issue 14).

Through ``__len__`` alone, a table that remembers no key (none is throttled at the moment) would
be false, and ``limiter = limiter or KeyedRateLimiter(...)`` would quietly put a new, unrelated
table in its place.
"""

from __future__ import annotations

import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code.qos.keyed import KeyedRateLimiter


def test_an_empty_table_is_true_and_is_not_replaced_by_or() -> None:
    limiter = KeyedRateLimiter(5, burst=10)
    assert len(limiter) == 0
    assert bool(limiter) is True
    kept = limiter or KeyedRateLimiter(1)
    assert kept is limiter


def test_a_table_stays_true_whatever_it_holds() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=2, shards=1)
    assert limiter.try_acquire("a", now_ns=0)
    assert len(limiter) == 1 and limiter
    limiter.refund("a", now_ns=0)
    assert len(limiter) == 0 and limiter


def test_a_subclass_may_still_say_otherwise() -> None:
    class Never(KeyedRateLimiter):
        def __bool__(self) -> bool:
            return False

    assert not Never(1)
