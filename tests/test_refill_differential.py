"""compute_refill: the decision flow, Python's number semantics, and parity with the reference.

Hand-written corner cases (checked against the implementation under test and the reference),
then hypothesis differential tests: same result values, same Python ``type`` of each field,
same ``repr``, same exception type, and the same Python operations in the same order.
"""

from __future__ import annotations

import inspect
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from qos_support import (
    BOOM,
    INF,
    NAN,
    OPAQUE,
    BoomError,
    TaggedFloat,
    TaggedInt,
    anything,
    assert_same_exception,
    call,
    call_styles,
    describe,
    kind_values,
    materialize,
    run,
    same_value,
)

NAMES = ("tokens", "capacity", "rate_per_sec", "last_refill_at", "now")
POSITIONAL = (5, [])

# (what, (tokens, capacity, rate_per_sec, last_refill_at, now), (tokens, last_refill_at) or an
# exception type). Worked out by hand from the decision flow.
CASES = [
    ("plain growth", (10, 100, 2, 5, 8), (16, 8)),
    ("zero elapsed: untouched", (10, 100, 2, 5, 5), (10, 5)),
    ("negative elapsed: untouched, no error", (10, 100, 2, 5, 3), (10, 5)),
    ("cap from empty after a long idle", (0, 10, 1, 0, 1000), (10, 1000)),
    ("cap from a partial balance", (7, 10, 2, 0, 60), (10, 60)),
    ("grown equal to capacity", (8, 10, 1, 0, 2), (10, 2)),
    ("zero rate still moves the timestamp", (3, 10, 0, 0, 7), (3, 7)),
    (
        "ints beyond 64 bits stay exact ints",
        (10**30, 10**40, 10**20, 0, 10**5),
        (10**30 + 10**25, 10**5),
    ),
    ("2**64 + 1", (2**64, 2**65, 1, 0, 1), (2**64 + 1, 1)),
    ("64-bit inputs, growth overflows", (2**62, 2**63 - 1, 2**62, 0, 4), (2**63 - 1, 4)),
    ("64-bit inputs, elapsed overflows", (0, 10, 1, -(2**63), 2**63 - 1), (10, 2**63 - 1)),
    ("negative big ints", (-(2**70), 0, 2**6, 0, 2**64), (0, 2**64)),
    ("min keeps int grown equal to float capacity", (5, 10.0, 5, 0, 1), (10, 1)),
    ("min keeps float grown equal to int capacity", (5.0, 10, 5, 0, 1), (10.0, 1)),
    (
        "exact int/float compare: 2.0**53 < 2**53 + 1 caps",
        (2**53 + 1, 2.0**53, 0, 0, 1),
        (2.0**53, 1),
    ),
    (
        "exact int/float compare: 2**53 + 1 < 2.0**53 is false",
        (2.0**53, 2**53 + 1, 0, 0, 1),
        (2.0**53, 1),
    ),
    ("huge int against float capacity compares exactly", (10**400, 1e308, 0, 0, 1), (1e308, 1)),
    ("nan capacity never caps", (5, NAN, 1, 0, 1), (6, 1)),
    ("nan tokens flow through min", (NAN, 10, 1, 0, 1), (NAN, 1)),
    ("nan elapsed is not <= 0", (5, 10, 1, NAN, 1), (NAN, 1)),
    ("inf elapsed times zero rate is nan", (5, 10, 0, 0, INF), (NAN, INF)),
    ("inf capacity", (5, INF, 1, 0, 1), (6, 1)),
    ("-0.0 growth keeps its sign", (-0.0, 0.0, -0.0, 0, 1), (-0.0, 1)),
    ("-0.0 capacity does not replace 0.0", (0.0, -0.0, 0.0, 0, 1), (0.0, 1)),
    ("bools: True + 1 * True is int 2", (True, 5, True, False, True), (2, True)),
    ("bool capacity is returned as the bool", (True, True, True, False, True), (True, True)),
    ("bools untouched", (True, 5, 1, True, True), (True, True)),
    ("Fraction growth", (Fraction(1, 2), 10, Fraction(1, 3), 0, 3), (Fraction(3, 2), 3)),
    ("Fraction capped by an int capacity", (Fraction(1, 2), 1, 1, 0, 3), (1, 3)),
    ("Decimal growth", (Decimal("1.5"), Decimal(10), Decimal("0.5"), 0, 2), (Decimal("2.5"), 2)),
    ("Decimal untouched keeps its exponent", (Decimal("1.50"), 10, 1, 5, 5), (Decimal("1.50"), 5)),
    (
        "int subclass arithmetic is its own",
        (TaggedInt(1), 10, TaggedInt(2), 0, 3),
        (TaggedInt(7), 3),
    ),
    (
        "float subclass capacity is returned as is",
        (5, TaggedFloat(2.5), 1, 0, 1),
        (TaggedFloat(2.5), 1),
    ),
    ("None tokens are never touched at zero elapsed", (None, 10, 1, 5, 5), (None, 5)),
    ("sequence repetition and concatenation", ("ab", "zz", "c", 0, 2), ("abcc", 2)),
    ("lists", ([1], [9], [0], 0, 2), ([1, 0, 0], 2)),
    ("Decimal NaN elapsed cannot be ordered", (1, 10, 1, 0, Decimal("NaN")), InvalidOperation),
    ("Decimal times float", (1, 10, 1.5, 0, Decimal(2)), TypeError),
    ("Decimal plus Fraction", (Decimal(1), 10, Fraction(1, 2), 0, 2), TypeError),
    ("float times a huge int overflows", (0, 10, 0.5, 0, 10**400), OverflowError),
    ("huge int minus a float overflows", (0, 10, 1, 0.5, 10**400), OverflowError),
    ("an opaque object", (OPAQUE, 10, 1, 0, 1), TypeError),
    ("str tokens cannot grow by an int", ("x", 10, 1, 0, 1), TypeError),
    ("None now", (1, 10, 1, 0, None), TypeError),
    ("a number's own exception passes through", (1, 10, 1, BOOM, 1), BoomError),
    ("exception from the cap comparison", (1, BOOM, 1, 0, 1), BoomError),
]


@pytest.mark.parametrize("side", ["impl", "ref"])
@pytest.mark.parametrize(("args", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_worked_cases(request, side, args, expected):
    qos = request.getfixturevalue(side)
    if isinstance(expected, type):
        with pytest.raises(expected) as info:
            qos.compute_refill(*args)
        assert type(info.value) is expected
        return
    result = qos.compute_refill(*args)
    assert type(result) is qos.RefillResult
    got = (result.tokens, result.last_refill_at)
    assert all(same_value(g, e) for g, e in zip(got, expected, strict=True)), (
        f"got {[describe(g) for g in got]}, expected {[describe(e) for e in expected]}"
    )


def test_issue_repr_example(impl):
    result = impl.compute_refill(tokens=10, capacity=100, rate_per_sec=2, last_refill_at=5, now=5)
    assert repr(result) == "RefillResult(tokens=10, last_refill_at=5)"
    assert type(result.tokens) is int and type(result.last_refill_at) is int


def check_against_reference(impl, ref, args, style) -> None:
    """Run both with fresh copies of stateful arguments; everything observable must match."""
    ref_log: list = []
    got_log: list = []
    ref_args = [materialize(a, ref_log) for a in args]
    got_args = [materialize(a, got_log) for a in args]
    expected = run(lambda: call(ref.compute_refill, NAMES, ref_args, style))
    got = run(lambda: call(impl.compute_refill, NAMES, got_args, style))
    assert_same_exception(expected, got)
    assert got_log == ref_log, "Python operations differ (order, operands or reflection)"
    if expected.raised:
        return
    result = got.value
    assert type(result) is impl.RefillResult
    for field in ("tokens", "last_refill_at"):
        want, have = getattr(expected.value, field), getattr(result, field)
        assert same_value(have, want), f"{field}: got {describe(have)}, want {describe(want)}"
    assert repr(result) == repr(expected.value)


@given(args=st.lists(anything, min_size=5, max_size=5), style=call_styles(5))
@example(args=[2**53 + 1, 2.0**53, 0, 0, 1], style=POSITIONAL)
@example(args=[-0.0, 0.0, -0.0, 0, 1], style=POSITIONAL)
@example(args=[1, NAN, 1, 0, 1], style=POSITIONAL)
@example(args=[0, 10, 0.5, 0, 10**400], style=POSITIONAL)
@example(args=[True, True, True, False, True], style=POSITIONAL)
def test_any_mix_of_types_matches_reference(impl, ref, args, style):
    check_against_reference(impl, ref, args, style)


@given(
    args=kind_values.flatmap(lambda s: st.lists(s, min_size=5, max_size=5)), style=call_styles(5)
)
def test_one_kind_of_number_matches_reference(impl, ref, args, style):
    check_against_reference(impl, ref, args, style)


small_sequences = st.one_of(
    st.lists(st.sampled_from("abz"), max_size=3).map("".join),
    st.lists(st.integers(0, 3), max_size=3),
    st.integers(-2, 3),
)


@given(
    seqs=st.lists(small_sequences, min_size=3, max_size=3),
    times=st.lists(st.integers(-3, 4), min_size=2, max_size=2),
)
def test_sequences_follow_python_operators(impl, ref, seqs, times):
    """str/list values: ``*`` repeats and ``+`` concatenates, exactly as Python does."""
    check_against_reference(impl, ref, seqs + times, POSITIONAL)


def test_numpy_scalars_match_reference(impl, ref):
    np = pytest.importorskip("numpy")
    values = [
        np.int64(5), np.int64(2**62), np.int32(3), np.uint8(250), np.float64(2.5),
        np.float32(1.5), np.float64("nan"), np.bool_(True), 7, 2.5,
    ]  # fmt: skip
    with np.errstate(all="ignore"):
        for tokens in values:
            for capacity in values[::3]:
                for rate in values[::4]:
                    for last, now in ((values[2], values[0]), (0, values[4]), (values[0], 0)):
                        args = [tokens, capacity, rate, last, now]
                        check_against_reference(impl, ref, args, POSITIONAL)


# --------------------------------------------------------------------------------------------
# How it can be called
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "capacity", "rate", "now"),
    [
        (10**6, 2 * 10**6, 10**6, 3 * 10**6),  # 64-bit ints, no overflow: computed natively
        (2**62, 2**63 - 1, 2**62, 4),  # 64-bit ints whose growth overflows: Python's arithmetic
        (10**30, 10**31, 10**30, 10**5),  # beyond 64 bits from the start
        (1e300, 2e300, 1e300, 3e300),  # floats
    ],
)
def test_numbers_passed_through_are_the_very_objects_given(impl, tokens, capacity, rate, now):
    # None of these is a small int Python caches, so `is` tells a passed-through object from
    # an equal copy.
    untouched = impl.compute_refill(tokens, capacity, rate, now, now)
    assert untouched.tokens is tokens and untouched.last_refill_at is now
    capped = impl.compute_refill(tokens, capacity, rate, 0, now)
    assert capped.tokens is capacity and capped.last_refill_at is now


def test_signature_names_the_five_parameters(impl):
    params = inspect.signature(impl.compute_refill).parameters
    assert list(params) == list(NAMES)
    for p in params.values():
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, p
        assert p.default is inspect.Parameter.empty, p


def test_positional_keyword_and_mixed_calls(impl):
    values = (10, 100, 2, 5, 8)
    calls = [
        impl.compute_refill(*values),
        impl.compute_refill(**dict(zip(NAMES, values, strict=True))),
        impl.compute_refill(now=8, last_refill_at=5, rate_per_sec=2, capacity=100, tokens=10),
        impl.compute_refill(10, 100, rate_per_sec=2, now=8, last_refill_at=5),
    ]
    for result in calls:
        assert repr(result) == "RefillResult(tokens=16, last_refill_at=8)"


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((1, 2, 3, 4), {}),
        ((1, 2, 3, 4, 5, 6), {}),
        ((1, 2, 3, 4), {"nOw": 5}),
        ((1, 2, 3, 4, 5), {"tokens": 1}),
        ((1, 2, 3, 4, 5), {"extra": 1}),
    ],
)
def test_bad_calls_raise_type_error_like_the_reference(impl, ref, args, kwargs):
    expected = run(lambda: ref.compute_refill(*args, **kwargs))
    got = run(lambda: impl.compute_refill(*args, **kwargs))
    assert type(expected.exc) is TypeError
    assert_same_exception(expected, got)
