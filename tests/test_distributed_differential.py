"""The Redis limiters against the in-process ones: random traces, identical answers and balances.

Times are explicit and whole microseconds. The script settles in microseconds, so a DENIED
``wait_ns`` is the in-process wait rounded up to the microsecond; everything else (outcome,
``remaining``, ``available``, and each band's balance: the server's units times 1000 are the
in-process nanosecond units) is identical. ``min_ttl_ms`` keeps every key for the length of a
test, since the explicit times do not run with the server's real clock.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from hypothesis import given
from hypothesis import strategies as st
from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import Band, RateLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

KEEP_MS = 600_000
_names = itertools.count()

rates = st.one_of(
    st.integers(1, 50),
    st.fractions(min_value=Fraction(1, 40), max_value=50, max_denominator=40),
    st.sampled_from(["0.1", "2.5", "1e-2", "7"]),
)
band = st.builds(
    lambda rate, burst, per: Band(rate, burst=burst, per=per),
    rates,
    st.integers(1, 20),
    st.sampled_from([1, 2, 3, 60]),
)
bands = st.lists(band, min_size=1, max_size=3)
ops = st.sampled_from(["try_acquire", "check", "check", "peek", "refund", "available"])
# Steps of whole microseconds, mostly forward; the single limiter also sees the clock go back.
steps = st.one_of(
    st.just(0), st.integers(1, 1000), st.integers(1, 10**7), st.integers(-(10**6), -1)
)


def expected_wait(wait_ns: int | None) -> int | None:
    """The in-process wait rounded up to the microsecond."""
    return None if wait_ns is None else -(-wait_ns // 1000) * 1000


def same_decision(remote: Any, local: Any) -> None:
    assert remote.outcome == local.outcome
    assert remote.remaining == local.remaining
    assert remote.wait_ns == expected_wait(local.wait_ns)


def same_balances(client: Any, redis_key: bytes, local: RateLimiter) -> None:
    """Each band's balance: stored units * 1000 == in-process units (a missing key is full)."""
    stored = client.hgetall(redis_key)
    balances = local.__reduce__()[2][0]
    pairs = ((band.per_second, band.burst) for band in local.bands)
    for index, ((units, _settled), (_rate, burst)) in enumerate(
        zip(balances, pairs, strict=True), start=1
    ):
        if stored:
            assert int(stored[str(index).encode()]) * 1000 == units
        else:
            rate = Fraction(_rate)
            assert units == burst * rate.denominator * 10**9


def apply(limiter: Any, op: str, *args: Any, n: int, now_ns: int) -> Any:
    """One call; ``try_acquire`` of more than a burst raises ValueError, compared as its
    message."""
    method = getattr(limiter, op)
    if op == "available":
        return method(*args, now_ns=now_ns)
    try:
        return method(*args, n, now_ns=now_ns)
    except ValueError as error:
        if op != "try_acquire":
            raise
        return ("ValueError", str(error))


@given(
    bands=bands,
    trace=st.lists(st.tuples(ops, st.integers(0, 25), steps), min_size=1, max_size=30),
    start=st.integers(0, 10**12),
)
def test_a_redis_limiter_answers_as_the_in_process_one(
    shared_redis_client: Any, bands: list[Band], trace: list[tuple[str, int, int]], start: int
) -> None:
    local = RateLimiter(bands=bands)
    remote = RedisRateLimiter(
        shared_redis_client, name=f"d{next(_names)}", bands=bands, min_ttl_ms=KEEP_MS
    )
    now_us = start
    for op, n, step in trace:
        now_us = max(0, now_us + step)
        now_ns = now_us * 1000
        got = apply(remote, op, n=n, now_ns=now_ns)
        want = apply(local, op, n=n, now_ns=now_ns)
        if op in ("check", "peek"):
            same_decision(got, want)
        else:
            assert got == want, (op, n, now_ns)
        same_balances(shared_redis_client, remote.redis_key, local)


@given(
    bands=bands,
    trace=st.lists(
        st.tuples(ops, st.sampled_from(["a", "b", b"c"]), st.integers(0, 25), steps),
        min_size=1,
        max_size=40,
    ),
)
def test_a_redis_keyed_limiter_answers_as_the_in_process_one(
    shared_redis_client: Any, bands: list[Band], trace: list[tuple[str, Any, int, int]]
) -> None:
    # The in-process table decides a call from the past at its own latest time, a Redis key at
    # the call's time, so the keyed traces keep time moving forward.
    local = KeyedRateLimiter(bands=bands)
    prefix = f"k{next(_names)}:"
    remote = RedisKeyedRateLimiter(
        shared_redis_client, name="clients", bands=bands, min_ttl_ms=KEEP_MS, prefix=prefix
    )
    now_us = 10**9
    for op, key, n, step in trace:
        now_us += abs(step)
        now_ns = now_us * 1000
        got = apply(remote, op, key, n=n, now_ns=now_ns)
        want = apply(local, op, key, n=n, now_ns=now_ns)
        if op in ("check", "peek"):
            same_decision(got, want)
        else:
            assert got == want, (op, key, n, now_ns)
    for key in ("a", "b", b"c"):
        assert remote.available(key, now_ns=now_ns) == local.available(key, now_ns=now_ns)


@given(
    bands=bands,
    keys=st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=30),
    n=st.integers(0, 4),
)
def test_try_acquire_many_answers_as_one_call_per_key(
    shared_redis_client: Any, bands: list[Band], keys: list[str], n: int
) -> None:
    now_ns = 5 * 10**15
    prefix = f"m{next(_names)}:"
    batch = RedisKeyedRateLimiter(
        shared_redis_client, name="clients", bands=bands, min_ttl_ms=KEEP_MS, prefix=prefix
    )
    prefix = f"m{next(_names)}:"
    single = RedisKeyedRateLimiter(
        shared_redis_client, name="clients", bands=bands, min_ttl_ms=KEEP_MS, prefix=prefix
    )
    try:
        want: Any = [single.try_acquire(key, n, now_ns=now_ns) for key in keys]
    except ValueError as error:  # more than a burst: the first call raises
        want = ("ValueError", str(error))
    try:
        got: Any = batch.try_acquire_many(keys, n, now_ns=now_ns)
    except ValueError as error:
        got = ("ValueError", str(error))
    assert got == want


@pytest.mark.parametrize("initial", [0, 3])
def test_initial_is_what_a_new_key_holds(shared_redis_client: Any, initial: int) -> None:
    local = RateLimiter(2, burst=5, initial=initial)
    remote = RedisRateLimiter(
        shared_redis_client, 2, name=f"init{initial}", burst=5, initial=initial, min_ttl_ms=KEEP_MS
    )
    for now_ns in (10**12, 10**12, 10**12 + 700_000_000, 10**12 + 10**10):
        same_decision(remote.peek(1, now_ns=now_ns), local.peek(1, now_ns=now_ns))
        same_decision(remote.check(1, now_ns=now_ns), local.check(1, now_ns=now_ns))
