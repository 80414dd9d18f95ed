"""The result, bucket, tree and shaper types behave like the course's dataclasses, the outcomes
like its Enums.

Frozen (``@dataclass(frozen=True)``): RefillResult, ConsumeResult, OfferResult,
ValidationResult, EnqueueResult, TrafficClass. Mutable (``@dataclass``): TokenBucket,
LeakyBucket, ClassTree, ToyShaper. Enums (``class X(str, Enum)``): ConsumeOutcome, OfferOutcome,
ValidationOutcome. Where a behaviour is whatever Python's dataclass/Enum machinery does, the
reference's class is the oracle.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import pickle
from collections.abc import Hashable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

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


class Text(str):
    """A str subclass: equal to, and hashing like, the same plain str."""


@dataclass(frozen=True)
class Spec:
    """One record class of one implementation, with a sample of it.

    ``values``: a sample (repr ``text``); ``alike``: field by field ``==`` (and hash-equal) to
    ``values`` but of other types; ``vary``: the index of a field the tests fill with odd values.
    """

    cls: type
    fields: tuple[str, ...]
    values: tuple
    text: str
    alike: tuple
    vary: int
    module: str


def frozen_specs(qos) -> dict[str, Spec]:
    allowed = qos.ConsumeOutcome.ALLOWED
    throttled = qos.ConsumeOutcome.THROTTLED
    accepted = qos.OfferOutcome.ACCEPTED
    unknown = qos.ValidationOutcome.UNKNOWN_PARENT
    return {
        "RefillResult": Spec(
            qos.RefillResult,
            ("tokens", "last_refill_at"),
            (10, 5),
            "RefillResult(tokens=10, last_refill_at=5)",
            (10, 5.0),
            1,
            "refill",
        ),
        "ConsumeResult": Spec(
            qos.ConsumeResult,
            ("outcome", "tokens_remaining"),
            (allowed, 9),
            "ConsumeResult(outcome=<ConsumeOutcome.ALLOWED: 'Allowed'>, tokens_remaining=9)",
            (allowed, 9.0),
            1,
            "token_bucket",
        ),
        "OfferResult": Spec(
            qos.OfferResult,
            ("outcome", "level"),
            (accepted, 4),
            "OfferResult(outcome=<OfferOutcome.ACCEPTED: 'Accepted'>, level=4)",
            (accepted, Fraction(4)),
            1,
            "leaky_bucket",
        ),
        "ValidationResult": Spec(
            qos.ValidationResult,
            ("outcome", "detail"),
            (unknown, "video -> ghost"),
            "ValidationResult(outcome=<ValidationOutcome.UNKNOWN_PARENT: 'UnknownParent'>, "
            "detail='video -> ghost')",
            (unknown, Text("video -> ghost")),
            1,
            "classes",
        ),
        "EnqueueResult": Spec(
            qos.EnqueueResult,
            ("class_name", "outcome", "tokens_remaining"),
            ("video", throttled, 1),
            "EnqueueResult(class_name='video', outcome=<ConsumeOutcome.THROTTLED: 'Throttled'>, "
            "tokens_remaining=1)",
            (Text("video"), throttled, 1.0),
            2,
            "shaper_loop",
        ),
        "TrafficClass": Spec(
            qos.TrafficClass,
            ("name", "guaranteed_rate", "parent"),
            ("video", 60, "default"),
            "TrafficClass(name='video', guaranteed_rate=60, parent='default')",
            ("video", 60.0, Text("default")),
            1,
            "classes",
        ),
    }


FROZEN = [
    "RefillResult",
    "ConsumeResult",
    "OfferResult",
    "ValidationResult",
    "EnqueueResult",
    "TrafficClass",
]
frozen = pytest.mark.parametrize("name", FROZEN)


def destructure(obj, cls, n: int):
    """A class pattern with ``n`` positional sub-patterns."""
    if n == 2:
        match obj:
            case cls(a, b):
                return (a, b)
    elif n == 3:
        match obj:
            case cls(a, b, c):
                return (a, b, c)
    elif n == 4:
        match obj:
            case cls(a, b, c, d):
                return (a, b, c, d)
    elif n == 1:
        match obj:
            case cls(a):
                return (a,)
    return None


def replaced(values: tuple, i: int, value: Any) -> tuple:
    return (*values[:i], value, *values[i + 1 :])


def required_count(ref_cls) -> int:
    return sum(
        1
        for f in dataclasses.fields(ref_cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


# --------------------------------------------------------------------------------------------
# Frozen records
# --------------------------------------------------------------------------------------------


@frozen
def test_frozen_construction_and_repr(impl, name):
    spec = frozen_specs(impl)[name]
    fields, values = spec.fields, spec.values
    kwargs = dict(zip(fields, values, strict=True))
    made = [
        spec.cls(*values),
        spec.cls(**kwargs),
        spec.cls(values[0], **dict(list(kwargs.items())[1:])),
        spec.cls(**dict(reversed(list(kwargs.items())))),
    ]
    for obj in made:
        assert type(obj) is spec.cls
        assert repr(obj) == spec.text
        assert str(obj) == spec.text
        for field, value in zip(fields, values, strict=True):
            assert getattr(obj, field) is value


@frozen
@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_frozen_fields_hold_any_object_and_repr_like_the_reference(impl, ref, name, value):
    spec, ref_spec = frozen_specs(impl)[name], frozen_specs(ref)[name]
    for i, field in enumerate(spec.fields):
        obj = spec.cls(*replaced(spec.values, i, value))
        assert getattr(obj, field) is value
        for j, other in enumerate(spec.fields):
            if j != i:
                assert getattr(obj, other) is spec.values[j]
        assert repr(obj) == repr(ref_spec.cls(*replaced(ref_spec.values, i, value)))


def test_traffic_class_parent_defaults_to_none(impl, ref):
    for qos in (impl, ref):
        for cls in (qos.TrafficClass("video", 60), qos.TrafficClass(guaranteed_rate=60, name="v")):
            assert cls.parent is None
        assert repr(qos.TrafficClass("video", 60)) == (
            "TrafficClass(name='video', guaranteed_rate=60, parent=None)"
        )
        assert qos.TrafficClass("a", 1) == qos.TrafficClass("a", 1, None)
        assert hash(qos.TrafficClass("a", 1)) == hash(("a", 1, None))


BAD_CONSTRUCTIONS = ["nothing", "too few", "too many", "unknown keyword", "duplicate keyword"]


@frozen
@pytest.mark.parametrize("how", BAD_CONSTRUCTIONS)
def test_frozen_bad_construction_raises_type_error(impl, ref, name, how):
    spec, ref_cls = frozen_specs(impl)[name], frozen_specs(ref)[name].cls
    check_bad_construction(spec.cls, ref_cls, spec.fields, how)


def bad_arguments(ref_cls, fields, how):
    n, required = len(fields), required_count(ref_cls)
    return {
        "nothing": ((), {}),
        "too few": ((1,) * (required - 1), {}),
        "too many": ((1,) * (n + 1), {}),
        "unknown keyword": ((1,) * n, {"extra": 3}),
        "duplicate keyword": ((1,) * max(required, 1), {fields[0]: 2}),
    }[how]


def check_bad_construction(cls, ref_cls, fields, how):
    if how in ("nothing", "too few") and required_count(ref_cls) == 0:
        pytest.skip("every field has a default")
    args, kwargs = bad_arguments(ref_cls, fields, how)
    expected = run(lambda: ref_cls(*args, **kwargs))
    got = run(lambda: cls(*args, **kwargs))
    assert type(expected.exc) is TypeError
    assert type(got.exc) is TypeError, got


@frozen
def test_frozen_equality(impl, ref, name):
    spec = frozen_specs(impl)[name]
    cls, values = spec.cls, spec.values
    obj = cls(*values)
    assert obj == cls(*values)
    assert not (obj != cls(*values))
    assert obj == cls(*spec.alike)  # field by field: 9 == 9.0
    for i in range(len(values)):
        assert obj != cls(*replaced(values, i, 123))
        assert not (obj == cls(*replaced(values, i, 123)))
    assert obj != values and not (obj == values)
    assert obj.__eq__(values) is NotImplemented
    assert obj.__ne__(values) is NotImplemented
    assert (obj == AlwaysEqual()) is True  # NotImplemented lets the other side decide
    assert (obj != AlwaysEqual()) is False
    for other_name, other in frozen_specs(impl).items():
        if other_name != name and len(other.fields) == len(values):
            assert obj != other.cls(*values), other_name  # only against its own class
    ref_spec = frozen_specs(ref)[name]
    assert obj != ref_spec.cls(*ref_spec.values)


@frozen
def test_frozen_no_ordering(impl, name):
    spec = frozen_specs(impl)[name]
    with pytest.raises(TypeError):
        spec.cls(*spec.values) < spec.cls(*spec.values)  # noqa: B015


@frozen
def test_frozen_hash(impl, name):
    spec = frozen_specs(impl)[name]
    cls, values, vary = spec.cls, spec.values, spec.vary
    assert isinstance(cls(*values), Hashable)
    assert hash(cls(*values)) == hash(values)
    assert hash(cls(*values)) == hash(cls(*spec.alike))
    big = replaced(values, vary, 10**40)
    assert hash(cls(*big)) == hash(big)
    assert len({cls(*values), cls(*values), cls(*spec.alike)}) == 1
    with pytest.raises(TypeError):
        hash(cls(*replaced(values, vary, [values[vary]])))


@frozen
def test_frozen_assignment_and_deletion_raise(impl, ref, name):
    """FrozenInstanceError (an AttributeError) with the dataclass's own message."""
    spec, ref_spec = frozen_specs(impl)[name], frozen_specs(ref)[name]
    obj, ref_obj = spec.cls(*spec.values), ref_spec.cls(*ref_spec.values)
    attempts = [(setattr, field, 1) for field in (*spec.fields, "new_attribute")]
    attempts += [(delattr, field) for field in (*spec.fields, "new_attribute")]
    for action, *args in attempts:
        expected = run(action, ref_obj, *args)
        got = run(action, obj, *args)
        assert type(expected.exc) is dataclasses.FrozenInstanceError
        assert type(got.exc) is dataclasses.FrozenInstanceError, (action, args, got)
        assert str(got.exc) == str(expected.exc)
    assert repr(obj) == spec.text


@frozen
def test_frozen_match_args_and_match_statement(impl, name):
    spec = frozen_specs(impl)[name]
    assert spec.cls.__match_args__ == spec.fields
    assert destructure(spec.cls(*spec.values), spec.cls, len(spec.fields)) == spec.values
    assert destructure(spec.values, spec.cls, len(spec.fields)) is None


def test_match_by_keyword(impl):
    match impl.compute_refill(10, 100, 2, 5, 8):
        case impl.RefillResult(tokens=t, last_refill_at=8):
            assert t == 16
        case _:
            pytest.fail("keyword class pattern did not match")
    match impl.TrafficClass("video", 60, "default"):
        case impl.TrafficClass(name="video", parent=parent, guaranteed_rate=rate):
            assert (parent, rate) == ("default", 60)
        case _:
            pytest.fail("keyword class pattern did not match")


@frozen
@pytest.mark.parametrize("odd", [9, 10**30, 2.5, NAN, Fraction(1, 3), Decimal("1.50"), [1, 2]])
def test_frozen_pickle_copy_deepcopy(impl, name, odd):
    spec = frozen_specs(impl)[name]
    cls, n = spec.cls, len(spec.fields)
    values = replaced(spec.values, spec.vary, odd)
    obj = cls(*values)
    clones = [pickle.loads(pickle.dumps(obj, protocol)) for protocol in PROTOCOLS]
    clones += [copy.copy(obj), copy.deepcopy(obj)]
    for clone in clones:
        assert type(clone) is cls
        got = destructure(clone, cls, n)
        assert all(same_value(a, b) for a, b in zip(got, values, strict=True)), got
        if not (isinstance(odd, float) and odd != odd):
            assert clone == obj
        for a, b in zip(got, values, strict=True):
            if isinstance(b, enum.Enum):
                assert a is b  # enum members survive as themselves
    assert destructure(copy.copy(obj), cls, n)[spec.vary] is odd  # shallow
    if isinstance(odd, list):
        deep = destructure(copy.deepcopy(obj), cls, n)[spec.vary]
        assert deep == odd and deep is not odd


CLASS_MODULES = [
    ("RefillResult", "refill"),
    ("ConsumeResult", "token_bucket"),
    ("TokenBucket", "token_bucket"),
    ("ConsumeOutcome", "token_bucket"),
    ("OfferOutcome", "leaky_bucket"),
    ("LeakyBucket", "leaky_bucket"),
    ("OfferResult", "leaky_bucket"),
    ("ValidationOutcome", "classes"),
    ("TrafficClass", "classes"),
    ("ClassTree", "classes"),
    ("ValidationResult", "classes"),
    ("EnqueueResult", "shaper_loop"),
    ("ToyShaper", "shaper_loop"),
]


@pytest.mark.parametrize(("name", "module"), CLASS_MODULES)
def test_class_names_and_modules(impl, name, module):
    cls = getattr(impl, name)
    assert cls.__module__ == f"protocol_in_code.qos.{module}"
    assert cls.__name__ == name and cls.__qualname__ == name


# --------------------------------------------------------------------------------------------
# Mutable records: TokenBucket, LeakyBucket, ClassTree, ToyShaper
# --------------------------------------------------------------------------------------------


def mutable_specs(qos) -> dict[str, Spec]:
    """Fresh samples on every call (they hold dicts and lists)."""
    bucket_text = "TokenBucket(capacity=1, tokens=1, rate_per_sec=1, last_refill_at=0)"
    return {
        "TokenBucket": Spec(
            qos.TokenBucket,
            ("capacity", "tokens", "rate_per_sec", "last_refill_at"),
            (10, 10, 1, 0),
            "TokenBucket(capacity=10, tokens=10, rate_per_sec=1, last_refill_at=0)",
            (10.0, 10, 1, 0.0),
            1,
            "token_bucket",
        ),
        "LeakyBucket": Spec(
            qos.LeakyBucket,
            ("capacity", "level", "leak_per_sec", "last_leak_at"),
            (10, 0, 1, 0),
            "LeakyBucket(capacity=10, level=0, leak_per_sec=1, last_leak_at=0)",
            (10.0, 0, Fraction(1), 0.0),
            1,
            "leaky_bucket",
        ),
        "ClassTree": Spec(
            qos.ClassTree,
            ("classes",),
            ({"a": qos.TrafficClass("a", 1)},),
            "ClassTree(classes={'a': TrafficClass(name='a', guaranteed_rate=1, parent=None)})",
            ({"a": qos.TrafficClass("a", 1.0)},),
            0,
            "classes",
        ),
        "ToyShaper": Spec(
            qos.ToyShaper,
            ("tree", "buckets", "clock", "trace"),
            (qos.ClassTree(), {"a": qos.TokenBucket(1, 1, 1)}, 0, ["x"]),
            f"ToyShaper(tree=ClassTree(classes={{}}), buckets={{'a': {bucket_text}}}, clock=0, "
            "trace=['x'])",
            (qos.ClassTree({}), {"a": qos.TokenBucket(1.0, 1, 1)}, 0.0, [Text("x")]),
            2,
            "shaper_loop",
        ),
    }


MUTABLE = ["TokenBucket", "LeakyBucket", "ClassTree", "ToyShaper"]
mutable = pytest.mark.parametrize("name", MUTABLE)
BUCKETS = pytest.mark.parametrize("name", ["TokenBucket", "LeakyBucket"])


@mutable
def test_mutable_construction_and_repr(impl, ref, name):
    spec = mutable_specs(impl)[name]
    kwargs = dict(zip(spec.fields, spec.values, strict=True))
    made = [
        spec.cls(*spec.values),
        spec.cls(**kwargs),
        spec.cls(**dict(reversed(list(kwargs.items())))),
    ]
    for obj in made:
        assert type(obj) is spec.cls
        assert repr(obj) == spec.text and str(obj) == spec.text
        for field, value in zip(spec.fields, spec.values, strict=True):
            assert getattr(obj, field) is value
    ref_spec = mutable_specs(ref)[name]
    assert repr(ref_spec.cls(*ref_spec.values)) == spec.text


@BUCKETS
def test_bucket_construction_and_default(impl, name):
    cls = getattr(impl, name)
    fields = mutable_specs(impl)[name].fields
    values = (10**30, Fraction(1, 2), 2.5)
    for bucket in (
        cls(*values),
        cls(**dict(zip(fields[:3], values, strict=True))),
        cls(**dict(reversed(list(zip(fields[:3], values, strict=True))))),
    ):
        for field, value in zip(fields[:3], values, strict=True):
            assert getattr(bucket, field) is value
        last = getattr(bucket, fields[3])
        assert last == 0 and type(last) is int
    stamp = Decimal("7.25")
    assert getattr(cls(1, 2, 3, stamp), fields[3]) is stamp
    assert getattr(cls(1, 2, 3, **{fields[3]: stamp}), fields[3]) is stamp


def test_class_tree_default_is_a_fresh_dict(impl):
    a, b = impl.ClassTree(), impl.ClassTree()
    assert a.classes == {} and type(a.classes) is dict
    assert a.classes is not b.classes
    a.classes["x"] = impl.TrafficClass("x", 1)
    assert b.classes == {} and impl.ClassTree().classes == {}
    assert repr(b) == "ClassTree(classes={})"
    given: dict = {}
    assert impl.ClassTree(given).classes is given
    assert impl.ClassTree(classes=given).classes is given


def test_toy_shaper_defaults_are_fresh_per_instance(impl):
    tree = impl.ClassTree()
    a, b = impl.ToyShaper(tree), impl.ToyShaper(tree=tree)
    for shaper in (a, b):
        assert shaper.tree is tree
        assert shaper.buckets == {} and type(shaper.buckets) is dict
        assert shaper.clock == 0 and type(shaper.clock) is int
        assert shaper.trace == [] and type(shaper.trace) is list
    assert a.buckets is not b.buckets and a.trace is not b.trace
    a.buckets["x"] = impl.TokenBucket(1, 1, 1)
    a.trace.append("line")
    assert b.buckets == {} and b.trace == []
    assert impl.ToyShaper(tree).buckets == {} and impl.ToyShaper(tree).trace == []
    assert repr(b) == "ToyShaper(tree=ClassTree(classes={}), buckets={}, clock=0, trace=[])"


def test_toy_shaper_keeps_the_dict_and_list_it_is_given(impl):
    """Callers reach in: the shaper works on the very dict and list, before and after."""
    buckets = {"video": impl.TokenBucket(1, 1, 0)}
    trace: list = []
    shaper = impl.ToyShaper(impl.ClassTree(), buckets, 0, trace)
    assert shaper.buckets is buckets and shaper.trace is trace
    shaper.enqueue("video", 1, 0)
    assert trace == ["enqueue video size=1 at t=0: Allowed (tokens_remaining=0)"]
    # Replace the bucket in the dict: the next enqueue uses the new one.
    buckets["video"] = impl.TokenBucket(5, 5, 0)
    assert shaper.enqueue("video", 1, 0).tokens_remaining == 4
    # A class added to the dict exists for the shaper at once; one removed is unknown.
    buckets["voice"] = impl.TokenBucket(2, 2, 0)
    assert shaper.enqueue("voice", 2, 0).tokens_remaining == 0
    del buckets["video"]
    with pytest.raises(KeyError):
        shaper.enqueue("video", 1, 0)
    # Lines the caller adds or removes are just list items; new lines go after them.
    trace.clear()
    trace.append("mine")
    shaper.enqueue("voice", 1, 0)
    assert trace == ["mine", "enqueue voice size=1 at t=0: Throttled (tokens_remaining=0)"]
    # Assigning new containers: from then on the shaper uses those.
    shaper.trace = new_trace = []
    shaper.buckets = {"video": impl.TokenBucket(3, 3, 0)}
    shaper.enqueue("video", 3, 0)
    assert shaper.trace is new_trace and len(new_trace) == 1 and len(trace) == 2


@mutable
@pytest.mark.parametrize(
    "value",
    [*ODD_VALUES, OPAQUE, [1], 2**64 + 1],
    ids=lambda v: "object()" if v is OPAQUE else repr(v),
)
def test_mutable_fields_are_writable_and_hold_the_object(impl, name, value):
    spec = mutable_specs(impl)[name]
    for i, field in enumerate(spec.fields):
        obj = spec.cls(*spec.values)
        setattr(obj, field, value)
        assert getattr(obj, field) is value
        for j, other in enumerate(spec.fields):
            if j != i:
                assert getattr(obj, other) is spec.values[j]


@mutable
@pytest.mark.parametrize("how", BAD_CONSTRUCTIONS)
def test_mutable_bad_construction_raises_type_error(impl, ref, name, how):
    spec, ref_cls = mutable_specs(impl)[name], mutable_specs(ref)[name].cls
    check_bad_construction(spec.cls, ref_cls, spec.fields, how)


@mutable
def test_mutable_equality(impl, ref, name):
    spec = mutable_specs(impl)[name]
    obj = spec.cls(*spec.values)
    assert obj == spec.cls(*mutable_specs(impl)[name].values)
    assert obj == spec.cls(*spec.alike)
    assert not (obj != spec.cls(*spec.values))
    for field in spec.fields:
        other = spec.cls(*mutable_specs(impl)[name].values)
        setattr(other, field, 99)
        assert obj != other and not (obj == other)
        setattr(other, field, getattr(obj, field))
        assert obj == other
    values = spec.values
    assert obj != values and not (obj == values)
    assert obj.__eq__(values) is NotImplemented
    assert obj.__ne__(values) is NotImplemented
    assert (obj == AlwaysEqual()) is True
    ref_spec = mutable_specs(ref)[name]
    assert obj != ref_spec.cls(*ref_spec.values)  # only against its own class


def test_bucket_equality_follows_the_state(impl):
    bucket = impl.TokenBucket(10, 10, 1)
    other = impl.TokenBucket(10, 10, 1)
    impl.try_consume(other, 1, 0)
    assert bucket != other
    other.tokens = 10
    assert bucket == other
    leaky, other = impl.LeakyBucket(10, 0, 1), impl.LeakyBucket(10, 0, 1)
    impl.offer(other, 1, 0)
    assert leaky != other
    other.level = 0
    assert leaky == other
    assert impl.TokenBucket(10, 10, 1) != impl.LeakyBucket(10, 10, 1)


@mutable
def test_mutable_is_unhashable_and_unordered(impl, name):
    spec = mutable_specs(impl)[name]
    obj = spec.cls(*spec.values)
    with pytest.raises(TypeError):
        hash(obj)
    assert not isinstance(obj, Hashable)
    with pytest.raises(TypeError):
        {obj}  # noqa: B018
    with pytest.raises(TypeError):
        obj < spec.cls(*spec.values)  # noqa: B015


@mutable
def test_mutable_match_args_and_match_statement(impl, name):
    spec = mutable_specs(impl)[name]
    assert spec.cls.__match_args__ == spec.fields
    assert destructure(spec.cls(*spec.values), spec.cls, len(spec.fields)) == spec.values
    assert destructure(spec.values, spec.cls, len(spec.fields)) is None
    match impl.TokenBucket(10, 9, 1, 4):
        case impl.TokenBucket(capacity, tokens, rate, last_refill_at=when):
            assert (capacity, tokens, rate, when) == (10, 9, 1, 4)
        case _:
            pytest.fail("class pattern did not match")


CLONES = [f"pickle-{p}" for p in PROTOCOLS] + ["copy", "deepcopy"]


def clone_of(obj, how):
    if how == "copy":
        return copy.copy(obj)
    if how == "deepcopy":
        return copy.deepcopy(obj)
    return pickle.loads(pickle.dumps(obj, int(how.split("-")[1])))


@mutable
@pytest.mark.parametrize("how", CLONES)
def test_mutable_clone_is_equal_and_independent(impl, name, how):
    spec = mutable_specs(impl)[name]
    payload = [1, 2]
    values = replaced(spec.values, spec.vary, payload)
    obj = spec.cls(*values)
    clone = clone_of(obj, how)
    assert type(clone) is spec.cls and clone is not obj
    assert clone == obj and repr(clone) == repr(obj)
    for field in spec.fields:
        assert same_value(getattr(clone, field), getattr(obj, field)), field
        if how == "copy":
            assert getattr(clone, field) is getattr(obj, field)  # shallow, like a dataclass
    vary = spec.fields[spec.vary]
    if how != "copy":
        assert getattr(clone, vary) is not payload
        getattr(clone, vary).append(3)
    for field in spec.fields:
        setattr(clone, field, 0)
    assert getattr(obj, vary) is payload and payload == [1, 2]
    assert repr(obj) == repr(spec.cls(*values))


@BUCKETS
@pytest.mark.parametrize("how", CLONES)
def test_bucket_clone_works_on_its_own(impl, name, how):
    spec = mutable_specs(impl)[name]
    bucket = spec.cls(*spec.values)
    clone = clone_of(bucket, how)
    if name == "TokenBucket":
        impl.try_consume(clone, 4, 3)
        after = "TokenBucket(capacity=10, tokens=6, rate_per_sec=1, last_refill_at=3)"
    else:
        impl.offer(clone, 4, 3)
        after = "LeakyBucket(capacity=10, level=4, leak_per_sec=1, last_leak_at=3)"
    assert repr(bucket) == spec.text
    assert repr(clone) == after


@pytest.mark.parametrize("how", CLONES)
def test_shaper_clone_shares_containers_only_when_shallow(impl, how):
    shaper = impl.ToyShaper(impl.ClassTree(), {"a": impl.TokenBucket(3, 3, 0)})
    clone = clone_of(shaper, how)
    clone.enqueue("a", 1, 0)
    clone.tick(5)
    assert shaper.clock == 0 and clone.clock == 5
    if how == "copy":  # the same dict, bucket and list: the original sees the spend
        assert shaper.trace is clone.trace and len(shaper.trace) == 1
        assert shaper.buckets["a"].tokens == 2
    else:
        assert shaper.trace == [] and clone.trace != []
        assert shaper.buckets["a"].tokens == 3 and clone.buckets["a"].tokens == 2
        assert type(clone.buckets["a"]) is impl.TokenBucket
        assert type(clone.tree) is impl.ClassTree


ALL_RECORDS = FROZEN + MUTABLE


@pytest.mark.parametrize("name", ALL_RECORDS)
def test_recursive_repr_like_the_reference(impl, ref, name):
    """A record inside its own field repr's as ``...``, like a dataclass (reprlib guard)."""
    reprs = []
    for qos in (impl, ref):
        specs = {**frozen_specs(qos), **mutable_specs(qos)}
        spec = specs[name]
        box: list = []
        obj = spec.cls(*replaced(spec.values, spec.vary, box))
        box.append(obj)
        reprs.append(repr(obj))
    assert reprs[0] == reprs[1]
    assert "[...]" in reprs[0]


# --------------------------------------------------------------------------------------------
# The outcome Enums: real str-mixin Enums
# --------------------------------------------------------------------------------------------

ENUMS = {
    "ConsumeOutcome": [("ALLOWED", "Allowed"), ("THROTTLED", "Throttled")],
    "OfferOutcome": [("ACCEPTED", "Accepted"), ("OVERFLOWED", "Overflowed")],
    "ValidationOutcome": [
        ("VALID", "Valid"),
        ("UNKNOWN_PARENT", "UnknownParent"),
        ("CYCLE", "Cycle"),
        ("OVER_SUBSCRIBED", "OverSubscribed"),
    ],
}
enums = pytest.mark.parametrize("enum_name", sorted(ENUMS))
MEMBERS = [(e, m) for e in sorted(ENUMS) for m, _ in ENUMS[e]]
members = pytest.mark.parametrize(("enum_name", "member"), MEMBERS)


@enums
def test_outcome_is_a_str_enum(impl, ref, enum_name):
    outcome = getattr(impl, enum_name)
    items = ENUMS[enum_name]
    assert issubclass(outcome, enum.Enum) and issubclass(outcome, str)
    assert isinstance(outcome, enum.EnumMeta)
    assert [(m.name, m.value) for m in outcome] == items
    assert [(m.name, m.value) for m in getattr(ref, enum_name)] == items
    assert len(outcome) == len(items)
    assert all(type(m.value) is str for m in outcome)
    for member, value in items:
        m = getattr(outcome, member)
        assert isinstance(m, str) and isinstance(m, outcome)
        assert outcome(value) is m and outcome[member] is m
    assert list(outcome.__members__) == [member for member, _ in items]
    with pytest.raises(ValueError):
        outcome(items[0][1].lower())
    with pytest.raises(KeyError):
        outcome[items[0][1]]


@enums
def test_outcome_compares_as_its_string(impl, enum_name):
    outcome = getattr(impl, enum_name)
    members_ = list(outcome)
    for m, (member, value) in zip(members_, ENUMS[enum_name], strict=True):
        assert m == value and value == m
        assert repr(m) == f"<{enum_name}.{member}: '{value}'>"
        for other in members_:
            assert (m == other) is (m is other)
            if other is not m:
                assert m != other.value


@members
def test_outcome_text_and_hash_like_the_reference(impl, ref, enum_name, member):
    mine = getattr(getattr(impl, enum_name), member)
    theirs = getattr(getattr(ref, enum_name), member)
    assert str(mine) == str(theirs)
    assert format(mine) == format(theirs) and f"{mine}" == f"{theirs}"
    assert f"{mine:>16}" == f"{theirs:>16}"
    assert hash(mine) == hash(theirs)
    assert mine.upper() == theirs.upper()


@members
def test_outcome_pickle_and_copy_keep_identity(impl, enum_name, member):
    m = getattr(getattr(impl, enum_name), member)
    for protocol in PROTOCOLS:
        assert pickle.loads(pickle.dumps(m, protocol)) is m
    assert copy.copy(m) is m and copy.deepcopy(m) is m


def test_calls_return_the_members_themselves(impl):
    bucket = impl.TokenBucket(1, 1, 0)
    assert impl.try_consume(bucket, 1, 0).outcome is impl.ConsumeOutcome.ALLOWED
    assert impl.try_consume(bucket, 1, 0).outcome is impl.ConsumeOutcome.THROTTLED
    leaky = impl.LeakyBucket(1, 0, 0)
    assert impl.offer(leaky, 1, 0).outcome is impl.OfferOutcome.ACCEPTED
    assert impl.offer(leaky, 1, 0).outcome is impl.OfferOutcome.OVERFLOWED
    tree = impl.ClassTree({"a": impl.TrafficClass("a", 1)})
    assert impl.validate_tree(tree).outcome is impl.ValidationOutcome.VALID


# --------------------------------------------------------------------------------------------
# The dataclasses module's own functions
# --------------------------------------------------------------------------------------------


def described_fields(cls) -> list[tuple]:
    """What ``dataclasses.fields`` says of each field, but its type annotation."""
    return [
        (f.name, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare, f.kw_only)
        for f in dataclasses.fields(cls)
    ]


def params(cls) -> tuple:
    p = cls.__dataclass_params__
    return (p.init, p.repr, p.eq, p.order, p.unsafe_hash, p.frozen)


@pytest.mark.parametrize(
    ("name", "specs"), [(n, frozen_specs) for n in FROZEN] + [(n, mutable_specs) for n in MUTABLE]
)
def test_the_dataclasses_module_sees_the_same_dataclass(impl, ref, name, specs):
    spec, ref_spec = specs(impl)[name], specs(ref)[name]
    obj, theirs = spec.cls(*spec.values), ref_spec.cls(*ref_spec.values)
    assert dataclasses.is_dataclass(spec.cls) and dataclasses.is_dataclass(obj)
    assert described_fields(spec.cls) == described_fields(ref_spec.cls)
    assert params(spec.cls) == params(ref_spec.cls)
    assert repr(dataclasses.asdict(obj)) == repr(dataclasses.asdict(theirs))
    assert repr(dataclasses.astuple(obj)) == repr(dataclasses.astuple(theirs))
    field = spec.fields[spec.vary]
    changed = dataclasses.replace(obj, **{field: 7})
    assert type(changed) is spec.cls and getattr(changed, field) == 7
    assert repr(changed) == repr(dataclasses.replace(theirs, **{field: 7}))
    assert obj == spec.cls(*spec.values), "replace made a new object and left this one"
