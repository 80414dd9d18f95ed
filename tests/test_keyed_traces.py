"""``try_acquire_many`` (issue 6): a whole trace decided as ``check`` one call at a time, from
any integer buffer, and a bad trace refused naming its index, the table untouched."""

from __future__ import annotations

import random
from array import array
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

import numpy
from keyed_support import (
    CODES,
    NEVER,
    SECOND,
    key_reprs,
    snapshot,
    used_limiter,
)
from limiter_model import FakeClock
from protocol_in_code.qos.keyed import (
    KeyedRateLimiter,
    KeyedStats,
)

# ---------------------------------------------------------------------------------------------
# try_acquire_many
# ---------------------------------------------------------------------------------------------


def buffer_kinds(values: list[int], dtype: str) -> list[Any]:
    arr = numpy.array(values, dtype=dtype)
    return [arr, list(values), array("q", values), memoryview(array("q", values))]


@pytest.mark.parametrize("kind", range(4), ids=["numpy", "list", "array", "memoryview"])
def test_try_acquire_many_equals_check_one_at_a_time(kind: int) -> None:
    rng = random.Random(kind)
    size = 3000
    keys = [rng.choice([1, 2, 3, -4, 2**62, rng.randrange(10**6)]) for _ in range(size)]
    times = sorted(rng.randrange(0, 20 * SECOND) for _ in range(size))
    for i in range(0, size, 97):  # some times go backwards
        times[i] = max(0, times[i] - 3 * SECOND)
    ns = [rng.choice([0, 1, 1, 1, 2, 5]) for _ in range(size)]

    def fresh() -> KeyedRateLimiter:
        # One shard: which keys a table of several shards refuses depends on its hashing,
        # which may differ between two tables.
        return KeyedRateLimiter(bands=[(2, 3), (1, 4)], max_keys=20, shards=1)

    batch, single = fresh(), fresh()
    codes = batch.try_acquire_many(
        buffer_kinds(keys, "int64")[kind],
        buffer_kinds(times, "int64")[kind],
        n=buffer_kinds(ns, "uint32")[kind] if kind != 3 else memoryview(array("I", ns)),
    )
    assert type(codes) is array and codes.typecode == "B" and len(codes) == size
    want = [single.check(k, n, now_ns=t).outcome for k, t, n in zip(keys, times, ns, strict=True)]
    assert [CODES[c] for c in codes] == want
    assert set(codes) == {0, 1, 2, 3}, "the trace should reach every outcome"
    assert batch.stats == single.stats
    assert key_reprs(batch) == key_reprs(single)


@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
)
def test_try_acquire_many_takes_any_int_dtype(dtype: str) -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    keys = numpy.array([1, 2, 1, 1, 2], dtype=dtype)
    times = numpy.array([0, 0, 0, 0, 0], dtype=dtype)
    assert list(limiter.try_acquire_many(keys, times)) == [0, 0, 0, 1, 0]
    assert list(limiter.try_acquire_many(keys, times, n=numpy.ones(5, dtype=dtype))) == [1] * 5
    assert list(limiter.try_acquire_many(keys, times, n=0)) == [0] * 5
    assert limiter.try_acquire(1.0, now_ns=0) is False, "int keys of the batch are the int keys"


def test_try_acquire_many_takes_every_value_of_an_int_buffer_as_check_does() -> None:
    """Issue 6: keys are "buffers of integers (numpy arrays of any int dtype ...) or lists of
    ints", and each code is "exactly what check(key, n, now_ns=t).outcome would have said":
    a uint64 key above 2**63 - 1 is that int (not refused, not wrapped to a negative key), and
    n up to 2**64 - 1 is NEVER as for check. (Ints beyond 64 bits in a list are refused, naming
    the index: see test_a_trace_refuses_ints_no_buffer_holds.)"""
    limiter = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    single = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    keys = [2**64 - 1, 2**63, 2**64 - 1, 5]
    want = [single.check(k, now_ns=0).outcome for k in keys]
    problems = []
    for name, call in [
        ("uint64 keys", lambda: limiter.try_acquire_many(numpy.array(keys, numpy.uint64), [0] * 4)),
        (
            "uint64 n",
            lambda: limiter.try_acquire_many([9], [0], n=numpy.array([2**64 - 1], numpy.uint64)),
        ),
    ]:
        try:
            got = [CODES[c] for c in call()]
        except (TypeError, ValueError) as exc:
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if name == "uint64 keys":
            assert got == want
            assert limiter.available(-1, now_ns=0) == 2, "2**64 - 1 was taken as -1"
            assert limiter.available(2**64 - 1, now_ns=0) == 0
        else:
            assert got == [NEVER] == [single.check(9, 2**64 - 1, now_ns=0).outcome]
    assert not problems, "try_acquire_many refuses what check takes: " + "; ".join(problems)


@pytest.mark.parametrize("key", [2**64, -(2**63) - 1, 2**70])
def test_a_trace_refuses_ints_no_buffer_holds(key: int) -> None:
    # A trace is for buffers of integers: a list holding an int no 64-bit buffer could hold is
    # refused, naming the index, and the table is untouched. check() takes such keys.
    limiter = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    with pytest.raises(ValueError, match=r"keys\[1\]"):
        limiter.try_acquire_many([5, key], [0, 0])
    assert len(limiter) == 0 and limiter.stats == KeyedStats(0, 0, 0, 0)
    assert limiter.try_acquire(key, now_ns=0)


def test_try_acquire_many_empty() -> None:
    limiter = KeyedRateLimiter(1, max_keys=10)
    assert list(limiter.try_acquire_many([], [])) == []
    assert limiter.stats == KeyedStats(0, 0, 0, 0)


@pytest.mark.parametrize(
    ("keys", "times", "n", "error", "index"),
    [
        ([1, 2, 3], [0, 0], None, ValueError, None),
        ([1, 2, 3], [0, 0, 0], [1, 1], ValueError, None),
        ([1, 2, 3], [0, 0, 0], [1, 1, -1], ValueError, "2"),
        ([1, 2, 3], [0, 0, 0], -1, ValueError, None),
        ([1, 2, 3], [0, 0, 0], [1, 1.5, 1], TypeError, "1"),
        ([1, 2.0, 3], [0, 0, 0], None, TypeError, "1"),
        ([1, "2", 3], [0, 0, 0], None, TypeError, "1"),
        ([1, 2, 3], [0, 0, "0"], None, TypeError, "2"),
        ([1, 2, 3], [0, 0.5, 0], None, TypeError, "1"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_index_and_changes_nothing(
    keys: list[Any], times: list[Any], n: Any, error: type, index: str | None
) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(error) as caught:
        limiter.try_acquire_many(keys, times, n=n)
    assert type(caught.value) is error
    if index is not None:
        assert index in str(caught.value), caught.value
    assert snapshot(limiter) == before
    assert 1 not in limiter and 2 not in limiter
