"""A keyed limiter runs no key's code under its locks, and clients cannot choose colliding keys.

* Two tables whose keys call each other from two threads (a key of A whose ``__hash__`` uses
  B, a key of B whose ``__hash__`` uses A) both finish, and both stay usable.
* Ints that CPython hashes alike (``n mod 2**61 - 1``) cost no more per new key than others.
* A restore whose saved keys' ``__hash__`` uses the table being restored cannot lose that call.
"""

from __future__ import annotations

import gc
import pickle
import threading
from typing import Any

import pytest
import qos_support
from protocol_in_code.qos.keyed import KeyedRateLimiter

HANG_SECONDS = 60
SECOND = 10**9


class CallsOtherTable:
    """A key whose second ``__hash__`` (the first is the table's own check of what it is) meets
    the other thread there and then calls the other table with an object key."""

    def __init__(self, name: str, barrier: threading.Barrier) -> None:
        self.name, self.barrier = name, barrier
        self.other: KeyedRateLimiter | None = None
        self.calls = 0

    def __hash__(self) -> int:
        self.calls += 1
        if self.calls == 2 and self.other is not None:
            self.barrier.wait()
            self.other.check(Plain(self.name), now_ns=0)
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return self is other


class Plain:
    """An object key of no native type, equal to the others of its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __hash__(self) -> int:
        return hash(("plain", self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plain) and other.name == self.name


def run_in_threads(*calls: Any) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in calls]

    def target(i: int) -> None:
        try:
            results[i]["value"] = calls[i]()
        except BaseException as exc:
            results[i]["exc"] = exc

    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(len(calls))]
    with qos_support.watchdog(HANG_SECONDS):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    assert not any(thread.is_alive() for thread in threads), "deadlock: a call did not return"
    return results


def test_keys_of_two_tables_calling_each_other_from_two_threads_do_not_deadlock() -> None:
    first = KeyedRateLimiter(1, burst=5, max_keys=10, shards=1)
    second = KeyedRateLimiter(1, burst=5, max_keys=10, shards=1)
    barrier = threading.Barrier(2, timeout=10)
    key_of_first = CallsOtherTable("a", barrier)
    key_of_second = CallsOtherTable("b", barrier)
    key_of_first.other, key_of_second.other = second, first
    results = run_in_threads(
        lambda: first.try_acquire(key_of_first, now_ns=0),
        lambda: second.try_acquire(key_of_second, now_ns=0),
    )
    assert results == [{"value": True}, {"value": True}]
    # Both tables stay usable for object keys, from another thread too.
    later = run_in_threads(
        lambda: first.check(Plain("later"), now_ns=0).allowed,
        lambda: second.check(Plain("later"), now_ns=0).allowed,
    )
    assert later == [{"value": True}, {"value": True}]
    assert Plain("b") in first and Plain("a") in second


class CountedInt(int):
    """An int that counts how often Python compares it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedInt.compared += 1
        return int.__eq__(self, other)

    __hash__ = int.__hash__


def test_ints_that_python_hashes_alike_are_not_compared_with_each_other() -> None:
    # All hash to 0 in CPython: a table found by Python's hash would compare each new key with
    # every earlier one (about count**2 / 2 comparisons). Read natively and hashed with the
    # table's seed, each is compared at most once, when it is read. No timing here: see
    # bench/bench_keyed.py for the cost per colliding key against spread ones.
    modulus = 2**61 - 1
    count = 2000
    colliding = [CountedInt(modulus * (i + 1)) for i in range(count)]
    assert len({hash(key) for key in colliding}) == 1
    limiter = KeyedRateLimiter(1, burst=1, max_keys=count + 1)
    CountedInt.compared = 0
    for key in colliding:
        assert limiter.try_acquire(key, now_ns=0)
    assert CountedInt.compared <= count
    assert len(limiter) == count
    assert not any(isinstance(found, CountedInt) for found in gc.get_referents(limiter))


class TouchesTheTable:
    """A saved key whose ``__hash__``, once armed, uses the table it is being restored into."""

    target: KeyedRateLimiter | None = None

    def __hash__(self) -> int:
        if TouchesTheTable.target is not None:
            TouchesTheTable.target.try_acquire("late", now_ns=0)
        return 42

    def __eq__(self, other: object) -> bool:
        return self is other


def test_a_call_made_while_a_table_is_restored_is_not_lost() -> None:
    saved = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    key = TouchesTheTable()
    assert saved.try_acquire(key, now_ns=0)
    _rebuild, _args, state = saved.__reduce__()
    fresh = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    TouchesTheTable.target = fresh
    restored = True
    try:
        fresh.__setstate__(state)
    except ValueError as error:
        assert "new limiter" in str(error)
        restored = False
    finally:
        TouchesTheTable.target = None
    # Either way, the calls that reached the table are there to be found.
    assert not restored
    assert "late" in fresh and list(fresh) == ["late"] and len(fresh) == 1
    assert fresh.available("late", now_ns=0) == 0  # each __hash__ above took one
    assert pickle.loads(pickle.dumps(fresh)).available("late", now_ns=0) == fresh.available(
        "late", now_ns=0
    )


class FloatOnly:
    """A number with ``__float__`` alone, equal to the float it converts to."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __float__(self) -> float:
        return self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __eq__(self, other: object) -> bool:
        return bool(other == self.value)


@pytest.mark.parametrize(
    "group",
    [
        [1, 1.0, complex(1, 0), FloatOnly(1.0)],
        [0.5, complex(0.5, 0), FloatOnly(0.5)],
        [2**100, float(2**100), complex(2**100, 0)],
        [-(2**127), float(-(2**127))],
        [2**127, float(2**127)],
    ],
    ids=repr,
)
def test_a_number_read_natively_is_one_key_with_every_number_equal_to_it(group: list[Any]) -> None:
    qos_support.assert_one_key(
        group, lambda burst: KeyedRateLimiter(1, burst=burst, max_keys=10, shards=1)
    )
