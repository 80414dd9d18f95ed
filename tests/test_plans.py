"""Plans (issue 25): ``plans={"free": ..., "pro": ...}`` on the three keyed limiters, ``plan=`` on
every per-key call.

The contract, checked against a model: each plan keeps its own state per key. A key's first
request under a plan starts from that plan's full burst; back on an earlier plan it finds its
state there as it left it, refilled meanwhile. Plans whose bands are the same limit (the same
canonical encoding: the same fingerprint) are one state, on every store. So a key that changes
plan never gets more than one new burst of the new plan.

The model is a dict of in-process ``RateLimiter``s, one per (plan's limit, key), on an injected
clock; the in-process, shared-memory and Redis keyed limiters must answer every call as it does.
Times only move forward: a keyed table decides a call from the past at its own latest time, a
single limiter at the call's.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import pickle
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import qos_support
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from limiter_model import FakeClock

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.keyed")

from protocol_in_code._native import _canonical
from protocol_in_code.qos import (
    Band,
    KeyedRateLimiter,
    KeyedStats,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
)
from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter, RedisKeyedRateLimiter
from protocol_in_code.qos.interfaces import kind_of

SECOND = 10**9
KEEP_MS = 600_000
_names = itertools.count()

PLANS: dict[str, Any] = {
    "free": "3/hour",
    "pro": [Band("10/second", burst=20), Band("10000/day")],
    "trial": Band(3, per=3600),  # the same limit as "free", written otherwise: one state
}


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


def as_bands(value: Any) -> tuple[Band, ...]:
    """A plan's value as its bands, as the limiters read it."""
    if isinstance(value, Band):
        return (value,)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        return RateLimiter(value).bands
    return RateLimiter(bands=value).bands


class Model:
    """Each plan's limit keeps its own ``RateLimiter`` per key, made full on first use."""

    def __init__(self, plans: dict[str, Any]) -> None:
        self.clock = FakeClock()
        self.bands = {plan: as_bands(value) for plan, value in plans.items()}
        # A plan's state is its limit's: plans of one canonical encoding share it.
        self.limit = {plan: _canonical(bands)[0] for plan, bands in self.bands.items()}
        self.limiters: dict[tuple[bytes, Any], RateLimiter] = {}

    def of(self, plan: str, key: Any) -> RateLimiter:
        state = (self.limit[plan], key)
        if state not in self.limiters:
            self.limiters[state] = RateLimiter(bands=self.bands[plan], clock=self.clock)
        return self.limiters[state]

    def call(self, op: str, key: Any, n: int, now_ns: int, plan: str) -> Any:
        self.clock.now = now_ns
        limiter = self.of(plan, key)
        if op == "available":
            return limiter.available()
        try:
            return getattr(limiter, op)(n)
        except ValueError as error:
            if op != "try_acquire":
                raise
            return ("ValueError", str(error))


def ask(limiter: Any, op: str, key: Any, n: int, now_ns: int, plan: str) -> Any:
    method = getattr(limiter, op)
    if op == "available":
        return method(key, now_ns=now_ns, plan=plan)
    try:
        return method(key, n, now_ns=now_ns, plan=plan)
    except ValueError as error:
        if op != "try_acquire":
            raise
        return ("ValueError", str(error))


def same(got: Any, want: Any, *, wait_grain: int = 1) -> None:
    """The same answer; a Decision's wait rounded up to ``wait_grain`` nanoseconds (the
    Redis script settles in microseconds)."""
    if hasattr(want, "outcome"):
        assert got.outcome == want.outcome
        assert got.remaining == want.remaining
        wait = None if want.wait_ns is None else -(-want.wait_ns // wait_grain) * wait_grain
        assert got.wait_ns == wait
    else:
        assert got == want


rates = st.one_of(
    st.integers(1, 50),
    st.fractions(min_value=Fraction(1, 40), max_value=50, max_denominator=40),
)
band = st.builds(
    lambda rate, burst, per: Band(rate, burst=burst, per=per),
    rates,
    st.integers(1, 20),
    st.sampled_from([1, 3, 60]),
)
plan_value = st.one_of(
    st.sampled_from(["5/second", "2/minute", "7"]),
    band,
    st.lists(band, min_size=1, max_size=3),
)
plans_strategy = st.dictionaries(
    st.sampled_from(["free", "pro", "team", "x"]), plan_value, min_size=1, max_size=3
)
ops = st.sampled_from(["try_acquire", "check", "check", "peek", "refund", "available"])
# Whole microseconds, only forward.
steps = st.one_of(st.just(0), st.integers(1, 1000), st.integers(1, 10**7), st.integers(1, 10**9))


@st.composite
def traces(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[str, str, str, int, int]]]:
    plans = draw(plans_strategy)
    if draw(st.booleans()):  # an alias: another name for one plan's very bands
        first = next(iter(plans))
        plans["alias"] = plans[first]
    trace = draw(
        st.lists(
            st.tuples(
                ops,
                st.sampled_from(sorted(plans)),
                st.sampled_from(["a", "b", "c"]),
                st.integers(0, 25),
                steps,
            ),
            min_size=1,
            max_size=40,
        )
    )
    return plans, trace


def run_against_model(
    limiter: Any, plans: dict[str, Any], trace: list[tuple[str, str, str, int, int]], grain: int
) -> None:
    model = Model(plans)
    now_us = 10**9
    for op, plan, key, n, step in trace:
        now_us += step
        now_ns = now_us * 1000
        got = ask(limiter, op, key, n, now_ns, plan)
        want = model.call(op, key, n, now_ns, plan)
        same(got, want, wait_grain=grain)
        # Every plan's balance of the key, after every call.
        for other in plans:
            assert limiter.available(key, now_ns=now_ns, plan=other) == model.call(
                "available", key, 0, now_ns, other
            ), (op, plan, key, n, other)


# ---------------------------------------------------------------------------------------------
# Each limiter against the model
# ---------------------------------------------------------------------------------------------


@given(case=traces())
def test_the_in_process_limiter_answers_as_the_model(
    case: tuple[dict[str, Any], list[Any]],
) -> None:
    plans, trace = case
    run_against_model(KeyedRateLimiter(plans=plans), plans, trace, 1)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=traces())
def test_the_shared_limiter_answers_as_the_model(
    tmp_path: Path, case: tuple[dict[str, Any], list[Any]]
) -> None:
    plans, trace = case
    limiter = SharedKeyedRateLimiter(
        f"plans{next(_names)}", plans=plans, max_keys=64, path=tmp_path
    )
    try:
        run_against_model(limiter, plans, trace, 1)
    finally:
        limiter.remove()


@given(case=traces())
def test_the_redis_limiter_answers_as_the_model(
    shared_redis_client: Any, case: tuple[dict[str, Any], list[Any]]
) -> None:
    plans, trace = case
    limiter = RedisKeyedRateLimiter(
        shared_redis_client,
        name="clients",
        plans=plans,
        min_ttl_ms=KEEP_MS,
        prefix=f"plans{next(_names)}:",
    )
    run_against_model(limiter, plans, trace, 1000)


# ---------------------------------------------------------------------------------------------
# A change of plan gives at most one new burst
# ---------------------------------------------------------------------------------------------

switches = st.lists(
    st.tuples(st.sampled_from(["small", "big", "small2"]), st.integers(1, 3)),
    min_size=1,
    max_size=60,
)
SWITCHING = {
    "small": Band(1, burst=3, per=3600),
    "big": Band(1, burst=8, per=3600),
    "small2": "5/hour",
}
BURSTS = {"small": 3, "big": 8, "small2": 5}


def taken_per_plan(limiter: Any, schedule: list[tuple[str, int]]) -> dict[str, int]:
    """Tokens taken for one key under each plan, switching plan at every request, all at
    one instant (so nothing refills)."""
    taken = dict.fromkeys(BURSTS, 0)
    for plan, n in schedule:
        if limiter.try_acquire("client", n, now_ns=SECOND * 1000, plan=plan):
            taken[plan] += n
    return taken


def check_one_burst_each(taken: dict[str, int]) -> None:
    for plan, count in taken.items():
        assert count <= BURSTS[plan], (plan, count)


@given(schedule=switches)
def test_switching_plans_in_process_gives_at_most_one_burst_of_each(
    schedule: list[tuple[str, int]],
) -> None:
    check_one_burst_each(taken_per_plan(KeyedRateLimiter(plans=SWITCHING), schedule))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schedule=switches)
def test_switching_plans_shared_gives_at_most_one_burst_of_each(
    tmp_path: Path, schedule: list[tuple[str, int]]
) -> None:
    limiter = SharedKeyedRateLimiter(f"switch{next(_names)}", plans=SWITCHING, path=tmp_path)
    try:
        check_one_burst_each(taken_per_plan(limiter, schedule))
    finally:
        limiter.remove()


@given(schedule=switches)
def test_switching_plans_on_redis_gives_at_most_one_burst_of_each(
    shared_redis_client: Any, schedule: list[tuple[str, int]]
) -> None:
    limiter = RedisKeyedRateLimiter(
        shared_redis_client,
        name="switch",
        plans=SWITCHING,
        min_ttl_ms=KEEP_MS,
        prefix=f"switch{next(_names)}:",
    )
    check_one_burst_each(taken_per_plan(limiter, schedule))


@given(
    schedule=st.lists(
        st.tuples(st.sampled_from(["small", "big"]), st.integers(1, 3), st.integers(0, 10**10)),
        min_size=1,
        max_size=60,
    )
)
def test_over_time_each_plan_gives_its_burst_and_its_refill_only(
    schedule: list[tuple[str, int, int]],
) -> None:
    """Under each plan a key gets at most the plan's burst plus what the plan's rate brought
    since its first request under it, however often it switched meanwhile."""
    limiter = KeyedRateLimiter(plans=SWITCHING)
    now = 0
    first: dict[str, int] = {}
    taken = dict.fromkeys(BURSTS, 0)
    for plan, n, step in schedule:
        now += step
        first.setdefault(plan, now)
        if limiter.try_acquire("client", n, now_ns=now, plan=plan):
            taken[plan] += n
        refilled = (now - first[plan]) // (3600 * SECOND)  # one token per hour on both
        assert taken[plan] <= BURSTS[plan] + refilled


def test_a_key_back_on_its_earlier_plan_finds_its_state_as_it_left_it() -> None:
    clock = FakeClock()
    limiter = KeyedRateLimiter(
        plans={"free": Band(1, burst=2, per=10), "pro": "100/second"}, clock=clock
    )
    assert limiter.try_acquire("k", 2, plan="free")
    assert not limiter.try_acquire("k", plan="free")
    assert limiter.try_acquire("k", 100, plan="pro")  # a fresh, full burst of the new plan
    assert not limiter.try_acquire("k", plan="pro")
    clock.advance(10 * SECOND)  # one token of "free" refills meanwhile
    assert limiter.available("k", plan="free") == 1
    assert limiter.try_acquire("k", plan="free")
    assert not limiter.try_acquire("k", plan="free")


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def native_limiters(tmp_path: Path) -> list[Any]:
    return [
        KeyedRateLimiter(plans=PLANS),
        SharedKeyedRateLimiter(f"errors{next(_names)}", plans=PLANS, path=tmp_path),
    ]


def every_limiter(tmp_path: Path, client: Any) -> list[Any]:
    return [
        *native_limiters(tmp_path),
        RedisKeyedRateLimiter(client, name="errors", plans=PLANS),
    ]


CALLS = [
    ("try_acquire", ("k",)),
    ("check", ("k",)),
    ("peek", ("k",)),
    ("refund", ("k",)),
    ("available", ("k",)),
    ("acquire", ("k", 1, 0)),
]


@pytest.mark.parametrize(("method", "args"), CALLS)
def test_a_call_without_its_plan_names_the_plans(
    tmp_path: Path, redis_client: Any, method: str, args: tuple[Any, ...]
) -> None:
    for limiter in every_limiter(tmp_path, redis_client):
        with pytest.raises(TypeError, match=r"plan= is required: .* 'free', 'pro', 'trial'"):
            getattr(limiter, method)(*args)
        with pytest.raises(ValueError, match=r"unknown plan 'gold': .*'free', 'pro', 'trial'"):
            getattr(limiter, method)(*args, plan="gold")
        with pytest.raises(TypeError, match=r"plan must be a str .* not 3"):
            getattr(limiter, method)(*args, plan=3)


@pytest.mark.parametrize(("method", "args"), CALLS)
def test_a_plan_for_a_limiter_without_plans_is_refused(
    tmp_path: Path, redis_client: Any, method: str, args: tuple[Any, ...]
) -> None:
    for limiter in [
        KeyedRateLimiter(5),
        SharedKeyedRateLimiter(f"none{next(_names)}", 5, path=tmp_path),
        RedisKeyedRateLimiter(redis_client, 5, name="none"),
    ]:
        with pytest.raises(TypeError, match="plan='pro' was given, but this limiter has no"):
            getattr(limiter, method)(*args, plan="pro")


def test_the_batch_and_the_waits_take_the_plan(tmp_path: Path, redis_client: Any) -> None:
    for limiter in native_limiters(tmp_path):
        with pytest.raises(TypeError, match="plan= is required"):
            limiter.try_acquire_many([1, 2], [0, 0])
        assert list(limiter.try_acquire_many([1, 1, 1, 1], [0] * 4, plan="free")) == [0, 0, 0, 1]
        assert limiter.available(1, now_ns=0, plan="pro") == 20
        with pytest.raises(ValueError, match="unknown plan"):
            limiter.acquire_async("k", plan="gold")  # raised at once, not when awaited
        assert asyncio.run(limiter.acquire_async("k", 3, plan="free"))
        assert not limiter.try_acquire("k", plan="free")
        assert limiter.try_acquire("k", plan="pro")
    remote = RedisKeyedRateLimiter(redis_client, name="batch", plans=PLANS)
    assert remote.try_acquire_many(["a", "a", "a", "a"], plan="free") == [True, True, True, False]
    assert remote.acquire("b", 3, plan="trial")
    assert not remote.try_acquire("b", plan="free")  # "trial" is "free"'s very limit
    assert remote.try_acquire("b", plan="pro")


BAD_PLANS = [
    ({}, ValueError, "plans must name at least one plan, not {}"),
    ([("free", 1)], TypeError, "plans must be a dict of plan name to its rate or bands, not list"),
    ({1: "5/second"}, TypeError, r"a plan's name must be a non-empty str, not 1 \(int\)"),
    ({"": "5/second"}, TypeError, r"a plan's name must be a non-empty str, not '' \(str\)"),
    ({"free": "5/fortnight"}, ValueError, r"plans\['free'\]: "),
    ({"free": 0}, ValueError, r"plans\['free'\]: rate must be positive"),
    ({"free": [1]}, TypeError, r"plans\['free'\]: bands must hold Band objects"),
]


@pytest.mark.parametrize(("plans", "error", "message"), BAD_PLANS)
def test_bad_plans_are_refused_alike_naming_the_plan(
    tmp_path: Path, redis_client: Any, plans: Any, error: type[Exception], message: str
) -> None:
    for make in [
        lambda: KeyedRateLimiter(plans=plans),
        lambda: SharedKeyedRateLimiter("bad", plans=plans, path=tmp_path),
        lambda: RedisKeyedRateLimiter(redis_client, name="bad", plans=plans),
    ]:
        with pytest.raises(error, match=message):
            make()


def test_a_plan_errs_as_rate_and_bands_do() -> None:
    for value in ["5/fortnight", 0, -1, "x", [1], [Band(1), "y"]]:
        try:
            KeyedRateLimiter(bands=value) if isinstance(value, list) else KeyedRateLimiter(value)
        except (TypeError, ValueError) as error:
            expected = error
        with pytest.raises(type(expected)) as caught:
            KeyedRateLimiter(plans={"p": value})
        assert str(caught.value) == f"plans['p']: {expected}"


@pytest.mark.parametrize("given", [{"rate": 5}, {"bands": [Band(5)]}, {"burst": 3}, {"per": 2}])
def test_plans_with_rate_bands_burst_or_per_are_refused(
    tmp_path: Path, redis_client: Any, given: dict[str, Any]
) -> None:
    (name,) = given
    for make in [
        lambda: KeyedRateLimiter(plans=PLANS, **given),
        lambda: SharedKeyedRateLimiter("both", plans=PLANS, path=tmp_path, **given),
        lambda: RedisKeyedRateLimiter(redis_client, name="both", plans=PLANS, **given),
    ]:
        with pytest.raises(TypeError, match=f"give plans or {name}, not both"):
            make()


def test_a_plan_beyond_the_scripts_bound_is_named(redis_client: Any) -> None:
    with pytest.raises(ValueError, match=r"plans\['huge'\]: band 0 .* exceeds 2\*\*53"):
        RedisKeyedRateLimiter(
            redis_client, name="huge", plans={"ok": 5, "huge": Band(1, burst=2**60)}
        )


def test_a_local_fallback_must_have_the_same_plans(redis_client: Any) -> None:
    with pytest.raises(ValueError, match="without the plan 'pro' of the same bands"):
        RedisKeyedRateLimiter(
            redis_client,
            name="fb",
            plans=PLANS,
            on_error=KeyedRateLimiter(plans={"free": "3/hour", "trial": "3/hour"}),
        )
    with pytest.raises(TypeError, match="local KeyedRateLimiter with plans, but this"):
        RedisKeyedRateLimiter(redis_client, 5, name="fb", on_error=KeyedRateLimiter(plans=PLANS))
    RedisKeyedRateLimiter(
        redis_client, name="fb", plans=PLANS, on_error=KeyedRateLimiter(plans=PLANS)
    )


# ---------------------------------------------------------------------------------------------
# The table: bands, plans, len, in, iteration, stats, repr, pickling
# ---------------------------------------------------------------------------------------------


def test_bands_points_to_plans_and_plans_lists_each_plans_bands(
    tmp_path: Path, redis_client: Any
) -> None:
    expected = {plan: as_bands(value) for plan, value in PLANS.items()}
    for limiter in every_limiter(tmp_path, redis_client):
        assert limiter.plans == expected
        with pytest.raises(AttributeError, match=r"no bands of its own: read \.plans"):
            limiter.bands  # noqa: B018
        assert kind_of(limiter) == (True, False)
        assert "plans={'free': (Band(rate=3, burst=3, per=3600),)" in repr(limiter)
    for limiter in [KeyedRateLimiter(5), RedisKeyedRateLimiter(redis_client, 5, name="one")]:
        assert limiter.plans is None
    assert kind_of(AsyncRedisKeyedRateLimiter(redis_client, name="a", plans=PLANS)) == (True, True)


def test_len_in_iteration_and_stats_add_up_over_plans(tmp_path: Path) -> None:
    for limiter in native_limiters(tmp_path):
        assert limiter.try_acquire("a", now_ns=0, plan="free")
        assert limiter.try_acquire("a", now_ns=0, plan="pro")
        assert limiter.try_acquire("b", now_ns=0, plan="pro")
        assert not limiter.try_acquire("a", 3, now_ns=0, plan="trial")  # "free"'s state
        assert len(limiter) == 3  # "a" under two plans' tables, "b" under one
        assert "a" in limiter and "b" in limiter and "c" not in limiter
        assert limiter.stats == KeyedStats(3, 1, 0, 0)
        if isinstance(limiter, KeyedRateLimiter):
            assert sorted(limiter) == ["a", "b"]  # each key once


def test_an_in_process_limiter_with_plans_pickles_with_every_plans_state() -> None:
    limiter = KeyedRateLimiter(plans=PLANS, max_keys=50, shards=2)
    limiter.try_acquire("a", 2, now_ns=0, plan="free")
    limiter.try_acquire("a", 15, now_ns=0, plan="pro")
    limiter.try_acquire(("t", 1), now_ns=0, plan="pro")
    for copied in [pickle.loads(pickle.dumps(limiter)), copy.deepcopy(limiter)]:
        assert copied.plans == limiter.plans
        assert (copied.max_keys, len(copied), copied.stats) == (50, 3, limiter.stats)
        assert copied.available("a", now_ns=0, plan="free") == 1
        assert copied.available("a", now_ns=0, plan="trial") == 1
        assert copied.available("a", now_ns=0, plan="pro") == 5
        assert copied.available(("t", 1), now_ns=0, plan="pro") == 19
    with pytest.raises(ValueError, match="restored from the state of one"):
        KeyedRateLimiter(plans=PLANS).__setstate__(KeyedRateLimiter(5).__reduce__()[2])


def test_a_shared_limiter_with_plans_pickles_to_the_same_tables(tmp_path: Path) -> None:
    limiter = SharedKeyedRateLimiter("pickled", plans=PLANS, path=tmp_path)
    limiter.try_acquire("a", 2, now_ns=0, plan="free")
    copied = pickle.loads(pickle.dumps(limiter))
    assert copied.plans == limiter.plans and copied.paths == limiter.paths
    assert copied.available("a", now_ns=0, plan="free") == 1
    assert copied.available("a", now_ns=0, plan="pro") == 20


def test_each_plan_of_a_shared_limiter_is_its_bands_table_under_the_name(tmp_path: Path) -> None:
    """One file per distinct limit, the limit's fingerprint in its name; opening another limit
    under the name removes only tables nobody holds, never a live sibling plan's."""
    limiter = SharedKeyedRateLimiter("site", plans=PLANS, path=tmp_path)
    paths = limiter.paths
    assert paths is not None
    assert paths["free"] == paths["trial"] != paths["pro"]
    assert sorted(os.listdir(tmp_path)) == sorted({p.name for p in paths.values()})
    with pytest.raises(AttributeError, match=r"read \.paths"):
        limiter.path  # noqa: B018
    limiter.try_acquire("a", 3, now_ns=0, plan="free")
    limiter.try_acquire("a", 20, now_ns=0, plan="pro")
    SharedKeyedRateLimiter("site", "9/second", path=tmp_path)  # another limit: sweeps stale files
    assert all(path.exists() for path in paths.values())
    again = SharedKeyedRateLimiter("site", plans=PLANS, path=tmp_path)
    assert again.available("a", now_ns=0, plan="free") == 0
    assert again.available("a", now_ns=0, plan="pro") == 0
    # A limiter without plans, of one plan's bands under the name, shares that plan's table.
    assert SharedKeyedRateLimiter("site", "3/hour", path=tmp_path).available("a", now_ns=0) == 0
    limiter.remove()
    assert not any(path.exists() for path in paths.values())


def test_the_redis_keys_of_a_plan_carry_its_fingerprint(redis_client: Any) -> None:
    limiter = RedisKeyedRateLimiter(redis_client, name="site", plans=PLANS)
    one = RedisKeyedRateLimiter(redis_client, "3/hour", name="site")
    assert limiter.redis_key("a", plan="free") == limiter.redis_key("a", plan="trial")
    assert limiter.redis_key("a", plan="free") == one.redis_key("a")
    assert limiter.redis_key("a", plan="pro") != one.redis_key("a")
    assert LimitOutcome.ALLOWED == limiter.check("a", plan="pro").outcome


def test_a_local_fallback_is_asked_under_the_same_plan() -> None:
    from test_distributed_api import unreachable_client

    local = KeyedRateLimiter(plans=PLANS)
    remote = RedisKeyedRateLimiter(unreachable_client(), name="fb", plans=PLANS, on_error=local)
    assert [remote.try_acquire("a", now_ns=0, plan="free") for _ in range(4)] == [
        True,
        True,
        True,
        False,
    ]
    assert remote.check("a", now_ns=0, plan="pro").remaining == 19
    assert remote.available("a", now_ns=0, plan="trial") == 0  # "free"'s state
    assert remote.try_acquire_many(["b"] * 4, now_ns=0, plan="trial") == [True, True, True, False]
    remote.refund("b", 2, now_ns=0, plan="free")
    assert local.available("b", now_ns=0, plan="free") == 2


def test_the_asyncio_redis_limiter_takes_plans(redis_server: Any) -> None:
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        limiter = AsyncRedisKeyedRateLimiter(
            client, name="aplans", plans=PLANS, prefix=f"a{next(_names)}:"
        )
        assert limiter.plans == {plan: as_bands(value) for plan, value in PLANS.items()}
        assert await limiter.try_acquire_many(["a"] * 4, plan="free") == [True, True, True, False]
        assert not await limiter.try_acquire("a", plan="trial")
        assert (await limiter.check("a", 20, plan="pro")).allowed
        assert await limiter.available("a", plan="pro") == 0
        await limiter.refund("a", 5, plan="pro")
        assert await limiter.acquire("a", 5, plan="pro")
        assert not (await limiter.peek("a", plan="pro")).allowed
        with pytest.raises(TypeError, match="plan= is required"):
            await limiter.check("a")
        await client.aclose()

    asyncio.run(main())


class Client:
    """A key of the program's own: numbered by each plan's registry."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Client) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_object_keys_under_plans_wait_and_pickle() -> None:
    limiter = KeyedRateLimiter(plans=PLANS)
    alice = Client("alice")
    assert limiter.acquire(alice, 3, plan="free")
    assert limiter.acquire(alice, 20, plan="pro")
    assert not limiter.try_acquire(Client("alice"), plan="trial")
    assert limiter.available(Client("alice"), plan="pro") == 0
    copied = pickle.loads(pickle.dumps(limiter))
    assert copied.available(Client("alice"), plan="free") == 0
    assert copied.available(Client("alice"), plan="pro") == 0
    assert [key.name for key in copied] == ["alice"]
    assert Client("alice") in copied and Client("bob") not in copied
