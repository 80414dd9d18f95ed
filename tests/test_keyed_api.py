"""The API of ``protocol_in_code.qos.keyed.KeyedRateLimiter`` (issue 6), with explicit values.

* Construction: rate/burst/per/bands/clock exactly as ``RateLimiter`` (same errors), no
  ``initial``/``start_ns``; ``max_keys`` and ``shards`` validated (the message names the
  parameter and the value); the shards share ``max_keys`` exactly, default shards
  ``min(16, max_keys)``.
* Every per-key method: signature and defaults; ``Decision`` for ALLOWED, DENIED, NEVER and
  REFUSED (wait_ns >= 1, remaining 0, nothing taken, counted as refused); ``peek`` answering
  REFUSED; ``refund`` of an unknown key doing nothing; forgetting; one clock per table.
* Keys: dict equality (``1 == 1.0 == True == Fraction(1) == Decimal(1) == numpy.int64(1) ==
  IntEnum``), ``"a"`` vs ``b"a"``, str subclasses, ints beyond 64 bits, tuples, non-integral
  floats, NaN as in a dict, unhashable keys; keys that raise or call back into the limiter.
* The table: ``iter`` (keys as given), ``in``, ``len``, ``stats`` (``KeyedStats``),
  ``max_keys``, ``bands``, ``repr``, pickle/copy/deepcopy.
* Bad ``n``/``now_ns``/clock/timeout values: the same errors as ``RateLimiter``, the table
  untouched. ``try_acquire_many``: codes equal to ``check`` one at a time, bad traces refused
  naming the index with the table untouched.
* Blocking ``acquire`` and ``acquire_async`` (short real sleeps only where the point is to
  sleep).

Model-based tests against ``keyed_model`` are in ``test_keyed_properties.py``.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import inspect
import os
import pickle
import random
import subprocess
import sys
import textwrap
import threading
import time
from array import array
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

import limiter_model as lm
import numpy
from limiter_model import FakeClock, TurningClock
from protocol_in_code.qos import limiter as limiter_module
from protocol_in_code.qos.keyed import (
    Band,
    Decision,
    KeyedRateLimiter,
    KeyedStats,
    LimitOutcome,
)
from protocol_in_code.qos.limiter import RateLimiter

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


# ---------------------------------------------------------------------------------------------
# The module and LimitOutcome
# ---------------------------------------------------------------------------------------------


def test_the_module_re_exports_the_limiter_records() -> None:
    from protocol_in_code.qos import keyed

    assert keyed.Band is limiter_module.Band
    assert keyed.Decision is limiter_module.Decision
    assert keyed.LimitOutcome is limiter_module.LimitOutcome
    assert {"KeyedRateLimiter", "KeyedStats", "Band", "Decision", "LimitOutcome"} <= set(
        getattr(keyed, "__all__", dir(keyed))
    )


def test_limit_outcome_has_a_fourth_member_refused() -> None:
    assert [m.name for m in LimitOutcome] == ["ALLOWED", "DENIED", "NEVER", "REFUSED"]
    assert [m.value for m in LimitOutcome] == ["Allowed", "Denied", "Never", "Refused"]
    assert LimitOutcome("Refused") is REFUSED and REFUSED == "Refused"
    assert isinstance(REFUSED, str)
    refused = Decision(REFUSED, 5, 0)
    assert refused.outcome is REFUSED and refused.allowed is False and not refused
    assert refused == Decision(REFUSED, 5, 0) and hash(refused) == hash(Decision(REFUSED, 5, 0))
    assert pickle.loads(pickle.dumps(refused)) == refused


def test_the_single_rate_limiter_never_answers_refused() -> None:
    limiter = RateLimiter(bands=[(2, 3), (1, 4)], start_ns=0)
    seen = set()
    for step in range(300):
        now = step * SECOND // 7
        n = step % 6
        for decision in (limiter.peek(n, now_ns=now), limiter.check(n, now_ns=now)):
            seen.add(decision.outcome)
            assert decision.outcome is not REFUSED
        limiter.try_acquire(now_ns=now)
    assert seen == {ALLOWED, DENIED, NEVER}


# ---------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------


def test_the_constructor_signature() -> None:
    params = inspect.signature(KeyedRateLimiter).parameters
    assert [(p.name, p.kind, p.default) for p in params.values()] == [
        ("rate", inspect.Parameter.POSITIONAL_OR_KEYWORD, None),
        ("burst", inspect.Parameter.KEYWORD_ONLY, None),
        ("per", inspect.Parameter.KEYWORD_ONLY, None),
        ("bands", inspect.Parameter.KEYWORD_ONLY, None),
        ("max_keys", inspect.Parameter.KEYWORD_ONLY, 100_000),
        ("shards", inspect.Parameter.KEYWORD_ONLY, None),
        ("clock", inspect.Parameter.KEYWORD_ONLY, None),
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate": 10},
        {"rate": 0.1},
        {"rate": Decimal("12.50")},
        {"rate": "2/minute"},
        {"rate": 10, "per": 60},
        {"rate": 3, "burst": 1, "per": Fraction(1, 2)},
        {"bands": [Band(10, burst=10), Band(1000, per=3600)]},
        {"bands": [(1, 2), (3, None, 60), ("0.5", 4, 1)]},
    ],
)
def test_bands_are_read_as_rate_limiter_reads_them(kwargs: dict[str, Any]) -> None:
    keyed = KeyedRateLimiter(**kwargs)
    assert keyed.bands == RateLimiter(**kwargs).bands
    assert keyed.max_keys == 100_000
    assert type(keyed.max_keys) is int


BAD_CONFIG: list[tuple[dict[str, Any], type, str]] = [
    ({"rate": 0}, ValueError, "rate"),
    ({"rate": -1}, ValueError, "rate"),
    ({"rate": float("nan")}, ValueError, "rate"),
    ({"rate": True}, TypeError, "rate"),
    ({"rate": "abc"}, ValueError, "rate"),
    ({"rate": None}, TypeError, "rate"),
    ({"rate": [1]}, TypeError, "rate"),
    ({"rate": 1, "burst": 0}, ValueError, "burst"),
    ({"rate": 1, "burst": 2.0}, TypeError, "burst"),
    ({"rate": 1, "burst": True}, TypeError, "burst"),
    ({"rate": 1, "burst": 2**64}, ValueError, "burst"),
    ({"rate": 1, "per": 0}, ValueError, "per"),
    ({"rate": 1, "per": True}, TypeError, "per"),
    ({"rate": 1, "clock": 3}, TypeError, "clock"),
    ({"rate": 1, "bands": [(1, 1)]}, TypeError, "bands"),
    ({}, TypeError, "bands"),
    ({"bands": []}, ValueError, "bands"),
    ({"bands": [(1,)]}, TypeError, "band"),
    ({"bands": [(0, 1)]}, ValueError, "rate"),
    ({"bands": [(1, 0)]}, ValueError, "burst"),
]


@pytest.mark.parametrize(("kwargs", "error", "name"), BAD_CONFIG)
def test_bad_bands_are_refused_as_rate_limiter_refuses_them(
    kwargs: dict[str, Any], error: type, name: str
) -> None:
    with pytest.raises(error) as single:
        RateLimiter(**kwargs)
    with pytest.raises(error) as keyed:
        KeyedRateLimiter(**kwargs)
    assert type(keyed.value) is type(single.value) is error
    assert name in str(keyed.value), keyed.value
    assert str(keyed.value) == str(single.value)


@pytest.mark.parametrize("kwargs", [{"initial": 1}, {"start_ns": 0}])
def test_there_is_no_initial_and_no_start_ns(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        KeyedRateLimiter(1, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "name", "value"),
    [
        ({"max_keys": 0}, ValueError, "max_keys", "0"),
        ({"max_keys": -1}, ValueError, "max_keys", "-1"),
        ({"max_keys": -(2**70)}, ValueError, "max_keys", str(-(2**70))),
        ({"max_keys": True}, TypeError, "max_keys", "True"),
        ({"max_keys": False}, TypeError, "max_keys", "False"),
        ({"max_keys": 10.0}, TypeError, "max_keys", "10.0"),
        ({"max_keys": "10"}, TypeError, "max_keys", "10"),
        ({"max_keys": None}, TypeError, "max_keys", "None"),
        ({"max_keys": 10, "shards": 0}, ValueError, "shards", "0"),
        ({"max_keys": 10, "shards": -3}, ValueError, "shards", "-3"),
        ({"max_keys": 10, "shards": 11}, ValueError, "shards", "11"),
        ({"max_keys": 3, "shards": 16}, ValueError, "shards", "16"),
        ({"max_keys": 10, "shards": True}, TypeError, "shards", "True"),
        ({"max_keys": 10, "shards": 2.0}, TypeError, "shards", "2.0"),
    ],
)
def test_bad_max_keys_and_shards_are_refused_naming_them(
    kwargs: dict[str, Any], error: type, name: str, value: str
) -> None:
    with pytest.raises(error) as caught:
        KeyedRateLimiter(1, **kwargs)
    assert type(caught.value) is error
    message = str(caught.value)
    assert name in message and value in message, message


@pytest.mark.parametrize(
    ("max_keys", "shards", "capacity"),
    [
        (1, None, 1),  # default shards = min(16, 1) = 1
        (10, None, 10),  # default 10 shards
        (1000, None, 1000),  # default 16 shards
        (1000, 1, 1000),
        (1000, 7, 1000),
        (5, 2, 5),
        (5, 5, 5),
    ],
)
def test_the_shards_share_max_keys_exactly(
    max_keys: int, shards: int | None, capacity: int
) -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=max_keys, shards=shards)
    keys = numpy.arange(50 * max_keys + 2000, dtype=numpy.int64)
    codes = limiter.try_acquire_many(keys, numpy.zeros(len(keys), dtype=numpy.int64))
    allowed = codes.count(0)
    assert allowed == capacity == len(limiter), (allowed, len(limiter))
    assert codes.count(3) == len(keys) - capacity
    assert set(codes) == {0, 3}
    assert stats_tuple(limiter) == (capacity, 0, len(keys) - capacity, 0)


# ---------------------------------------------------------------------------------------------
# Per-key methods
# ---------------------------------------------------------------------------------------------

SIGNATURES: dict[str, list[tuple[str, Any]]] = {
    "try_acquire": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None)],
    "check": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None)],
    "peek": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None)],
    "refund": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None)],
    "available": [("key", inspect.Parameter.empty), ("now_ns", None)],
    "acquire": [("key", inspect.Parameter.empty), ("n", 1), ("timeout", None)],
    "acquire_async": [("key", inspect.Parameter.empty), ("n", 1), ("timeout", None)],
    "try_acquire_many": [
        ("keys", inspect.Parameter.empty),
        ("now_ns", inspect.Parameter.empty),
        ("n", None),
    ],
}


@pytest.mark.parametrize("method", sorted(SIGNATURES))
def test_method_signatures_and_defaults(method: str) -> None:
    params = [
        (p.name, p.default)
        for p in inspect.signature(getattr(KeyedRateLimiter, method)).parameters.values()
        if p.name != "self"
    ]
    assert params == SIGNATURES[method]


def test_the_defaults_are_one_token_and_the_clock() -> None:
    clock = FakeClock(now=5 * SECOND)
    limiter = KeyedRateLimiter(1, burst=3, clock=clock)
    assert limiter.try_acquire("k") is True
    assert limiter.check("k") == Decision(ALLOWED, 0, 1)
    assert limiter.peek("k") == Decision(ALLOWED, 0, 1)
    assert limiter.available("k") == 1
    limiter.refund("k")
    assert limiter.available("k") == 2
    # Positional n and now_ns.
    assert limiter.check("k", 2, 5 * SECOND) == Decision(ALLOWED, 0, 0)
    assert limiter.peek("k", 1, 5 * SECOND) == Decision(DENIED, SECOND, 0)
    assert clock.reads >= 5


def test_each_key_starts_full_and_is_its_own_limiter() -> None:
    limiter = KeyedRateLimiter(bands=[(10, 10), (Fraction(1, 3), 4)], max_keys=10, shards=1)
    assert limiter.available("x", now_ns=0) == 4
    assert [limiter.try_acquire("x", now_ns=0) for _ in range(5)] == [True] * 4 + [False]
    assert limiter.available("y", now_ns=0) == 4, "another key is untouched"
    assert limiter.check("y", 4, now_ns=0) == Decision(ALLOWED, 0, 0)
    assert limiter.check("x", now_ns=0) == Decision(DENIED, 3 * SECOND, 0)
    assert limiter.check("x", now_ns=3 * SECOND - 1) == Decision(DENIED, 1, 0)
    assert limiter.check("x", now_ns=3 * SECOND) == Decision(ALLOWED, 0, 0)


def test_a_new_key_is_anchored_at_its_first_call() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    late = 10**15
    assert limiter.check("k", 2, now_ns=late) == Decision(ALLOWED, 0, 0)
    assert limiter.check("k", now_ns=late) == Decision(DENIED, SECOND, 0)
    # A key first seen later is full then (not credited from the table's creation).
    assert limiter.check("j", 2, now_ns=late + 5) == Decision(ALLOWED, 0, 0)
    assert limiter.peek("j", now_ns=late + 5) == Decision(DENIED, SECOND, 0)


def test_decision_fields_for_allowed_denied_and_never() -> None:
    limiter = KeyedRateLimiter(bands=[(2, 3), (1, 5)], max_keys=10, shards=1)
    assert limiter.check("k", now_ns=0) == Decision(ALLOWED, 0, 2)
    assert limiter.check("k", 2, now_ns=0) == Decision(ALLOWED, 0, 0)
    assert limiter.check("k", now_ns=0) == Decision(DENIED, SECOND // 2, 0)
    never = limiter.check("k", 4, now_ns=0)
    assert never == Decision(NEVER, None, 0)
    # NEVER for a key that is not remembered: remaining is its full burst (min over bands).
    assert limiter.check("fresh", 4, now_ns=0) == Decision(NEVER, None, 3)
    assert "fresh" not in limiter
    assert limiter.peek("fresh", 4, now_ns=0) == Decision(NEVER, None, 3)
    # NEVER counts as denied.
    assert stats_tuple(limiter) == (2, 3, 0, 0)


def full_table(max_keys: int = 2) -> KeyedRateLimiter:
    """``max_keys`` keys taken at 0 and 0.5 s (rate 1/s, burst 1): full of keys that cannot be
    forgotten until 1 s (the first) and 1.5 s. Its clock stands at 0.5 s."""
    limiter = KeyedRateLimiter(
        1, burst=1, max_keys=max_keys, shards=1, clock=FakeClock(SECOND // 2)
    )
    for i in range(max_keys):
        assert limiter.try_acquire(f"k{i}", now_ns=i * SECOND // 2)
    return limiter


def test_refused_takes_nothing_and_says_when_room_may_appear() -> None:
    limiter = full_table(2)  # k0 full again at 1 s, k1 at 1.5 s; the table's time is 0.5 s
    before = stats_tuple(limiter)
    refused = limiter.check("new", now_ns=SECOND // 2)
    assert refused.outcome is REFUSED
    assert type(refused.wait_ns) is int and refused.wait_ns >= 1
    assert refused.remaining == 0
    assert refused.wait_ns == SECOND // 2, "k0 can be forgotten in 0.5 s"
    assert refused == Decision(REFUSED, SECOND // 2, 0)
    assert "new" not in limiter and len(limiter) == 2
    assert stats_tuple(limiter) == (before[0], before[1], before[2] + 1, before[3])
    assert limiter.try_acquire("new", now_ns=SECOND // 2) is False
    assert limiter.stats.refused == before[2] + 2
    # The other keys were not disturbed: still throttled.
    assert limiter.peek("k0", now_ns=SECOND // 2) == Decision(DENIED, SECOND // 2, 0)
    assert limiter.peek("k1", now_ns=SECOND // 2) == Decision(DENIED, SECOND, 0)
    # The hint is exact here: at 1 s k0 is full and can be forgotten, making room.
    assert limiter.check("new", now_ns=SECOND - 1).outcome is REFUSED
    assert limiter.check("new", now_ns=SECOND) == Decision(ALLOWED, 0, 0)
    assert "new" in limiter and len(limiter) == 2
    assert limiter.stats.forgotten >= 1


def test_the_refused_hint_follows_the_keys_as_they_change() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=1, shards=1)
    assert limiter.check("a", now_ns=0) == Decision(ALLOWED, 0, 1)  # a is full again at 1 s
    assert limiter.check("b", now_ns=0) == Decision(REFUSED, SECOND, 0)
    assert limiter.check("a", now_ns=0) == Decision(ALLOWED, 0, 0)  # now only at 2 s
    hint = limiter.check("b", now_ns=0)
    assert hint == Decision(REFUSED, 2 * SECOND, 0), (
        f"after a was drained further, b is refused with {hint}: a cannot be forgotten before "
        "2 s (a stale hint from the first refusal)"
    )
    assert limiter.check("b", now_ns=SECOND).outcome is REFUSED
    # A refund brings the time forward again.
    limiter.refund("a", now_ns=SECOND)  # a: 2 at 1 s, full: may be forgotten
    assert limiter.check("b", now_ns=SECOND) == Decision(ALLOWED, 0, 1)


def test_a_refused_wait_counts_from_the_callers_time() -> None:
    limiter = full_table(2)  # table time 0.5 s
    assert limiter.check("new", now_ns=0) == Decision(REFUSED, SECOND, 0)


def test_requests_that_leave_nothing_to_remember_are_not_refused() -> None:
    limiter = full_table(2)
    t = SECOND // 2
    # n=0 leaves the new key full: nothing to remember, so it is allowed.
    assert limiter.check("new", 0, now_ns=t) == Decision(ALLOWED, 0, 1)
    # More than the burst: NEVER, not REFUSED.
    assert limiter.check("new", 2, now_ns=t) == Decision(NEVER, None, 1)
    assert limiter.peek("new", 2, now_ns=t) == Decision(NEVER, None, 1)
    # A known key is never refused.
    assert limiter.check("k1", now_ns=t).outcome is DENIED
    assert "new" not in limiter and len(limiter) == 2


def test_peek_answers_refused_and_counts_nothing() -> None:
    limiter = full_table(2)
    before = stats_tuple(limiter)
    assert limiter.peek("new", now_ns=SECOND // 2) == Decision(REFUSED, SECOND // 2, 0)
    assert limiter.peek("new", 0, now_ns=SECOND // 2) == Decision(ALLOWED, 0, 1)
    assert stats_tuple(limiter) == before
    assert "new" not in limiter
    assert limiter.available("new", now_ns=SECOND // 2) == 1
    assert stats_tuple(limiter) == before


def test_refund_of_an_unknown_key_does_nothing() -> None:
    limiter = full_table(2)
    before = snapshot(limiter)
    limiter.refund("unknown", now_ns=SECOND // 2)
    limiter.refund("unknown", 5, now_ns=SECOND // 2)
    limiter.refund(("a", "tuple"), now_ns=SECOND // 2)
    assert snapshot(limiter) == before
    assert "unknown" not in limiter
    assert limiter.available("unknown", now_ns=SECOND // 2) == 1


def test_refund_is_capped_at_each_burst_and_a_full_key_may_be_forgotten() -> None:
    limiter = KeyedRateLimiter(bands=[(1, 3), (1, 5)], max_keys=4, shards=1)
    assert limiter.check("k", 4, now_ns=0).outcome is NEVER
    assert limiter.check("k", 3, now_ns=0) == Decision(ALLOWED, 0, 0)
    limiter.refund("k", 1, now_ns=0)
    assert limiter.available("k", now_ns=0) == 1
    limiter.refund("k", 10, now_ns=0)
    assert limiter.available("k", now_ns=0) == 3
    # Full again: it is indistinguishable from a fresh key, and may be forgotten; either way
    # it answers as a fresh key.
    assert limiter.check("k", 3, now_ns=0) == Decision(ALLOWED, 0, 0)


def test_a_key_touched_when_full_is_forgotten() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=4, shards=1)
    assert limiter.try_acquire("k", now_ns=0)
    assert "k" in limiter and len(limiter) == 1
    assert limiter.check("k", 0, now_ns=SECOND) == Decision(ALLOWED, 0, 2)
    assert "k" not in limiter and len(limiter) == 0
    assert limiter.stats == KeyedStats(2, 0, 0, 1)
    assert list(limiter) == []


def test_a_throttled_key_is_never_forgotten_however_many_keys_arrive() -> None:
    limiter = KeyedRateLimiter(Fraction(1, 1000), burst=3, max_keys=4, shards=1)
    assert limiter.check("slow", 3, now_ns=0).outcome is ALLOWED
    for i in range(1000):
        limiter.check(i, now_ns=i)  # the three first are remembered, then refusals
    assert "slow" in limiter and len(limiter) == 4
    assert limiter.check("slow", now_ns=1000).outcome is DENIED
    assert limiter.stats == KeyedStats(4, 1, 997, 0)


def test_one_clock_per_table_an_earlier_call_is_decided_at_the_latest_time() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=10, shards=1)
    limiter.peek("other", now_ns=10 * SECOND)  # a peek moves the table's time too
    assert limiter.check("k", now_ns=0) == Decision(ALLOWED, 0, 0)  # anchored at 10 s
    assert limiter.check("k", now_ns=0) == Decision(DENIED, 11 * SECOND, 0)
    assert limiter.check("k", now_ns=10 * SECOND) == Decision(DENIED, SECOND, 0)
    assert limiter.check("k", now_ns=11 * SECOND) == Decision(ALLOWED, 0, 0)
    # Going back after 11 s: decided at 11 s, the wait counts from the caller's time.
    assert limiter.peek("k", now_ns=5 * SECOND) == Decision(DENIED, 7 * SECOND, 0)
    assert limiter.available("k", now_ns=100 * SECOND) == 1
    assert limiter.peek("k", now_ns=50 * SECOND) == Decision(ALLOWED, 0, 1)


@pytest.mark.parametrize("method", ["available", "refund"])
def test_available_and_refund_move_the_table_time(method: str) -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=10, shards=1)
    getattr(limiter, method)("other", now_ns=10 * SECOND)
    assert limiter.check("k", now_ns=0).outcome is ALLOWED
    assert limiter.check("k", now_ns=0) == Decision(DENIED, 11 * SECOND, 0)


def test_now_ns_overrides_the_clock() -> None:
    clock = TurningClock(AssertionError("the clock must not be read when now_ns is given"))
    limiter = KeyedRateLimiter(2, clock=clock)
    assert limiter.try_acquire("a", now_ns=5) is True
    assert limiter.check("a", now_ns=5) == Decision(ALLOWED, 0, 0)
    assert limiter.peek("a", now_ns=5).wait_ns == SECOND // 2
    limiter.refund("a", now_ns=5)
    assert limiter.available("a", now_ns=5) == 1
    codes = limiter.try_acquire_many([1, 1, 1], [5, 5, 5])
    assert list(codes) == [0, 0, 1]


def test_an_injected_clock_drives_every_operation_without_sleeping() -> None:
    clock = FakeClock(now=7 * SECOND)
    limiter = KeyedRateLimiter(bands=[(4, 4), (Fraction(1, 3), 10)], clock=clock)
    models = {k: lm.model_from(bands=[(4, 4), (Fraction(1, 3), 10)]) for k in ("a", 2, (3,))}
    began = time.monotonic()
    for round_ in range(4):
        for key, model in models.items():
            for _ in range(3):
                assert limiter.try_acquire(key) == model.try_acquire(1, clock.now)
            got, want = limiter.check(key, 2), model.check(2, clock.now)
            assert (got.outcome.value, got.wait_ns, got.remaining) == (
                want.outcome,
                want.wait_ns,
                want.remaining,
            )
            assert limiter.available(key) == model.available(clock.now)
            limiter.refund(key)
            model.refund(1, clock.now)
        clock.advance(SECOND // 4 + round_)
    clock.advance(60 * SECOND)  # all full again
    with qos_support.watchdog(HANG_SECONDS):
        assert limiter.acquire("a") is True
        assert limiter.acquire("a", 3, timeout=0) is True
        assert limiter.acquire("a", timeout=0) is False, "empty: timeout=0 does not wait"
    assert time.monotonic() - began < 1.0, "an injected clock must not make anything sleep"
    assert clock.reads > 0


def test_the_default_clock_is_time_monotonic_ns() -> None:
    limiter = KeyedRateLimiter(1, max_keys=10)
    before = time.monotonic_ns()
    assert limiter.check("k").outcome is ALLOWED
    after = time.monotonic_ns()
    denied = limiter.check("k")
    assert denied.outcome is DENIED and 0 < denied.wait_ns <= SECOND
    assert limiter.peek("k", now_ns=before + SECOND - 1).outcome is DENIED
    assert limiter.peek("k", now_ns=after + SECOND).outcome is ALLOWED


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------

ONE_KEYS: list[Any] = [1, 1.0, True, Fraction(1), Decimal(1), numpy.int64(1), One.ONE]


@pytest.mark.parametrize("first", ONE_KEYS, ids=lambda k: f"{type(k).__name__}")
def test_keys_equal_as_dict_keys_are_one_key(first: Any) -> None:
    limiter = KeyedRateLimiter(1, burst=len(ONE_KEYS) + 1, max_keys=100, shards=1)
    assert limiter.try_acquire(first, now_ns=0)
    for other in ONE_KEYS:
        assert other in limiter, f"{other!r} ({type(other).__name__}) is not {first!r}"
        assert limiter.try_acquire(other, now_ns=0), other
    assert len(limiter) == 1
    assert limiter.available(1, now_ns=0) == 0
    assert limiter.check(numpy.uint8(1), now_ns=0).outcome is DENIED
    assert limiter.available(2, now_ns=0) == len(ONE_KEYS) + 1
    assert limiter.available(numpy.int64(2), now_ns=0) == len(ONE_KEYS) + 1


@pytest.mark.parametrize(
    "group",
    [
        [0, 0.0, -0.0, False, Fraction(0), Decimal("-0"), numpy.int32(0)],
        [2**70, float(2**70), Fraction(2**70), Decimal(2**70)],
        [2**63, float(2**63), numpy.uint64(2**63)],
        [2**64, float(2**64)],
        [-(2**63), float(-(2**63)), numpy.int64(-(2**63))],
        [int(1e300), 1e300],
        [0.5, Fraction(1, 2), Decimal("0.5"), numpy.float64(0.5)],
        [(1, "a"), (1.0, "a"), (True, Str("a"))],
        ["a", Str("a")],
        [("t", (1, 2)), ("t", (1.0, Fraction(2)))],
        [frozenset({1, 2}), frozenset({2.0, 1})],
    ],
    ids=repr,
)
def test_equal_keys_across_types_and_paths(group: list[Any]) -> None:
    for first in group:
        limiter = KeyedRateLimiter(1, burst=len(group), max_keys=100, shards=1)
        assert limiter.try_acquire(first, now_ns=0)
        for other in group:
            assert other in limiter, f"{other!r} is not the same key as {first!r}"
        for other in group[1:]:
            assert limiter.try_acquire(other, now_ns=0), other
        assert len(limiter) == 1, list(limiter)
        assert limiter.check(first, now_ns=0).outcome is DENIED


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("a", b"a"),
        ("", b""),
        ("1", 1),
        (b"\x01", 1),
        (0, 2**64),
        (1, 2**64 + 1),
        (-1, 2**64 - 1),
        (2**63, -(2**63)),
        (2**63 - 1, 2**63),
        (2**100, -(2**100)),
        (0, ""),
        (0, None),
        (1, (1,)),
        ((1, 2), (2, 1)),
        (0.5, 0.25),
        (2**53, 2**53 + 1),
        (float(2**53), 2**53 + 1),
    ],
    ids=repr,
)
def test_different_keys_are_different_clients(a: Any, b: Any) -> None:
    qos_support.assert_two_keys(a, b, KeyedRateLimiter(1, burst=1, max_keys=100, shards=1))


def test_nan_behaves_as_in_a_dict() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=100, shards=1)
    nan = float("nan")
    other_nan = float("nan")
    table: dict[Any, int] = {nan: 1}
    assert nan in table and other_nan not in table  # what a dict does
    assert limiter.try_acquire(nan, now_ns=0)
    assert nan in limiter
    assert limiter.try_acquire(nan, now_ns=0) is False, "the same NaN object is one key"
    assert other_nan not in limiter
    assert limiter.try_acquire(other_nan, now_ns=0), "another NaN object is another key"
    assert len(limiter) == 2
    keys = list(limiter)
    assert any(k is nan for k in keys) and any(k is other_nan for k in keys)
    tuple_nan = (nan,)
    assert limiter.try_acquire(tuple_nan, now_ns=0)
    assert limiter.try_acquire((nan,), now_ns=0) is False, "(nan,) == (nan,) by identity"


@pytest.mark.parametrize("key", [[1], {"a": 1}, {1}, bytearray(b"a"), (1, [2])], ids=repr)
@pytest.mark.parametrize(
    "method", ["try_acquire", "check", "peek", "refund", "available", "acquire", "in"]
)
def test_an_unhashable_key_raises_type_error_and_changes_nothing(key: Any, method: str) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(TypeError):
        if method == "in":
            _ = key in limiter
        elif method == "acquire":
            limiter.acquire(key, timeout=0)
        elif method == "available":
            limiter.available(key, now_ns=SECOND)
        else:
            getattr(limiter, method)(key, now_ns=SECOND)
    assert snapshot(limiter) == before


def test_an_unhashable_key_in_acquire_async_raises_type_error() -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(TypeError):
        asyncio.run(limiter.acquire_async([1], timeout=0))
    assert snapshot(limiter) == before


class HashError(Exception):
    pass


class BadHash:
    def __hash__(self) -> int:
        raise HashError("no hash")


class BadEq:
    """Hashes as ``OBJECT_KEY`` (a key of ``used_limiter``), and refuses to compare."""

    def __hash__(self) -> int:
        return hash(OBJECT_KEY)

    def __eq__(self, other: object) -> bool:
        raise HashError("no eq")


@pytest.mark.parametrize("key", [BadHash(), (1, BadHash()), BadEq()], ids=repr)
@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "available", "in"])
def test_a_key_whose_hash_or_eq_raises_lets_the_error_through(key: Any, method: str) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(HashError):
        if method == "in":
            _ = key in limiter
        elif method == "available":
            limiter.available(key, now_ns=SECOND)
        else:
            getattr(limiter, method)(key, now_ns=SECOND)
    assert snapshot(limiter) == before
    # The registry's lock was released: object keys still work.
    assert limiter.check(OBJECT_KEY, 0, now_ns=SECOND).outcome is ALLOWED


INNER_KEY = ("inner", Fraction(1, 3))


class CallsBack:
    """A key whose ``__hash__`` or ``__eq__`` calls back into the limiter (with an object
    key, which needs the registry)."""

    def __init__(self, limiter: KeyedRateLimiter, where: str, hash_as: Any) -> None:
        self.limiter, self.where, self.hash_as = limiter, where, hash_as
        self.inner: list[str] = []

    def _call_back(self) -> None:
        try:
            self.limiter.check(INNER_KEY, now_ns=SECOND)
        except RuntimeError:
            self.inner.append("RuntimeError")
            raise
        self.inner.append("returned")

    def __hash__(self) -> int:
        if self.where == "hash":
            self._call_back()
        return hash(self.hash_as)

    def __eq__(self, other: object) -> bool:
        if self.where == "eq":
            self._call_back()
        return False


def run_with_timeout(fn: Any, seconds: float = 10) -> dict[str, Any]:
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:
            result["exc"] = exc

    worker = threading.Thread(target=target, daemon=True)
    with qos_support.watchdog(HANG_SECONDS):
        worker.start()
        worker.join(seconds)
    assert not worker.is_alive(), "deadlock: the call did not return"
    return result


@pytest.mark.parametrize("where", ["hash", "eq"])
@pytest.mark.parametrize("method", ["check", "try_acquire", "peek", "available", "refund"])
def test_a_key_calling_back_into_the_limiter_is_served_as_a_dict_would_serve_it(
    where: str, method: str
) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = peeks_by_key(limiter)
    before_stats = stats_tuple(limiter)
    key = CallsBack(limiter, where, OBJECT_KEY)  # hashes as a remembered key: __eq__ is called
    result = run_with_timeout(lambda: getattr(limiter, method)(key, now_ns=SECOND))
    assert "exc" not in result, (
        f"{method} with a key whose __{where}__ calls back into the limiter gave {result} "
        f"(inner call: {key.inner})"
    )
    assert key.inner and set(key.inner) == {"returned"}, key.inner
    # The key equals no other (its __eq__ says so), so it is a new key of its own; the inner
    # calls checked INNER_KEY; nothing else changed.
    stores = method in ("check", "try_acquire")
    allowed, denied, refused, forgotten = stats_tuple(limiter)
    assert (allowed - len(key.inner) - stores, denied, refused, forgotten) == before_stats
    assert any(k is key for k in limiter) is stores
    after = peeks_by_key(limiter)
    after.pop(repr(INNER_KEY), None)
    assert {k: v for k, v in after.items() if "CallsBack" not in k} == before
    # Nothing stays locked.
    again = run_with_timeout(lambda: limiter.check(OBJECT_KEY, 0, now_ns=SECOND))
    assert again.get("value") == Decision(ALLOWED, 0, 3), again


def test_a_key_calling_back_on_the_fast_path_does_not_deadlock() -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))

    class FastCallBack:
        def __hash__(self) -> int:
            limiter.check("a", 0, now_ns=SECOND)
            _ = len(limiter)
            return 12345

    result = run_with_timeout(lambda: limiter.check(FastCallBack(), now_ns=SECOND))
    assert "value" in result or isinstance(result.get("exc"), RuntimeError), result


def test_iteration_returns_the_keys_as_given() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    big = 2**70
    first_tuple = ("x", Fraction(1, 3))
    frac = Fraction(1, 3)
    given = ["name", 12345678901, -5, b"raw", (1, "x"), first_tuple, big, frac, 0.25]
    for key in given:
        assert limiter.try_acquire(key, now_ns=0)
    # Equal keys given later do not replace the first object (a key read natively comes back
    # as its plain value: the tuple (1.0, "x") as (1, "x")).
    assert limiter.try_acquire((1.0, "x"), now_ns=0)
    assert limiter.try_acquire(("x", Fraction(2, 6)), now_ns=0)
    assert limiter.try_acquire(Fraction(big), now_ns=0)
    keys = list(limiter)
    assert len(keys) == len(given) == len(limiter)
    by_repr = {f"{type(k).__name__}:{k!r}": k for k in keys}
    assert set(by_repr) == {f"{type(k).__name__}:{k!r}" for k in given}, keys
    assert by_repr["str:'name'"] == "name"
    assert type(by_repr["int:12345678901"]) is int and by_repr["int:-5"] == -5
    assert type(by_repr["bytes:b'raw'"]) is bytes
    assert type(by_repr["tuple:(1, 'x')"][0]) is int
    assert any(k is first_tuple for k in keys), "not the first tuple object"
    assert any(k is frac for k in keys)
    assert by_repr[f"int:{big!r}"] == big
    # A snapshot: changing the table while iterating is fine.
    for key in limiter:
        limiter.check(key, 0, now_ns=10 * SECOND)
    assert list(limiter) == [] and len(limiter) == 0


class Bytes(bytes):
    """A bytes subclass."""


@pytest.mark.parametrize(
    ("first", "canonical"),
    [
        (True, 1),
        (1.0, 1),
        (Fraction(1), 1),
        (Decimal(1), 1),
        (numpy.int64(1), 1),
        (One.ONE, 1),
        (-(2.0**63), -(2**63)),
        (Str("a"), "a"),
        (Bytes(b"a"), b"a"),
    ],
    ids=repr,
)
def test_fast_path_keys_come_back_in_their_canonical_type(first: Any, canonical: Any) -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    assert limiter.try_acquire(first, now_ns=0)
    (key,) = list(limiter)
    assert type(key) is type(canonical) and key == canonical, (first, key)


def test_len_and_in() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=100, shards=1)
    assert len(limiter) == 0 and "a" not in limiter
    limiter.try_acquire("a", now_ns=0)
    limiter.try_acquire(b"a", now_ns=0)
    limiter.try_acquire(("a",), now_ns=0)
    assert len(limiter) == 3
    assert "a" in limiter and b"a" in limiter and ("a",) in limiter
    assert Str("a") in limiter and "b" not in limiter and ("b",) not in limiter
    limiter.peek("c", now_ns=0)
    limiter.available("d", now_ns=0)
    assert len(limiter) == 3 and "c" not in limiter and "d" not in limiter


# ---------------------------------------------------------------------------------------------
# Stats, properties, repr
# ---------------------------------------------------------------------------------------------


def test_stats_count_decisions() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=1, shards=1)
    assert limiter.stats == KeyedStats(0, 0, 0, 0)
    limiter.try_acquire("a", now_ns=0)  # allowed
    limiter.check("a", now_ns=0)  # allowed
    limiter.check("a", now_ns=0)  # denied
    limiter.check("a", 3, now_ns=0)  # never: denied
    limiter.check("b", now_ns=0)  # refused
    limiter.try_acquire("b", now_ns=0)  # refused
    limiter.peek("a", now_ns=0)
    limiter.peek("b", now_ns=0)
    limiter.available("a", now_ns=0)
    limiter.refund("a", 0, now_ns=0)
    codes = limiter.try_acquire_many([5, 5], [0, 0], n=[1, 3])  # refused, never
    assert list(codes) == [3, 2]
    assert limiter.stats == KeyedStats(allowed=2, denied=3, refused=3, forgotten=0)
    limiter.check("b", now_ns=2 * SECOND)  # a is full at 2 s: forgotten, b allowed
    assert limiter.stats == KeyedStats(allowed=3, denied=3, refused=3, forgotten=1)


def test_stats_count_acquire_attempts() -> None:
    clock = FakeClock(0)
    limiter = KeyedRateLimiter(1, burst=1, max_keys=1, shards=1, clock=clock)
    assert limiter.acquire("a") is True
    assert limiter.stats == KeyedStats(1, 0, 0, 0)
    assert limiter.acquire("a", timeout=0) is False
    assert limiter.stats == KeyedStats(1, 1, 0, 0)
    assert limiter.acquire("b", timeout=0) is False
    assert limiter.stats == KeyedStats(1, 1, 1, 0)
    assert asyncio.run(limiter.acquire_async("a", timeout=0)) is False
    assert asyncio.run(limiter.acquire_async("b", timeout=0)) is False
    assert limiter.stats == KeyedStats(1, 2, 2, 0)
    clock.advance(SECOND)  # a is full again: it can be forgotten for b
    assert asyncio.run(limiter.acquire_async("b", timeout=0)) is True
    assert limiter.stats == KeyedStats(2, 2, 2, 1)


def test_keyed_stats_is_a_frozen_record() -> None:
    stats = KeyedStats(allowed=1, denied=2, refused=3, forgotten=4)
    assert (stats.allowed, stats.denied, stats.refused, stats.forgotten) == (1, 2, 3, 4)
    assert stats == KeyedStats(1, 2, 3, 4) and stats != KeyedStats(1, 2, 3, 5)
    assert hash(stats) == hash(KeyedStats(1, 2, 3, 4))
    assert repr(stats) == "KeyedStats(allowed=1, denied=2, refused=3, forgotten=4)"
    with pytest.raises(AttributeError):
        stats.allowed = 5  # type: ignore[misc]
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        restored = pickle.loads(pickle.dumps(stats, protocol=protocol))
        assert restored == stats and type(restored) is KeyedStats
    assert copy.copy(stats) == stats and copy.deepcopy(stats) == stats
    live = KeyedRateLimiter(1, max_keys=10)
    live.try_acquire("x", now_ns=0)
    snapshot_stats = live.stats
    assert type(snapshot_stats) is KeyedStats
    live.try_acquire("x", now_ns=0)
    assert snapshot_stats == KeyedStats(1, 0, 0, 0), "stats is a snapshot, not a live view"
    assert all(
        type(getattr(live.stats, f)) is int for f in ("allowed", "denied", "refused", "forgotten")
    )


@pytest.mark.parametrize(("max_keys", "shards"), [(1000, None), (1000, 7), (5, 2), (100, 1)])
def test_max_keys_is_the_configured_bound(max_keys: int, shards: int | None) -> None:
    limiter = KeyedRateLimiter(1, max_keys=max_keys, shards=shards)
    assert limiter.max_keys == max_keys, (
        f"max_keys={max_keys}, shards={shards} reads back as {limiter.max_keys}"
    )
    assert f"max_keys={max_keys}," in repr(limiter), repr(limiter)


def test_max_keys_and_bands_properties() -> None:
    limiter = KeyedRateLimiter(bands=[Band(10, burst=10), Band(1000, per=3600)], max_keys=77)
    assert limiter.max_keys == 77
    assert limiter.bands == ((10, 10), (Fraction(5, 18), 1000))
    with pytest.raises(AttributeError):
        limiter.max_keys = 5  # type: ignore[misc]


def test_repr() -> None:
    limiter = KeyedRateLimiter(10, max_keys=100)
    assert (
        repr(limiter) == "KeyedRateLimiter(bands=[Band(rate=10, burst=10)], max_keys=100, keys=0)"
    )
    for key in ("a", 2, (3,)):
        limiter.try_acquire(key, now_ns=0)
    assert (
        repr(limiter) == "KeyedRateLimiter(bands=[Band(rate=10, burst=10)], max_keys=100, keys=3)"
    )
    two = KeyedRateLimiter(bands=[Band(10, burst=10), Band(0.1, burst=2)], max_keys=5)
    assert repr(two) == (
        "KeyedRateLimiter(bands=[Band(rate=10, burst=10), Band(rate=Fraction(1, 10), burst=2)], "
        "max_keys=5, keys=0)"
    )
    assert repr(KeyedRateLimiter("100/minute", max_keys=5)) == (
        "KeyedRateLimiter(bands=[Band(rate=100, burst=100, per=60)], max_keys=5, keys=0)"
    )


# ---------------------------------------------------------------------------------------------
# Pickle and copy
# ---------------------------------------------------------------------------------------------

CLONES = [
    lambda x: pickle.loads(pickle.dumps(x)),
    lambda x: pickle.loads(pickle.dumps(x, protocol=0)),
    copy.copy,
    copy.deepcopy,
]


@pytest.mark.parametrize("clone", CLONES, ids=["pickle", "pickle0", "copy", "deepcopy"])
@pytest.mark.parametrize("clocked", [False, True], ids=["now_ns", "fake-clock"])
def test_pickle_and_copy_keep_config_keys_state_and_stats(clone: Any, clocked: bool) -> None:
    clock = FakeClock(now=3 * SECOND) if clocked else None
    original = KeyedRateLimiter(
        bands=[(3, 5), (Fraction(7, 3), 4, 2)], max_keys=6, shards=1, clock=clock
    )
    t = 3 * SECOND
    keys: list[Any] = ["a", 7, b"b", ("t", 1), 2**70, 0.5]
    for i, key in enumerate(keys):
        original.check(key, 1 + i % 3, now_ns=t + i)
    original.check("a", 3, now_ns=t + 10)  # denied
    original.check("zz", 9, now_ns=t + 10)  # never
    original.refund(7, now_ns=t + SECOND // 3)
    t += SECOND // 3
    if clock is not None:
        clock.now = t
    restored = clone(original)
    assert type(restored) is KeyedRateLimiter
    assert restored is not original
    assert restored.bands == original.bands and restored.max_keys == 6
    assert repr(restored) == repr(original)
    assert restored.stats == original.stats
    assert key_reprs(restored) == key_reprs(original)
    assert len(restored) == len(original)
    if clock is not None:
        assert restored.peek("a") == original.peek("a")
        assert restored.available(7) == original.available(7)
    for step in range(8):
        now = t + step * SECOND // 5
        for key in [*keys, "new", ("new", step)]:
            assert restored.peek(key, 2, now_ns=now) == original.peek(key, 2, now_ns=now)
            assert restored.check(key, now_ns=now) == original.check(key, now_ns=now), key
            assert restored.available(key, now_ns=now) == original.available(key, now_ns=now)
    assert restored.stats == original.stats
    # The copies are independent.
    restored.check("independent", now_ns=t + 100 * SECOND)
    assert "independent" not in original


@pytest.mark.parametrize("clone", CLONES, ids=["pickle", "pickle0", "copy", "deepcopy"])
def test_a_restored_table_with_several_shards_keeps_its_keys_and_its_bound(clone: Any) -> None:
    for attempt in range(10):
        original = KeyedRateLimiter(1, burst=2, max_keys=6, shards=2)
        codes = original.try_acquire_many(list(range(200)), [0] * 200)
        assert codes.count(0) == len(original) == 6  # both shards full
        restored = clone(original)
        assert sorted(restored) == sorted(original) == [k for k in range(200) if not codes[k]]
        assert restored.stats == original.stats
        for key in original:
            assert restored.peek(key, 2, now_ns=0) == original.peek(key, 2, now_ns=0)
        # No key can be forgotten at time 0: both tables are full.
        again = restored.try_acquire_many(list(range(200)), [0] * 200)
        assert len(restored) <= 6, (
            f"attempt {attempt}: the restored table (max_keys=6, shards=2) now remembers "
            f"{len(restored)} keys: {sorted(restored)}; it admitted the new keys "
            f"{[k for k in range(200) if again[k] == 0 and k not in original]} although "
            "the original was full"
        )


def test_pickle_keeps_max_keys_and_shards_in_effect() -> None:
    original = KeyedRateLimiter(1, burst=1, max_keys=3, shards=1)
    for key in ("a", "b", "c"):
        original.try_acquire(key, now_ns=0)
    restored = pickle.loads(pickle.dumps(original))
    assert restored.check("d", now_ns=0) == original.check("d", now_ns=0)
    assert restored.peek("d", now_ns=0).outcome is REFUSED
    assert restored.stats == original.stats


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


# ---------------------------------------------------------------------------------------------
# try_acquire_many
# ---------------------------------------------------------------------------------------------


def buffer_kinds(values: list[int], dtype: str) -> list[Any]:
    arr = numpy.array(values, dtype=dtype)
    return [arr, list(values), array("q", values), memoryview(array("q", values))]


@pytest.mark.parametrize("kind", range(4), ids=["numpy", "list", "array", "memoryview"])
def test_try_acquire_many_equals_check_one_at_a_time(kind: int) -> None:
    rng = random.Random(kind)
    size = 3000
    keys = [rng.choice([1, 2, 3, -4, 2**62, rng.randrange(10**6)]) for _ in range(size)]
    times = sorted(rng.randrange(0, 20 * SECOND) for _ in range(size))
    for i in range(0, size, 97):  # some times go backwards
        times[i] = max(0, times[i] - 3 * SECOND)
    ns = [rng.choice([0, 1, 1, 1, 2, 5]) for _ in range(size)]

    def fresh() -> KeyedRateLimiter:
        # One shard: which keys a table of several shards refuses depends on its hashing,
        # which may differ between two tables.
        return KeyedRateLimiter(bands=[(2, 3), (1, 4)], max_keys=20, shards=1)

    batch, single = fresh(), fresh()
    codes = batch.try_acquire_many(
        buffer_kinds(keys, "int64")[kind],
        buffer_kinds(times, "int64")[kind],
        n=buffer_kinds(ns, "uint32")[kind] if kind != 3 else memoryview(array("I", ns)),
    )
    assert type(codes) is array and codes.typecode == "B" and len(codes) == size
    want = [single.check(k, n, now_ns=t).outcome for k, t, n in zip(keys, times, ns, strict=True)]
    assert [CODES[c] for c in codes] == want
    assert set(codes) == {0, 1, 2, 3}, "the trace should reach every outcome"
    assert batch.stats == single.stats
    assert key_reprs(batch) == key_reprs(single)


@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_try_acquire_many_takes_any_int_dtype(dtype: str) -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    keys = numpy.array([1, 2, 1, 1, 2], dtype=dtype)
    times = numpy.array([0, 0, 0, 0, 0], dtype=dtype)
    assert list(limiter.try_acquire_many(keys, times)) == [0, 0, 0, 1, 0]
    assert list(limiter.try_acquire_many(keys, times, n=numpy.ones(5, dtype=dtype))) == [1] * 5
    assert list(limiter.try_acquire_many(keys, times, n=0)) == [0] * 5
    assert limiter.try_acquire(1.0, now_ns=0) is False, "int keys of the batch are the int keys"


def test_try_acquire_many_takes_every_value_of_an_int_buffer_as_check_does() -> None:
    """Issue 6: keys are "buffers of integers (numpy arrays of any int dtype ...) or lists of
    ints", and each code is "exactly what check(key, n, now_ns=t).outcome would have said":
    a uint64 key above 2**63 - 1 is that int (not refused, not wrapped to a negative key), and
    n up to 2**64 - 1 is NEVER as for check. (Ints beyond 64 bits in a list are refused, naming
    the index: see test_a_trace_refuses_ints_no_buffer_holds.)"""
    limiter = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    single = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    keys = [2**64 - 1, 2**63, 2**64 - 1, 5]
    want = [single.check(k, now_ns=0).outcome for k in keys]
    problems = []
    for name, call in [
        ("uint64 keys", lambda: limiter.try_acquire_many(numpy.array(keys, numpy.uint64), [0] * 4)),
        (
            "uint64 n",
            lambda: limiter.try_acquire_many([9], [0], n=numpy.array([2**64 - 1], numpy.uint64)),
        ),
    ]:
        try:
            got = [CODES[c] for c in call()]
        except (TypeError, ValueError) as exc:
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if name == "uint64 keys":
            assert got == want
            assert limiter.available(-1, now_ns=0) == 2, "2**64 - 1 was taken as -1"
            assert limiter.available(2**64 - 1, now_ns=0) == 0
        else:
            assert got == [NEVER] == [single.check(9, 2**64 - 1, now_ns=0).outcome]
    assert not problems, "try_acquire_many refuses what check takes: " + "; ".join(problems)


@pytest.mark.parametrize("key", [2**64, -(2**63) - 1, 2**70])
def test_a_trace_refuses_ints_no_buffer_holds(key: int) -> None:
    # A trace is for buffers of integers: a list holding an int no 64-bit buffer could hold is
    # refused, naming the index, and the table is untouched. check() takes such keys.
    limiter = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    with pytest.raises(ValueError, match=r"keys\[1\]"):
        limiter.try_acquire_many([5, key], [0, 0])
    assert len(limiter) == 0 and limiter.stats == KeyedStats(0, 0, 0, 0)
    assert limiter.try_acquire(key, now_ns=0)


def test_try_acquire_many_empty() -> None:
    limiter = KeyedRateLimiter(1, max_keys=10)
    assert list(limiter.try_acquire_many([], [])) == []
    assert limiter.stats == KeyedStats(0, 0, 0, 0)


@pytest.mark.parametrize(
    ("keys", "times", "n", "error", "index"),
    [
        ([1, 2, 3], [0, 0], None, ValueError, None),
        ([1, 2, 3], [0, 0, 0], [1, 1], ValueError, None),
        ([1, 2, 3], [0, 0, 0], [1, 1, -1], ValueError, "2"),
        ([1, 2, 3], [0, 0, 0], -1, ValueError, None),
        ([1, 2, 3], [0, 0, 0], [1, 1.5, 1], TypeError, "1"),
        ([1, 2.0, 3], [0, 0, 0], None, TypeError, "1"),
        ([1, "2", 3], [0, 0, 0], None, TypeError, "1"),
        ([1, 2, 3], [0, 0, "0"], None, TypeError, "2"),
        ([1, 2, 3], [0, 0.5, 0], None, TypeError, "1"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_index_and_changes_nothing(
    keys: list[Any], times: list[Any], n: Any, error: type, index: str | None
) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(error) as caught:
        limiter.try_acquire_many(keys, times, n=n)
    assert type(caught.value) is error
    if index is not None:
        assert index in str(caught.value), caught.value
    assert snapshot(limiter) == before
    assert 1 not in limiter and 2 not in limiter


# ---------------------------------------------------------------------------------------------
# Blocking acquire and acquire_async
# ---------------------------------------------------------------------------------------------


def test_acquire_with_timeout_zero_when_denied_returns_false_at_once() -> None:
    limiter = KeyedRateLimiter(Fraction(1, 100), burst=1, max_keys=10)
    assert limiter.acquire("k", timeout=0) is True
    began = time.monotonic()
    assert limiter.acquire("k", timeout=0) is False
    assert limiter.acquire("k", timeout=0.0) is False
    assert time.monotonic() - began < 0.5
    assert limiter.available("k") == 0
    refused = full_table(1)
    began = time.monotonic()
    assert refused.peek("new").outcome is REFUSED
    assert refused.acquire("new", timeout=0) is False, "REFUSED with timeout=0: no wait"
    assert time.monotonic() - began < 0.5
    assert refused.stats.refused == 1 and "new" not in refused


def test_acquire_of_more_than_a_burst_raises_and_changes_nothing() -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    for key in ("a", "new", ("t", 1)):
        for kwargs in ({}, {"timeout": 0}, {"timeout": 10}):
            with pytest.raises(ValueError, match=r"n=5"):
                limiter.acquire(key, 5, **kwargs)

            async def main(key: Any = key, kwargs: dict[str, Any] = kwargs) -> None:
                await limiter.acquire_async(key, 5, **kwargs)

            with pytest.raises(ValueError, match=r"n=5"):
                asyncio.run(main())
    assert snapshot(limiter)[:2] == before[:2]
    assert snapshot(limiter)[3:] == before[3:]


def test_acquire_blocks_for_about_the_wait_on_its_own_key() -> None:
    limiter = KeyedRateLimiter(20, burst=1, max_keys=10, shards=1)
    assert limiter.acquire("k") is True
    began = time.monotonic()
    assert limiter.acquire("other", timeout=5) is True
    assert time.monotonic() - began < 0.04, "another key does not wait"
    assert limiter.acquire("k", timeout=5) is True
    elapsed = time.monotonic() - began
    assert 0.04 <= elapsed < 2.0, elapsed


def test_a_refused_acquire_sleeps_for_the_hint_and_tries_again() -> None:
    limiter = KeyedRateLimiter(20, burst=1, max_keys=1, shards=1)
    assert limiter.try_acquire("a")
    assert limiter.peek("b").outcome is REFUSED
    began = time.monotonic()
    with qos_support.watchdog(HANG_SECONDS):
        assert limiter.acquire("b", timeout=5) is True
    elapsed = time.monotonic() - began
    assert 0.03 <= elapsed < 2.0, elapsed
    assert limiter.stats.refused >= 1 and limiter.stats.forgotten == 1
    assert "b" in limiter and "a" not in limiter


def test_acquire_async() -> None:
    async def main() -> dict[str, Any]:
        limiter = KeyedRateLimiter(20, burst=1, max_keys=1, shards=1)
        out: dict[str, Any] = {}
        assert await limiter.acquire_async("a") is True
        out["denied_now"] = await limiter.acquire_async("a", timeout=0)
        out["refused_now"] = await limiter.acquire_async("b", timeout=0)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        task = asyncio.create_task(ticker())
        began = time.monotonic()
        out["refused_then_allowed"] = await limiter.acquire_async("b", timeout=5)
        out["elapsed"] = time.monotonic() - began
        began = time.monotonic()
        out["timed_out"] = await limiter.acquire_async("b", timeout=0.01)
        out["timeout_elapsed"] = time.monotonic() - began
        task.cancel()
        out["ticks"] = ticks
        out["stats"] = limiter.stats
        return out

    out = asyncio.run(main())
    assert out["denied_now"] is False and out["refused_now"] is False
    assert out["refused_then_allowed"] is True
    assert 0.03 <= out["elapsed"] < 2.0, out["elapsed"]
    assert out["timed_out"] is False and out["timeout_elapsed"] < 1.0
    assert out["ticks"] >= 3, "the event loop kept running while acquire_async waited"
    assert out["stats"].refused >= 2 and out["stats"].allowed == 2


# ---------------------------------------------------------------------------------------------
# Regressions found in review
# ---------------------------------------------------------------------------------------------


def test_a_restored_table_keeps_its_keys_in_their_shards() -> None:
    # The seed is saved with the table: a restored table's shards hold what the saved one's
    # held, so none is left with no room (new keys used to be refused in an empty table).
    limiter = KeyedRateLimiter(1, burst=2, max_keys=16)
    limiter.check("seed", now_ns=0)
    restored = pickle.loads(pickle.dumps(limiter))
    restored.check("seed", n=0, now_ns=10**10)  # full again: forgotten
    assert len(restored) == 0
    for i in range(200):  # each new key meets an empty table: never refused
        assert restored.check(f"k{i}", now_ns=10**10).outcome is ALLOWED, i
        restored.refund(f"k{i}", now_ns=10**10)  # full again: forgotten
        assert len(restored) == 0


SAVE_FULL_TABLE_OF_STR_KEYS = """
import pickle, sys
from protocol_in_code.qos.keyed import KeyedRateLimiter
limiter = KeyedRateLimiter(1, burst=2, max_keys=64, shards=8)
i = 0
while len(limiter) < 64:
    limiter.try_acquire(f"client-{i}", 2, now_ns=0)
    i += 1
sys.stdout.buffer.write(pickle.dumps(limiter))
"""

LOAD_AND_PROBE = """
import pickle, sys
limiter = pickle.loads(sys.stdin.buffer.read())
held = len(limiter)
throttled = not any(limiter.try_acquire(key, now_ns=0) for key in list(limiter))
newcomers = {limiter.check(f"new-{i}", now_ns=0).outcome.name for i in range(500)}
print(held, throttled, sorted(newcomers), len(limiter))
"""


def run_python(code: str, hash_seed: int, given: bytes = b"") -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        input=given,
        capture_output=True,
        env=env,
        check=True,
        timeout=60,
    )
    return done.stdout


@pytest.mark.parametrize("hash_seed", [1, 2, 3])
def test_a_full_table_of_str_keys_loads_where_str_hashes_differ(hash_seed: int) -> None:
    # A key's shard depends on the table's saved seed alone, never on the interpreter's own str
    # hash (which differs from process to process): so a full table saved in one process loads
    # in another with every key in its shard, its throttled keys stay throttled, and it refuses
    # newcomers rather than grow past its bound. (Hashing str keys by the interpreter's cached
    # hash was tried; it broke exactly this.)
    saved = run_python(SAVE_FULL_TABLE_OF_STR_KEYS, hash_seed=0)
    probed = run_python(LOAD_AND_PROBE, hash_seed=hash_seed, given=saved)
    assert probed.decode().split() == ["64", "True", "['REFUSED']", "64"]


def test_a_saved_state_with_a_key_twice_is_refused_and_changes_nothing() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    limiter.check(1, now_ns=0)
    limiter.check((1, Fraction(1, 3)), now_ns=0)
    rebuild, args, (state, attributes) = limiter.__reduce__()
    seed, entries, latest, counts, origin = state
    (plain,) = [entry for entry in entries if entry[1] is None]
    (thing,) = [entry for entry in entries if entry[1] is not None]
    frac = Fraction(1, 3)
    for doubled in (
        [*entries, (1.0, None, plain[2])],  # 1.0 is 1
        [*entries, ((1.0, Fraction(2, 6)), thing[1] + 1, thing[2])],  # the same tuple
        [*entries, (("other", frac), thing[1], thing[2])],  # a number twice
    ):
        fresh = rebuild(*args)
        with pytest.raises(ValueError, match="twice"):
            fresh.__setstate__(((seed, doubled, latest, counts, origin), attributes))
        assert len(fresh) == 0 and list(fresh) == []
        fresh.__setstate__(((seed, entries, latest, counts, origin), attributes))
        assert sorted(map(repr, fresh)) == sorted(map(repr, limiter))


@pytest.mark.parametrize("clone", CLONES, ids=["pickle", "pickle0", "copy", "deepcopy"])
def test_a_full_table_of_object_keys_copies_with_its_keys_in_their_shards(clone: Any) -> None:
    limiter = KeyedRateLimiter(1, burst=5, max_keys=8, shards=4)
    i = 0
    while len(limiter) < 8:
        limiter.try_acquire(("k", i), now_ns=0)
        i += 1
    copied = clone(limiter)
    assert sorted(copied) == sorted(limiter)
    assert copied.check(("k", 0), 5, now_ns=0).outcome is DENIED
    assert copied.check(("new",), now_ns=0).outcome is REFUSED  # still full: nothing evicted


class HashFailsOnCall:
    """A key whose ``__hash__`` raises KeyboardInterrupt on its ``fail_on``-th call."""

    def __init__(self, fail_on: int) -> None:
        self.calls = 0
        self.fail_on = fail_on

    def __hash__(self) -> int:
        self.calls += 1
        if self.calls == self.fail_on:
            raise KeyboardInterrupt
        return 42

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashFailsOnCall)


def test_a_key_never_kept_is_let_go_and_can_come_back() -> None:
    # NEVER for a new key: registered, not kept, let go.
    limiter = KeyedRateLimiter(1, burst=5, max_keys=10)
    key = HashFailsOnCall(fail_on=0)
    assert limiter.check(key, 6, now_ns=0).outcome is LimitOutcome.NEVER
    assert len(limiter) == 0 and key not in limiter and list(limiter) == []
    assert limiter.try_acquire(key, 5, now_ns=0)
    assert len(limiter) == 1 and key in limiter and list(limiter) == [key]
    restored = pickle.loads(pickle.dumps(limiter))
    assert len(restored) == 1 and restored.check(key, now_ns=0).outcome is DENIED


def test_letting_go_of_a_forgotten_key_runs_none_of_its_code() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=10)
    key = HashFailsOnCall(fail_on=0)
    assert limiter.try_acquire(key, now_ns=0)
    limiter.refund(key, now_ns=0)  # full again: forgotten, to be let go at the next object call
    key.fail_on = key.calls + 1
    seen: list[Any] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        assert limiter.try_acquire(("innocent",), now_ns=0)
    finally:
        sys.unraisablehook = old_hook
    assert seen == []
    assert len(limiter) == 1 and list(limiter) == [("innocent",)]


def test_a_key_whose_hash_fails_takes_nothing() -> None:
    class Flaky:
        calls = 0

        def __hash__(self) -> int:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise KeyboardInterrupt
            return 42

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Flaky)

    limiter = KeyedRateLimiter(1, burst=1, max_keys=10)
    with pytest.raises(KeyboardInterrupt):
        limiter.check(Flaky(), now_ns=0)
    assert len(limiter) == 0 and limiter.stats == KeyedStats(0, 0, 0, 0)
    assert limiter.check(Flaky(), now_ns=0).outcome is ALLOWED
    assert len(limiter) == 1 and Flaky() in limiter and len(list(limiter)) == 1
    assert limiter.check(Flaky(), now_ns=0).outcome is DENIED


def test_shards_beyond_the_limit_are_refused() -> None:
    with pytest.raises(ValueError, match="shards"):
        KeyedRateLimiter(1, max_keys=2**62, shards=2**62)
    assert KeyedRateLimiter(1, max_keys=2**20, shards=65_536).max_keys == 2**20


def test_a_trace_takes_a_numpy_integer_as_n_for_every_request() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    codes = limiter.try_acquire_many([1, 1], [0, 0], n=numpy.int64(2))
    assert list(codes) == [0, 1]


def test_pickle_keeps_attributes_set_on_the_instance() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10)
    limiter.tag = "api"  # type: ignore[attr-defined]
    limiter.check("a", now_ns=0)
    restored = pickle.loads(pickle.dumps(limiter))
    assert restored.tag == "api"  # type: ignore[attr-defined]
    assert restored.available("a", now_ns=0) == 1
