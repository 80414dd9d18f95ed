"""Property tests of ``protocol_in_code.qos.keyed.KeyedRateLimiter`` (issue 6).

The model is ``tests/keyed_model.py``: one exact ``limiter_model.ModelLimiter`` per remembered
key, plus the table's rules (one clock per table, forgetting, refusing). Workloads use a few
keys, ``n`` from 0 to a burst + 1, explicit ``now_ns`` that mostly go forward but sometimes go
back, and a mix of check/try_acquire/peek/refund/available.

* ``test_native_matches_the_unbounded_model``: a large table against the model that never
  forgets a throttled key nor refuses: every answer (outcome, ``wait_ns``, ``remaining``; the
  bools, ints and ``None`` of the other calls), the allowed/denied/refused counts, and which keys
  are remembered: every throttled key; no key whose last check/try_acquire/refund left it fresh
  (``peek``/``available`` "may" forget, so they are allowed not to).
* ``test_equal_keys_are_one_key``: the same with keys given as equal objects of other types
  (``1``, ``1.0``, ``True``, ``Fraction(1)``, ``Decimal(1)``, an ``IntEnum``, a ``str``
  subclass...) and keys outside the fast path.
* ``test_equal_tuple_keys_are_one_key``: the same with tuple keys (nested,
  ``namedtuple`` and ``typing.NamedTuple`` too) each spelled several ways by equal items, mixed
  with plain keys and with tuples holding items no plain key equals (a ``Fraction`` equal to
  no float, a ``Decimal`` beyond the floats, a NaN, a ``frozenset``): the model is keyed by a
  dict.
* ``test_native_matches_the_bounded_model``: ``shards=1, max_keys=M`` (M in 1..4) against the
  bounded model: every answer including REFUSED (its ``wait_ns`` an int >= 1), the
  allowed/denied/refused counts; ``len``, membership and ``forgotten`` within what the contract
  pins down (throttled keys remembered, fresh keys left by a check/try_acquire/refund not,
  ``len <= M``, ``len + forgotten`` = keys inserted, within the insertions possible).
* ``test_a_refusal_hints_when_the_first_key_could_be_forgotten`` (the same runs, REFUSED's
  ``wait_ns`` exactly the model's: the time until the first remembered key could be forgotten,
  from the caller's ``now_ns``) and ``test_a_refusal_hint_follows_the_latest_take`` (one
  explicit case).
* ``test_a_two_key_table_answers_as_the_unbounded_model``: eviction safety: a native
  ``max_keys=2, shards=1`` table answers every request as the model that never forgets a
  throttled key nor refuses, except where it answers REFUSED (and then the model would have
  allowed the request). A table that forgot a throttled key (after a denial, or to make room)
  would hand it a full bucket, and the model would not.
  ``test_the_eviction_check_catches_an_lru_table`` shows that the same check fails for an LRU
  table (a model variant below) on a fixed workload, and
  ``test_a_throttled_key_survives_a_full_table`` runs that workload on the native table.
* ``test_a_trace_decides_as_one_call_at_a_time``: ``try_acquire_many`` (keys, times and ``n``
  as lists, ``array.array``, ``memoryview`` and numpy arrays of several dtypes, strided too; ``n``
  None, an int or a buffer) equals ``check(...).outcome`` one call at a time on an identical
  second table, and leaves both tables alike (stats, keys, ``available``). Tables of several
  shards are compared only when they cannot fill (each table places keys in shards its own
  way). ``test_a_numpy_trace_of_any_int_dtype``: one explicit trace reaching all four codes, in
  numpy arrays of each int dtype. ``test_uint64_keys_beyond_i64``: unsigned 64-bit keys above
  2**63 - 1 are the int keys of those values.
* ``test_a_bad_trace_changes_nothing``: lengths that differ, a negative ``n``, a non-integer:
  ValueError/TypeError naming the index, and the table (state, clock, stats, keys) untouched.
* ``test_after_a_denial_one_ns_short_is_denied_and_the_wait_is_allowed``: the exact
  ``wait_ns``, also when the caller's clock is behind the table's.
"""

from __future__ import annotations

import array
import collections
import enum
import math
import typing
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from hypothesis import assume, event, note, settings
from hypothesis import given as hyp_given
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

import keyed_model as km
import limiter_model as lm
from keyed_model import ALLOWED, REFUSED
from protocol_in_code.qos.keyed import Band, Decision, KeyDigest, KeyedRateLimiter, LimitOutcome

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
U64_MAX = 2**64 - 1
LARGE = 10**6
SECOND = 10**9
REFUSED_ = LimitOutcome.REFUSED
OPS = ("check", "try_acquire", "peek", "refund", "available")


def clamp(t: int, lo: int = I64_MIN, hi: int = I64_MAX) -> int:
    return max(lo, min(hi, t))


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


class Level(enum.IntEnum):
    ONE = 1
    TWO = 2


class Name(str):
    """A str subclass: equal to the plain str, so the same key."""


INT_KEYS = (0, 1, 2, 3, -1, 7, 2**31, I64_MAX, I64_MIN)
STR_KEYS = ("a", "b", "", "ключ", "a" * 40, "ключ" * 20)  # the last kept as its digest
plain_keys = st.sampled_from(INT_KEYS + STR_KEYS)

# Groups of objects equal as dict keys (one client each); different groups are different keys.
KEY_GROUPS: tuple[tuple[Hashable, ...], ...] = (
    (1, 1.0, True, Fraction(1), Decimal(1), Level.ONE),
    (0, 0.0, -0.0, False, Decimal(0)),
    (2, 2.0, Fraction(2), Level.TWO),
    (-1, -1.0, Decimal(-1)),
    ("a", Name("a")),
    (b"a",),
    (1.5, Fraction(3, 2)),
    ((1, "x"),),
    (2**63, float(2**63)),  # beyond i64: an int and an integral float
    (2**64 + 5,),
    (2**53 + 1,),  # not equal to float(2**53): a lossy float conversion would merge them
    (float(2**53), 2**53),
    (I64_MIN, float(I64_MIN)),
    ("é" * 100, Name("é" * 100)),  # 200 bytes: kept as its digest
    (b"x" * 200,),
    (2**1100, Fraction(2**1100)),  # 138 bytes, beyond the floats
    (frozenset({1, 2}),),
)


# A key as a tuple of its spellings: each use picks one (by the op's index, see ``spelling``).
aliased_keys = st.sampled_from(KEY_GROUPS)


class Spellings(tuple):  # type: ignore[type-arg]
    """Equal spellings of one key (not itself a key): each use picks one, as ``spelling`` does
    for a group of ``KEY_GROUPS``."""


Point = collections.namedtuple("Point", "x y")


class Triple(typing.NamedTuple):
    a: Any
    b: Any
    c: Any


NAN = float("nan")  # one object: equal to itself by identity, inside a tuple too

# The items of tuple keys: groups of equal spellings, first those a plain key equals, then
# those none does (a tuple holding one is the registry's, whole).
ITEM_GROUPS: tuple[tuple[Hashable, ...], ...] = (
    (1, 1.0, True, Fraction(1), Decimal(1), Level.ONE),
    (0, 0.0, -0.0, False, Decimal(0)),
    (2, 2.0, Fraction(2), Level.TWO),
    (2**70, float(2**70), Fraction(2**70)),
    (-(2**127), float(-(2**127))),
    (2**200, float(2**200), Decimal(2**200)),
    (1.5, Fraction(3, 2), Decimal("1.5")),
    ("a", Name("a")),
    ("", Name("")),
    (b"a",),
    (Fraction(1, 3), Fraction(2, 6)),
    (Decimal("1E+400"), Decimal("1.0E+400")),
    (NAN,),
    (frozenset({1}), frozenset({1.0})),
)

# A tuple key's shape: an int is an item of that group, a list a tuple of such.
shapes = st.recursive(
    st.integers(0, len(ITEM_GROUPS) - 1),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


@st.composite
def spelled(draw: st.DrawFn, shape: Any) -> Hashable:
    """One spelling of a shape: each item and each tuple's type drawn afresh."""
    if isinstance(shape, int):
        return draw(st.sampled_from(ITEM_GROUPS[shape]))
    items = [draw(spelled(item)) for item in shape]
    make: list[Callable[..., Hashable]] = [tuple]
    if len(items) == 2:
        make.append(lambda items: Point(*items))
    if len(items) == 3:
        make.append(lambda items: Triple(*items))
    return draw(st.sampled_from(make))(items)


@st.composite
def tuple_keys(draw: st.DrawFn) -> Spellings:
    """A tuple key (or now and then a plain one, which no tuple equals) in 1 to 3 spellings."""
    shape = draw(shapes)
    if isinstance(shape, int) and draw(st.booleans()):
        shape = [shape]
    return Spellings(draw(spelled(shape)) for _ in range(draw(st.integers(1, 3))))


# ---------------------------------------------------------------------------------------------
# Configurations and workloads
# ---------------------------------------------------------------------------------------------

rates = st.one_of(
    st.integers(1, 100),
    st.builds(Fraction, st.integers(1, 300), st.integers(1, 7)),
    st.sampled_from([0.5, "2.5", Decimal("0.3"), Fraction(7, 3), Fraction(1, 1000), 1 / 3]),
)
pers = st.one_of(st.none(), st.sampled_from([1, 2, Fraction(1, 3), "0.5", 60]))
bursts = st.one_of(st.integers(1, 6), st.integers(1, 3), st.none())


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """Band keyword arguments for KeyedRateLimiter (and keyed_model.keyed_model_from)."""
    count = draw(st.integers(1, 2))
    specs = []
    for _ in range(count):
        rate, burst, per = draw(rates), draw(bursts), draw(pers)
        if burst is None and math.ceil(lm.exact(rate)) > 8:
            burst = draw(st.integers(1, 8))
        specs.append((rate, burst, per))
    # Keep to rates a limiter (or a Band, when made) accepts: within 64 bits per second.
    per_second = [lm.band_spec(*spec)[0] for spec in specs]
    assume(all(max(r.numerator, r.denominator) < 2**64 for r in per_second))
    if count == 1 and draw(st.booleans()):
        rate, burst, per = specs[0]
        kwargs: dict[str, Any] = {"rate": rate}
        if burst is not None:
            kwargs["burst"] = burst
        if per is not None:
            kwargs["per"] = per
        return kwargs
    bands: list[Any] = []
    for rate, burst, per in specs:
        if draw(st.booleans()):
            bands.append(Band(rate, burst) if per is None else Band(rate, burst, per))
        elif per is None:
            bands.append((rate, burst))
        else:
            bands.append((rate, burst, per))
    return {"bands": bands}


def bursts_of(kwargs: dict[str, Any]) -> list[int]:
    return [burst for _, burst in lm.model_from(**kwargs).band_pairs()]


time_steps = st.one_of(
    st.just(("delta", 0)),
    st.tuples(st.just("delta"), st.integers(1, 10**6)),
    st.tuples(st.just("delta"), st.integers(1, 2 * 10**9)),
    st.tuples(st.just("delta"), st.integers(10**9, 10**11)),  # long idle: keys refill
    st.tuples(st.just("delta"), st.integers(-(2 * 10**9), -1)),  # the caller's clock goes back
    st.tuples(st.just("wait"), st.sampled_from([-1, 0, 1])),  # around the last wait_ns
)


def next_time(now: int, step: tuple[str, int], last_wait: int | None) -> int:
    kind, value = step
    if kind == "wait":
        return clamp(now + (last_wait or 0) + value)
    return clamp(now + value)


@dataclass
class Workload:
    kwargs: dict[str, Any]
    keys: list[Any]  # a key, or a tuple of equal spellings of one key (aliased workloads)
    t0: int
    ops: list[tuple[str, int, int, tuple[str, int]]]  # (operation, key index, n, time step)

    def __repr__(self) -> str:
        return f"Workload({self.kwargs!r}, keys={self.keys!r}, t0={self.t0}, ops={self.ops!r})"


@st.composite
def workloads(
    draw: st.DrawFn,
    min_keys: int = 1,
    max_keys: int = 4,
    max_ops: int = 30,
    keys: st.SearchStrategy[Any] = plain_keys,
    min_ops: int = 5,
) -> Workload:
    kwargs = draw(configs())
    burst_list = bursts_of(kwargs)
    pool = draw(st.lists(keys, min_size=min_keys, max_size=max_keys, unique=True))
    ns = st.one_of(
        st.integers(0, max(burst_list) + 1),
        st.sampled_from([0, 1, min(burst_list), max(burst_list), max(burst_list) + 1]),
    )
    ops = draw(
        st.lists(
            st.tuples(st.sampled_from(OPS), st.integers(0, len(pool) - 1), ns, time_steps),
            min_size=min(min_ops, max_ops),
            max_size=max_ops,
        )
    )
    t0 = draw(st.one_of(st.just(0), st.integers(-(2**40), 2**40), st.just(-(2**62))))
    return Workload(kwargs, pool, t0, ops)


# For tables that fill up: mostly taking, little idle time, so keys stay throttled.
CROWDED_DELTAS = {
    "zero": st.just(0),
    "tiny": st.integers(1, 10**4),
    "small": st.integers(1, 10**6),
    "back": st.integers(-(10**6), -1),
    "mid": st.integers(10**6, 10**9),
    "long": st.integers(10**9, 10**11),  # keys refill
}
crowded_steps = st.sampled_from(
    ["zero", "zero", "tiny", "tiny", "small", "small", "back", "wait", "wait", "mid", "long"]
).flatmap(
    lambda kind: (
        st.tuples(st.just("wait"), st.sampled_from([-1, 0, 1]))
        if kind == "wait"
        else st.tuples(st.just("delta"), CROWDED_DELTAS[kind])
    )
)


@st.composite
def crowded_workloads(draw: st.DrawFn, min_keys: int, max_keys: int) -> Workload:
    """Mostly throttling-heavy workloads (rewritten over the same keys), else plain ones."""
    w = draw(workloads(min_keys=min_keys, max_keys=max_keys, max_ops=40))
    if draw(st.sampled_from([False, True, True])):
        burst_list = bursts_of(w.kwargs)
        ops = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["check", "check", "try_acquire", "peek", "refund"]),
                    st.integers(0, len(w.keys) - 1),
                    st.sampled_from([1, 1, min(burst_list), max(burst_list), 0]),
                    crowded_steps,
                ),
                min_size=12,
                max_size=40,
            )
        )
        w = Workload(w.kwargs, w.keys, w.t0, ops)
    return w


def spelling(key: Any, step: int) -> Hashable:
    """The key object used at step ``step``: aliased keys rotate through their spellings."""
    if isinstance(key, Spellings) or (isinstance(key, tuple) and key in KEY_GROUPS):
        return key[step % len(key)]
    return key


# ---------------------------------------------------------------------------------------------
# Driving a table (native or model) and comparing
# ---------------------------------------------------------------------------------------------


def as_tuple(decision: Any) -> tuple[str, int | None, int]:
    if isinstance(decision, lm.ModelDecision):
        return (decision.outcome, decision.wait_ns, decision.remaining)
    assert type(decision.outcome) is LimitOutcome, f"outcome {decision.outcome!r}"
    assert decision.wait_ns is None or type(decision.wait_ns) is int, decision
    assert type(decision.remaining) is int, decision
    assert decision.allowed is (decision.outcome is LimitOutcome.ALLOWED)
    return (decision.outcome.value, decision.wait_ns, decision.remaining)


def do(table: Any, op: str, key: Hashable, n: int, now: int) -> Any:
    """One operation as comparable plain values (Decisions as tuples; ``try_acquire`` of more
    than a band's burst raises ValueError: that is ``("ValueError", None, None)``)."""
    if op == "available":
        result = table.available(key, now_ns=now)
    else:
        try:
            result = getattr(table, op)(key, n, now_ns=now)
        except ValueError:
            if op != "try_acquire":
                raise
            return ("ValueError", None, None)
    if op in ("check", "peek"):
        return as_tuple(result)
    if not isinstance(table, km.ModelKeyedLimiter):
        expected_type = {"try_acquire": bool, "available": int, "refund": type(None)}[op]
        assert type(result) is expected_type, f"{op} returned {result!r}"
    return result


def waited(result: Any) -> int | None:
    if isinstance(result, tuple) and result[1]:
        return result[1]
    return None


def check_table(
    native: KeyedRateLimiter,
    model: km.ModelKeyedLimiter,
    pool: list[Any],
    context: str,
    plain: bool = True,
) -> None:
    """Stats and remembered keys, as far as the contract pins them down."""
    got, want = native.stats, model.stats
    assert (got.allowed, got.denied, got.refused) == (want.allowed, want.denied, want.refused), (
        f"{context}: stats {got}, model {want}"
    )
    remembered = list(native)
    assert len(native) == len(remembered), f"{context}: len {len(native)}, iter {remembered}"
    assert len(set(remembered)) == len(remembered), f"{context}: a key twice in {remembered}"
    if model.max_keys is not None:
        assert len(native) <= model.max_keys, f"{context}: {len(native)} keys remembered"
    # A key longer than 128 bytes (a tuple of big ints, say) comes back as its digest, which
    # stands for it: `in` finds the key, iteration gives the digest.
    digests = [key for key in remembered if type(key) is KeyDigest]
    assert all(key in native for key in digests), f"{context}: a digest not found: {digests}"
    if plain:  # an int comes back as an int, a str as a str
        for key in remembered:
            assert type(key) is KeyDigest or any(type(key) is type(k) and key == k for k in pool), (
                f"{context}: iter gave {key!r} ({type(key).__name__}), keys used: {pool}"
            )
    throttled = model.not_fresh_keys()
    digested = 0
    for key in [spelling(k, 0) for k in pool]:
        inside = key in native
        if inside and key not in set(remembered):
            digested += 1
        else:
            assert inside == (key in set(remembered)), f"{context}: `{key!r} in` says {inside}"
        if key in throttled:
            assert inside, f"{context}: key {key!r} is throttled but was forgotten"
        if key not in model.maybe_remembered:
            assert not inside, (
                f"{context}: key {key!r} is remembered, but its last check/try_acquire/refund "
                "left it fresh (or it never needed remembering): it should have been forgotten"
            )
    assert digested <= len(digests), f"{context}: {digested} keys found, {digests} given back"
    inserted = len(native) + got.forgotten
    assert model.min_inserts <= inserted <= model.max_inserts, (
        f"{context}: len {len(native)} + forgotten {got.forgotten} = {inserted} keys inserted, "
        f"but between {model.min_inserts} and {model.max_inserts} insertions happened"
    )


def run_differential(
    native: KeyedRateLimiter,
    model: km.ModelKeyedLimiter,
    w: Workload,
    plain: bool = True,
    exact_hint: bool = True,
) -> None:
    """Run ``w`` on both; compare every answer and the table after each step. With
    ``exact_hint=False`` a REFUSED ``wait_ns`` need only be an int >= 1 (its exact value has
    its own test)."""
    now, last_wait = w.t0, None
    check_table(native, model, w.keys, "new table", plain)
    for i, (op, k, n, step) in enumerate(w.ops):
        now = next_time(now, step, last_wait)
        key = spelling(w.keys[k], i)
        context = f"step {i}: {op}({key!r}, n={n}, now_ns={now}) [table time was {model.time}]"
        want = do(model, op, key, n, now)
        got = do(native, op, key, n, now)
        if isinstance(got, tuple) and got[0] == want[0] == REFUSED:
            assert got[2] == want[2] == 0, f"{context}: REFUSED with remaining {got[2]}"
            assert type(got[1]) is int and got[1] >= 1, f"{context}: REFUSED {got}"
            assert got[1] == want[1] or not exact_hint, (
                f"{context}: REFUSED wait_ns hint {got[1]}, model {want[1]} (the time until "
                "the first remembered key could be forgotten, from the caller's now_ns)"
            )
            got = want
        behind = f" (the caller is {model.time - now} ns behind the table)" * (model.time > now)
        assert got == want, f"{context}: native {got!r}, model {want!r}{behind}"
        last_wait = waited(want) or last_wait
        check_table(native, model, w.keys, context, plain)


# ---------------------------------------------------------------------------------------------
# Native against the model
# ---------------------------------------------------------------------------------------------


@hyp_given(workloads(), st.sampled_from([None, 1, 4]))
def test_native_matches_the_unbounded_model(w: Workload, shards: int | None) -> None:
    extra = {} if shards is None else {"shards": shards}
    native = KeyedRateLimiter(**w.kwargs, max_keys=LARGE, **extra)
    model = km.keyed_model_from(**w.kwargs)
    assert native.max_keys == LARGE
    assert qos_support.band_pairs(native) == lm.model_from(**w.kwargs).band_pairs()
    run_differential(native, model, w)


@hyp_given(workloads(keys=aliased_keys, max_keys=5))
def test_equal_keys_are_one_key(w: Workload) -> None:
    native = KeyedRateLimiter(**w.kwargs, max_keys=LARGE)
    model = km.keyed_model_from(**w.kwargs)
    run_differential(native, model, w, plain=False)


@hyp_given(workloads(keys=tuple_keys(), max_keys=5))
def test_equal_tuple_keys_are_one_key(w: Workload) -> None:
    native = KeyedRateLimiter(**w.kwargs, max_keys=LARGE)
    model = km.keyed_model_from(**w.kwargs)
    run_differential(native, model, w, plain=False)
    event(f"tuple keys: {sum(isinstance(spelling(k, 0), tuple) for k in w.keys)}")


@hyp_given(crowded_workloads(min_keys=2, max_keys=6), st.integers(1, 4))
def test_native_matches_the_bounded_model(w: Workload, max_keys: int) -> None:
    native = KeyedRateLimiter(**w.kwargs, max_keys=max_keys, shards=1)
    model = km.keyed_model_from(**w.kwargs, max_keys=max_keys)
    run_differential(native, model, w, exact_hint=False)
    event(f"refused: {model.stats.refused > 0}")


@settings(max_examples=max(10, settings().max_examples // 2))
@hyp_given(crowded_workloads(min_keys=2, max_keys=4), st.integers(1, 3))
def test_a_refusal_hints_when_the_first_key_could_be_forgotten(w: Workload, max_keys: int) -> None:
    """The contract: REFUSED's wait_ns is "the time until the first key of that shard could
    be forgotten" (from the caller's now_ns, as every wait_ns)."""
    native = KeyedRateLimiter(**w.kwargs, max_keys=max_keys, shards=1)
    model = km.keyed_model_from(**w.kwargs, max_keys=max_keys)
    run_differential(native, model, w, exact_hint=True)


def test_a_refusal_hint_follows_the_latest_take() -> None:
    """rate 1/s, burst 2, one key of room: key 0 takes 1 (full again in 1 s), then 1 more
    (full again in 2 s): the first moment it could be forgotten is 2 s away, not 1 s."""
    table = KeyedRateLimiter(1, burst=2, max_keys=1, shards=1)
    assert table.check(0, 1, now_ns=0).allowed
    assert table.check(1, 1, now_ns=0) == Decision(REFUSED_, SECOND, 0)
    assert table.check(0, 1, now_ns=0).allowed
    assert table.peek(1, 1, now_ns=0) == Decision(REFUSED_, 2 * SECOND, 0)
    assert table.check(1, 1, now_ns=0) == Decision(REFUSED_, 2 * SECOND, 0)
    assert table.check(1, 1, now_ns=SECOND) == Decision(REFUSED_, SECOND, 0)
    assert table.check(1, 1, now_ns=2 * SECOND).allowed  # room appeared when the hint said


# ---------------------------------------------------------------------------------------------
# Eviction safety: a small table answers as the unbounded model, except REFUSED
# ---------------------------------------------------------------------------------------------


class LRUModel(km.ModelKeyedLimiter):
    """A WRONG table, for the self-test: when full, it evicts the least recently used key,
    throttled or not (so a throttled key comes back full)."""

    def _lookup(self, key: Hashable) -> lm.ModelLimiter | None:
        limiter = self.keys.pop(key, None)
        if limiter is not None:
            self.keys[key] = limiter  # the most recently used last
        return limiter

    def _make_room(self, now: int) -> bool:
        assert self.max_keys is not None
        while len(self.keys) >= self.max_keys:
            self._forget(next(iter(self.keys)))
        return True


def compare_small_and_large(small: Any, large: Any, w: Workload) -> tuple[list[str], int]:
    """Run ``w`` on both tables; return the answers that differ and the number of refusals.

    A request the small table refuses takes nothing there; on the large table it is skipped,
    except that its time is still used (one clock per table): the large table is asked to
    ``peek`` the same request at the same time instead, which must say ALLOWED.
    """
    mismatches: list[str] = []
    refusals = 0
    now, last_wait = w.t0, None
    for i, (op, k, n, step) in enumerate(w.ops):
        now = next_time(now, step, last_wait)
        key = w.keys[k]
        before = small.stats.refused
        got = do(small, op, key, n, now)
        context = f"step {i}: {op}({key!r}, n={n}, now_ns={now})"
        if small.stats.refused > before or (isinstance(got, tuple) and got[0] == REFUSED):
            refusals += 1
            twin = do(large, "peek", key, n, now)
            if twin[0] != ALLOWED:
                mismatches.append(f"{context}: small table REFUSED, large table peek {twin}")
            continue
        want = do(large, op, key, n, now)
        if got != want:
            mismatches.append(f"{context}: max_keys=2 answered {got!r}, unbounded {want!r}")
        last_wait = waited(want) or last_wait
    return mismatches, refusals


@hyp_given(crowded_workloads(min_keys=3, max_keys=5))
def test_a_two_key_table_answers_as_the_unbounded_model(w: Workload) -> None:
    small = KeyedRateLimiter(**w.kwargs, max_keys=2, shards=1)
    mismatches, refusals = compare_small_and_large(small, km.keyed_model_from(**w.kwargs), w)
    assert not mismatches, "\n".join(mismatches)
    assert len(small) <= 2
    event(f"refusals: {min(refusals, 3)}{'+' * (refusals > 3)}")


# rate 1/s, burst 2: "a" takes both tokens (throttled), "b" and "c" one each, then "a" again.
LRU_CATCHER = Workload(
    {"rate": 1, "burst": 2},
    ["a", "b", "c"],
    0,
    [
        ("check", 0, 2, ("delta", 0)),
        ("check", 1, 1, ("delta", 0)),
        ("check", 2, 1, ("delta", 1)),  # the table is full of throttled keys
        ("check", 0, 1, ("delta", 1)),  # "a" is still empty: DENIED (an LRU table: ALLOWED)
        ("try_acquire", 0, 2, ("delta", 10**8)),
        ("peek", 2, 2, ("delta", 0)),
        ("check", 2, 1, ("delta", -(10**6))),
    ],
)


def test_the_eviction_check_catches_an_lru_table() -> None:
    """A self-test of the eviction check: it fails for an LRU table, passes for the model."""
    specs = lm.model_from(**LRU_CATCHER.kwargs).band_pairs()
    mismatches, _ = compare_small_and_large(
        LRUModel(specs, max_keys=2), km.ModelKeyedLimiter(specs), LRU_CATCHER
    )
    assert mismatches, "the eviction check did not notice an LRU table"
    assert any("step 3" in m for m in mismatches), mismatches
    mismatches, refusals = compare_small_and_large(
        km.ModelKeyedLimiter(specs, max_keys=2), km.ModelKeyedLimiter(specs), LRU_CATCHER
    )
    assert not mismatches, mismatches
    assert refusals >= 1


def test_a_throttled_key_survives_a_full_table() -> None:
    small = KeyedRateLimiter(**LRU_CATCHER.kwargs, max_keys=2, shards=1)
    unbounded = km.keyed_model_from(**LRU_CATCHER.kwargs)
    mismatches, refusals = compare_small_and_large(small, unbounded, LRU_CATCHER)
    assert not mismatches, "\n".join(mismatches)
    assert refusals >= 1
    assert "a" in small and "b" in small and "c" not in small


# ---------------------------------------------------------------------------------------------
# Whole traces
# ---------------------------------------------------------------------------------------------

try:
    import numpy as np
except ImportError:  # the list, array.array and memoryview flavours still run
    np = None  # type: ignore[assignment]

Flavour = tuple[int, int, Callable[[list[int]], Any]]
FLAVOURS: dict[str, Flavour] = {
    "list": (I64_MIN, I64_MAX, list),
    "array-q": (I64_MIN, I64_MAX, lambda xs: array.array("q", xs)),
    "array-i": (-(2**31), 2**31 - 1, lambda xs: array.array("i", xs)),
    "array-B": (0, 255, lambda xs: array.array("B", xs)),
    "array-Q": (0, U64_MAX, lambda xs: array.array("Q", xs)),
    "memoryview-q": (I64_MIN, I64_MAX, lambda xs: memoryview(array.array("q", xs))),
}
if np is not None:
    for _dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        _info = np.iinfo(_dtype)
        FLAVOURS[f"numpy-{_dtype}"] = (
            int(_info.min),
            int(_info.max),
            lambda xs, dt=_dtype: np.array(xs, dtype=dt),
        )
    FLAVOURS["numpy-int64-strided"] = (
        I64_MIN,
        I64_MAX,
        lambda xs: np.repeat(np.array(xs, dtype=np.int64), 2)[::2],
    )
    FLAVOURS["numpy-uint16-reversed"] = (
        0,
        2**16 - 1,
        lambda xs: np.array(xs[::-1], dtype=np.uint16)[::-1],
    )


@st.composite
def flavoured(draw: st.DrawFn, lo: int, hi: int) -> str:
    """A flavour whose range holds ``lo..hi``."""
    fits = sorted(name for name, (a, b, _) in FLAVOURS.items() if a <= lo and hi <= b)
    return draw(st.sampled_from(fits))


@st.composite
def traces(draw: st.DrawFn) -> dict[str, Any]:
    kwargs = draw(configs())
    burst_list = bursts_of(kwargs)
    key_flavour = draw(st.sampled_from(sorted(FLAVOURS)))
    klo, khi, _ = FLAVOURS[key_flavour]
    klo, khi = max(klo, I64_MIN), min(khi, I64_MAX)  # beyond: test_uint64_keys_beyond_i64
    pool = draw(
        st.lists(
            st.one_of(
                st.sampled_from([klo, khi, 0, 1, 2, 3]).filter(lambda k: klo <= k <= khi),
                st.integers(max(klo, -5), min(khi, 5)),
                st.integers(klo, khi),
            ),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    time_flavour = draw(st.sampled_from(sorted(FLAVOURS)))
    tlo, thi, _ = FLAVOURS[time_flavour]
    tlo, thi = max(tlo, I64_MIN), min(thi, I64_MAX)
    length = draw(st.integers(0, 40))
    now = draw(st.one_of(st.just(max(tlo, 0)), st.integers(tlo, thi)))
    keys, times = [], []
    for _ in range(length):
        keys.append(draw(st.sampled_from(pool)))
        times.append(now)
        now = clamp(now + draw(time_steps)[1], tlo, thi)
    n_kind = draw(st.sampled_from(["none", "int", "buffer"]))
    ns = [draw(st.integers(0, max(burst_list) + 1)) for _ in range(length)]
    n: Any = None
    if n_kind == "int":
        n = draw(st.sampled_from([0, 1, min(burst_list), max(burst_list) + 1]))
    elif n_kind == "buffer":
        n = FLAVOURS[draw(flavoured(0, max(burst_list) + 1))][2](ns)
    table = draw(
        st.sampled_from(
            # Only tables that decide deterministically: a table of several shards places keys
            # in shards its own way (seeded per table), so two such tables may refuse
            # differently once a shard fills; with one shard, or room to spare, they cannot.
            [
                {"max_keys": LARGE},
                {"max_keys": LARGE, "shards": 7},
                {"max_keys": 2, "shards": 1},
                {"max_keys": 3, "shards": 1},
            ]
        )
    )
    # a warm-up, one call at a time on both tables
    warm = draw(
        st.lists(st.tuples(st.sampled_from(pool), st.integers(0, max(burst_list) + 1)), max_size=6)
    )
    return {
        "kwargs": kwargs,
        "table": table,
        "keys": keys,
        "times": times,
        "n": n,
        "flavours": (key_flavour, time_flavour, n_kind),
        "pool": pool,
        "warm": warm,
        "chunks": draw(st.lists(st.integers(0, length), max_size=2)),
    }


def outcome_code(decision: Any) -> int:
    return km.CODES[decision.outcome.value]


def n_list(n: Any, length: int) -> list[int]:
    if n is None:
        return [1] * length
    if isinstance(n, int):
        return [n] * length
    return [int(x) for x in n]


def table_state(table: KeyedRateLimiter, pool: list[int], now: int) -> tuple:
    """Stats, remembered keys and each pool key's tokens (``available`` last: it may forget)."""
    return (
        table.stats,
        len(table),
        sorted(table, key=repr),
        [k in table for k in pool],
    )


def availability(table: KeyedRateLimiter, pool: list[int], now: int) -> list[int]:
    return [table.available(k, now_ns=now) for k in pool]


@hyp_given(traces())
def test_a_trace_decides_as_one_call_at_a_time(trace: dict[str, Any]) -> None:
    kwargs, table = trace["kwargs"], trace["table"]
    batch = KeyedRateLimiter(**kwargs, **table)
    single = KeyedRateLimiter(**kwargs, **table)
    t_warm = trace["times"][0] if trace["times"] else 0
    for key, n in trace["warm"]:
        assert batch.check(key, n, now_ns=t_warm) == single.check(key, n, now_ns=t_warm)
    key_flavour, time_flavour, _ = trace["flavours"]
    keys, times, n = trace["keys"], trace["times"], trace["n"]
    length = len(keys)
    ns = n_list(n, length)
    bounds = sorted({0, length, *trace["chunks"]})
    got: list[int] = []
    for lo, hi in zip(bounds, bounds[1:] if length else [0], strict=False):
        chunk_n = n if n is None or isinstance(n, int) else n[lo:hi]
        result = batch.try_acquire_many(
            FLAVOURS[key_flavour][2](keys[lo:hi]), FLAVOURS[time_flavour][2](times[lo:hi]), chunk_n
        )
        assert type(result) is array.array and result.typecode == "B", repr(result)
        assert len(result) == hi - lo
        got.extend(result)
    want = [
        outcome_code(single.check(k, m, now_ns=t)) for k, t, m in zip(keys, times, ns, strict=True)
    ]
    assert got == want, f"trace codes {got}, one call at a time {want}"
    event(f"codes seen: {sorted(set(want))}")
    end = max(times, default=t_warm)
    assert table_state(batch, trace["pool"], end) == table_state(single, trace["pool"], end)
    later = clamp(end + 10**9)
    for when in (end, later):
        assert availability(batch, trace["pool"], when) == availability(single, trace["pool"], when)
    assert batch.stats == single.stats


@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "intp"]
)
def test_a_numpy_trace_of_any_int_dtype(dtype: str) -> None:
    numpy = pytest.importorskip("numpy")
    # rate: one token per 100 ns; burst 3; three keys fit. Every outcome code appears.
    config: dict[str, Any] = {"rate": 10**7, "burst": 3, "max_keys": 3, "shards": 1}
    keys = [0, 1, 2, 1, 0, 3, 1, 1, 2, 0, 3, 2]
    times = [0, 0, 0, 1, 5, 5, 100, 50, 120, 127, 127, 126]  # fits int8; goes back twice
    ns = [1, 2, 3, 1, 4, 1, 2, 1, 3, 0, 1, 1]
    batch, single = KeyedRateLimiter(**config), KeyedRateLimiter(**config)
    got = batch.try_acquire_many(
        numpy.array(keys, dtype=dtype), numpy.array(times, dtype=dtype), numpy.array(ns, dtype)
    )
    want = [
        outcome_code(single.check(k, m, now_ns=t)) for k, t, m in zip(keys, times, ns, strict=True)
    ]
    assert list(got) == want
    assert set(want) == {0, 1, 2, 3}, want
    assert batch.stats == single.stats
    assert sorted(batch) == sorted(single)
    assert availability(batch, [0, 1, 2, 3], 200) == availability(single, [0, 1, 2, 3], 200)


def test_uint64_keys_beyond_i64() -> None:
    """A trace's keys are "buffers of integers" (numpy arrays of any int dtype): a uint64 key
    above 2**63 - 1 is the int key of that value, as ``check`` takes it."""
    keys = [U64_MAX, 2**63, U64_MAX, 2**63 - 1]
    batch, single = KeyedRateLimiter(1, burst=1), KeyedRateLimiter(1, burst=1)
    got = batch.try_acquire_many(array.array("Q", keys), array.array("q", [0, 0, 1, 2]))
    want = [
        outcome_code(single.check(k, now_ns=t)) for k, t in zip(keys, [0, 0, 1, 2], strict=True)
    ]
    assert want == [0, 0, 1, 0]
    assert list(got) == want
    assert sorted(batch) == sorted(single) == sorted(set(keys))
    assert batch.stats == single.stats


FAULTS: tuple[str, ...] = (
    "keys longer",
    "times longer",
    "n buffer shorter",
    "negative n in a list",
    "negative n as the int",
    "float key in a list",
    "str key in a list",
    "None time in a list",
    "float n in a list",
)
if np is not None:
    FAULTS += ("negative n in a numpy array", "float numpy keys")


@hyp_given(workloads(max_keys=3, max_ops=12), st.sampled_from(FAULTS), st.integers(0, 8), st.data())
def test_a_bad_trace_changes_nothing(
    w: Workload, fault: str, where: int, data: st.DataObject
) -> None:
    burst_list = bursts_of(w.kwargs)
    pool = [0, 1, 5]
    faulty = KeyedRateLimiter(**w.kwargs, max_keys=LARGE)
    twin = KeyedRateLimiter(**w.kwargs, max_keys=LARGE)
    # a common history, int keys
    now = w.t0
    for i, (op, k, n, step) in enumerate(w.ops):
        now = next_time(now, step, None)
        assert do(faulty, op, pool[k % 3], n, now) == do(twin, op, pool[k % 3], n, now), i
    # A trace whose valid part would change the table: takes everything from each key, much
    # later (which would move the table's clock forward too).
    length = where + 2
    keys = [pool[i % 3] for i in range(length)]
    late = clamp(now + 10**12)
    times = [late] * length
    ns: Any = [min(burst_list)] * length
    index: int | None = where
    if fault == "keys longer":
        keys, index = [*keys, 1], None
    elif fault == "times longer":
        times, index = [*times, late], None
    elif fault == "n buffer shorter":
        ns, index = ns[:-1], None
    elif fault == "negative n in a list":
        ns[where] = -1
    elif fault == "negative n in a numpy array":
        ns[where] = -data.draw(st.integers(1, 2**63), label="negative n")
        ns = np.array(ns, dtype=np.int64)
    elif fault == "negative n as the int":
        ns, index = -1, None
    elif fault == "float key in a list":
        keys[where] = 1.5
    elif fault == "str key in a list":
        keys[where] = "a"
    elif fault == "None time in a list":
        times[where] = None  # type: ignore[call-overload]
    elif fault == "float n in a list":
        ns[where] = 1.5
    elif fault == "float numpy keys":
        keys, index = np.array(keys, dtype=np.float64), None
    before = (faulty.stats, len(faulty), sorted(faulty, key=repr))
    with pytest.raises((ValueError, TypeError)) as info:
        faulty.try_acquire_many(keys, times, ns)
    if index is not None:
        assert str(index) in str(info.value), f"the error does not name index {index}: {info}"
    assert (faulty.stats, len(faulty), sorted(faulty, key=repr)) == before
    # nothing was taken, and the table's clock did not move: the same future as the twin
    future = data.draw(
        st.lists(
            st.tuples(st.sampled_from(OPS), st.sampled_from(pool), st.integers(0, 3), time_steps),
            max_size=8,
        ),
        label="future",
    )
    for op, key, n, step in [("available", k, 0, ("delta", 0)) for k in pool] + future:
        now = next_time(now, step, None)
        got, want = do(faulty, op, key, n, now), do(twin, op, key, n, now)
        assert got == want, f"after the bad trace ({fault}), {op}({key}, {n}, now_ns={now})"
    assert faulty.stats == twin.stats


# ---------------------------------------------------------------------------------------------
# Wait exactness
# ---------------------------------------------------------------------------------------------


@hyp_given(
    workloads(max_ops=15),
    st.integers(0, 10**6),
    st.booleans(),
    st.one_of(st.just(0), st.integers(1, 10**9)),
    st.integers(0, 3),
)
def test_after_a_denial_one_ns_short_is_denied_and_the_wait_is_allowed(
    w: Workload, pick: int, via_peek: bool, behind: int, which: int
) -> None:
    limiter = KeyedRateLimiter(**w.kwargs, max_keys=LARGE)
    now, last_wait = w.t0, None
    for op, k, n, step in w.ops:
        now = next_time(now, step, last_wait)
        last_wait = waited(do(limiter, op, w.keys[k], n, now)) or last_wait
    key = w.keys[which % len(w.keys)]
    t = clamp(now - behind)  # the caller may be behind the table's clock
    smallest = min(bursts_of(w.kwargs))
    if limiter.available(key, now_ns=t) >= smallest:  # full: empty the smallest band
        assert limiter.check(key, smallest, now_ns=t).allowed
    held = limiter.available(key, now_ns=t)
    assert held < smallest
    n = held + 1 + pick % (smallest - held)
    first = limiter.peek(key, n, now_ns=t) if via_peek else limiter.check(key, n, now_ns=t)
    assert first.outcome is LimitOutcome.DENIED, f"{n} tokens when {held} are held: {first}"
    wait = first.wait_ns
    assert isinstance(wait, int) and wait >= 1
    assume(t + wait <= I64_MAX)
    note(f"key={key!r}, n={n}, t={t}, wait={wait}")
    short = limiter.peek(key, n, now_ns=t + wait - 1)
    assert short.outcome is LimitOutcome.DENIED, f"{n} allowed 1 ns before the wait {wait}"
    assert short.wait_ns == 1, f"1 ns before the end of the wait, {short.wait_ns} ns left"
    on_time = limiter.peek(key, n, now_ns=t + wait)
    assert on_time.outcome is LimitOutcome.ALLOWED, (
        f"{'peek' if via_peek else 'check'}({n}) at {t} said wait {wait} ns, but peek({n}) at "
        f"{t + wait} answered {on_time}"
    )
    assert limiter.check(key, n, now_ns=t + wait).allowed
