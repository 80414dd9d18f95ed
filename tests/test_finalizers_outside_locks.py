"""No finalizer runs while a native object holds its own lock.

A mutable native record (a bucket, a shaper) keeps its fields behind a lock and runs Python
arithmetic with that lock released. When a number's arithmetic writes the very object being
updated, the update stores only the fields it changed; the objects it read but does not store
may then hold the last reference to what the write displaced. Letting go of them must wait
until the lock is free, or a finalizer that reads the object would wait for the lock forever.

Each test makes exactly that happen under a watchdog that turns a hang into a failure, and
compares the outcome with the pure-Python reference's: the same result, and the finalizer run
once. (When it runs within the call differs: the course's code lets go of the object as soon as
its own local is gone, mid-update.)
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from qos_support import watchdog

HANG_SECONDS = 60


def consume_while_capacity_is_replaced(qos: Any) -> tuple[Any, ...]:
    seen: list[Any] = []
    bucket: Any = None

    class Capacity(Fraction):
        def __del__(self) -> None:
            seen.append(bucket.tokens)

    class Now(Fraction):
        def __sub__(self, other: Any) -> Any:
            bucket.capacity = 1000
            return Fraction(self) - other

    bucket = qos.TokenBucket(Capacity(100), Fraction(1), Fraction(1), Fraction(0))
    with watchdog(HANG_SECONDS):
        result = qos.token_try_consume(bucket, 1, Now(5))
    return result.outcome.value, result.tokens_remaining, bucket.capacity, len(seen)


def offer_while_capacity_is_replaced(qos: Any) -> tuple[Any, ...]:
    seen: list[Any] = []
    bucket: Any = None

    class Capacity(Fraction):
        def __del__(self) -> None:
            seen.append(bucket.level)

    class Now(Fraction):
        def __sub__(self, other: Any) -> Any:
            bucket.capacity = 1000
            return Fraction(self) - other

    bucket = qos.LeakyBucket(Capacity(100), Fraction(1), Fraction(1), Fraction(0))
    with watchdog(HANG_SECONDS):
        result = qos.leaky_offer(bucket, 1, Now(5))
    return result.outcome.value, result.level, bucket.capacity, len(seen)


def tick_while_trace_is_replaced(qos: Any) -> tuple[Any, ...]:
    seen: list[Any] = []
    shaper: Any = None

    class Trace(list[str]):
        def __del__(self) -> None:
            seen.append(shaper.clock)

    class Seconds(Fraction):
        def __radd__(self, other: Any) -> Any:
            shaper.trace = []
            return other + Fraction(self)

    shaper = qos.ToyShaper(qos.ClassTree({}), {}, 0, Trace())
    with watchdog(HANG_SECONDS):
        shaper.tick(Seconds(3))
    return shaper.clock, shaper.trace, len(seen)


def test_a_finalizer_reading_the_token_bucket_runs_after_try_consume(impl: Any, ref: Any) -> None:
    assert consume_while_capacity_is_replaced(impl) == consume_while_capacity_is_replaced(ref)


def test_a_finalizer_reading_the_leaky_bucket_runs_after_offer(impl: Any, ref: Any) -> None:
    assert offer_while_capacity_is_replaced(impl) == offer_while_capacity_is_replaced(ref)


def test_a_finalizer_reading_the_shaper_runs_after_tick(impl: Any, ref: Any) -> None:
    assert tick_while_trace_is_replaced(impl) == tick_while_trace_is_replaced(ref)
