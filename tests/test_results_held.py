"""A result someone holds never changes, and a result dropped lets go of its values.

The hot calls (``compute_refill``, ``try_consume``, ``offer``, ``ToyShaper.enqueue``, the
limiters' ``check`` and ``peek``) return frozen records that callers often drop at once. These
tests pin what must hold however results are made: a result someone still holds (a variable, a
list, another result) never changes; a value a dropped result held lives on for whoever kept
it, and dies with the result otherwise (by a weak reference, a finalizer, a cycle); threads get
correct results of their own. They hold for the pure-Python reference trivially, which is the
point: the two must not be told apart.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any, ClassVar

import pytest
from qos_support import switch_interval

BIG = 10**12  # beyond the small ints Python caches: `is` tells objects apart


@pytest.mark.parametrize("keep_every", [1, 2, 3])
def test_a_result_someone_holds_never_changes(impl: Any, keep_every: int) -> None:
    kept = []
    for i in range(300):
        result = impl.compute_refill(BIG + i, 2 * BIG, 1, 0, 1)
        if i % keep_every == 0:
            kept.append((result, result.tokens, result.last_refill_at, BIG + i + 1))
        del result  # the others are dropped at once
    for result, tokens, at, expected in kept:
        assert result.tokens is tokens and result.last_refill_at is at
        assert (result.tokens, result.last_refill_at) == (expected, 1)


def test_held_results_of_every_hot_call_stay_as_they_were(impl: Any) -> None:
    bucket = impl.TokenBucket(capacity=BIG, tokens=BIG, rate_per_sec=0, last_refill_at=0)
    leaky = impl.LeakyBucket(capacity=BIG, level=0, leak_per_sec=0, last_leak_at=0)
    consumed, offered = [], []
    for i in range(200):
        if i % 2:
            impl.token_try_consume(bucket, 1, i)  # dropped at once
            impl.leaky_offer(leaky, 1, i)
        else:
            result = impl.token_try_consume(bucket, 1, i)
            consumed.append((result, result.tokens_remaining))
            accepted = impl.leaky_offer(leaky, 1, i)
            offered.append((accepted, accepted.level))
    for n, (result, remaining) in enumerate(consumed):
        assert result.outcome is impl.ConsumeOutcome.ALLOWED
        assert result.tokens_remaining is remaining and remaining == BIG - 2 * n - 1
    for n, (result, level) in enumerate(offered):
        assert result.level is level and level == 2 * n + 1


def test_a_result_inside_another_result_is_held(impl: Any) -> None:
    inner = impl.compute_refill(BIG, 2 * BIG, 1, 0, 0)
    outer = impl.compute_refill(inner, 2 * BIG, 1, 5, 5)  # zero elapsed: `inner` passes through
    del inner
    for i in range(10):
        impl.compute_refill(BIG + i, 2 * BIG, 1, 0, 1)
    assert outer.tokens.tokens == BIG and outer.tokens.last_refill_at == 0
    assert outer.last_refill_at == 5


def test_a_value_a_dropped_result_held_lives_on_for_whoever_kept_it(impl: Any) -> None:
    values = [impl.compute_refill(BIG + i, 2 * BIG, 1, 0, 1).tokens for i in range(100)]
    assert values == [BIG + i + 1 for i in range(100)]


class Noisy(int):
    """An int whose finalizer makes results of its own while a result is being rewritten."""

    refill: ClassVar[Any] = None
    seen: ClassVar[list[tuple[Any, Any]]] = []

    def __del__(self) -> None:
        if Noisy.refill is not None:
            result = Noisy.refill(BIG, 2 * BIG, 7, 0, 1)
            Noisy.seen.append((result, (result.tokens, result.last_refill_at)))


def test_finalizers_of_values_that_leave_results_get_results_of_their_own(impl: Any) -> None:
    Noisy.refill, Noisy.seen = impl.compute_refill, []
    try:
        results = []
        for i in range(50):
            # Zero elapsed: the Noisy tokens pass through into the result, and die with it.
            result = impl.compute_refill(Noisy(i), 10, 1, 3, 3)
            results.append((result.tokens == i, result.last_refill_at == 3))
            del result
        gc.collect()
    finally:
        Noisy.refill = None
    assert all(ok == (True, True) for ok in results)
    assert len(Noisy.seen) == 50
    for result, fields in Noisy.seen:
        assert (result.tokens, result.last_refill_at) == fields == (BIG + 7, 1)


def test_threads_each_get_their_own_results(impl: Any) -> None:
    failures: list[str] = []
    done = [0] * 4

    def work(index: int) -> None:
        offset = index * BIG
        try:
            kept = []
            for i in range(2_000):
                result = impl.compute_refill(offset + i, 10**15, 1, 0, 1)
                if i % 7 == 0:
                    kept.append((result, offset + i + 1))
                elif result.tokens != offset + i + 1:
                    failures.append(f"thread {index}: call {i} got {result!r}")
                done[index] += 1
            failures.extend(
                f"thread {index}: kept {result!r}" for result, want in kept if result.tokens != want
            )
        except BaseException as error:  # reported below, whatever it is
            failures.append(f"thread {index}: {error!r}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    with switch_interval(1e-6):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
    assert done == [2_000] * 4


class Tokens:
    """A weakly referenceable balance, to see when it is freed."""

    def __init__(self) -> None:
        self.holder: Any = None


def test_a_value_of_a_dropped_result_dies_with_it(impl: Any) -> None:
    tokens = Tokens()
    alive = weakref.ref(tokens)
    result = impl.compute_refill(tokens, 10, 1, 3, 3)  # zero elapsed: tokens pass through
    assert result.tokens is tokens
    del tokens, result
    assert alive() is None


def test_a_cycle_through_a_result_is_collected(impl: Any) -> None:
    tokens = Tokens()
    result = impl.compute_refill(tokens, 10, 1, 3, 3)
    tokens.holder = result  # result -> tokens -> result
    alive = weakref.ref(tokens)
    del tokens, result
    gc.collect()
    assert alive() is None


def test_held_shaper_results_stay_as_they_were(impl: Any) -> None:
    names = [f"class {i}" for i in range(50)]  # a str of its own for every call
    bucket = impl.TokenBucket(capacity=BIG, tokens=BIG, rate_per_sec=0, last_refill_at=0)
    shaper = impl.ToyShaper(impl.ClassTree({}), dict.fromkeys(names, bucket))
    kept = []
    for i, name in enumerate(names):
        result = shaper.enqueue(name, 1, i)
        if i % 2:
            kept.append((result, result.tokens_remaining, BIG - i - 1, name))
        del result
    for result, remaining, want, name in kept:
        assert result.tokens_remaining is remaining and remaining == want
        assert result.class_name is name and result.outcome is impl.ConsumeOutcome.ALLOWED


def test_held_limiter_decisions_stay_as_they_were(reference_mode: bool) -> None:
    if reference_mode:
        pytest.skip("the exact limiters have no pure-Python reference")
    from protocol_in_code.qos.keyed import KeyedRateLimiter
    from protocol_in_code.qos.limiter import RateLimiter

    single = RateLimiter(1, burst=100)
    keyed = KeyedRateLimiter(1, burst=100)
    kept = []
    for i in range(300):
        decisions = (single.check(now_ns=0), keyed.check("client", now_ns=0))
        if i % 3 == 0:
            kept.append((decisions, 99 - i if i < 100 else None))
        del decisions
    for decisions, remaining in kept:
        for decision in decisions:
            if remaining is None:
                assert not decision.allowed and decision.remaining == 0
            else:
                assert decision.allowed and decision.remaining == remaining
                assert decision.wait_ns == 0
