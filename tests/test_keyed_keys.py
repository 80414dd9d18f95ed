"""``KeyedRateLimiter``'s keys (issue 6): one key for everything a dict takes as one, keys that
raise or call back into the table, iteration, ``len`` and ``in``."""

from __future__ import annotations

import asyncio
import threading
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

import numpy
from keyed_support import (
    ALLOWED,
    DENIED,
    HANG_SECONDS,
    OBJECT_KEY,
    SECOND,
    One,
    Str,
    peeks_by_key,
    snapshot,
    stats_tuple,
    used_limiter,
)
from limiter_model import FakeClock
from protocol_in_code.qos.keyed import (
    Decision,
    KeyedRateLimiter,
)

# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------

ONE_KEYS: list[Any] = [1, 1.0, True, Fraction(1), Decimal(1), numpy.int64(1), One.ONE]


@pytest.mark.parametrize("first", ONE_KEYS, ids=lambda k: f"{type(k).__name__}")
def test_keys_equal_as_dict_keys_are_one_key(first: Any) -> None:
    limiter = KeyedRateLimiter(1, burst=len(ONE_KEYS) + 1, max_keys=100, shards=1)
    assert limiter.try_acquire(first, now_ns=0)
    for other in ONE_KEYS:
        assert other in limiter, f"{other!r} ({type(other).__name__}) is not {first!r}"
        assert limiter.try_acquire(other, now_ns=0), other
    assert len(limiter) == 1
    assert limiter.available(1, now_ns=0) == 0
    assert limiter.check(numpy.uint8(1), now_ns=0).outcome is DENIED
    assert limiter.available(2, now_ns=0) == len(ONE_KEYS) + 1
    assert limiter.available(numpy.int64(2), now_ns=0) == len(ONE_KEYS) + 1


@pytest.mark.parametrize(
    "group",
    [
        [0, 0.0, -0.0, False, Fraction(0), Decimal("-0"), numpy.int32(0)],
        [2**70, float(2**70), Fraction(2**70), Decimal(2**70)],
        [2**63, float(2**63), numpy.uint64(2**63)],
        [2**64, float(2**64)],
        [-(2**63), float(-(2**63)), numpy.int64(-(2**63))],
        [int(1e300), 1e300],
        [0.5, Fraction(1, 2), Decimal("0.5"), numpy.float64(0.5)],
        [(1, "a"), (1.0, "a"), (True, Str("a"))],
        ["a", Str("a")],
        [("t", (1, 2)), ("t", (1.0, Fraction(2)))],
        [frozenset({1, 2}), frozenset({2.0, 1})],
    ],
    ids=repr,
)
def test_equal_keys_across_types_and_paths(group: list[Any]) -> None:
    for first in group:
        limiter = KeyedRateLimiter(1, burst=len(group), max_keys=100, shards=1)
        assert limiter.try_acquire(first, now_ns=0)
        for other in group:
            assert other in limiter, f"{other!r} is not the same key as {first!r}"
        for other in group[1:]:
            assert limiter.try_acquire(other, now_ns=0), other
        assert len(limiter) == 1, list(limiter)
        assert limiter.check(first, now_ns=0).outcome is DENIED


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("a", b"a"),
        ("", b""),
        ("1", 1),
        (b"\x01", 1),
        (0, 2**64),
        (1, 2**64 + 1),
        (-1, 2**64 - 1),
        (2**63, -(2**63)),
        (2**63 - 1, 2**63),
        (2**100, -(2**100)),
        (0, ""),
        (0, None),
        (1, (1,)),
        ((1, 2), (2, 1)),
        (0.5, 0.25),
        (2**53, 2**53 + 1),
        (float(2**53), 2**53 + 1),
    ],
    ids=repr,
)
def test_different_keys_are_different_clients(a: Any, b: Any) -> None:
    qos_support.assert_two_keys(a, b, KeyedRateLimiter(1, burst=1, max_keys=100, shards=1))


def test_nan_behaves_as_in_a_dict() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=100, shards=1)
    nan = float("nan")
    other_nan = float("nan")
    table: dict[Any, int] = {nan: 1}
    assert nan in table and other_nan not in table  # what a dict does
    assert limiter.try_acquire(nan, now_ns=0)
    assert nan in limiter
    assert limiter.try_acquire(nan, now_ns=0) is False, "the same NaN object is one key"
    assert other_nan not in limiter
    assert limiter.try_acquire(other_nan, now_ns=0), "another NaN object is another key"
    assert len(limiter) == 2
    keys = list(limiter)
    assert any(k is nan for k in keys) and any(k is other_nan for k in keys)
    tuple_nan = (nan,)
    assert limiter.try_acquire(tuple_nan, now_ns=0)
    assert limiter.try_acquire((nan,), now_ns=0) is False, "(nan,) == (nan,) by identity"


@pytest.mark.parametrize("key", [[1], {"a": 1}, {1}, bytearray(b"a"), (1, [2])], ids=repr)
@pytest.mark.parametrize(
    "method", ["try_acquire", "check", "peek", "refund", "available", "acquire", "in"]
)
def test_an_unhashable_key_raises_type_error_and_changes_nothing(key: Any, method: str) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(TypeError):
        if method == "in":
            _ = key in limiter
        elif method == "acquire":
            limiter.acquire(key, timeout=0)
        elif method == "available":
            limiter.available(key, now_ns=SECOND)
        else:
            getattr(limiter, method)(key, now_ns=SECOND)
    assert snapshot(limiter) == before


def test_an_unhashable_key_in_acquire_async_raises_type_error() -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(TypeError):
        asyncio.run(limiter.acquire_async([1], timeout=0))
    assert snapshot(limiter) == before


class HashError(Exception):
    pass


class BadHash:
    def __hash__(self) -> int:
        raise HashError("no hash")


class BadEq:
    """Hashes as ``OBJECT_KEY`` (a key of ``used_limiter``), and refuses to compare."""

    def __hash__(self) -> int:
        return hash(OBJECT_KEY)

    def __eq__(self, other: object) -> bool:
        raise HashError("no eq")


@pytest.mark.parametrize("key", [BadHash(), (1, BadHash()), BadEq()], ids=repr)
@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "available", "in"])
def test_a_key_whose_hash_or_eq_raises_lets_the_error_through(key: Any, method: str) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = snapshot(limiter)
    with pytest.raises(HashError):
        if method == "in":
            _ = key in limiter
        elif method == "available":
            limiter.available(key, now_ns=SECOND)
        else:
            getattr(limiter, method)(key, now_ns=SECOND)
    assert snapshot(limiter) == before
    # The registry's lock was released: object keys still work.
    assert limiter.check(OBJECT_KEY, 0, now_ns=SECOND).outcome is ALLOWED


INNER_KEY = ("inner", Fraction(1, 3))


class CallsBack:
    """A key whose ``__hash__`` or ``__eq__`` calls back into the limiter (with an object
    key, which needs the registry)."""

    def __init__(self, limiter: KeyedRateLimiter, where: str, hash_as: Any) -> None:
        self.limiter, self.where, self.hash_as = limiter, where, hash_as
        self.inner: list[str] = []

    def _call_back(self) -> None:
        try:
            self.limiter.check(INNER_KEY, now_ns=SECOND)
        except RuntimeError:
            self.inner.append("RuntimeError")
            raise
        self.inner.append("returned")

    def __hash__(self) -> int:
        if self.where == "hash":
            self._call_back()
        return hash(self.hash_as)

    def __eq__(self, other: object) -> bool:
        if self.where == "eq":
            self._call_back()
        return False


def run_with_timeout(fn: Any, seconds: float = 10) -> dict[str, Any]:
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:
            result["exc"] = exc

    worker = threading.Thread(target=target, daemon=True)
    with qos_support.watchdog(HANG_SECONDS):
        worker.start()
        worker.join(seconds)
    assert not worker.is_alive(), "deadlock: the call did not return"
    return result


@pytest.mark.parametrize("where", ["hash", "eq"])
@pytest.mark.parametrize("method", ["check", "try_acquire", "peek", "available", "refund"])
def test_a_key_calling_back_into_the_limiter_is_served_as_a_dict_would_serve_it(
    where: str, method: str
) -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))
    before = peeks_by_key(limiter)
    before_stats = stats_tuple(limiter)
    key = CallsBack(limiter, where, OBJECT_KEY)  # hashes as a remembered key: __eq__ is called
    result = run_with_timeout(lambda: getattr(limiter, method)(key, now_ns=SECOND))
    assert "exc" not in result, (
        f"{method} with a key whose __{where}__ calls back into the limiter gave {result} "
        f"(inner call: {key.inner})"
    )
    assert key.inner and set(key.inner) == {"returned"}, key.inner
    # The key equals no other (its __eq__ says so), so it is a new key of its own; the inner
    # calls checked INNER_KEY; nothing else changed.
    stores = method in ("check", "try_acquire")
    allowed, denied, refused, forgotten = stats_tuple(limiter)
    assert (allowed - len(key.inner) - stores, denied, refused, forgotten) == before_stats
    assert any(k is key for k in limiter) is stores
    after = peeks_by_key(limiter)
    after.pop(repr(INNER_KEY), None)
    assert {k: v for k, v in after.items() if "CallsBack" not in k} == before
    # Nothing stays locked.
    again = run_with_timeout(lambda: limiter.check(OBJECT_KEY, 0, now_ns=SECOND))
    assert again.get("value") == Decision(ALLOWED, 0, 3), again


def test_a_key_calling_back_on_the_fast_path_does_not_deadlock() -> None:
    limiter = used_limiter(clock=FakeClock(SECOND))

    class FastCallBack:
        def __hash__(self) -> int:
            limiter.check("a", 0, now_ns=SECOND)
            _ = len(limiter)
            return 12345

    result = run_with_timeout(lambda: limiter.check(FastCallBack(), now_ns=SECOND))
    assert "value" in result or isinstance(result.get("exc"), RuntimeError), result


def test_iteration_returns_the_keys_as_given() -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=100, shards=1)
    big = 2**70
    first_tuple = ("x", Fraction(1, 3))
    frac = Fraction(1, 3)
    given = ["name", 12345678901, -5, b"raw", (1, "x"), first_tuple, big, frac, 0.25]
    for key in given:
        assert limiter.try_acquire(key, now_ns=0)
    # Equal keys given later do not replace the first object (a key read natively comes back
    # as its plain value: the tuple (1.0, "x") as (1, "x")).
    assert limiter.try_acquire((1.0, "x"), now_ns=0)
    assert limiter.try_acquire(("x", Fraction(2, 6)), now_ns=0)
    assert limiter.try_acquire(Fraction(big), now_ns=0)
    keys = list(limiter)
    assert len(keys) == len(given) == len(limiter)
    by_repr = {f"{type(k).__name__}:{k!r}": k for k in keys}
    assert set(by_repr) == {f"{type(k).__name__}:{k!r}" for k in given}, keys
    assert by_repr["str:'name'"] == "name"
    assert type(by_repr["int:12345678901"]) is int and by_repr["int:-5"] == -5
    assert type(by_repr["bytes:b'raw'"]) is bytes
    assert type(by_repr["tuple:(1, 'x')"][0]) is int
    assert any(k is first_tuple for k in keys), "not the first tuple object"
    assert any(k is frac for k in keys)
    assert by_repr[f"int:{big!r}"] == big
    # A snapshot: changing the table while iterating is fine.
    for key in limiter:
        limiter.check(key, 0, now_ns=10 * SECOND)
    assert list(limiter) == [] and len(limiter) == 0


class Bytes(bytes):
    """A bytes subclass."""


@pytest.mark.parametrize(
    ("first", "canonical"),
    [
        (True, 1),
        (1.0, 1),
        (Fraction(1), 1),
        (Decimal(1), 1),
        (numpy.int64(1), 1),
        (One.ONE, 1),
        (-(2.0**63), -(2**63)),
        (Str("a"), "a"),
        (Bytes(b"a"), b"a"),
    ],
    ids=repr,
)
def test_fast_path_keys_come_back_in_their_canonical_type(first: Any, canonical: Any) -> None:
    limiter = KeyedRateLimiter(1, burst=2, max_keys=10, shards=1)
    assert limiter.try_acquire(first, now_ns=0)
    (key,) = list(limiter)
    assert type(key) is type(canonical) and key == canonical, (first, key)


def test_len_and_in() -> None:
    limiter = KeyedRateLimiter(1, burst=1, max_keys=100, shards=1)
    assert len(limiter) == 0 and "a" not in limiter
    limiter.try_acquire("a", now_ns=0)
    limiter.try_acquire(b"a", now_ns=0)
    limiter.try_acquire(("a",), now_ns=0)
    assert len(limiter) == 3
    assert "a" in limiter and b"a" in limiter and ("a",) in limiter
    assert Str("a") in limiter and "b" not in limiter and ("b",) not in limiter
    limiter.peek("c", now_ns=0)
    limiter.available("d", now_ns=0)
    assert len(limiter) == 3 and "c" not in limiter and "d" not in limiter
