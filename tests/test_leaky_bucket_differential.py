"""leak and offer over sequences of calls, compared step by step with the reference.

After every step: what the call returned (``None`` for ``leak``; for ``offer`` an
``OfferResult`` whose outcome *is* the enum member, its ``level`` by value and type, its repr),
the bucket's four fields (value and type; capacity and leak_per_sec are the very objects
stored), the bucket's repr, and the Python operations done on traced numbers. When the reference
raises, the implementation must raise the same type and leave the bucket as the reference left
it: the leak is written back only once it has completed.

The corners the course's two lines hide: ``max(level - drained, 0)`` is Python's ``max`` with
the int ``0`` (a float or Fraction level that drains below zero becomes the int 0, ``-0.0`` and
NaN stay as they are), and ``bucket.level += n`` is an in-place addition (a number with
``__iadd__`` is updated in place).
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
    BoomError,
    TaggedInt,
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

FIELDS = ("capacity", "level", "leak_per_sec", "last_leak_at")
LEAK_ARGS = ("bucket", "now")
OFFER_ARGS = ("bucket", "n", "now")


def assert_same_bucket(got, want, stored: dict, context: str = "") -> None:
    assert_same_fields(got, want, FIELDS, context, "bucket")
    for field in ("capacity", "leak_per_sec"):  # never written by leak or offer
        assert getattr(got, field) is stored[field], (
            f"{context}bucket.{field} is not the object set"
        )


def check_offer_result(impl, result, want, context: str = "") -> None:
    assert type(result) is impl.OfferResult, context
    assert result.outcome is impl.OfferOutcome(want.outcome.value), context
    assert same_value(result.level, want.level), (
        f"{context}level: got {describe(result.level)}, reference {describe(want.level)}"
    )
    assert repr(result) == repr(want), context


# --------------------------------------------------------------------------------------------
# Hypothesis: sequences of leak / offer / field assignments
# --------------------------------------------------------------------------------------------


@st.composite
def scenarios(draw, values: st.SearchStrategy):
    init = draw(st.lists(values, min_size=4, max_size=4))
    default_last = draw(st.booleans())
    if default_last:
        init[3] = 0
    step = st.sampled_from(["offer"] * 4 + ["leak"] * 2 + ["set"]).flatmap(
        lambda kind: (
            st.tuples(st.just(kind), values, values, call_styles(3))
            if kind == "offer"
            else st.tuples(st.just(kind), values, st.none(), call_styles(2))
            if kind == "leak"
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
        rb, gb = ref.LeakyBucket(*ref_init[:3]), impl.LeakyBucket(*got_init[:3])
        got_init[3] = gb.last_leak_at
    else:
        rb, gb = ref.LeakyBucket(*ref_init), impl.LeakyBucket(*got_init)
    stored = dict(zip(FIELDS, got_init, strict=True))
    assert_same_bucket(gb, rb, stored, "constructed: ")
    for i, (kind, a, b, style) in enumerate(steps):
        context = f"step {i} {kind} {a!r} {b!r}: "
        if kind == "set":
            setattr(rb, a, materialize(b, ref_log))
            stored[a] = materialize(b, got_log)
            setattr(gb, a, stored[a])
            assert getattr(gb, a) is stored[a], context
        elif kind == "leak":
            expected = run(call, ref.leak, LEAK_ARGS, [rb, materialize(a, ref_log)], style)
            got = run(call, impl.leak, LEAK_ARGS, [gb, materialize(a, got_log)], style)
            assert_same_exception(expected, got, context)
            if not expected.raised:
                assert got.value is None, f"{context}leak returned {got.value!r}"
        else:
            r_args = [rb, materialize(a, ref_log), materialize(b, ref_log)]
            g_args = [gb, materialize(a, got_log), materialize(b, got_log)]
            expected = run(call, ref.offer, OFFER_ARGS, r_args, style)
            got = run(call, impl.offer, OFFER_ARGS, g_args, style)
            assert_same_exception(expected, got, context)
            if not expected.raised:
                check_offer_result(impl, got.value, expected.value, context)
        assert got_log == ref_log, f"{context}Python operations differ"
        assert_same_bucket(gb, rb, stored, context)


@given(scenario=scenarios(anything))
def test_any_mix_of_types_matches_reference(impl, ref, scenario):
    run_scenario(impl, ref, *scenario)


@given(scenario=kind_values.flatmap(scenarios))
@example(scenario=([10, 3.5, 1.0, 0], False, [("offer", 2, 10, (3, []))]))
@example(scenario=([10, -0.0, 0.0, 0], False, [("leak", 1, None, (2, []))]))
@example(scenario=([10, NAN, 1, 0], False, [("offer", 1, 5, (3, []))]))
@example(scenario=([10, Fraction(1, 2), 1, 0], True, [("leak", 3, None, (0, [1, 0]))]))
@example(scenario=([2**64, 2**64 - 1, 0.5, 0], True, [("offer", 1, 10**400, (3, []))]))
def test_one_kind_of_number_matches_reference(impl, ref, scenario):
    run_scenario(impl, ref, *scenario)


# --------------------------------------------------------------------------------------------
# The decision, worked by hand
# --------------------------------------------------------------------------------------------

# (what, (level, leak_per_sec, last_leak_at, now), (level, last_leak_at) after leak(), or the
# exception type).
LEAK_CASES = [
    ("plain drain: 10 - 3 s * 2/s", (10, 2, 0, 3), (4, 3)),
    ("zero elapsed: untouched", (10, 2, 5, 5), (10, 5)),
    ("negative elapsed: untouched, no error", (10, 2, 5, 1), (10, 5)),
    ("a long idle floors at the int 0", (3, 2, 0, 100), (0, 100)),
    ("drained exactly to 0", (6, 2, 0, 3), (0, 3)),
    ("a float level below 0 becomes the int 0", (3.5, 1.0, 0, 10), (0, 10)),
    ("a float level drained to 0.0 stays 0.0", (2.0, 1, 0, 2), (0.0, 2)),
    ("-0.0 is not below 0: it stays -0.0", (-0.0, 0.0, 0, 1), (-0.0, 1)),
    ("a NaN level is never below 0", (NAN, 1, 0, 1), (NAN, 1)),
    ("a NaN leak rate makes a NaN level", (5, NAN, 0, 1), (NAN, 1)),
    ("a NaN elapsed is not <= 0", (5, 1, NAN, 1), (NAN, 1)),
    ("inf elapsed times zero rate is NaN", (5, 0, 0, INF), (NAN, INF)),
    ("an infinite rate floors at the int 0", (5, INF, 0, 1), (0, 1)),
    ("Fraction drain", (Fraction(5, 2), Fraction(1, 2), 0, 3), (Fraction(1), 3)),
    ("a Fraction below 0 becomes the int 0", (Fraction(1, 2), 1, 0, 1), (0, 1)),
    ("Decimal drain", (Decimal("5.0"), Decimal("0.5"), 0, 2), (Decimal("4.0"), 2)),
    ("a Decimal below 0 becomes the int 0", (Decimal("0.5"), 1, 0, 1), (0, 1)),
    ("Decimal untouched keeps its exponent", (Decimal("1.50"), 1, 5, 5), (Decimal("1.50"), 5)),
    ("ints beyond 64 bits stay exact", (10**30, 10**20, 0, 10**5), (10**30 - 10**25, 10**5)),
    ("a negative big level floors", (-(2**70), 0, 0, 1), (0, 1)),
    ("bools: True - 1 * True is the int 0", (True, True, False, True), (0, True)),
    ("bools untouched", (True, 1, True, True), (True, True)),
    ("int subclass arithmetic is its own", (TaggedInt(10), 2, 0, 3), (TaggedInt(4), 3)),
    ("None level untouched at zero elapsed", (None, 1, 5, 5), (None, 5)),
    ("Decimal NaN elapsed cannot be ordered", (1, 1, 0, Decimal("NaN")), InvalidOperation),
    ("Decimal level minus a float", (Decimal(5), 1.5, 0, 1), TypeError),
    ("float times a huge int overflows", (0, 0.5, 0, 10**400), OverflowError),
    ("an opaque now", (1, 1, 0, object()), TypeError),
    ("a number's own exception passes through", (1, 1, BOOM, 1), BoomError),
    ("exception from the floor comparison", (BOOM, 0, 0, 1), BoomError),
]


def _check_pair(bucket, expected) -> None:
    got = (bucket.level, bucket.last_leak_at)
    assert all(same_value(g, e) for g, e in zip(got, expected, strict=True)), (
        f"got {[describe(g) for g in got]}, expected {[describe(e) for e in expected]}"
    )


@pytest.mark.parametrize("side", ["impl", "ref"])
@pytest.mark.parametrize(
    ("args", "expected"), [c[1:] for c in LEAK_CASES], ids=[c[0] for c in LEAK_CASES]
)
def test_leak_hand_worked_cases(request, side, args, expected):
    qos = request.getfixturevalue(side)
    level, rate, last, now = args
    bucket = qos.LeakyBucket(10, level, rate, last)
    if isinstance(expected, type):
        with pytest.raises(expected) as info:
            qos.leak(bucket, now)
        assert type(info.value) is expected
        _check_pair(bucket, (level, last))  # nothing written
        return
    assert qos.leak(bucket, now) is None
    _check_pair(bucket, expected)


ACC, OVER, ONE = "ACCEPTED", "OVERFLOWED", Fraction(1)

# (what, (capacity, level, leak_per_sec, last_leak_at), (n, now),
#  (outcome name, result level, bucket level, bucket last_leak_at) or the exception type and
#  the bucket's (level, last_leak_at) afterwards).
OFFER_CASES = [
    ("fits", (10, 4, 1, 0), (3, 0), (ACC, 7, 7, 0)),
    ("fills exactly to capacity", (10, 4, 1, 0), (6, 0), (ACC, 10, 10, 0)),
    ("one too many overflows, level unchanged", (10, 4, 1, 0), (7, 0), (OVER, 4, 4, 0)),
    ("an overflow still stores the leak", (10, 8, 1, 0), (5, 2), (OVER, 6, 6, 2)),
    ("room opened by the leak", (10, 10, 2, 0), (5, 3), (ACC, 9, 9, 3)),
    ("more than capacity never fits", (5, 0, 1, 0), (6, 100), (OVER, 0, 0, 100)),
    ("negative n is just added", (10, 4, 1, 0), (-10, 0), (ACC, -6, -6, 0)),
    ("NaN n is never too much", (10, 4, 1, 0), (NAN, 0), (ACC, NAN, NAN, 0)),
    ("NaN capacity never overflows", (NAN, 4, 1, 0), (10**6, 0), (ACC, 10**6 + 4, 10**6 + 4, 0)),
    ("float level floored to int 0, int n", (10, 3.5, 1.0, 0), (2, 10), (ACC, 2, 2, 10)),
    ("Fraction n", (1, Fraction(1, 3), 0, 0), (Fraction(2, 3), 0), (ACC, ONE, ONE, 0)),
    ("exact int/float compare", (2.0**53, 2**53, 0, 0), (1, 0), (OVER, 2**53, 2**53, 0)),
    ("bool n", (True, False, 0, 0), (True, 0), (ACC, 1, 1, 0)),
    ("Decimal level plus a float n", (10, Decimal(8), 1, 0), (1.5, 2), (TypeError, Decimal(6), 2)),
    ("a str n cannot be added", (10, 8, 1, 0), ("x", 2), (TypeError, 6, 2)),
    ("an opaque capacity cannot be compared", (object(), 8, 1, 0), (1, 2), (TypeError, 6, 2)),
    ("the leak fails: nothing written", (10, 8, 0.5, 0), (1, 10**400), (OverflowError, 8, 0)),
]  # fmt: skip


@pytest.mark.parametrize("side", ["impl", "ref"])
@pytest.mark.parametrize(
    ("fields", "args", "expected"), [c[1:] for c in OFFER_CASES], ids=[c[0] for c in OFFER_CASES]
)
def test_offer_hand_worked_cases(request, side, fields, args, expected):
    qos = request.getfixturevalue(side)
    bucket = qos.LeakyBucket(*fields)
    if isinstance(expected[0], type):
        with pytest.raises(expected[0]) as info:
            qos.offer(bucket, *args)
        assert type(info.value) is expected[0]
        _check_pair(bucket, expected[1:])
        return
    outcome, level, *pair = expected
    result = qos.offer(bucket, *args)
    assert type(result) is qos.OfferResult
    assert result.outcome is qos.OfferOutcome[outcome]
    assert same_value(result.level, level), describe(result.level)
    _check_pair(bucket, pair)
    assert bucket.capacity is fields[0] and bucket.leak_per_sec is fields[2]


def test_walkthrough_story(impl):
    accepted, overflowed = impl.OfferOutcome.ACCEPTED, impl.OfferOutcome.OVERFLOWED
    bucket = impl.LeakyBucket(capacity=10, level=0, leak_per_sec=2)
    assert bucket.last_leak_at == 0 and type(bucket.last_leak_at) is int
    steps = [
        ((4, 0), accepted, 4),
        ((6, 0), accepted, 10),
        ((1, 0), overflowed, 10),  # no time to drain
        ((5, 3), accepted, 9),  # 10 - 3 * 2 = 4, + 5
        ((2, 1), overflowed, 9),  # clock went back: nothing drained
    ]
    for (n, now), outcome, level in steps:
        result = impl.offer(bucket, n, now)
        assert result.outcome is outcome
        assert type(result.level) is int and result.level == level
        assert bucket.level == level and type(bucket.level) is int
    assert impl.leak(bucket, 100) is None
    assert repr(bucket) == "LeakyBucket(capacity=10, level=0, leak_per_sec=2, last_leak_at=100)"
    assert repr(impl.offer(bucket, 3, 100)) == (
        "OfferResult(outcome=<OfferOutcome.ACCEPTED: 'Accepted'>, level=3)"
    )


@pytest.mark.parametrize(
    "level",
    [3, 3.5, Fraction(7, 2), Decimal("3.5"), True, 2**70, -(2**70), TaggedInt(3), -INF],
    ids=repr,
)
def test_floor_is_pythons_max_with_the_int_zero(impl, level):
    """``max(level - drained, 0)``: below zero, the result is the int ``0`` itself."""
    bucket = impl.LeakyBucket(10, level, 10**100, 0)
    impl.leak(bucket, 1)
    assert type(bucket.level) is int and bucket.level == 0, describe(bucket.level)
    bucket = impl.LeakyBucket(10, level, 10**100, 0)
    result = impl.offer(bucket, 0.0, 1)
    assert type(result.level) is float and result.level == 0.0  # int 0 + 0.0


def test_floor_compares_zero_to_the_level(impl, ref):
    """``max(x, 0)`` asks ``0 > x``, which a traced level answers by its reflected ``<``."""
    logs = {}
    for side, qos in (("ref", ref), ("got", impl)):
        log: list = []
        bucket = qos.LeakyBucket(10, Traced(3, "lvl", log), Traced(2, "rate", log), 0)
        qos.leak(bucket, 5)
        assert type(bucket.level) is int and bucket.level == 0
        logs[side] = log
    assert logs["got"] == logs["ref"]
    assert logs["ref"] == [
        ("rmul", "rate", "5"),
        ("sub", "lvl", "(5*rate)"),
        ("lt", "(lvl-(5*rate))", "0"),
    ]


# --------------------------------------------------------------------------------------------
# In-place addition, and exceptions at each operation
# --------------------------------------------------------------------------------------------


def test_addition_is_in_place(impl, ref):
    """``bucket.level += n``: a number with ``__iadd__`` is updated in place, as in Python."""
    logs = {}
    for side, qos in (("ref", ref), ("got", impl)):
        log: list = []
        level = TracedInplace(5, "lvl", log)
        bucket = qos.LeakyBucket(10, level, 1, 7)
        result = qos.offer(bucket, 2, 7)  # zero elapsed: the stored level object is added to
        assert bucket.level is level and result.level is level
        assert level.v == 7 and level.label == "(lvl+=2)"
        logs[side] = log
    assert logs["got"] == logs["ref"]
    assert logs["ref"] == [
        ("add", "lvl", "2"),
        ("gt", "(lvl+2)", "10"),
        ("iadd", "lvl", "2"),
    ]


def test_addition_without_iadd_rebinds(impl):
    log: list = []
    level = Traced(5, "lvl", log)
    bucket = impl.LeakyBucket(10, level, 1, 7)
    result = impl.offer(bucket, 2, 7)
    assert bucket.level is not level and result.level is bucket.level
    assert bucket.level.label == "(lvl+2)" and level.v == 5
    assert log[-1] == ("add", "lvl", "2")


@pytest.mark.parametrize(
    "failing_op", ["rsub", "le", "mul", "sub", "lt", "add", "gt", "iadd", "radd", "rmul"]
)
def test_failure_at_each_operation(impl, ref, failing_op):
    """Traced fields fail at one operation; state and operation log must match the reference."""
    for cls in (Traced, TracedInplace):
        logs: dict = {"ref": [], "got": []}
        buckets = {}
        for side, qos in (("ref", ref), ("got", impl)):
            log = logs[side]
            fail = frozenset([failing_op])
            buckets[side] = qos.LeakyBucket(
                Traced(10, "cap", log, fail),
                cls(6, "lvl", log, fail),
                Traced(1, "rate", log, fail),
                Traced(1, "last", log, fail),
            )
        for traced_n in (False, True):  # a plain n, then a traced one (its own add/radd)
            n = {side: Traced(2, "n", logs[side]) if traced_n else 3 for side in logs}
            expected = run(ref.offer, buckets["ref"], n["ref"], 3)
            got = run(impl.offer, buckets["got"], n["got"], 3)
            assert_same_exception(expected, got)
            assert logs["got"] == logs["ref"]
            for field in FIELDS:
                assert same_value(getattr(buckets["got"], field), getattr(buckets["ref"], field))


# --------------------------------------------------------------------------------------------
# How they can be called
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "params"), [("leak", LEAK_ARGS), ("offer", OFFER_ARGS)])
def test_signature(impl, name, params):
    fn = getattr(impl, name)
    assert fn.__name__ == name
    got = inspect.signature(fn).parameters
    assert list(got) == list(params)
    for p in got.values():
        assert p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, p
        assert p.default is inspect.Parameter.empty, p


def test_positional_and_keyword_calls(impl):
    for style in ("pos", "kw", "mixed", "kw-reversed"):
        bucket = impl.LeakyBucket(10, 4, 1)
        if style == "pos":
            impl.leak(bucket, 1)
            result = impl.offer(bucket, 2, 2)
        elif style == "kw":
            impl.leak(bucket=bucket, now=1)
            result = impl.offer(bucket=bucket, n=2, now=2)
        elif style == "mixed":
            impl.leak(bucket, now=1)
            result = impl.offer(bucket, now=2, n=2)
        else:
            impl.leak(now=1, bucket=bucket)
            result = impl.offer(now=2, n=2, bucket=bucket)
        assert repr(result) == "OfferResult(outcome=<OfferOutcome.ACCEPTED: 'Accepted'>, level=4)"
        assert repr(bucket) == "LeakyBucket(capacity=10, level=4, leak_per_sec=1, last_leak_at=2)"


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("leak", (), {}),
        ("leak", ("B",), {}),
        ("leak", ("B", 1, 2), {}),
        ("leak", ("B",), {"when": 2}),
        ("leak", ("B", 1), {"now": 1}),
        ("offer", (), {}),
        ("offer", ("B", 1), {}),
        ("offer", ("B", 1, 2, 3), {}),
        ("offer", ("B", 1), {"when": 2}),
        ("offer", ("B", 1, 2), {"n": 1}),
    ],
)
def test_bad_calls_raise_type_error_like_the_reference(impl, ref, name, args, kwargs):
    def args_for(qos):
        return tuple(qos.LeakyBucket(10, 0, 1) if a == "B" else a for a in args)

    expected = run(lambda: getattr(ref, name)(*args_for(ref), **kwargs))
    got = run(lambda: getattr(impl, name)(*args_for(impl), **kwargs))
    assert type(expected.exc) is TypeError
    assert_same_exception(expected, got)
