"""The limiters are native classes that behave as Python classes would.

``RateLimiter`` and ``KeyedRateLimiter`` are the extension's own types (not Python subclasses
of them), so that a call costs one native method call. These tests pin that ``try_acquire``
binds arguments as a Python method with the same signature would, and that everything a Python
class gave (subclasses, instance attributes, pickling them, ``help``) still holds.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import inspect
import pickle
import pydoc
import weakref
from typing import Any

import pytest
import qos_support
from hypothesis import given
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from protocol_in_code import _native
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter

SECOND = 10**9


def plain() -> RateLimiter:
    return RateLimiter(1, burst=2)


def keyed() -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)


class Sub(RateLimiter):
    """A user's subclass, with its own state and an override."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls = 0

    def check(self, n: int = 1, now_ns: int | None = None) -> Any:
        self.calls += 1
        return super().check(n, now_ns)


class KeyedSub(KeyedRateLimiter):
    """A user's keyed subclass."""


def test_the_public_classes_are_the_native_ones() -> None:
    assert RateLimiter is _native.RateLimiter
    assert KeyedRateLimiter is _native.KeyedRateLimiter
    assert RateLimiter.__module__ == "protocol_in_code.qos.limiter"
    assert KeyedRateLimiter.__module__ == "protocol_in_code.qos.keyed"
    assert type(plain()) is RateLimiter


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (plain, ["n", "now_ns"]),
        (keyed, ["key", "n", "now_ns", "plan"]),
    ],
)
def test_try_acquire_shows_its_signature(make: Any, expected: list[str]) -> None:
    limiter = make()
    parameters = inspect.signature(limiter.try_acquire).parameters
    assert list(parameters) == expected
    defaults = [p.default for p in parameters.values() if p.name not in ("key", "plan")]
    assert defaults == [1, None]
    if "plan" in parameters:  # a keyed limiter's plan is a keyword, None without plans
        assert parameters["plan"].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters["plan"].default is None
    assert "True if taken" in (type(limiter).try_acquire.__doc__ or "")


#: The calls every limiter class has, written once for both kinds of limiter.
SHARED_CALLS = [
    "try_acquire",
    "check",
    "peek",
    "refund",
    "available",
    "band_levels",
    "acquire",
    "_reserve",
    "_give_back",
    "acquire_async",
]


@pytest.mark.parametrize(
    ("one_key", "keyed_class"),
    [
        (_native.RateLimiter, _native.KeyedRateLimiter),
        (_native.SharedRateLimiter, _native.SharedKeyedRateLimiter),
    ],
)
@pytest.mark.parametrize("method", SHARED_CALLS)
def test_a_keyed_call_is_the_one_key_call_with_a_key_first_and_a_plan_last(
    one_key: Any, keyed_class: Any, method: str
) -> None:
    one = inspect.signature(getattr(one_key, method)).parameters
    many = inspect.signature(getattr(keyed_class, method)).parameters
    assert list(many) == ["self", "key", *list(one)[1:], "plan"]
    for name, parameter in one.items():
        assert many[name].default == parameter.default
        assert many[name].kind == parameter.kind
    assert many["key"].default is inspect.Parameter.empty
    assert many["plan"].kind is inspect.Parameter.KEYWORD_ONLY
    assert many["plan"].default is None
    assert getattr(one_key, method).__doc__
    assert getattr(keyed_class, method).__doc__ != getattr(one_key, method).__doc__


def test_try_acquire_binds_by_position_and_by_keyword() -> None:
    limiter = plain()
    assert limiter.try_acquire(2, 0) is True
    assert limiter.try_acquire(n=1, now_ns=0) is False
    assert limiter.try_acquire(now_ns=SECOND) is True
    assert limiter.try_acquire(1, now_ns=SECOND) is False
    table = keyed()
    assert table.try_acquire("a", 2, 0) is True
    assert table.try_acquire(key="a", now_ns=0) is False
    assert table.try_acquire("b", n=2, now_ns=0) is True
    assert table.try_acquire(now_ns=0, n=1, key="c") is True


def test_none_for_n_or_now_ns_means_not_given() -> None:
    clock = iter(range(0, 100 * SECOND, SECOND))
    limiter = RateLimiter(1, burst=2, clock=lambda: next(clock))
    assert limiter.try_acquire(None, None) is True  # n=1 at the clock's 0
    assert limiter.try_acquire(n=None, now_ns=None) is True  # at 1 s: one token back, one left
    assert limiter.available(now_ns=SECOND) == 1
    table = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    assert table.try_acquire("a", None, None) is True
    assert table.try_acquire("a", n=None, now_ns=None) is True
    assert table.available("a", now_ns=0) == 0
    assert table.try_acquire(None, now_ns=0) is True, "None is a key like any other"
    assert None in table


def test_the_defaults_alone() -> None:
    assert RateLimiter(1).try_acquire() is True
    assert KeyedRateLimiter(1).try_acquire("a") is True


def test_keyword_names_built_at_run_time_are_found_by_their_text() -> None:
    name = "".join(["now", "_ns"])  # not the interned identifier
    assert plain().try_acquire(**{name: 0}) is True
    assert keyed().try_acquire(**{"".join(["k", "ey"]): "a", name: 0}) is True


@pytest.mark.parametrize(
    ("make", "args", "kwargs", "words"),
    [
        (plain, (1, 0, 3), {}, "from 0 to 2 positional arguments but 3"),
        (plain, (), {"m": 1}, "unexpected keyword argument 'm'"),
        (plain, (1,), {"n": 1}, "multiple values for argument 'n'"),
        (keyed, (), {}, "missing 1 required positional argument: 'key'"),
        (keyed, ("a", 1, 0, 4), {}, "from 1 to 3 positional arguments but 4"),
        (keyed, ("a",), {"key": "b"}, "multiple values for argument 'key'"),
        (keyed, ("a",), {"now": 0}, "unexpected keyword argument 'now'"),
    ],
)
def test_bad_arguments_raise_type_error_naming_them(
    make: Any, args: tuple[Any, ...], kwargs: dict[str, Any], words: str
) -> None:
    limiter = make()
    with pytest.raises(TypeError, match=words) as caught:
        limiter.try_acquire(*args, **kwargs)
    assert f"{type(limiter).__name__}.try_acquire()" in str(caught.value)
    if make is keyed:
        assert len(limiter) == 0 and limiter.available("a", now_ns=0) == 2, "nothing taken"
    else:
        assert limiter.available(now_ns=0) == 2, "nothing taken"


def test_a_bad_value_still_names_the_parameter() -> None:
    with pytest.raises(TypeError, match="n must be an int"):
        plain().try_acquire("1")
    with pytest.raises(ValueError, match="now_ns must fit in 64 bits"):
        keyed().try_acquire("a", 1, 2**64)
    with pytest.raises(TypeError, match="unhashable"):
        keyed().try_acquire([])


def test_the_method_refuses_an_instance_of_another_class() -> None:
    with pytest.raises(TypeError):
        RateLimiter.try_acquire(keyed())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        KeyedRateLimiter.try_acquire(plain(), "a")  # type: ignore[arg-type]


def test_a_subclass_is_served_by_the_same_method_and_keeps_its_overrides() -> None:
    limiter = Sub(1, burst=2)
    assert limiter.try_acquire(2, now_ns=0) is True
    assert limiter.try_acquire(now_ns=0) is False
    assert limiter.check(now_ns=0).wait_ns == SECOND
    assert limiter.calls == 1
    assert KeyedSub(1, burst=1).try_acquire("a", now_ns=0) is True


@pytest.mark.parametrize("make", [plain, keyed])
def test_attributes_set_on_an_instance_are_kept_by_pickle_and_copy(make: Any) -> None:
    limiter = make()
    limiter.tags = ["api"]
    for restored in (pickle.loads(pickle.dumps(limiter)), copy.copy(limiter)):
        assert type(restored) is type(limiter)
        assert restored.tags == ["api"]
    restored = copy.deepcopy(limiter)
    restored.tags.append("other")
    assert limiter.tags == ["api"], "a deep copy has attributes of its own"


@pytest.mark.parametrize("make", [plain, keyed])
def test_limiters_take_weak_references(make: Any) -> None:
    limiter = make()
    ref = weakref.ref(limiter)
    cache = weakref.WeakValueDictionary({"limiter": limiter})
    assert ref() is limiter and cache["limiter"] is limiter
    del limiter
    gc.collect()
    assert ref() is None and "limiter" not in cache


@pytest.mark.parametrize("make", [plain, keyed])
def test_acquire_async_returns_a_coroutine_to_await(make: Any) -> None:
    limiter = make()
    args = ("a",) if make is keyed else ()
    pending = limiter.acquire_async(*args, 2)
    assert inspect.iscoroutine(pending)
    assert asyncio.run(pending) is True
    assert asyncio.run(limiter.acquire_async(*args, timeout=0)) is False


def test_a_subclass_pickles_with_its_type_and_attributes() -> None:
    limiter = Sub(1, burst=2)
    limiter.check(2, now_ns=0)
    restored = pickle.loads(pickle.dumps(limiter))
    assert type(restored) is Sub
    assert restored.calls == 1
    assert restored.available(now_ns=0) == 0


@pytest.mark.parametrize("cls", [RateLimiter, KeyedRateLimiter])
def test_help_shows_the_class_and_its_methods(cls: type) -> None:
    text = pydoc.render_doc(cls)
    for name in ("try_acquire(", "check(", "acquire_async(", " acquire(", "refund("):
        assert name in text
    assert "max_keys" in text if cls is KeyedRateLimiter else "initial" in text


def _reference_try_acquire(n: Any = None, now_ns: Any = None) -> None:
    """try_acquire's signature, as Python binds it."""


def _reference_keyed_try_acquire(key: Any, n: Any = None, now_ns: Any = None) -> None:
    """The keyed try_acquire's signature, as Python binds it."""


NAMES = st.sampled_from(["key", "n", "now_ns", "now", "m", "".join(["n", "ow_ns"])])


def empty_try_acquire(is_keyed: bool) -> Any:
    """A ``try_acquire`` with no token to give, whatever the key and the time: a limiter
    starting empty, or a table whose keys 0, 1 and None are emptied at 0 ns, at one token per
    10**12 s (so that even the monotonic clock's reading brings no token). Only ``n=0`` is
    allowed."""
    if not is_keyed:
        return RateLimiter(1, burst=10, per=10**12, initial=0).try_acquire
    table = KeyedRateLimiter(1, burst=10, per=10**12, max_keys=10, shards=1)
    for key in (0, 1, None):
        assert table.try_acquire(key, 10, now_ns=0)
    return table.try_acquire


@given(
    positional=st.lists(st.sampled_from([0, 1, None]), max_size=4),
    keywords=st.dictionaries(NAMES, st.sampled_from([0, 1, None]), max_size=3),
    is_keyed=st.booleans(),
)
def test_try_acquire_binds_exactly_as_python_does(
    positional: list[Any], keywords: dict[str, Any], is_keyed: bool
) -> None:
    reference = _reference_keyed_try_acquire if is_keyed else _reference_try_acquire
    try_acquire = empty_try_acquire(is_keyed)
    try:
        bound = inspect.signature(reference).bind(*positional, **keywords)
    except TypeError:
        with pytest.raises(TypeError):
            try_acquire(*positional, **keywords)
        return
    # Bound as Python would: the call runs (the values are valid; now_ns=None reads the clock)
    # and answers for the n that Python binds (None: one token), from an empty limiter.
    n = bound.arguments.get("n")
    assert try_acquire(*positional, **keywords) is (n == 0), f"n bound to {n!r}"
