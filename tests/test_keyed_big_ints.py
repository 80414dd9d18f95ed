"""Ints of any size are keys the table reads natively and hashes with its own seed.

CPython hashes an int as ``n mod 2**61 - 1``, with no seed, so a client can choose as many ints
as it likes that hash alike (``k * (2**61 - 1) + c``). Ints beyond 128 bits were numbered by the
registry, which finds a key by its Python hash, then by ``==``: 20,000 such keys cost 3.2 s to
store and 0.24 ms per call after. Now every int is read by its bytes and hashed with the table's
seed, whatever its size, and inside tuples too:

* Python-level ``__eq__`` runs once per key (asking an int subclass which int it equals), never
  once per earlier key of the same Python hash; and the table holds no int object (the registry
  held each, and showed it to the cycle collector). No timing here: ``bench/bench_keyed.py``
  has the cost per colliding key against spread ones.
* Equality stays Python's: an int is one key with every number equal to it that is read
  natively (``True`` and ``1.0`` for ``1``, ``float(2**200)``, ``Fraction(2**200)``,
  ``Decimal(2**200)``, an ``IntEnum``), and two with its negation, its neighbours, and the bytes
  it is stored by. A number other than an int whose ``float()`` is infinite (beyond about
  2**1024, a ``Decimal("1E+400")``) is a key of its own: ``int()`` of such a number can cost
  without limit, and the table does not ask it.
* Iteration gives such a key back as the int; pickling keeps it, and a state saved while such
  ints were numbered by the registry restores them as native keys.
"""

from __future__ import annotations

import enum
import gc
import pickle
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code.qos.keyed import KeyedRateLimiter, LimitOutcome

MODULUS = 2**61 - 1  # CPython hashes an int n as n mod MODULUS
BEYOND = 2**130  # every key below is at least this big: beyond what i128 holds


class CountedInt(int):
    """An int that counts how often Python compares it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedInt.compared += 1
        return int.__eq__(self, other)  # NotImplemented for a float: then float's == answers

    __hash__ = int.__hash__


class Huge(enum.IntEnum):
    BIG = 2**200


class Str(str):
    """A str subclass, equal to the plain str."""


def table(size: int = 100) -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=1, max_keys=size, shards=1)


def one_key_table(burst: int) -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=burst, max_keys=100, shards=1)


def held_by(limiter: KeyedRateLimiter, key: object) -> bool:
    """Whether the table holds this very object (the registry keeps the objects it numbers;
    the table shows them to the cycle collector)."""
    return any(found is key for found in gc.get_referents(limiter))


def colliding(count: int, make: Any = int) -> list[Any]:
    keys = [make((BEYOND + k) * MODULUS) for k in range(1, count + 1)]
    assert len({hash(key) for key in keys}) == 1  # one Python hash: a dict compares them all
    return keys


@pytest.mark.parametrize("in_tuple", [False, True], ids=["bare", "in a tuple"])
def test_big_ints_that_python_hashes_alike_are_never_compared_with_each_other(
    in_tuple: bool,
) -> None:
    count = 300
    keys: list[Any] = colliding(count, CountedInt)
    if in_tuple:
        keys = [(key, "route") for key in keys]
    limiter = KeyedRateLimiter(1, burst=1, max_keys=count + 1, shards=1)
    CountedInt.compared = 0
    for key in keys:
        assert limiter.try_acquire(key, now_ns=0)
    # Each key is compared once, with the plain int it equals, when it is read; keys numbered
    # by their Python hash would be compared with every earlier one: count * (count - 1) / 2.
    assert CountedInt.compared <= count, CountedInt.compared
    assert len(limiter) == count
    CountedInt.compared = 0
    for key in keys:
        plain = (int(key[0]), "route") if in_tuple else int(key)
        assert plain in limiter
        assert limiter.try_acquire(plain, now_ns=0) is False
    assert CountedInt.compared == 0


@pytest.mark.parametrize(
    "key",
    [2**200, -(2**300), BEYOND * MODULUS, 2**127, -(2**127) - 1, (2**200, "route"), ((2**999,),)],
    ids=repr,
)
def test_an_int_of_any_size_is_not_held_by_the_table(key: Any) -> None:
    limiter = table()
    assert limiter.try_acquire(key, now_ns=0)
    assert not held_by(limiter, key)
    assert key in limiter and limiter.try_acquire(key, now_ns=0) is False


def test_colliding_big_ints_are_all_kept_apart() -> None:
    keys = colliding(2_000)
    limiter = KeyedRateLimiter(1, burst=1, max_keys=len(keys), shards=4)
    assert all(limiter.try_acquire(key, now_ns=0) for key in keys)
    assert len(limiter) == len(keys)
    assert not any(held_by(limiter, key) for key in keys[:10])
    assert sorted(limiter) == sorted(keys)
    assert all(limiter.try_acquire(key, now_ns=0) is False for key in keys)
    assert (BEYOND + 1) * MODULUS + 1 not in limiter


@pytest.mark.parametrize(
    "group",
    [
        [1, True, 1.0, Fraction(1), Decimal(1), CountedInt(1)],
        [0, False, 0.0, -0.0, Decimal("-0")],
        [2**127, float(2**127), Fraction(2**127), Decimal(2**127)],
        [-(2**127), float(-(2**127)), Decimal(-(2**127))],
        [2**200, float(2**200), Fraction(2**200), Decimal(2**200), Huge.BIG, CountedInt(2**200)],
        [-(2**300), float(-(2**300)), Fraction(-(2**300)), Decimal(-(2**300))],
        [int(1e308), 1e308, Decimal(int(1e308))],  # 1024 bits, near the largest float
        [10**400, Fraction(10**400), CountedInt(10**400)],  # no float: int() is asked
        [(2**200, "a"), (float(2**200), Str("a")), (Decimal(2**200), "a")],
        [((2**200, -(2**300)),), ((Fraction(2**200), float(-(2**300))),)],
    ],
    ids=lambda group: f"{group[0]!r:.30}",
)
def test_an_int_is_one_key_with_every_number_equal_to_it(group: list[Any]) -> None:
    qos_support.assert_one_key(group, one_key_table)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (2**200, -(2**200)),
        (2**200, 2**200 + 1),
        (2**200, 2**201),
        (2**127, -(2**127)),
        (2**128, 2**128 - 1),
        (-(2**127), -(2**127) - 1),
        (2**200, (2**200).to_bytes(26, "little", signed=True)),  # the bytes it is kept by
        (2**200, float(2**200 + 2**148)),  # the next float up
        ((2**200,), 2**200),
        ((2**200, 1), (1, 2**200)),
    ],
    ids=lambda value: f"{value!r:.30}",
)
def test_different_big_ints_are_different_keys(a: Any, b: Any) -> None:
    qos_support.assert_two_keys(a, b, table())


def test_a_number_beyond_the_floats_other_than_an_int_is_a_key_of_its_own() -> None:
    # Decimal("1E+400") equals 10**400, but int() of a Decimal that big can cost without limit
    # (a million digits take about a minute), so the table does not ask it: it is a key of its
    # own, as in a table that would keep it whole. Within the floats, int() is asked.
    assert Decimal("1E+400") == 10**400 and {10**400: 1}[Decimal("1E+400")] == 1
    limiter = table()
    assert limiter.try_acquire(10**400, now_ns=0)
    assert Decimal("1E+400") not in limiter
    assert limiter.try_acquire(Decimal("1E+400"), now_ns=0)
    assert Decimal("1E+400") in limiter and len(limiter) == 2
    qos_support.assert_one_key([Decimal("1E+300"), 10**300], one_key_table)


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        (float(2**200), 2**200),
        (Decimal(-(2**300)), -(2**300)),
        (Huge.BIG, 2**200),
        ((Fraction(2**200), (float(2**300),)), (2**200, (2**300,))),
    ],
    ids=repr,
)
def test_a_big_int_comes_back_as_the_int(given: Any, plain: Any) -> None:
    limiter = table()
    assert limiter.try_acquire(given, now_ns=0)
    (key,) = list(limiter)
    assert key == plain and repr(key) == repr(plain)


def test_pickle_keeps_big_int_keys() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=4)
    keys = [2**200, -(2**300), (2**200, "a"), *colliding(3)]
    for key in keys:
        assert limiter.try_acquire(key, 2, now_ns=0)
    restored = pickle.loads(pickle.dumps(limiter))
    assert sorted(map(repr, restored)) == sorted(map(repr, keys))
    for key in [float(2**200), Decimal(-(2**300)), (Fraction(2**200), Str("a")), *keys]:
        assert restored.check(key, now_ns=0).outcome is LimitOutcome.DENIED, key


def test_a_state_saved_with_numbered_big_ints_restores_them_as_native_keys() -> None:
    # Before big ints were read natively, the registry numbered them: a saved entry was
    # (key, number, balances). Such a state still restores, the int read natively.
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=2)
    limiter.try_acquire(frozenset({"t"}), 2, now_ns=0)
    rebuild, args, (state, attributes) = limiter.__reduce__()
    seed, entries, latest, counts, origin = state
    ((_, number, balances),) = entries
    old = [*entries, (2**200, number + 1, balances), ((1, -(2**300)), number + 2, balances)]
    restored = rebuild(*args)
    restored.__setstate__(((seed, old, latest, counts, origin), attributes))
    assert len(restored) == 3
    for key in [float(2**200), (1.0, Decimal(-(2**300))), frozenset({"t"})]:
        assert restored.check(key, now_ns=0).outcome is LimitOutcome.DENIED, key
    assert not held_by(restored, old[1][0]) and not held_by(restored, old[2][0])
    _, _, (again, _) = restored.__reduce__()
    assert sorted(repr(key) for key, number, _ in again[1] if number is None) == sorted(
        [repr(2**200), repr((1, -(2**300)))]
    )
