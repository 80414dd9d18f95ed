"""What the tests of ``KeyedRateLimiter``'s API share: outcomes, key kinds, and a look at a
table that changes nothing."""

from __future__ import annotations

import enum
from fractions import Fraction
from typing import Any

from limiter_model import FakeClock
from protocol_in_code.qos.keyed import (
    Decision,
    KeyedRateLimiter,
    LimitOutcome,
)

SECOND = 10**9
ALLOWED, DENIED, NEVER = LimitOutcome.ALLOWED, LimitOutcome.DENIED, LimitOutcome.NEVER
REFUSED = LimitOutcome.REFUSED
CODES = {0: ALLOWED, 1: DENIED, 2: NEVER, 3: REFUSED}
HANG_SECONDS = 60  # only a hang detector


class One(enum.IntEnum):
    ONE = 1


class Str(str):
    """A str subclass (goes through the object registry, equal to the plain str)."""


def stats_tuple(limiter: KeyedRateLimiter) -> tuple[int, int, int, int]:
    s = limiter.stats
    return (s.allowed, s.denied, s.refused, s.forgotten)


def key_reprs(limiter: KeyedRateLimiter) -> list[str]:
    return key_reprs_of(limiter)


def key_reprs_of(keys: Any) -> list[str]:
    return sorted(f"{type(k).__name__}:{k!r}" for k in keys)


def snapshot(limiter: KeyedRateLimiter) -> tuple:
    """What can be seen of the table without changing it: peeks at time 0 are decided at the
    table's (later) time and their wait reveals that time; they take nothing and never move
    the table's time forward."""
    keys = list(limiter)
    return (
        len(limiter),
        key_reprs(limiter),
        limiter.stats,
        [limiter.peek(k, n, now_ns=0) for k in keys for n in range(4)],
        limiter.peek("never-used", 1, now_ns=0),
        repr(limiter),
    )


def peeks_by_key(limiter: KeyedRateLimiter) -> dict[str, list[Decision]]:
    return {repr(k): [limiter.peek(k, n, now_ns=0) for n in range(4)] for k in limiter}


# A key of the registry's: a tuple holding an item no plain key equals.
OBJECT_KEY = ("t", Fraction(1, 3))


def used_limiter(**kwargs: Any) -> KeyedRateLimiter:
    """Four keys (fast and object paths), none of them full at the table's time (1 s)."""
    limiter = KeyedRateLimiter(bands=[(3, 5), (Fraction(7, 3), 4)], max_keys=8, shards=1, **kwargs)
    assert limiter.check("a", 3, now_ns=SECOND // 3).outcome is ALLOWED
    assert limiter.check(7, 2, now_ns=SECOND // 2).outcome is ALLOWED
    assert limiter.check(b"b", 3, now_ns=SECOND).outcome is ALLOWED
    assert limiter.check(OBJECT_KEY, 1, now_ns=SECOND).outcome is ALLOWED
    assert len(limiter) == 4
    return limiter


def full_table(max_keys: int = 2) -> KeyedRateLimiter:
    """``max_keys`` keys taken at 0 and 0.5 s (rate 1/s, burst 1): full of keys that cannot be
    forgotten until 1 s (the first) and 1.5 s. Its clock stands at 0.5 s."""
    limiter = KeyedRateLimiter(
        1, burst=1, max_keys=max_keys, shards=1, clock=FakeClock(SECOND // 2)
    )
    for i in range(max_keys):
        assert limiter.try_acquire(f"k{i}", now_ns=i * SECOND // 2)
    return limiter
