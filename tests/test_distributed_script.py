"""The script declares what it does, on the oldest server the Redis tests run against (issue 22).

``settle.lua`` starts with a ``#!lua`` line and no flags: it writes, it is refused before it runs
on a server out of memory or on a replica, it reads nothing stale, and its keys share one hash
slot (no ``allow-cross-slot-keys``). Servers read that line from Redis 7.0 and Valkey 7.2 on,
which the README names as the oldest supported; the tests run on Debian's redis-server, 7.0.15
here.
"""

from __future__ import annotations

import os
from typing import Any

import qos_support
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, _bands
from protocol_in_code.qos.distributed._server import SOURCE

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")


def test_the_script_declares_itself_a_writing_script() -> None:
    assert SOURCE.splitlines()[0] == "#!lua"


def test_the_server_is_at_least_the_oldest_supported(redis_client: Any) -> None:
    version = redis_client.info("server")["redis_version"]
    assert tuple(int(part) for part in version.split(".")[:2]) >= (7, 0), version


def test_decisions_still_run_under_the_declaration(redis_client: Any) -> None:
    limiter = RedisKeyedRateLimiter(redis_client, 1, name="clients", burst=2, per=3600)
    assert [limiter.try_acquire("k") for _ in range(3)] == [True, True, False]
    assert limiter.try_acquire_many(["a", "b", "k"]) == [True, True, False]


# -- one settlement, two paths ------------------------------------------------------------------
#
# The script settles one band on one key in plain locals (its fast path) and everything else in
# tables (its general path). The general path is the fast path's arithmetic line for line; this
# runs the same random single-band traces through the script as shipped and through a copy whose
# fast path is switched off, and compares every reply, every stored field and every expiry.

FAST_PATH = "if count == 1 and #KEYS == 1 then"


def test_the_fast_path_is_where_the_script_says() -> None:
    assert SOURCE.count(FAST_PATH) == 1


# take, peek, refund, available, reserve and give back (many is several keys)
OPS = st.sampled_from([0, 2, 3, 4, 5, 5, 6])


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# Two waiters queue on an empty key, and the last gives its turn back: the settlement runs back
# to the first one's turn.
@example(
    rate=1,
    per=1,
    burst=2,
    initial=None,
    least_ttl_ms=0,
    steps=[
        (0, 2, 0, False, -1),
        (5, 1, 0, False, -1),
        (5, 1, 0, False, -1),
        (6, 1, 1000, False, 2),
    ],
)
@given(
    rate=st.integers(1, 50),
    per=st.sampled_from([1, 3, 60]),
    burst=st.integers(1, 20),
    initial=st.one_of(st.none(), st.integers(0, 20)),
    least_ttl_ms=st.sampled_from([0, 5000]),
    steps=st.lists(
        st.tuples(
            OPS,
            st.integers(0, 25),
            st.integers(-2_000_000, 5_000_000),
            st.booleans(),
            # A reservation's longest wait (-1: none), or which moment a give-back names: a
            # reservation's (the last one's, or the one before), or another time.
            st.one_of(st.just(-1), st.integers(0, 10_000_000)),
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_the_fast_path_and_the_general_path_settle_alike(
    redis_client: Any,
    rate: int,
    per: int,
    burst: int,
    initial: int | None,
    least_ttl_ms: int,
    steps: list[tuple[int, int, int, bool, int]],
) -> None:
    if initial is not None and initial > burst:
        initial = burst
    general = SOURCE.replace(FAST_PATH, "if false then")
    _, config = _bands.parse(rate, burst, per, None, initial)
    tail = _bands.script_args(initial, least_ttl_ms)
    keys = {"fast": b"qos-test:fast", "general": b"qos-test:general"}
    redis_client.delete(*keys.values())
    now_us = 10**12
    args: list[bytes] = []
    moments = [now_us, now_us]  # the moments reservations were made for
    for op, n, step, resend, extra in steps:
        if not (resend and args):
            # A new call (with a token when it changes a balance), or the last one sent again,
            # as a client's retry sends it.
            if op in (5, 6):
                # Waiters queue and give up within moments of each other, for at most a burst.
                n, step = n % (burst + 2), step % 300_000
            now_us += step
            request = _bands.request(op, min(n, config.largest + 1), now_us) + tail
            if op == 5:
                request += _bands.extra(extra)
            elif op == 6:
                request += _bands.extra(moments[-1 - extra % 2] if extra % 3 else now_us + extra)
            token = [os.urandom(8)] if op in (0, 3, 5, 6) else []
            args = [request, config.encoding, *token]
        # One transaction per step: no other command runs between the two calls, so neither key
        # can expire before both are read back. (The server's clock runs on between the
        # commands of a transaction, each PEXPIRE and PTTL reading it afresh: the two TTLs may
        # differ by as long as the transaction took, a few milliseconds on a loaded machine, and
        # by a millisecond of rounding.)
        step_both = redis_client.pipeline(transaction=True)
        step_both.time()
        step_both.eval(SOURCE, 1, keys["fast"], *args)
        step_both.eval(general, 1, keys["general"], *args)
        for key in keys.values():
            step_both.hgetall(key)
        for key in keys.values():
            step_both.pttl(key)
        step_both.time()
        start, fast, slow, fast_fields, slow_fields, fast_ttl, slow_ttl, end = step_both.execute()
        took_ms = ((end[0] - start[0]) * 10**6 + end[1] - start[1]) // 1000 + 1
        if op == 5 and isinstance(fast, list) and len(fast) == 4:
            moments.append(int(fast[3]))
        assert fast == slow, (op, n, now_us)
        assert fast_fields == slow_fields, (op, n, now_us)
        assert (fast_ttl < 0) == (slow_ttl < 0), (op, n, now_us)
        assert abs(fast_ttl - slow_ttl) <= took_ms + 2, (op, n, now_us, took_ms)
