"""The API of ``protocol_in_code.qos.keyed.KeyedRateLimiter`` (issue 6), with explicit values.

* Construction: rate/burst/per/bands/clock exactly as ``RateLimiter`` (same errors), no
  ``initial``/``start_ns``; ``max_keys`` and ``shards`` validated (the message names the
  parameter and the value); the shards share ``max_keys`` exactly, default shards
  ``min(16, max_keys)``.
* Every per-key method: signature and defaults; ``Decision`` for ALLOWED, DENIED, NEVER and
  REFUSED (wait_ns >= 1, remaining 0, nothing taken, counted as refused); ``peek`` answering
  REFUSED; ``refund`` of an unknown key doing nothing; forgetting; one clock per table.
Also split by concern: keys in ``test_keyed_keys.py``, the table (stats, repr, pickle) in
``test_keyed_table.py``, bad arguments in ``test_keyed_bad_arguments.py``, traces in
``test_keyed_traces.py``, waiting in ``test_keyed_waiting.py``.

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

import inspect
import pickle
import time
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

import limiter_model as lm
import numpy
from keyed_support import (
    ALLOWED,
    DENIED,
    HANG_SECONDS,
    NEVER,
    REFUSED,
    SECOND,
    full_table,
    snapshot,
    stats_tuple,
)
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
        ("plans", inspect.Parameter.KEYWORD_ONLY, None),
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
    "try_acquire": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None), ("plan", None)],
    "check": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None), ("plan", None)],
    "peek": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None), ("plan", None)],
    "refund": [("key", inspect.Parameter.empty), ("n", 1), ("now_ns", None), ("plan", None)],
    "available": [("key", inspect.Parameter.empty), ("now_ns", None), ("plan", None)],
    "acquire": [("key", inspect.Parameter.empty), ("n", 1), ("timeout", None), ("plan", None)],
    "acquire_async": [
        ("key", inspect.Parameter.empty),
        ("n", 1),
        ("timeout", None),
        ("plan", None),
    ],
    "try_acquire_many": [
        ("keys", inspect.Parameter.empty),
        ("now_ns", inspect.Parameter.empty),
        ("n", None),
        ("plan", None),
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
