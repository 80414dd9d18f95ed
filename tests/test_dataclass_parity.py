"""The result and bucket types behave like the course's dataclasses, the outcome like its Enum.

RefillResult and ConsumeResult: ``@dataclass(frozen=True)``. TokenBucket: a mutable
``@dataclass``. ConsumeOutcome: ``class ConsumeOutcome(str, Enum)``. Where a behaviour is
whatever Python's dataclass/Enum machinery does, the reference's class is the oracle.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import pickle
from collections.abc import Hashable
from decimal import Decimal
from fractions import Fraction

import pytest
from qos_support import NAN, OPAQUE, run, same_value

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)
ODD_VALUES = [10**30, -(2**64), 2.5, -0.0, NAN, Fraction(1, 3), Decimal("1.50"), True, None, "x"]


class AlwaysEqual:
    """Equal to everything: reached only if the left operand's ``__eq__`` says NotImplemented."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None


def frozen_specs(qos):
    """(class, field names, sample values, exact repr of the sample) for the frozen pairs."""
    allowed = qos.ConsumeOutcome.ALLOWED
    return {
        "RefillResult": (
            qos.RefillResult,
            ("tokens", "last_refill_at"),
            (10, 5),
            "RefillResult(tokens=10, last_refill_at=5)",
        ),
        "ConsumeResult": (
            qos.ConsumeResult,
            ("outcome", "tokens_remaining"),
            (allowed, 9),
            "ConsumeResult(outcome=<ConsumeOutcome.ALLOWED: 'Allowed'>, tokens_remaining=9)",
        ),
    }


frozen = pytest.mark.parametrize("name", ["RefillResult", "ConsumeResult"])


def destructure(obj, cls):
    match obj:
        case cls(a, b):
            return (a, b)
    return None


# --------------------------------------------------------------------------------------------
# Frozen pairs: RefillResult, ConsumeResult
# --------------------------------------------------------------------------------------------


@frozen
def test_frozen_construction_and_repr(impl, name):
    cls, fields, values, text = frozen_specs(impl)[name]
    made = [
        cls(*values),
        cls(**dict(zip(fields, values, strict=True))),
        cls(values[0], **{fields[1]: values[1]}),
        cls(**dict(reversed(list(zip(fields, values, strict=True))))),
    ]
    for obj in made:
        assert type(obj) is cls
        assert repr(obj) == text
        assert str(obj) == text
        for field, value in zip(fields, values, strict=True):
            assert getattr(obj, field) is value


@frozen
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_frozen_fields_hold_any_object_and_repr_like_the_reference(impl, ref, name, value):
    cls, fields, values, _ = frozen_specs(impl)[name]
    ref_cls = frozen_specs(ref)[name][0]
    first = values[0] if name == "ConsumeResult" else value
    obj = cls(first, value)
    assert getattr(obj, fields[0]) is first and getattr(obj, fields[1]) is value
    ref_first = ref.ConsumeOutcome.ALLOWED if name == "ConsumeResult" else value
    assert repr(obj) == repr(ref_cls(ref_first, value))


@frozen
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((1,), {}), ((1, 2, 3), {}), ((1, 2), {"extra": 3}), ((1,), {"FIELD0": 2})],
)
def test_frozen_bad_construction_raises_type_error(impl, ref, name, args, kwargs):
    cls, fields, _, _ = frozen_specs(impl)[name]
    ref_cls = frozen_specs(ref)[name][0]
    kwargs = {(fields[0] if k == "FIELD0" else k): v for k, v in kwargs.items()}
    expected = run(lambda: ref_cls(*args, **kwargs))
    got = run(lambda: cls(*args, **kwargs))
    assert type(expected.exc) is TypeError
    assert type(got.exc) is TypeError, got


@frozen
def test_frozen_equality(impl, ref, name):
    cls, _, (a, b), _ = frozen_specs(impl)[name]
    obj = cls(a, b)
    assert obj == cls(a, b)
    assert not (obj != cls(a, b))
    assert obj == cls(a, float(b))  # field by field: 9 == 9.0
    assert obj != cls(a, 123)
    assert not (obj == cls(a, 123))
    assert obj != (a, b) and not (obj == (a, b))
    assert obj.__eq__((a, b)) is NotImplemented
    assert obj.__ne__((a, b)) is NotImplemented
    assert (obj == AlwaysEqual()) is True  # NotImplemented lets the other side decide
    assert (obj != AlwaysEqual()) is False
    other_name = "ConsumeResult" if name == "RefillResult" else "RefillResult"
    assert obj != frozen_specs(impl)[other_name][0](a, b)
    ref_cls, _, (ra, rb), _ = frozen_specs(ref)[name]
    assert obj != ref_cls(ra, rb)  # only against its own class


@frozen
def test_frozen_no_ordering(impl, name):
    cls, _, values, _ = frozen_specs(impl)[name]
    with pytest.raises(TypeError):
        cls(*values) < cls(*values)  # noqa: B015


@frozen
def test_frozen_hash(impl, name):
    cls, _, (a, b), _ = frozen_specs(impl)[name]
    assert isinstance(cls(a, b), Hashable)
    assert hash(cls(a, b)) == hash((a, b))
    assert hash(cls(a, b)) == hash(cls(a, float(b)))
    assert hash(cls(a, 10**40)) == hash((a, 10**40))
    assert len({cls(a, b), cls(a, b), cls(a, float(b))}) == 1
    with pytest.raises(TypeError):
        hash(cls(a, [b]))


@frozen
def test_frozen_assignment_and_deletion_raise(impl, ref, name):
    """FrozenInstanceError (an AttributeError) with the dataclass's own message."""
    cls, fields, values, text = frozen_specs(impl)[name]
    ref_cls, _, ref_values, _ = frozen_specs(ref)[name]
    obj, ref_obj = cls(*values), ref_cls(*ref_values)
    attempts = [(setattr, field, 1) for field in (*fields, "new_attribute")]
    attempts += [(delattr, field) for field in (*fields, "new_attribute")]
    for action, *args in attempts:
        expected = run(action, ref_obj, *args)
        got = run(action, obj, *args)
        assert type(expected.exc) is dataclasses.FrozenInstanceError
        assert type(got.exc) is dataclasses.FrozenInstanceError, (action, args, got)
        assert str(got.exc) == str(expected.exc)
    assert repr(obj) == text


@frozen
def test_frozen_match_args_and_match_statement(impl, name):
    cls, fields, values, _ = frozen_specs(impl)[name]
    assert cls.__match_args__ == fields
    assert destructure(cls(*values), cls) == values
    assert destructure(values, cls) is None


def test_match_by_keyword(impl):
    match impl.compute_refill(10, 100, 2, 5, 8):
        case impl.RefillResult(tokens=t, last_refill_at=8):
            assert t == 16
        case _:
            pytest.fail("keyword class pattern did not match")


@frozen
@pytest.mark.parametrize("second", [9, 10**30, 2.5, NAN, Fraction(1, 3), Decimal("1.50"), [1, 2]])
def test_frozen_pickle_copy_deepcopy(impl, name, second):
    cls, _, (first, _), _ = frozen_specs(impl)[name]
    obj = cls(first, second)
    clones = [pickle.loads(pickle.dumps(obj, protocol)) for protocol in PROTOCOLS]
    clones += [copy.copy(obj), copy.deepcopy(obj)]
    for clone in clones:
        assert type(clone) is cls
        a, b = destructure(clone, cls)
        assert same_value(a, first) and same_value(b, second)
        if not (isinstance(second, float) and second != second):
            assert clone == obj
        if name == "ConsumeResult":
            assert a is first  # enum members survive as themselves
    assert destructure(copy.copy(obj), cls)[1] is second  # shallow
    if isinstance(second, list):
        deep = destructure(copy.deepcopy(obj), cls)[1]
        assert deep == second and deep is not second


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("RefillResult", "protocol_in_code.qos.refill"),
        ("ConsumeResult", "protocol_in_code.qos.token_bucket"),
        ("TokenBucket", "protocol_in_code.qos.token_bucket"),
        ("ConsumeOutcome", "protocol_in_code.qos.token_bucket"),
    ],
)
def test_class_names_and_modules(impl, name, module):
    cls = getattr(impl, name)
    assert cls.__module__ == module
    assert cls.__name__ == name and cls.__qualname__ == name


# --------------------------------------------------------------------------------------------
# TokenBucket: a mutable dataclass
# --------------------------------------------------------------------------------------------

BUCKET_FIELDS = ("capacity", "tokens", "rate_per_sec", "last_refill_at")


def test_bucket_construction_and_default(impl):
    values = (10**30, Fraction(1, 2), 2.5)
    for bucket in (
        impl.TokenBucket(*values),
        impl.TokenBucket(capacity=values[0], tokens=values[1], rate_per_sec=values[2]),
        impl.TokenBucket(rate_per_sec=values[2], tokens=values[1], capacity=values[0]),
    ):
        for field, value in zip(BUCKET_FIELDS[:3], values, strict=True):
            assert getattr(bucket, field) is value
        assert bucket.last_refill_at == 0 and type(bucket.last_refill_at) is int
    stamp = Decimal("7.25")
    assert impl.TokenBucket(1, 2, 3, stamp).last_refill_at is stamp
    assert impl.TokenBucket(1, 2, 3, last_refill_at=stamp).last_refill_at is stamp


def test_bucket_repr(impl, ref):
    assert repr(impl.TokenBucket(10, 10, 1)) == (
        "TokenBucket(capacity=10, tokens=10, rate_per_sec=1, last_refill_at=0)"
    )
    odd = (Fraction(1, 2), "x", None, Decimal("1.50"))
    assert repr(impl.TokenBucket(*odd)) == repr(ref.TokenBucket(*odd))
    assert str(impl.TokenBucket(*odd)) == str(ref.TokenBucket(*odd))


@pytest.mark.parametrize("field", BUCKET_FIELDS)
@pytest.mark.parametrize(
    "value",
    [*ODD_VALUES, OPAQUE, [1], 2**64 + 1],
    ids=lambda v: "object()" if v is OPAQUE else repr(v),
)
def test_bucket_fields_are_writable_and_hold_the_object(impl, field, value):
    bucket = impl.TokenBucket(10, 10, 1)
    setattr(bucket, field, value)
    assert getattr(bucket, field) is value
    others = [f for f in BUCKET_FIELDS if f != field]
    assert [getattr(bucket, f) for f in others] == [
        {"capacity": 10, "tokens": 10, "rate_per_sec": 1, "last_refill_at": 0}[f] for f in others
    ]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), ((1, 2), {}), ((1, 2, 3, 4, 5), {}), ((1, 2, 3), {"extra": 1}),
     ((1, 2, 3), {"capacity": 1})],
)  # fmt: skip
def test_bucket_bad_construction_raises_type_error(impl, ref, args, kwargs):
    expected = run(lambda: ref.TokenBucket(*args, **kwargs))
    got = run(lambda: impl.TokenBucket(*args, **kwargs))
    assert type(expected.exc) is TypeError
    assert type(got.exc) is TypeError, got


def test_bucket_equality(impl, ref):
    bucket = impl.TokenBucket(10, 10, 1)
    assert bucket == impl.TokenBucket(10, 10, 1, 0)
    assert bucket == impl.TokenBucket(10.0, 10, 1, 0.0)
    assert not (bucket != impl.TokenBucket(10, 10, 1, 0))
    for field in BUCKET_FIELDS:
        other = impl.TokenBucket(10, 10, 1)
        setattr(other, field, 99)
        assert bucket != other and not (bucket == other)
    other = impl.TokenBucket(10, 10, 1)
    impl.try_consume(other, 1, 0)
    assert bucket != other
    other.tokens = 10
    assert bucket == other
    assert bucket != (10, 10, 1, 0) and not (bucket == (10, 10, 1, 0))
    assert bucket.__eq__((10, 10, 1, 0)) is NotImplemented
    assert bucket.__ne__((10, 10, 1, 0)) is NotImplemented
    assert (bucket == AlwaysEqual()) is True
    assert bucket != ref.TokenBucket(10, 10, 1)  # only against its own class


def test_bucket_is_unhashable_and_unordered(impl):
    bucket = impl.TokenBucket(10, 10, 1)
    with pytest.raises(TypeError):
        hash(bucket)
    assert not isinstance(bucket, Hashable)
    with pytest.raises(TypeError):
        {bucket}  # noqa: B018
    with pytest.raises(TypeError):
        bucket < impl.TokenBucket(10, 10, 1)  # noqa: B015


def test_bucket_match_args_and_match_statement(impl):
    assert impl.TokenBucket.__match_args__ == BUCKET_FIELDS
    match impl.TokenBucket(10, 9, 1, 4):
        case impl.TokenBucket(capacity, tokens, rate, last_refill_at=when):
            assert (capacity, tokens, rate, when) == (10, 9, 1, 4)
        case _:
            pytest.fail("class pattern did not match")


@pytest.mark.parametrize("how", [f"pickle-{p}" for p in PROTOCOLS] + ["copy", "deepcopy"])
def test_bucket_clone_is_equal_and_independent(impl, how):
    payload = [1, 2]
    bucket = impl.TokenBucket(Fraction(10), 10**30, 2.5, payload)
    if how == "copy":
        clone = copy.copy(bucket)
    elif how == "deepcopy":
        clone = copy.deepcopy(bucket)
    else:
        clone = pickle.loads(pickle.dumps(bucket, int(how.split("-")[1])))
    assert type(clone) is impl.TokenBucket and clone is not bucket
    assert clone == bucket and repr(clone) == repr(bucket)
    for field in BUCKET_FIELDS:
        assert same_value(getattr(clone, field), getattr(bucket, field))
    if how == "copy":
        assert clone.last_refill_at is payload  # shallow, like a dataclass
    else:
        assert clone.last_refill_at is not payload
        clone.last_refill_at.append(3)
    clone.tokens = 0
    clone.capacity = 1
    assert bucket.tokens == 10**30 and bucket.capacity == Fraction(10)
    assert payload == [1, 2]
    # A clone refills and drains on its own.
    bucket = impl.TokenBucket(10, 10, 1)
    clone = copy.deepcopy(bucket) if how == "deepcopy" else copy.copy(bucket)
    if how.startswith("pickle"):
        clone = pickle.loads(pickle.dumps(bucket, int(how.split("-")[1])))
    impl.try_consume(clone, 4, 3)
    assert repr(bucket) == "TokenBucket(capacity=10, tokens=10, rate_per_sec=1, last_refill_at=0)"
    assert repr(clone) == "TokenBucket(capacity=10, tokens=6, rate_per_sec=1, last_refill_at=3)"


# --------------------------------------------------------------------------------------------
# ConsumeOutcome: a real str-mixin Enum
# --------------------------------------------------------------------------------------------


def test_outcome_is_a_str_enum(impl):
    outcome = impl.ConsumeOutcome
    assert issubclass(outcome, enum.Enum) and issubclass(outcome, str)
    assert isinstance(outcome, enum.EnumMeta)
    assert list(outcome) == [outcome.ALLOWED, outcome.THROTTLED]
    assert len(outcome) == 2
    assert [(m.name, m.value) for m in outcome] == [
        ("ALLOWED", "Allowed"),
        ("THROTTLED", "Throttled"),
    ]
    assert all(type(m.value) is str for m in outcome)
    assert isinstance(outcome.ALLOWED, str) and isinstance(outcome.ALLOWED, outcome)
    assert outcome("Allowed") is outcome.ALLOWED and outcome("Throttled") is outcome.THROTTLED
    assert outcome["ALLOWED"] is outcome.ALLOWED
    assert outcome.__members__.keys() == {"ALLOWED", "THROTTLED"}
    with pytest.raises(ValueError):
        outcome("allowed")


def test_outcome_compares_as_its_string(impl):
    allowed, throttled = impl.ConsumeOutcome.ALLOWED, impl.ConsumeOutcome.THROTTLED
    assert allowed == "Allowed" and "Allowed" == allowed
    assert throttled == "Throttled" and allowed != "Throttled" and allowed != throttled
    assert repr(allowed) == "<ConsumeOutcome.ALLOWED: 'Allowed'>"
    assert repr(throttled) == "<ConsumeOutcome.THROTTLED: 'Throttled'>"


@pytest.mark.parametrize("member", ["ALLOWED", "THROTTLED"])
def test_outcome_text_and_hash_like_the_reference(impl, ref, member):
    mine, theirs = getattr(impl.ConsumeOutcome, member), getattr(ref.ConsumeOutcome, member)
    assert str(mine) == str(theirs)
    assert format(mine) == format(theirs) and f"{mine}" == f"{theirs}"
    assert f"{mine:>12}" == f"{theirs:>12}"
    assert hash(mine) == hash(theirs)
    assert mine.upper() == theirs.upper()


@pytest.mark.parametrize("member", ["ALLOWED", "THROTTLED"])
def test_outcome_pickle_and_copy_keep_identity(impl, member):
    m = getattr(impl.ConsumeOutcome, member)
    for protocol in PROTOCOLS:
        assert pickle.loads(pickle.dumps(m, protocol)) is m
    assert copy.copy(m) is m and copy.deepcopy(m) is m


def test_try_consume_returns_the_members_themselves(impl):
    bucket = impl.TokenBucket(1, 1, 0)
    assert impl.try_consume(bucket, 1, 0).outcome is impl.ConsumeOutcome.ALLOWED
    assert impl.try_consume(bucket, 1, 0).outcome is impl.ConsumeOutcome.THROTTLED
