"""Stacked limits on one Redis server: ``check_together`` decides a request against several
limits at once, taking from all of them or from none, in one script call.

The property tests play random stacks (1 to 4 parts over a one-key limiter, a second limiter of
the same name and bands, a keyed limiter and a keyed limiter with plans, with random ``n`` and
explicit times, the clock sometimes going back) against a pure-Python model: a
``tests/limiter_model.py`` limiter per Redis key, and the stack's rule (the parts naming one key
ask it for the sum of their ``n``; peek every key; if every one is allowed, take on every key).
Every part's Decision and every key's stored state afterwards must be the model's. The other
tests hold the rest of the contract: one script call per stack, the same argument errors as
``check`` before anything is sent, ``on_error`` and server errors with nothing left taken on a
refusal, a call re-sent by the client taking once, a cancelled asyncio caller net zero, threads
never over-admitting, asyncio and valkey-py.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import re
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from limiter_model import ALLOWED, ModelDecision, ModelLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos import Band, KeyedRateLimiter, LimitOutcome, RateLimiter, _give_backs
from protocol_in_code.qos.distributed import (
    UNAVAILABLE_WAIT_NS,
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    LimiterUnavailable,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
    check_together,
    check_together_async,
)
from protocol_in_code.qos.distributed._server import TOKEN_BYTES

#: Every key written is kept this long: explicit times do not run with the server's clock.
KEEP_MS = 600_000
HOUR = 3600
names = itertools.count()


def expected_wait(wait_ns: int | None) -> int | None:
    """The exact wait rounded up to the microsecond, the script's grain."""
    return None if wait_ns is None else -(-wait_ns // 1000) * 1000


def same_decision(got: Any, want: ModelDecision, where: Any = None) -> None:
    assert got.outcome is LimitOutcome(want.outcome), (where, got, want)
    assert got.remaining == want.remaining, (where, got, want)
    assert got.wait_ns == expected_wait(want.wait_ns), (where, got, want)


@dataclass
class Limit:
    """A part's limit as the model sees it: its Redis key, its bands and its initial tokens."""

    name: bytes
    bands: tuple[Band, ...]
    initial: int | None


def limit_of(limiter: Any, key: Any, plan: str | None, initial: int | None = None) -> Limit:
    """A part's limit; ``initial`` is what a one-key limiter was made with."""
    if isinstance(limiter, (RedisKeyedRateLimiter, AsyncRedisKeyedRateLimiter)):
        bands = limiter.bands if plan is None else limiter.plans[plan]
        return Limit(limiter.redis_key(key, plan=plan), bands, None)
    return Limit(limiter.redis_key, limiter.bands, initial)


class StackModel:
    """Every Redis key's model, and the stack's rule."""

    def __init__(self) -> None:
        self.keys: dict[bytes, tuple[Limit, ModelLimiter]] = {}

    def model(self, limit: Limit) -> ModelLimiter:
        if limit.name not in self.keys:
            specs = [(Fraction(band.per_second), band.burst) for band in limit.bands]
            self.keys[limit.name] = (limit, ModelLimiter(specs, initial=limit.initial))
        return self.keys[limit.name][1]

    def decide(self, parts: list[tuple[Limit, int]], now_ns: int) -> list[ModelDecision]:
        totals: dict[bytes, int] = {}
        limits: dict[bytes, Limit] = {}
        for limit, n in parts:
            totals[limit.name] = totals.get(limit.name, 0) + n
            limits.setdefault(limit.name, limit)
        peeks = {name: self.model(limits[name]).peek(n, now_ns) for name, n in totals.items()}
        if all(peek.outcome == ALLOWED for peek in peeks.values()):
            peeks = {name: self.model(limits[name]).check(n, now_ns) for name, n in totals.items()}
        return [peeks[limit.name] for limit, _ in parts]


def redis_tokens(stored: dict[bytes, bytes], bands: tuple[Band, ...], at_us: int) -> list[Fraction]:
    """Each band's tokens in a key's stored hash, settled forward to ``at_us`` (at or after its
    settlement point) as the script settles it: ``p`` units a microsecond, of ``1/(q * 10^6)``
    token each, up to the burst."""
    settled = int(stored[b"t"])
    tokens = []
    for index, band in enumerate(bands, start=1):
        rate = Fraction(band.per_second)
        unit = rate.denominator * 10**6
        capacity = band.burst * unit
        units = min(int(stored[str(index).encode()]), capacity)
        units = min(units + (at_us - settled) * rate.numerator, capacity)
        tokens.append(Fraction(units, unit))
    return tokens


def same_state(stored: dict[bytes, bytes], limit: Limit, model: ModelLimiter, exact: bool) -> None:
    """The key's stored state is the model's: the same settlement point and balances
    (``exact``), or the same balances once both are settled to the later of their two points
    (a key taken and given back on a cluster is stored settled at the give-back)."""
    if model.settled_at is None:
        assert not stored, (limit.name, stored)
        return
    assert stored, limit.name
    settled_us = int(stored[b"t"])
    if exact:
        assert settled_us * 1000 == model.settled_at, limit.name
    at_us = max(settled_us, model.settled_at // 1000)
    twin = model.copy()
    twin._settle(at_us * 1000)
    want = [band.balance for band in twin.bands]
    assert redis_tokens(stored, limit.bands, at_us) == want, limit.name


# -- the property: random stacks against the model -----------------------------------------------

rates = st.one_of(
    st.integers(1, 20),
    st.fractions(min_value=Fraction(1, 20), max_value=20, max_denominator=20),
)
band = st.builds(
    lambda rate, burst, per: Band(rate, burst=burst, per=per),
    rates,
    st.integers(1, 6),
    st.sampled_from([1, 3, 60]),
)
bands = st.lists(band, min_size=1, max_size=2)
configs = st.tuples(bands, bands, bands, bands, st.one_of(st.none(), st.integers(0, 6)))
# Which limiter, which key, which plan, and n.
part = st.tuples(
    st.sampled_from(["one", "same", "keyed", "planned"]),
    st.sampled_from(["a", "b", b"a"]),
    st.sampled_from(["free", "pro"]),
    st.integers(0, 7),
)
# Steps of whole microseconds, mostly forward; each key's clock also sees time go back.
steps = st.one_of(
    st.just(0), st.integers(1, 1000), st.integers(1, 10**7), st.integers(-(10**6), -1)
)
traces = st.lists(st.tuples(st.lists(part, min_size=1, max_size=4), steps), min_size=1, max_size=12)
# Time forward only: a stack decided slot by slot leaves a key taken and given back settled at
# that moment, where the model's peek leaves it where it was, so a later call from an earlier
# time gains less there (nothing for the time in between; never more).
forward_traces = st.lists(
    st.tuples(st.lists(part, min_size=1, max_size=4), steps.map(abs)), min_size=1, max_size=12
)


@dataclass
class Limiters:
    """The limiters a trace stacks: a one-key limiter, a second one of the same name and bands
    (the same Redis key), a keyed limiter, and a keyed limiter with plans."""

    one: Any
    same: Any
    keyed: Any
    planned: Any
    initial: int | None

    def parts(self, chosen: list[tuple[str, Any, str, int]]) -> list[tuple[Any, Any, int, Any]]:
        parts: list[tuple[Any, Any, int, Any]] = []
        for which, key, plan, n in chosen:
            if which in ("one", "same"):
                parts.append((getattr(self, which), None, n, None))
            elif which == "keyed":
                parts.append((self.keyed, key, n, None))
            else:
                parts.append((self.planned, key, n, plan))
        return parts

    def limits(self, parts: list[tuple[Any, Any, int, Any]]) -> list[tuple[Limit, int]]:
        return [(limit_of(lim, key, plan, self.initial), n) for lim, key, n, plan in parts]


def make_limiters(client: Any, config: tuple[Any, ...]) -> Limiters:
    one_bands, keyed_bands, free, pro, initial = config
    if initial is not None:
        initial = min(initial, *(band.burst for band in one_bands))
    prefix = f"t{next(names)}:"
    common: dict[str, Any] = {"min_ttl_ms": KEEP_MS, "prefix": prefix}
    return Limiters(
        RedisRateLimiter(client, bands=one_bands, name="global", initial=initial, **common),
        RedisRateLimiter(client, bands=one_bands, name="global", initial=initial, **common),
        RedisKeyedRateLimiter(client, bands=keyed_bands, name="route", **common),
        RedisKeyedRateLimiter(client, name="client", plans={"free": free, "pro": pro}, **common),
        initial,
    )


def check_step(
    got: list[Any], want: list[ModelDecision], model: StackModel, read: Any, exact: bool
) -> None:
    """Every part's Decision is the model's, and so is every key's state afterwards
    (``read(names)`` reads the keys' hashes)."""
    assert len(got) == len(want)
    for index, (answer, wanted) in enumerate(zip(got, want, strict=True)):
        same_decision(answer, wanted, index)
    known = list(model.keys.values())
    for (limit, limiter), stored in zip(
        known, read([limit.name for limit, _ in known]), strict=True
    ):
        same_state(stored, limit, limiter, exact)


def reader(client: Any) -> Any:
    def read(keys: list[bytes]) -> list[dict[bytes, bytes]]:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(key)
        return list(pipe.execute())

    return read


def play(client: Any, config: tuple[Any, ...], trace: Any, start: int, exact: bool) -> None:
    limiters = make_limiters(client, config)
    model = StackModel()
    now_us = start
    for chosen, step in trace:
        now_us = max(0, now_us + step)
        parts = limiters.parts(chosen)
        want = model.decide(limiters.limits(parts), now_us * 1000)
        got = check_together(parts, now_ns=now_us * 1000)
        check_step(got, want, model, reader(client), exact)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(
    # The same key twice, by two limiters of the same name and bands: the sum is asked of it.
    config=([Band(1, burst=3)], [Band(1, burst=3)], [Band(1, burst=3)], [Band(2, burst=5)], None),
    trace=[([("one", "a", "free", 2), ("same", "a", "free", 1)], 0)] * 2,
    start=10**12,
)
@given(config=configs, trace=traces, start=st.integers(0, 10**12))
def test_a_stack_answers_and_settles_as_the_model(
    shared_redis_client: Any, config: tuple[Any, ...], trace: Any, start: int
) -> None:
    play(shared_redis_client, config, trace, start, exact=True)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=configs, trace=traces, start=st.integers(0, 10**12))
def test_an_asyncio_stack_answers_and_settles_as_the_model(
    redis_server: Any, shared_redis_client: Any, config: tuple[Any, ...], trace: Any, start: int
) -> None:
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        limiters = make_limiters(client, config)
        assert isinstance(limiters.one, AsyncRedisRateLimiter)
        assert isinstance(limiters.keyed, AsyncRedisKeyedRateLimiter)
        model = StackModel()
        now_us = start
        for chosen, step in trace:
            now_us = max(0, now_us + step)
            parts = limiters.parts(chosen)
            want = model.decide(limiters.limits(parts), now_us * 1000)
            got = await check_together_async(parts, now_ns=now_us * 1000)
            check_step(got, want, model, reader(shared_redis_client), exact=True)
        await client.aclose()

    asyncio.run(main())


# -- one script call ----------------------------------------------------------------------------


def script_calls(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


def test_a_stack_on_one_server_is_one_script_call(redis_client: Any) -> None:
    everyone = RedisRateLimiter(redis_client, 1, burst=3, per=HOUR, name="global")
    route = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=HOUR, name="route")
    client = RedisKeyedRateLimiter(redis_client, name="client", plans={"free": "2/hour"})
    stack = [
        (everyone, None, 1, None),
        (route, "/search", 1, None),
        (client, "203.0.113.7", 1, "free"),
        (client, b"203.0.113.7", 0, "free"),  # the same key again
    ]
    everyone.available()  # the script is loaded: what follows is counted alone
    redis_client.config_resetstat()
    answers = [check_together(stack) for _ in range(3)]
    assert [[d.allowed for d in row] for row in answers] == [
        [True] * 4,
        [True] * 4,
        [True, True, False, False],  # as peek answers: nothing taken
    ]
    assert [d.outcome for d in answers[2]] == [
        LimitOutcome.ALLOWED,  # what the global limit alone would answer
        LimitOutcome.ALLOWED,
        LimitOutcome.DENIED,  # the client's plan is spent
        LimitOutcome.DENIED,
    ]
    # NEVER (more than a burst) is one call too.
    never = check_together([(everyone, None, 1, None), (route, "/search", 6, None)])
    assert [d.outcome for d in never] == [LimitOutcome.ALLOWED, LimitOutcome.NEVER]
    assert script_calls(redis_client) == 4  # one per stack, refused or not
    assert (everyone.available(), route.available("/search")) == (1, 3)
    assert client.available("203.0.113.7", plan="free") == 0


def test_an_asyncio_stack_is_one_script_call(redis_server: Any, redis_client: Any) -> None:
    import redis.asyncio

    async def main() -> list[Any]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        everyone = RedisRateLimiter(client, 1, burst=3, per=HOUR, name="global")
        route = RedisKeyedRateLimiter(client, 1, burst=1, per=HOUR, name="route")
        await everyone.available()
        redis_client.config_resetstat()
        stack = [(everyone, None, 1, None), (route, "/", 1, None)]
        answers = [await check_together_async(stack) for _ in range(2)]
        await client.aclose()
        return answers

    first, second = asyncio.run(main())
    assert all(d.allowed for d in first)
    assert [d.outcome for d in second] == [LimitOutcome.ALLOWED, LimitOutcome.DENIED]
    assert second[0].remaining == 2  # nothing taken from the global limit the second time
    assert script_calls(redis_client) == 2


def test_an_empty_stack_asks_nothing(redis_client: Any) -> None:
    redis_client.config_resetstat()
    assert check_together([]) == []
    assert asyncio.run(check_together_async([])) == []
    assert script_calls(redis_client) == 0


# -- the rule, by example --------------------------------------------------------------------------


def test_everything_or_nothing(redis_client: Any) -> None:
    everyone = RedisRateLimiter(redis_client, 1, burst=5, per=HOUR, name="global")
    client = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=HOUR, name="client")
    stack = [(everyone, None, 1, None), (client, "a", 1, None)]
    assert all(d.allowed for d in check_together(stack))
    assert all(d.allowed for d in check_together(stack))
    refused = check_together(stack)
    # The global limit alone would allow it, and is answered so (as peek), but nothing is taken.
    assert refused[0].outcome is LimitOutcome.ALLOWED and refused[0].remaining == 3
    assert refused[1].outcome is LimitOutcome.DENIED and refused[1].remaining == 0
    assert 0 < refused[1].wait_ns <= HOUR * 10**9
    assert everyone.available() == 3
    # Another client is not held back by the first one's limit.
    assert all(
        d.allowed for d in check_together([(everyone, None, 1, None), (client, "b", 1, None)])
    )
    assert everyone.available() == 2


def test_a_key_named_twice_is_asked_the_sum(redis_client: Any) -> None:
    client = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=HOUR, name="client")
    # "a" and b"a" are one Redis key: 2 + 2 is more than its burst, NEVER for both.
    never = check_together([(client, "a", 2, None), (client, b"a", 2, None)])
    assert [(d.outcome, d.remaining) for d in never] == [(LimitOutcome.NEVER, 3)] * 2
    both = check_together([(client, "a", 2, None), (client, b"a", 1, None)])
    assert [(d.outcome, d.remaining) for d in both] == [(LimitOutcome.ALLOWED, 0)] * 2
    assert client.available("a") == 0


def test_each_part_keeps_its_own_identity(redis_client: Any) -> None:
    # A deploy that changes a limit's bands starts its keys afresh, stacked or not: the old and
    # the new configuration are two Redis keys, each settled in its own units.
    old = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=HOUR, name="api")
    new = RedisKeyedRateLimiter(redis_client, 1, burst=4, per=HOUR, name="api")
    login = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=HOUR, name="login")
    assert old.redis_key("k") != new.redis_key("k")
    assert all(d.allowed for d in check_together([(old, "k", 2, None), (login, "k", 1, None)]))
    assert [d.remaining for d in check_together([(new, "k", 3, None), (login, "k", 1, None)])] == [
        1,
        0,
    ]
    assert (old.available("k"), new.available("k"), login.available("k")) == (0, 1, 0)
    # A one-key limiter named as a key is still another limit.
    named_k = RedisRateLimiter(redis_client, 1, burst=1, per=HOUR, name="k")
    assert check_together([(named_k, None, 1, None)])[0].allowed


def test_a_stack_takes_what_check_would_take(redis_client: Any) -> None:
    # Each part's Decision is what its own check would answer, on the server's clock.
    stacked = RedisRateLimiter(redis_client, 2, burst=4, name="stacked")
    alone = RedisRateLimiter(redis_client, 2, burst=4, name="alone")
    for n in (1, 2, 1, 3):
        together = check_together([(stacked, None, n, None)])[0]
        single = alone.check(n)
        assert (together.outcome, together.remaining) == (single.outcome, single.remaining)
        if not single.allowed:
            # The two limits' calls are a round trip apart on the server's clock.
            assert abs(together.wait_ns - single.wait_ns) < 250_000_000


# -- the same errors as check, before anything is sent --------------------------------------------


def error_of(call: Any) -> tuple[type[BaseException], str]:
    with pytest.raises((TypeError, ValueError)) as raised:
        call()
    return type(raised.value), str(raised.value)


@pytest.mark.parametrize("n", [-1, 1.5, "1", None, 2**64, 2**100])
def test_n_is_checked_as_check_checks_it(redis_client: Any, n: Any) -> None:
    everyone = RedisRateLimiter(redis_client, 1, burst=5, per=HOUR, name="global")
    client = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=HOUR, name="client")
    redis_client.config_resetstat()
    first = (client, "a", 1, None)
    assert error_of(lambda: check_together([first, (everyone, None, n, None)])) == error_of(
        lambda: everyone.check(n)
    )
    assert error_of(
        lambda: check_together([(everyone, None, 1, None), (client, "a", n, None)])
    ) == (error_of(lambda: client.check("a", n)))
    assert script_calls(redis_client) == 0
    assert redis_client.dbsize() == 0


def test_the_key_the_plan_and_the_time_are_checked_as_check_checks_them(redis_client: Any) -> None:
    everyone = RedisRateLimiter(redis_client, 1, burst=5, per=HOUR, name="global")
    plain = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=HOUR, name="client")
    planned = RedisKeyedRateLimiter(redis_client, name="p", plans={"free": 1, "pro": 5})
    redis_client.config_resetstat()
    cases = [
        ((plain, None, 1, None), lambda: plain.check(None)),
        ((plain, 7, 1, None), lambda: plain.check(7)),
        ((plain, "a", 1, "pro"), lambda: plain.check("a", plan="pro")),
        ((planned, "a", 1, None), lambda: planned.check("a")),
        ((planned, "a", 1, "gold"), lambda: planned.check("a", plan="gold")),
        ((planned, "a", 1, 3), lambda: planned.check("a", plan=3)),
    ]
    for part, single in cases:
        assert error_of(lambda part=part: check_together([(everyone, None, 1, None), part])) == (
            error_of(single)
        )
    for now_ns in (1, 2**80, 1.0):
        assert error_of(
            lambda now_ns=now_ns: check_together([(everyone, None, 1, None)], now_ns=now_ns)
        ) == (error_of(lambda now_ns=now_ns: everyone.check(1, now_ns=now_ns)))
    assert script_calls(redis_client) == 0


def test_parts_of_another_shape_are_refused(redis_client: Any, redis_server: Any) -> None:
    import redis.asyncio

    everyone = RedisRateLimiter(redis_client, 1, burst=5, per=HOUR, name="global")
    with pytest.raises(TypeError, match=re.escape("parts[0]")):
        check_together([(everyone, None, 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="key and no plan"):
        check_together([(everyone, "a", 1, None)])
    with pytest.raises(TypeError, match="one of RedisRateLimiter, RedisKeyedRateLimiter, not"):
        check_together([(RateLimiter(1), None, 1, None)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="sequence of"):
        check_together("abc")  # type: ignore[arg-type]
    asynchronous = RedisRateLimiter(redis.asyncio.Redis(port=redis_server.port), 1, name="g")
    with pytest.raises(TypeError, match="check_together_async"):
        check_together([(asynchronous, None, 1, None)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="one of AsyncRedisRateLimiter, RedisRateLimiter, Async"):
        asyncio.run(check_together_async([(RateLimiter(1), None, 1, None)]))  # type: ignore[list-item]


def test_the_asyncio_form_takes_synchronous_limiters_too(
    redis_server: Any, redis_client: Any
) -> None:
    import redis.asyncio

    # Their script calls run in a worker thread, as their acquire_async does.
    synchronous = RedisRateLimiter(redis_client, 1, burst=2, per=HOUR, name="sync")

    async def main() -> list[list[Any]]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        awaited = RedisKeyedRateLimiter(client, 1, burst=1, per=HOUR, name="awaited")
        stack = [(synchronous, None, 1, None), (awaited, "k", 1, None)]
        answers = [await check_together_async(stack) for _ in range(2)]
        await client.aclose()
        return answers

    first, second = asyncio.run(main())
    assert all(d.allowed for d in first)
    assert [(d.outcome, d.remaining) for d in second] == [
        (LimitOutcome.ALLOWED, 1),  # given back: the asyncio limiter refused
        (LimitOutcome.DENIED, 0),
    ]
    assert synchronous.available() == 1


# -- when a server cannot decide ------------------------------------------------------------------


def nowhere(**options: Any) -> Any:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(
        port=1, socket_timeout=0.2, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )


def test_a_server_that_cannot_answer_is_each_limiters_on_error(redis_client: Any) -> None:
    here = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=HOUR, name="here")
    deny = RedisRateLimiter(nowhere(), 1, name="gone", on_error="deny")
    allow = RedisRateLimiter(nowhere(), 1, name="gone", on_error="allow")
    fails = RedisRateLimiter(nowhere(), 1, name="gone")
    # Taken here first, refused there: given back.
    answers = check_together([(here, "k", 2, None), (deny, None, 1, None)])
    assert answers[0].outcome is LimitOutcome.ALLOWED and answers[0].remaining == 5
    assert answers[1].outcome is LimitOutcome.DENIED and answers[1].wait_ns == UNAVAILABLE_WAIT_NS
    assert here.available("k") == 5
    # Refused there first: only peeked here.
    answers = check_together([(deny, None, 1, None), (here, "k", 2, None)])
    assert [d.outcome for d in answers] == [LimitOutcome.DENIED, LimitOutcome.ALLOWED]
    assert here.available("k") == 5
    # "allow" admits: taken here.
    answers = check_together([(allow, None, 1, None), (here, "k", 2, None)])
    assert [(d.outcome, d.remaining) for d in answers] == [
        (LimitOutcome.ALLOWED, 0),
        (LimitOutcome.ALLOWED, 3),
    ]
    assert here.available("k") == 3
    # "raise" raises, and what was taken is given back first.
    with pytest.raises(LimiterUnavailable, match="given back") as raised:
        check_together([(here, "k", 2, None), (fails, None, 1, None)])
    assert raised.value.__cause__ is not None
    assert here.available("k") == 3


def test_a_local_fallback_decides_and_is_given_back(redis_client: Any) -> None:
    here = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=HOUR, name="here")
    local = RateLimiter(1, burst=2, per=HOUR)
    gone = RedisRateLimiter(nowhere(), 1, burst=2, per=HOUR, name="gone", on_error=local)
    stack = [(here, "k", 1, None), (gone, None, 1, None)]
    assert all(d.allowed for d in check_together(stack))
    assert all(d.allowed for d in check_together(stack))
    refused = check_together(stack)  # the local limit is spent: nothing taken here
    assert [d.outcome for d in refused] == [LimitOutcome.ALLOWED, LimitOutcome.DENIED]
    assert (here.available("k"), local.available()) == (3, 0)
    # Taken locally, then refused here: the local take is given back.
    keyed_local = KeyedRateLimiter(1, burst=2, per=HOUR)
    gone_keyed = RedisKeyedRateLimiter(
        nowhere(), 1, burst=2, per=HOUR, name="gone", on_error=keyed_local
    )
    spent = RedisRateLimiter(redis_client, 1, burst=1, per=HOUR, name="spent")
    assert spent.try_acquire()
    answers = check_together([(gone_keyed, "c", 1, None), (spent, None, 1, None)])
    assert [d.outcome for d in answers] == [LimitOutcome.ALLOWED, LimitOutcome.DENIED]
    assert answers[0].remaining == 2  # as peek answers, once given back
    assert keyed_local.available("c") == 2


def test_an_error_reply_is_on_error_too(redis_client: Any) -> None:
    deny = RedisKeyedRateLimiter(redis_client, 1, burst=5, per=HOUR, name="deny", on_error="deny")
    allow = RedisKeyedRateLimiter(
        redis_client, 1, burst=5, per=HOUR, name="allow", on_error="allow"
    )
    redis_client.set(deny.redis_key("k"), "another program's string")  # WRONGTYPE for the script
    answers = check_together([(allow, "k", 1, None), (deny, "k", 1, None)])
    assert [d.outcome for d in answers] == [LimitOutcome.ALLOWED, LimitOutcome.DENIED]
    assert not redis_client.exists(allow.redis_key("k"))  # nothing taken anywhere
    with pytest.raises(LimiterUnavailable):
        check_together(
            [(RedisKeyedRateLimiter(redis_client, 1, name="deny", burst=5, per=HOUR), "k", 1, None)]
        )


def test_groups_of_two_clients_are_given_back_when_a_later_one_refuses(
    redis_server: Any, redis_client: Any
) -> None:
    # Two client objects are two groups, even of one server: decided in order, not atomically.
    other = redis_server.client()
    first = RedisRateLimiter(redis_client, 1, burst=5, per=HOUR, name="first")
    second = RedisKeyedRateLimiter(other, 1, burst=1, per=HOUR, name="second")
    third = RedisRateLimiter(redis_server.client(), 1, burst=5, per=HOUR, name="third")
    assert second.try_acquire("k")
    first.available()
    redis_client.config_resetstat()
    answers = check_together(
        [(first, None, 2, None), (second, "k", 1, None), (third, None, 1, None)]
    )
    assert [(d.outcome, d.remaining) for d in answers] == [
        (LimitOutcome.ALLOWED, 5),  # taken, given back, answered as peek
        (LimitOutcome.DENIED, 0),
        (LimitOutcome.ALLOWED, 5),  # only peeked
    ]
    assert (first.available(), third.available()) == (5, 5)
    assert script_calls(redis_client) == 4 + 2  # three stacks and a give-back; two availables
    answers = check_together([(first, None, 2, None), (third, None, 1, None)])
    assert all(d.allowed for d in answers)
    assert (first.available(), third.available()) == (3, 4)


# -- a call sent twice takes once ---------------------------------------------------------------


def retrying_client(server: Any) -> Any:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return server.client(
        socket_timeout=0.1, socket_connect_timeout=1.0, retry=Retry(NoBackoff(), 10)
    )


def test_a_stack_sent_several_times_takes_once(own_redis_server: Any) -> None:
    client = retrying_client(own_redis_server)
    everyone = RedisRateLimiter(client, 1, burst=10, per=HOUR, name="global")
    per_client = RedisKeyedRateLimiter(client, 1, burst=10, per=HOUR, name="client")
    stack = [(everyone, None, 1, None), (per_client, "k", 2, None)]
    assert all(d.allowed for d in check_together(stack))
    answers: list[Any] = []
    own_redis_server.pause()  # the client times out and sends again; every sending runs later
    try:
        worker = threading.Thread(target=lambda: answers.append(check_together(stack)))
        worker.start()
        time.sleep(0.35)
    finally:
        own_redis_server.resume()
    worker.join(10)
    assert all(d.allowed for d in answers[0])
    # Two stacks, two takes each: not one per sending that reached the server.
    assert (everyone.available(), per_client.available("k")) == (8, 6)


def test_a_stack_sent_again_answers_as_it_did_and_takes_nothing(redis_client: Any) -> None:
    from protocol_in_code.qos.distributed import _together

    everyone = RedisRateLimiter(redis_client, 1, burst=2, per=HOUR, name="global")
    per_client = RedisKeyedRateLimiter(redis_client, 1, burst=1, per=HOUR, name="client")
    stack = _together._Stack([(everyone, None, 1, None), (per_client, "k", 1, None)], None, False)
    (group,) = stack.groups
    args = [*group.args(_together.TOGETHER, None), b"x" * TOKEN_BYTES]
    first = group.server.send(group.names, args)
    again = group.server.send(group.names, args)  # the same sending: a client's retry
    assert first == [4 * 1, 4 * 0] and again == first
    assert (everyone.available(), per_client.available("k")) == (1, 0)
    fresh = [*group.args(_together.TOGETHER, None), b"y" * TOKEN_BYTES]
    assert group.server.send(group.names, fresh)[1][0] == 1  # a new call: refused


# -- threads and tasks --------------------------------------------------------------------------

GLOBAL = 60
PER_CLIENT = 10
CLIENTS = 8


def hammer(check: Any, everyone: Any, per_client: Any, seed: int, admitted: dict[str, int]) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        client, n = f"c{rng.randrange(CLIENTS)}", rng.choice([1, 1, 2])
        answers = check([(everyone, None, n, None), (per_client, client, n, None)])
        if all(answer.allowed for answer in answers):
            admitted[client] = admitted.get(client, 0) + n


def test_threads_stacking_never_over_admit_and_lose_nothing(
    redis_server: Any, redis_client: Any
) -> None:
    everyone = RedisRateLimiter(redis_client, 1, burst=GLOBAL, per=HOUR, name="global")
    per_client = RedisKeyedRateLimiter(redis_client, 1, burst=PER_CLIENT, per=HOUR, name="client")
    tallies: list[dict[str, int]] = [{} for _ in range(8)]
    threads = [
        threading.Thread(target=hammer, args=(check_together, everyone, per_client, i, tallies[i]))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    admitted = {f"c{i}": sum(t.get(f"c{i}", 0) for t in tallies) for i in range(CLIENTS)}
    total = sum(admitted.values())
    assert total <= GLOBAL
    assert GLOBAL - everyone.available() == total  # nothing taken that was not admitted
    for client, count in admitted.items():
        assert count <= PER_CLIENT
        assert PER_CLIENT - per_client.available(client) == count


def test_tasks_stacking_never_over_admit_and_lose_nothing(
    redis_server: Any, redis_client: Any
) -> None:
    import redis.asyncio

    async def main() -> tuple[dict[str, int], int, dict[str, int]]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        everyone = RedisRateLimiter(client, 1, burst=GLOBAL, per=HOUR, name="global")
        per_client = RedisKeyedRateLimiter(client, 1, burst=PER_CLIENT, per=HOUR, name="client")
        admitted: dict[str, int] = {}

        async def task(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(40):
                who, n = f"c{rng.randrange(CLIENTS)}", rng.choice([1, 1, 2])
                answers = await check_together_async(
                    [(everyone, None, n, None), (per_client, who, n, None)]
                )
                if all(answer.allowed for answer in answers):
                    admitted[who] = admitted.get(who, 0) + n

        await asyncio.gather(*(task(seed) for seed in range(8)))
        left = await everyone.available()
        each = {f"c{i}": await per_client.available(f"c{i}") for i in range(CLIENTS)}
        await client.aclose()
        return admitted, left, each

    admitted, left, each = asyncio.run(main())
    total = sum(admitted.values())
    assert total <= GLOBAL and GLOBAL - left == total
    for who, left_here in each.items():
        assert PER_CLIENT - left_here == admitted.get(who, 0)


def test_a_cancelled_stack_takes_nothing_it_was_not_told_of(own_redis_server: Any) -> None:
    import redis.asyncio

    burst = 100_000  # one token an hour: no stack is refused, and nothing refills meanwhile

    async def main() -> tuple[int, int, int]:
        first = redis.asyncio.Redis(port=own_redis_server.port)
        second = redis.asyncio.Redis(port=own_redis_server.port)  # another group
        everyone = RedisRateLimiter(first, 1, burst=burst, per=HOUR, name="global")
        per_client = RedisKeyedRateLimiter(first, 1, burst=burst, per=HOUR, name="client")
        elsewhere = RedisRateLimiter(second, 1, burst=burst, per=HOUR, name="elsewhere")
        stack = [(everyone, None, 1, None), (per_client, "k", 1, None), (elsewhere, None, 1, None)]
        rng = random.Random(11)
        told = 0

        async def one() -> None:
            nonlocal told
            try:
                answers = await asyncio.wait_for(check_together_async(stack), rng.uniform(0, 0.004))
            except asyncio.TimeoutError:
                return
            told += all(answer.allowed for answer in answers)

        await check_together_async(stack)
        told += 1
        for _ in range(30):
            await asyncio.gather(*(one() for _ in range(10)))

        async def held() -> tuple[int, int, int]:
            return (
                burst - await everyone.available(),
                burst - await per_client.available("k"),
                burst - await elsewhere.available(),
            )

        # Every cancelled call's give-back runs on its own (``_give_backs``): the count is
        # final once none is left, not at the first moment it looks right (a cancelled take
        # may land after that moment, and its give-back after it).
        deadline = time.monotonic() + 10
        while (_give_backs._running or await held() != (told, told, told)) and (
            time.monotonic() < deadline
        ):
            await asyncio.sleep(0.01)
        result = await held()
        await first.aclose()
        await second.aclose()
        assert result == (told, told, told), (result, told)
        return result

    asyncio.run(main())


# -- valkey-py ------------------------------------------------------------------------------------


def test_valkey_py_stacks_as_redis_py(redis_server: Any) -> None:
    valkey = pytest.importorskip("valkey", reason="pip install valkey to test valkey-py's client")
    client = valkey.Valkey(host="127.0.0.1", port=redis_server.port)
    client.flushall()
    everyone = RedisRateLimiter(client, 1, burst=2, per=HOUR, name="global")
    per_client = RedisKeyedRateLimiter(client, 1, burst=1, per=HOUR, name="client")
    stack = [(everyone, None, 1, None), (per_client, "k", 1, None)]
    assert all(d.allowed for d in check_together(stack))
    assert [d.outcome for d in check_together(stack)] == [LimitOutcome.ALLOWED, LimitOutcome.DENIED]
    client.script_flush()  # invisible: the script is sent again
    assert all(
        d.allowed for d in check_together([(everyone, None, 1, None), (per_client, "j", 1, None)])
    )
    assert everyone.available() == 0
