"""Settlement against the Fraction models, on every store, and the bound it keeps.

* The keyed limiters (in-process and shared) and the shared one-key limiter answer a random
  mix of ``check``, ``refund``, ``settle``, ``peek`` and ``available`` exactly as the models do
  (``tests/limiter_model.py``, ``tests/keyed_model.py``: a debt moves its band's own settlement
  point). The in-process one-key limiter is checked the same way by
  ``test_limiter_properties.py``.
* Redis, on a real server, answers as the model does for one band, its waits rounded up to
  the microsecond (fewer examples: every step is a round trip).
* The documented bound: over any span of T ns between two admissions, the actual costs of the
  requests admitted are at most ``burst + rate * T`` plus the largest single overage.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos settle")

import keyed_model as km
import limiter_model as lm
from protocol_in_code.qos import (
    Band,
    KeyedRateLimiter,
    RateLimiter,
    SharedKeyedRateLimiter,
    SharedRateLimiter,
)
from protocol_in_code.qos.distributed import RedisRateLimiter

SECOND = 10**9
KEEP_MS = 600_000
_names = itertools.count()

#: One or two bands: a rate in tokens per second (some not whole), and a burst.
bands = st.lists(
    st.tuples(
        st.sampled_from([1, 2, 3, 10, Fraction(1, 3), Fraction(7, 2)]),
        st.integers(1, 6),
    ),
    min_size=1,
    max_size=2,
)
#: A step: an operation, its two counts (``settle``'s reserved and actual; the first is the
#: ``n`` of the others), and the time since the last step (now and then a clock gone back).
steps = st.lists(
    st.tuples(
        st.sampled_from(["check", "check", "settle", "settle", "refund", "peek", "available"]),
        st.integers(0, 8),
        st.integers(0, 14),
        st.one_of(st.integers(0, 3 * SECOND), st.integers(-SECOND // 4, 0)),
    ),
    max_size=40,
)


def plain(answer: Any) -> Any:
    """A native or model answer as comparable plain values."""
    if isinstance(answer, lm.ModelDecision):
        return (answer.outcome, answer.wait_ns, answer.remaining)
    if hasattr(answer, "outcome"):
        return (answer.outcome.value, answer.wait_ns, answer.remaining)
    return answer


def ask(limiter: Any, op: str, key: tuple[Any, ...], first: int, second: int, now: int) -> Any:
    """One step on a native limiter (``key`` empty for one of one key)."""
    if op == "settle":
        return limiter.settle(*key, first, second, now_ns=now)
    if op == "available":
        return limiter.available(*key, now_ns=now)
    return plain(getattr(limiter, op)(*key, first, now_ns=now))


def ask_model(model: lm.ModelLimiter, op: str, first: int, second: int, now: int) -> Any:
    if op == "settle":
        return model.settle(first, second, now)
    if op == "available":
        return model.available(now)
    return plain(getattr(model, op)(first, now))


def ask_keyed_model(
    model: km.ModelKeyedLimiter, op: str, key: str, first: int, second: int, now: int
) -> Any:
    if op == "settle":
        return model.settle(key, first, second, now_ns=now)
    if op == "available":
        return model.available(key, now_ns=now)
    return plain(getattr(model, op)(key, first, now_ns=now))


@settings(deadline=None)
@given(bands=bands, steps=steps, keys=st.lists(st.sampled_from("abc"), min_size=40, max_size=40))
def test_the_keyed_limiters_settle_as_the_model(
    tmp_path_factory: pytest.TempPathFactory, bands: Any, steps: Any, keys: list[str]
) -> None:
    folder = tmp_path_factory.mktemp("settle")
    local = KeyedRateLimiter(bands=bands)
    shared = SharedKeyedRateLimiter(f"k{next(_names)}", bands=bands, max_keys=64, path=folder)
    model = km.ModelKeyedLimiter(lm.model_from(bands=bands).band_pairs())
    now = 10 * SECOND
    try:
        for i, ((op, first, second, step), key) in enumerate(zip(steps, keys, strict=False)):
            now += step
            want = ask_keyed_model(model, op, key, first, second, now)
            context = f"step {i}: {op}({key!r}, {first}, {second}, now_ns={now})"
            assert ask(local, op, (key,), first, second, now) == want, context
            assert ask(shared, op, (key,), first, second, now) == want, context
            if op == "settle":
                # A key in debt is never forgotten: every key the model holds as not fresh.
                for held in model.not_fresh_keys():
                    assert held in local, f"{context}: {held!r} forgotten in debt"
    finally:
        shared.remove()


@settings(deadline=None)
@given(bands=bands, steps=steps)
def test_the_shared_limiter_settles_as_the_model(
    tmp_path_factory: pytest.TempPathFactory, bands: Any, steps: Any
) -> None:
    folder = tmp_path_factory.mktemp("settle")
    shared = SharedRateLimiter(f"one{next(_names)}", bands=bands, path=folder)
    model = lm.model_from(bands=bands)
    now = 10 * SECOND
    try:
        for i, (op, first, second, step) in enumerate(steps):
            now += step
            want = ask_model(model, op, first, second, now)
            got = ask(shared, op, (), first, second, now)
            assert got == want, f"step {i}: {op}({first}, {second}, now_ns={now})"
    finally:
        shared.remove()


def rounded_to_microseconds(answer: Any) -> Any:
    """An in-process answer as Redis gives it: a wait rounded up to the microsecond."""
    if isinstance(answer, tuple) and answer[1]:
        return (answer[0], math.ceil(answer[1] / 1000) * 1000, answer[2])
    return answer


@settings(deadline=None, max_examples=max(10, settings().max_examples // 5))
@given(
    band=st.tuples(st.sampled_from([1, 3, 10, Fraction(7, 2)]), st.integers(1, 6)),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["check", "settle", "settle", "refund", "available"]),
            st.integers(0, 8),
            st.integers(0, 14),
            st.integers(0, 3 * 10**6),  # microseconds, forwards only: Redis keeps no clock
        ),
        max_size=25,
    ),
)
def test_redis_settles_as_the_model(shared_redis_client: Any, band: Any, steps: Any) -> None:
    remote = RedisRateLimiter(
        shared_redis_client, bands=[band], name=f"s{next(_names)}", min_ttl_ms=KEEP_MS
    )
    model = lm.model_from(bands=[band])
    now = 10 * SECOND
    for i, (op, first, second, micros) in enumerate(steps):
        now += micros * 1000
        want = rounded_to_microseconds(ask_model(model, op, first, second, now))
        got = ask(remote, op, (), first, second, now)
        assert got == want, f"step {i}: {op}({first}, {second}, now_ns={now}) on {band}"


# -- The bound --------------------------------------------------------------------------------

requests = st.lists(
    st.tuples(
        st.integers(0, 2 * SECOND),  # time since the last request
        st.integers(1, 5),  # the estimate reserved
        st.integers(0, 15),  # the actual cost
    ),
    min_size=1,
    max_size=60,
)


def admitted(limiter: Any, key: tuple[Any, ...], requests: Any) -> list[tuple[int, int, int]]:
    """Each request checked for its estimate and, if allowed, settled with its actual cost
    at once: the (time, actual cost, overage) of every one admitted."""
    now, taken = 0, []
    for step, reserved, actual in requests:
        now += step
        if limiter.check(*key, reserved, now_ns=now).allowed:
            limiter.settle(*key, reserved, actual, now_ns=now)
            taken.append((now, actual, max(actual - reserved, 0)))
    return taken


@pytest.mark.parametrize("keyed", [False, True], ids=["one key", "keyed"])
@given(
    rate=st.sampled_from([1, 2, Fraction(1, 3), Fraction(5, 2)]),
    burst=st.integers(5, 8),
    requests=requests,
)
def test_the_costs_admitted_over_any_span_keep_the_bound(
    keyed: bool, rate: Fraction, burst: int, requests: Any
) -> None:
    band = Band(rate, burst=burst)
    limiter = KeyedRateLimiter(bands=[band]) if keyed else RateLimiter(bands=[band])
    taken = admitted(limiter, ("k",) if keyed else (), requests)
    largest_overage = max((overage for _, _, overage in taken), default=0)
    for first in range(len(taken)):
        total = 0
        for last in range(first, len(taken)):
            total += taken[last][1]
            span = taken[last][0] - taken[first][0]
            bound = burst + Fraction(rate) * span / SECOND + largest_overage
            assert total <= bound, (
                f"{total} admitted in {span} ns, more than burst {burst} + rate {rate} x span "
                f"+ largest overage {largest_overage}"
            )


def test_the_bound_is_reached_by_one_overage() -> None:
    # At once: the whole burst reserved, then settled one overage of 3 above it.
    limiter = RateLimiter(1, burst=5)
    assert admitted(limiter, (), [(0, 5, 8)]) == [(0, 8, 3)]
    assert not limiter.check(1, now_ns=0).allowed
