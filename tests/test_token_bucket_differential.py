"""try_consume over sequences of calls, compared step by step with the reference.

After every step: the outcome (and that it *is* the enum member), ``tokens_remaining`` (value
and type), the bucket's four fields (value and type; capacity and rate are the very objects
stored), the bucket's repr, and the Python operations done on traced numbers. When the reference
raises, the implementation must raise the same type and leave the bucket as the reference left
it: the refill is written back only once it has completed, never half-updated.
"""

from __future__ import annotations

import inspect
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qos_support import (
    BOOM,
    BoomError,
    Traced,
    TracedInplace,
    anything,
    assert_same_exception,
    assert_same_fields,
    call,
    call_styles,
    describe,
    kind_values,
    materialize,
    run,
    same_value,
)

FIELDS = ("capacity", "tokens", "rate_per_sec", "last_refill_at")
ARGS = ("bucket", "n", "now")
POSITIONAL = (3, [])


def assert_same_bucket(got, want, stored: dict, context: str = "") -> None:
    assert_same_fields(got, want, FIELDS, context, "bucket")
    for field in ("capacity", "rate_per_sec"):  # never written by try_consume
        assert getattr(got, field) is stored[field], (
            f"{context}bucket.{field} is not the object set"
        )


@st.composite
def scenarios(draw, values: st.SearchStrategy):
    init = draw(st.lists(values, min_size=4, max_size=4))
    default_last = draw(st.booleans())
    if default_last:
        init[3] = 0
    step = st.sampled_from(["consume"] * 4 + ["set"]).flatmap(
        lambda kind: (
            st.tuples(st.just(kind), values, values, call_styles(3))
            if kind == "consume"
            else st.tuples(st.just(kind), st.sampled_from(FIELDS), values, st.none())
        )
    )
    return init, default_last, draw(st.lists(step, min_size=1, max_size=8))


def run_scenario(impl, ref, init, default_last, steps) -> None:
    ref_log: list = []
    got_log: list = []
    ref_init = [materialize(v, ref_log) for v in init]
    got_init = [materialize(v, got_log) for v in init]
    if default_last:
        rb, gb = ref.TokenBucket(*ref_init[:3]), impl.TokenBucket(*got_init[:3])
        got_init[3] = gb.last_refill_at
    else:
        rb, gb = ref.TokenBucket(*ref_init), impl.TokenBucket(*got_init)
    stored = dict(zip(FIELDS, got_init, strict=True))
    assert_same_bucket(gb, rb, stored, "constructed: ")
    for i, (kind, a, b, style) in enumerate(steps):
        context = f"step {i} {kind} {a!r} {b!r}: "
        if kind == "set":
            setattr(rb, a, materialize(b, ref_log))
            stored[a] = materialize(b, got_log)
            setattr(gb, a, stored[a])
            assert getattr(gb, a) is stored[a], context
        else:
            r_args = [rb, materialize(a, ref_log), materialize(b, ref_log)]
            g_args = [gb, materialize(a, got_log), materialize(b, got_log)]
            expected = run(call, ref.try_consume, ARGS, r_args, style)
            got = run(call, impl.try_consume, ARGS, g_args, style)
            assert_same_exception(expected, got, context)
            if not expected.raised:
                result, want = got.value, expected.value
                assert type(result) is impl.ConsumeResult, context
                assert result.outcome is impl.ConsumeOutcome(want.outcome.value), context
                assert same_value(result.tokens_remaining, want.tokens_remaining), (
                    f"{context}tokens_remaining: got {describe(result.tokens_remaining)}, "
                    f"reference {describe(want.tokens_remaining)}"
                )
                assert repr(result) == repr(want), context
        assert got_log == ref_log, f"{context}Python operations differ"
        assert_same_bucket(gb, rb, stored, context)


@given(scenario=scenarios(anything))
def test_any_mix_of_types_matches_reference(impl, ref, scenario):
    run_scenario(impl, ref, *scenario)


@given(scenario=kind_values.flatmap(scenarios))
def test_one_kind_of_number_matches_reference(impl, ref, scenario):
    run_scenario(impl, ref, *scenario)


# --------------------------------------------------------------------------------------------
# The decision, worked by hand
# --------------------------------------------------------------------------------------------


def test_drain_throttle_refill(impl):
    allowed, throttled = impl.ConsumeOutcome.ALLOWED, impl.ConsumeOutcome.THROTTLED
    bucket = impl.TokenBucket(capacity=3, tokens=3, rate_per_sec=1)
    steps = [
        ((1, 0), allowed, 2),
        ((2, 0), allowed, 0),
        ((1, 0), throttled, 0),
        ((2, 2), allowed, 0),  # refilled 2 in 2 s
        ((1, 2), throttled, 0),
        ((5, 1), throttled, 0),  # clock went back: untouched
        ((1, 100), allowed, 2),  # capped at 3, then 1 taken
        ((4, 200), throttled, 3),  # more than capacity never passes
    ]
    for (n, now), outcome, remaining in steps:
        result = impl.try_consume(bucket, n, now)
        assert result.outcome is outcome
        assert type(result.tokens_remaining) is int and result.tokens_remaining == remaining
        assert bucket.tokens == remaining and type(bucket.tokens) is int
    assert repr(bucket) == "TokenBucket(capacity=3, tokens=3, rate_per_sec=1, last_refill_at=200)"


def test_throttled_call_still_stores_the_refill(impl):
    bucket = impl.TokenBucket(capacity=10, tokens=0, rate_per_sec=2, last_refill_at=1)
    result = impl.try_consume(bucket, 5, 2)
    assert result == impl.ConsumeResult(impl.ConsumeOutcome.THROTTLED, 2)
    assert (bucket.tokens, bucket.last_refill_at) == (2, 2)


def test_fraction_and_float_balances(impl):
    bucket = impl.TokenBucket(Fraction(5, 2), Fraction(1, 2), Fraction(1, 4), 0)
    result = impl.try_consume(bucket, Fraction(1, 2), 2)
    assert result.tokens_remaining == Fraction(1, 2) and type(result.tokens_remaining) is Fraction
    bucket = impl.TokenBucket(2.5, 0.5, 0.25, 0)
    result = impl.try_consume(bucket, 1, 2)
    assert result.outcome is impl.ConsumeOutcome.ALLOWED
    assert type(result.tokens_remaining) is float and result.tokens_remaining == 0.0


# --------------------------------------------------------------------------------------------
# Exceptions: the bucket is left exactly as the reference leaves it
# --------------------------------------------------------------------------------------------


def both(impl, ref, fields, n, now):
    """Run one try_consume on equal buckets of both; return (expected, got, ref bucket, bucket)."""
    rb, gb = ref.TokenBucket(*fields), impl.TokenBucket(*fields)
    expected = run(lambda: ref.try_consume(rb, n, now))
    got = run(lambda: impl.try_consume(gb, n, now))
    assert_same_exception(expected, got)
    assert_same_bucket(gb, rb, dict(zip(FIELDS, fields, strict=True)))
    return expected, got, rb, gb


def test_incomparable_n_raises_after_the_refill_is_stored(impl, ref):
    expected, _, _, gb = both(impl, ref, (10, 2, 1, 0), "x", 3)
    assert type(expected.exc) is TypeError  # raised by `bucket.tokens < n`
    assert repr(gb) == "TokenBucket(capacity=10, tokens=5, rate_per_sec=1, last_refill_at=3)"


def test_decimal_balance_with_float_n_raises_at_the_subtraction(impl, ref):
    # Decimal < float compares fine; Decimal - float raises TypeError. The refill is stored.
    fields = (Decimal(10), Decimal(2), Decimal(1), 0)
    expected, _, _, gb = both(impl, ref, fields, 1.5, 3)
    assert type(expected.exc) is TypeError
    assert repr(gb) == (
        "TokenBucket(capacity=Decimal('10'), tokens=Decimal('5'), "
        "rate_per_sec=Decimal('1'), last_refill_at=3)"
    )


def test_decimal_nan_n_raises_from_the_comparison(impl, ref):
    expected, _, _, gb = both(impl, ref, (Decimal(10), Decimal(2), 1, 0), Decimal("NaN"), 4)
    assert type(expected.exc).__name__ == "InvalidOperation"
    assert (gb.tokens, gb.last_refill_at) == (Decimal(6), 4)


def test_failed_refill_leaves_the_bucket_untouched(impl, ref):
    fields = (10, 2**70, 0.5, 0)
    expected, _, _, gb = both(impl, ref, fields, 1, 10**400)  # 10**400 * 0.5 overflows
    assert type(expected.exc) is OverflowError
    assert (
        repr(gb) == f"TokenBucket(capacity=10, tokens={2**70}, rate_per_sec=0.5, last_refill_at=0)"
    )


def test_failing_number_leaves_the_bucket_untouched(impl, ref):
    expected, *_ = both(impl, ref, (10, 1, 1, BOOM), 1, 5)
    assert type(expected.exc) is BoomError


@pytest.mark.parametrize("failing_op", ["rsub", "le", "mul", "add", "lt", "sub", "isub", "gt"])
def test_failure_at_each_operation(impl, ref, failing_op):
    """Traced tokens fail at one operation; state and operation log must match the reference."""
    for cls in (Traced, TracedInplace):
        logs: dict = {"ref": [], "got": []}
        buckets = {}
        for side, qos in (("ref", ref), ("got", impl)):
            log = logs[side]
            fail = frozenset([failing_op])
            buckets[side] = qos.TokenBucket(
                Traced(10, "cap", log, fail),
                cls(4, "tok", log, fail),
                Traced(2, "rate", log, fail),
                Traced(1, "last", log, fail),
            )
        expected = run(ref.try_consume, buckets["ref"], 3, 3)
        got = run(impl.try_consume, buckets["got"], 3, 3)
        assert_same_exception(expected, got)
        assert logs["got"] == logs["ref"]
        for field in FIELDS:
            assert same_value(getattr(buckets["got"], field), getattr(buckets["ref"], field))


def test_subtraction_is_in_place(impl, ref):
    """``bucket.tokens -= n``: a number with ``__isub__`` is updated in place, as in Python."""
    log: list = []
    tokens = TracedInplace(5, "tok", log)
    bucket = impl.TokenBucket(10, tokens, 0, 0)
    result = impl.try_consume(bucket, 2, 0)
    assert ("isub", "tok", "2") in log
    assert bucket.tokens is tokens and result.tokens_remaining is tokens
    assert tokens.v == 3


# --------------------------------------------------------------------------------------------
# How it can be called
# --------------------------------------------------------------------------------------------


def test_signature(impl):
    params = inspect.signature(impl.try_consume).parameters
    assert list(params) == list(ARGS)
    for p in params.values():
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, p
        assert p.default is inspect.Parameter.empty, p


def test_positional_and_keyword_calls(impl):
    results = []
    for style in ("pos", "kw", "mixed", "kw-reversed"):
        bucket = impl.TokenBucket(10, 10, 1)
        if style == "pos":
            results.append(impl.try_consume(bucket, 1, 0))
        elif style == "kw":
            results.append(impl.try_consume(bucket=bucket, n=1, now=0))
        elif style == "mixed":
            results.append(impl.try_consume(bucket, now=0, n=1))
        else:
            results.append(impl.try_consume(now=0, n=1, bucket=bucket))
        assert bucket.tokens == 9
    for result in results:
        assert repr(result) == (
            "ConsumeResult(outcome=<ConsumeOutcome.ALLOWED: 'Allowed'>, tokens_remaining=9)"
        )


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        (("B", 1), {}),
        (("B", 1, 2, 3), {}),
        (("B", 1), {"when": 2}),
        (("B", 1, 2), {"n": 1}),
    ],
)
def test_bad_calls_raise_type_error_like_the_reference(impl, ref, args, kwargs):
    def args_for(qos):
        return tuple(qos.TokenBucket(10, 10, 1) if a == "B" else a for a in args)

    expected = run(lambda: ref.try_consume(*args_for(ref), **kwargs))
    got = run(lambda: impl.try_consume(*args_for(impl), **kwargs))
    assert type(expected.exc) is TypeError
    assert_same_exception(expected, got)
