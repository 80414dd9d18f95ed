"""Tuple keys of a keyed limiter: read natively when every item is, and equal as dict keys are.

* A tuple whose items are all keys the table reads natively (``str``, ``bytes``, ints of any
  size, floats, or what Python says equals one of them; tuples of such, nested) is one key with
  every tuple a dict says equals it: ``(1, "a")``, ``(1.0, "a")``, ``(True, Str("a"))`` and a
  namedtuple of those items. ``("a",)`` is not ``"a"``, ``(1, b"a")`` is not ``(1, "a")``,
  ``()`` is a key, nesting counts. It comes back from iteration as the plain tuple of its
  items' plain values (as ``1.0`` comes back as ``1``).
* A tuple holding anything else (an object of the program's own class, a NaN, a ``Fraction``
  equal to no float), or of a subclass that says it is not the plain
  tuple of its items, goes to the registry whole, as any object key: the very object comes back.
* Tuples of ints that CPython hashes alike (ints hash as ``n mod 2**61 - 1``, and a tuple's hash
  is unseeded) are never compared with each other: seen by counting the ``__eq__`` calls of
  their items, and by the table not holding them (the registry keeps the objects it numbers,
  and the cycle collector sees them through the table). No timing: ``bench/bench_keyed.py``
  has the cost per new key.
* No item's code runs under a lock: an item whose ``__eq__`` calls back into the table.
* Pickling keeps tuple keys, and a state saved while tuples were numbered by the registry (a
  tuple with a key number) still restores, the tuple read natively.

The hypothesis property (tuple keys of many spellings against the dict-keyed model) is
``test_equal_tuple_keys_are_one_key`` in ``test_keyed_properties.py``.
"""

from __future__ import annotations

import collections
import gc
import pickle
import threading
import typing
import warnings
from collections import UserString
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code.qos.keyed import KeyedRateLimiter, LimitOutcome

MODULUS = 2**61 - 1  # CPython hashes an int n as n mod MODULUS
HANG_SECONDS = 60
NAN = float("nan")


class Str(str):
    """A str subclass, equal to the plain str."""


Point = collections.namedtuple("Point", "x y")


class Pair(typing.NamedTuple):
    first: Any
    second: Any


class Caseless(tuple):  # type: ignore[type-arg]
    """A tuple subclass of strs equal to any tuple of the same strs in any case."""

    def _folded(self) -> tuple[str, ...]:
        return tuple(item.lower() for item in self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, tuple) and self._folded() == tuple(item.lower() for item in other)

    def __hash__(self) -> int:
        return hash(self._folded())


class Tagged(tuple):  # type: ignore[type-arg]
    """A tuple subclass equal only to tuples of its own class."""

    def __eq__(self, other: object) -> bool:
        return type(other) is Tagged and tuple.__eq__(self, other)

    def __hash__(self) -> int:
        return tuple.__hash__(self)


class Thing:
    """An object key of the program's own class, equal to the others of its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Thing) and other.name == self.name


class CountedInt(int):
    """An int that counts how often it is compared."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedInt.compared += 1
        return int.__eq__(self, other) is True

    __hash__ = int.__hash__


def table(size: int = 100) -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=1, max_keys=size, shards=1)


def held_by(limiter: KeyedRateLimiter, key: object) -> bool:
    """Whether the table holds this very object (the registry keeps the objects it numbers;
    the table shows them to the cycle collector)."""
    return any(found is key for found in gc.get_referents(limiter))


@pytest.mark.parametrize(
    "group",
    [
        [(1, "a"), (1.0, "a"), (True, "a"), (Fraction(1), Str("a")), (Decimal(1), "a")],
        [(1, "a"), Point(1, "a"), Pair(1.0, "a"), Point(True, Str("a"))],
        [((1, 2), "x"), ((1.0, Fraction(2)), "x"), (Point(1, 2), "x"), Pair(Point(1, 2.0), "x")],
        [(), ()],
        [(0.5, b"a"), (Fraction(1, 2), b"a"), (Decimal("0.5"), b"a")],
        [(2**100, -(2**127)), (float(2**100), float(-(2**127)))],
        [(0, ""), (-0.0, ""), (False, Str(""))],
    ],
    ids=repr,
)
def test_equal_tuples_are_one_key(group: list[Any]) -> None:
    qos_support.assert_one_key(
        group, lambda burst: KeyedRateLimiter(1, burst=burst, max_keys=100, shards=1)
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (("a",), "a"),
        ((1,), 1),
        ((), ((),)),
        ((), ""),
        ((), b""),
        ((1, b"a"), (1, "a")),
        (("ab", "c"), ("a", "bc")),
        ((b"ab", b"c"), (b"a", b"bc")),
        ((1, 2), (2, 1)),
        (((1, 2), 3), (1, (2, 3))),
        (((1,),), (1,)),
        ((1, 2), (1, 2, 0)),
        ((0.5,), (0.25,)),
        ((2**63,), (-(2**63),)),
        ((2**64,), (0,)),
        ((2**53 + 1,), (float(2**53),)),
        ((Thing("a"),), ("a",)),
        (Tagged((1, "a")), (1, "a")),
    ],
    ids=repr,
)
def test_different_tuples_are_different_keys(a: Any, b: Any) -> None:
    qos_support.assert_two_keys(a, b, table())


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        ((1.0, Str("a")), (1, "a")),
        (Point(True, b"x"), (1, b"x")),
        (((Decimal(2), (0.5,)), Pair(-0.0, "y")), ((2, (0.5,)), (0, "y"))),
        ((), ()),
        ((2**100, float(2**64)), (2**100, 2**64)),
        ((2**200, float(2**300)), (2**200, 2**300)),
    ],
    ids=repr,
)
def test_a_native_tuple_comes_back_as_the_plain_tuple_of_its_items(given: Any, plain: Any) -> None:
    limiter = table()
    assert limiter.try_acquire(given, now_ns=0)
    (key,) = list(limiter)
    assert key == plain and repr(key) == repr(plain)

    def types(value: Any) -> Any:
        return (type(value), *map(types, value)) if isinstance(value, tuple) else type(value)

    assert types(key) == types(plain)


@pytest.mark.parametrize(
    "key",
    [
        (1, Thing("a")),
        ("route", NAN),
        (1, Fraction(1, 3)),
        ((1, (2, Thing("deep"))), 3),
        ("a", frozenset({1})),
        Tagged((1, "a")),
        Caseless(("A", "b")),
    ],
    ids=repr,
)
def test_a_tuple_with_an_item_not_read_natively_is_kept_whole(key: Any) -> None:
    limiter = table()
    assert limiter.try_acquire(key, now_ns=0)
    assert held_by(limiter, key)
    assert any(found is key for found in limiter), "not the very object"
    assert key in limiter and limiter.try_acquire(key, now_ns=0) is False


@pytest.mark.parametrize(
    "group",
    [
        [(1, Thing("a")), (1.0, Thing("a")), Point(True, Thing("a"))],
        [(1, Fraction(1, 3)), (1.0, Fraction(2, 6))],
        [(Decimal("1E+400"), "x"), (Decimal("1.0E+400"), "x")],  # beyond the floats
        [("route", NAN), ("route", NAN)],  # the same NaN object: equal by identity
        [Caseless(("A", "b")), Caseless(("a", "B"))],
    ],
    ids=repr,
)
def test_a_tuple_kept_whole_is_found_by_every_tuple_equal_to_it(group: list[Any]) -> None:
    assert len(dict.fromkeys(group)) == 1
    limiter = KeyedRateLimiter(1, burst=len(group), max_keys=100, shards=1)
    for key in group:
        assert limiter.try_acquire(key, now_ns=0)
    assert len(limiter) == 1
    assert limiter.check(group[0], now_ns=0).outcome is LimitOutcome.DENIED


def test_a_nan_in_a_tuple_behaves_as_in_a_dict() -> None:
    other_nan = float("nan")
    seen = {("route", NAN): 1}
    assert ("route", NAN) in seen and ("route", other_nan) not in seen
    limiter = table()
    assert limiter.try_acquire(("route", NAN), now_ns=0)
    assert ("route", NAN) in limiter and ("route", other_nan) not in limiter


def test_a_subclass_equal_to_the_plain_tuple_of_its_items_is_that_tuple() -> None:
    # As a str subclass: Python says whether it equals its plain value, and then it is that
    # key. A Caseless tuple equals the tuple of its own items, so it is found by it, as in a
    # dict; one spelled in another case is the registry's (equal to a *different* plain
    # tuple: a key of its own, as a case-insensitive str subclass is).
    lower = Caseless(("a", "b"))
    seen = {lower: 1}
    assert ("a", "b") in seen
    limiter = table()
    assert limiter.try_acquire(lower, now_ns=0)
    assert ("a", "b") in limiter and not held_by(limiter, lower)
    assert list(limiter) == [("a", "b")]
    # A subclass with tuple's own == and hash (a namedtuple) needs no question.
    assert limiter.try_acquire(Point("x", "y"), now_ns=0)
    assert ("x", "y") in limiter and type(next(k for k in limiter if k[0] == "x")) is tuple


def test_the_empty_tuple_is_a_key() -> None:
    limiter = table()
    assert limiter.try_acquire((), now_ns=0)
    assert () in limiter and "" not in limiter and b"" not in limiter
    assert limiter.try_acquire((), now_ns=0) is False
    assert list(limiter) == [()]


def nested(depth: int, leaf: Any) -> Any:
    key = leaf
    for _ in range(depth):
        key = (key,)
    return key


@pytest.mark.parametrize("depth", [1, 2, 16, 31, 32, 33, 100, 400])
def test_nested_tuples_of_any_depth_are_keys(depth: int) -> None:
    limiter = table()
    key = nested(depth, 1)
    assert limiter.try_acquire(key, now_ns=0)
    assert nested(depth, 1.0) in limiter
    assert nested(depth, True) in limiter
    assert nested(depth - 1, 1) not in limiter and nested(depth + 1, 1) not in limiter
    assert limiter.try_acquire(nested(depth, Fraction(1)), now_ns=0) is False
    assert len(limiter) == 1
    restored = pickle.loads(pickle.dumps(limiter))
    assert nested(depth, 1.0) in restored and len(restored) == 1


def test_tuples_of_colliding_ints_are_never_compared_with_each_other() -> None:
    count = 300
    keys = [(CountedInt(k * MODULUS), "route") for k in range(1, count + 1)]
    assert len({hash(key) for key in keys}) == 1  # one Python hash: a dict compares them all
    limiter = KeyedRateLimiter(1, burst=1, max_keys=count + 1, shards=1)
    CountedInt.compared = 0
    for key in keys:
        assert limiter.try_acquire(key, now_ns=0)
    # Each item is compared once, with the plain int it equals, when its key is read; keys
    # numbered by Python's hash (a dict, the registry) would compare each new key with every
    # earlier one: count * (count - 1) / 2 calls.
    assert CountedInt.compared <= count, CountedInt.compared
    assert len(limiter) == count
    CountedInt.compared = 0
    for k in range(1, count + 1):
        assert (k * MODULUS, "route") in limiter
        assert (Decimal(k * MODULUS), Str("route")) in limiter
    assert CountedInt.compared == 0


def test_a_tuple_of_native_keys_is_not_held_by_the_table() -> None:
    limiter = table()
    plain = (MODULUS, "route", (b"x", 0.5, 2**100))
    assert limiter.try_acquire(plain, now_ns=0)
    assert not held_by(limiter, plain) and not held_by(limiter, plain[2])
    kept = (MODULUS, Thing("route"))
    assert limiter.try_acquire(kept, now_ns=0)
    assert held_by(limiter, kept)  # what the check above would have seen without the fix


class CallsBackInt(int):
    """An int whose ``__eq__`` (asked what plain int it equals) uses the table."""

    limiter: KeyedRateLimiter | None = None

    def __eq__(self, other: object) -> bool:
        if CallsBackInt.limiter is not None:
            CallsBackInt.limiter.check(("inner", 1), now_ns=0)
            CallsBackInt.limiter.check((Thing("inner"), 1), now_ns=0)
        return int.__eq__(self, other) is True

    __hash__ = int.__hash__


def test_an_item_calling_back_into_the_table_does_not_deadlock() -> None:
    limiter = KeyedRateLimiter(1, burst=5, max_keys=10, shards=1)
    limiter.check((Thing("other"), 5), now_ns=0)  # the registry is in use
    result: dict[str, Any] = {}

    def target() -> None:
        CallsBackInt.limiter = limiter
        try:
            result["value"] = limiter.try_acquire((CallsBackInt(5), "x"), now_ns=0)
        except BaseException as exc:
            result["exc"] = exc
        finally:
            CallsBackInt.limiter = None

    worker = threading.Thread(target=target, daemon=True)
    with qos_support.watchdog(HANG_SECONDS):
        worker.start()
        worker.join(20)
    assert not worker.is_alive(), "deadlock: the call did not return"
    assert result == {"value": True}
    assert (5, "x") in limiter and ("inner", 1) in limiter and (Thing("inner"), 1) in limiter


def test_an_unhashable_item_raises_type_error_and_changes_nothing() -> None:
    limiter = table()
    limiter.check((1, "a"), now_ns=0)
    for key in [(1, [2]), ((1, {3}),), ("a", Thing("x"), [1])]:
        with pytest.raises(TypeError):
            limiter.try_acquire(key, now_ns=0)
    assert list(limiter) == [(1, "a")]


def test_pickle_keeps_tuple_keys() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=4)
    keys = [(1, "a"), (), ((2.5, b"x"), "y"), (1, Thing("t")), Point(7, "p")]
    for key in keys:
        assert limiter.try_acquire(key, 2, now_ns=0)
    restored = pickle.loads(pickle.dumps(limiter))
    assert len(restored) == len(keys) and restored.stats == limiter.stats
    for key in [(1.0, Str("a")), (), ((Fraction(5, 2), b"x"), "y"), (True, Thing("t")), (7, "p")]:
        assert key in restored, key
        assert restored.check(key, now_ns=0).outcome is LimitOutcome.DENIED, key


def test_a_state_saved_with_numbered_tuples_restores_them_as_native_keys() -> None:
    # Before tuples were read natively, the registry numbered them: a saved entry was
    # (key, number, balances) with the tuple's number. Such a state still restores.
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=2)
    limiter.try_acquire(Thing("t"), 2, now_ns=0)
    limiter.try_acquire("s", 2, now_ns=0)
    rebuild, args, (state, attributes) = limiter.__reduce__()
    seed, entries, latest, counts, origin = state
    (object_entry,) = [entry for entry in entries if entry[1] is not None]
    balances = object_entry[2]
    number = object_entry[1]
    old_entries = [
        *entries,
        ((1, "a"), number + 1, balances),
        (((2, "x"), b"y"), number + 2, balances),
    ]
    restored = rebuild(*args)
    restored.__setstate__(((seed, old_entries, latest, counts, origin), attributes))
    assert len(restored) == 4
    for key in [(1.0, "a"), ((2.0, Str("x")), b"y"), Thing("t"), "s"]:
        assert key in restored, key
        assert restored.check(key, now_ns=0).outcome is LimitOutcome.DENIED, key
    assert not held_by(restored, old_entries[-1][0])
    # Saved again, the tuples have no number.
    _, _, (again, _) = restored.__reduce__()
    assert sorted(repr(key) for key, number, _ in again[1] if number is None) == sorted(
        ["'s'", "(1, 'a')", "((2, 'x'), b'y')"]
    )


def test_a_saved_state_with_a_tuple_twice_is_refused() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    limiter.try_acquire((1, "a"), now_ns=0)
    rebuild, args, (state, attributes) = limiter.__reduce__()
    seed, entries, latest, counts, origin = state
    ((key, number, balances),) = entries
    assert key == (1, "a") and number is None
    for doubled in ([*entries, ((1.0, "a"), None, balances)], [*entries, ((1, "a"), 0, balances)]):
        fresh = rebuild(*args)
        with pytest.raises(ValueError, match="twice"):
            fresh.__setstate__(((seed, doubled, latest, counts, origin), attributes))
        assert len(fresh) == 0


# Numbers that are costly or noisy to convert, alone and inside tuples.


@pytest.mark.parametrize(
    "huge",
    [Decimal("1E+999999999999"), Decimal("-1E+1000000"), Decimal("3.5E+400")],
    ids=repr,
)
@pytest.mark.parametrize("in_tuple", [False, True], ids=["bare", "in a tuple"])
def test_a_number_too_big_for_any_plain_key_is_a_key_of_its_own(huge: Any, in_tuple: bool) -> None:
    # int() of the first would need a trillion digits (MemoryError); a dict only hashes it.
    key = ("route", huge) if in_tuple else huge
    limiter = table()
    assert limiter.try_acquire(key, now_ns=0)
    assert key in limiter and limiter.try_acquire(key, now_ns=0) is False
    assert float("inf") not in limiter and ("route", float("inf")) not in limiter


def test_an_infinite_decimal_is_the_float_infinity() -> None:
    qos_support.assert_one_key(
        [Decimal("Infinity"), float("inf")],
        lambda burst: KeyedRateLimiter(1, burst=burst, max_keys=100, shards=1),
    )
    qos_support.assert_two_keys(Decimal("1E+400"), float("inf"), table())


def test_a_complex_key_is_read_without_converting_it() -> None:
    np = pytest.importorskip("numpy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # int() or float() of a numpy complex warns
        qos_support.assert_one_key(
            [("route", np.complex128(1)), ("route", 1), ("route", complex(1, 0))],
            lambda burst: KeyedRateLimiter(1, burst=burst, max_keys=100, shards=1),
        )
        qos_support.assert_two_keys(("route", np.complex128(1j)), ("route", 0), table())


@pytest.mark.parametrize(
    ("other", "plain"),
    [(UserString("a"), "a"), (memoryview(b"x"), b"x")],
    ids=["UserString", "memoryview"],
)
def test_an_object_of_another_type_equal_to_a_str_or_bytes_is_a_key_of_its_own(
    other: Any, plain: Any
) -> None:
    # The documented exception: only numbers are asked which plain value they equal.
    assert {plain: 1}[other] == 1
    limiter = table()
    assert limiter.try_acquire(plain, now_ns=0)
    assert other not in limiter
    assert limiter.try_acquire(other, now_ns=0)
    assert len(limiter) == 2
