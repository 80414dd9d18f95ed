"""Which object each result *is*: the same one the course's code leaves there.

Python's ``min(grown, capacity)`` returns the very ``capacity`` object, an untouched refill
hands back the very ``tokens`` and ``last_refill_at`` it got, and a settled bucket keeps the
very ``now`` it was given. The native code computes exact ints and floats without holding
their objects, so it has to put the right object back by itself. These tests compare, for
every result and every field, *which input object* it is (or that it is none of them) with
the reference, over ints and floats whose objects are all distinct.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

# Every value gets a fresh object (see `fresh`), so identity says where a result came from.
# Ints stay beyond CPython's cache of small ints; a few values repeat, so that equal but
# distinct objects meet (an elapsed time equal to the capacity, a request equal to the level).
big_ints = st.one_of(
    st.sampled_from([2**40, 2**40 + 1, 2**40 + 2, 3 * 2**40, -(2**40)]),
    st.integers(2**40, 2**40 + 50),
    st.integers(-(2**62), 2**62),
).filter(lambda v: not -5 <= v <= 256)
plain_floats = st.one_of(st.sampled_from([0.0, 1.0, 2.5, -1.0]), st.floats(-1e6, 1e6))
numbers = st.one_of(big_ints, plain_floats)


def fresh(value: Any) -> Any:
    """A new object equal to `value` (of the same type), shared with no other input."""
    return type(value)(repr(value)) if isinstance(value, float) else int(str(value))


def origins(results: list[Any], inputs: list[Any]) -> list[int | None]:
    """For each result, the position of the input object it is, or None."""
    return [next((i for i, o in enumerate(inputs) if o is r), None) for r in results]


def run_both(impl, ref, values: list[Any], call) -> None:
    seen = {}
    for side, qos in (("ref", ref), ("got", impl)):
        inputs = [fresh(v) for v in values]
        results = call(qos, inputs)
        seen[side] = (origins(results, inputs), [repr(r) for r in results])
    assert seen["got"] == seen["ref"]


@given(st.lists(numbers, min_size=5, max_size=5))
def test_compute_refill(impl, ref, values):
    def call(qos, inputs):
        result = qos.compute_refill(*inputs)
        return [result.tokens, result.last_refill_at]

    run_both(impl, ref, values, call)


# A bucket operation `op(bucket, n, now)`: the bucket's class, the operation, the bucket's
# fields and the result's report of the balance.
DECISIONS = {
    "try_consume": (
        "TokenBucket",
        "token_try_consume",
        ("capacity", "tokens", "rate_per_sec", "last_refill_at"),
        "tokens_remaining",
    ),
    "offer": (
        "LeakyBucket",
        "leaky_offer",
        ("capacity", "level", "leak_per_sec", "last_leak_at"),
        "level",
    ),
}


@pytest.mark.parametrize("decision", DECISIONS)
@given(values=st.lists(numbers, min_size=6, max_size=6))
def test_bucket_decisions(impl, ref, decision, values):
    bucket_class, operation, fields, reported = DECISIONS[decision]

    def call(qos, inputs):
        bucket = getattr(qos, bucket_class)(*inputs[:4])
        result = getattr(qos, operation)(bucket, *inputs[4:])
        return [*(getattr(bucket, field) for field in fields), getattr(result, reported)]

    run_both(impl, ref, values, call)


@given(st.lists(numbers, min_size=5, max_size=5))
def test_leak(impl, ref, values):
    def call(qos, inputs):
        capacity, level, leak_rate, last, now = inputs
        bucket = qos.LeakyBucket(capacity, level, leak_rate, last)
        qos.leaky_leak(bucket, now)
        return [bucket.capacity, bucket.level, bucket.leak_per_sec, bucket.last_leak_at]

    run_both(impl, ref, values, call)


class Seen(Fraction):
    """A capacity that records what it is compared with."""

    seen: ClassVar[list[Any]] = []

    def __lt__(self, other: Any) -> bool:
        Seen.seen.append(other)
        return Fraction.__lt__(self, other)


@pytest.mark.parametrize("tokens", [10**6, 10**12])
def test_a_computed_value_is_one_object(impl, ref, tokens):
    """``min(grown, capacity)`` compares ``grown`` and returns it: the very object compared is
    the one stored, also when Python arithmetic (a Fraction capacity) is in the mix."""
    for qos in (ref, impl):
        Seen.seen.clear()
        bucket = qos.TokenBucket(Seen(10**13), tokens, 10**6, 0)
        qos.token_try_consume(bucket, 10**15, 5)  # throttled: the settled balance stays
        assert Seen.seen[0] is bucket.tokens, qos


@given(
    values=st.lists(numbers, min_size=6, max_size=6),
    aliases=st.lists(st.integers(0, 5), min_size=6, max_size=6),
)
def test_inputs_that_are_one_object(impl, ref, values, aliases):
    """Some inputs are the very same object: each result is still the input Python gives."""

    def call(qos, inputs):
        pairs = enumerate(zip(inputs, aliases, strict=True))
        inputs = [inputs[a] if a < i else x for i, (x, a) in pairs]
        capacity, tokens, rate, last, n, now = inputs
        bucket = qos.TokenBucket(capacity, tokens, rate, last)
        result = qos.token_try_consume(bucket, n, now)
        fields = [bucket.capacity, bucket.tokens, bucket.rate_per_sec, bucket.last_refill_at]
        return [*fields, result.tokens_remaining, *inputs]

    run_both(impl, ref, values, call)
