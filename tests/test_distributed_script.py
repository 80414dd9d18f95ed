"""The script declares what it does, on the oldest server the Redis tests run against (issue 22).

``settle.lua`` starts with a ``#!lua`` line and no flags: it writes, it is refused before it runs
on a server out of memory or on a replica, it reads nothing stale, and its keys share one hash
slot (no ``allow-cross-slot-keys``). Servers read that line from Redis 7.0 and Valkey 7.2 on,
which the README names as the oldest supported; the tests run on Debian's redis-server, 7.0.15
here.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import pytest
import qos_support
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, _bands, _keys
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
# Every op that one key can run is in the traces, "together" (a stack of one key) and "peek
# together" included; a stack of several keys, which only the general path runs, is compared
# below with its keys alone on the fast path.

FAST_PATH = "if count == 1 and #KEYS == 1 then"


def test_the_fast_path_is_where_the_script_says() -> None:
    assert SOURCE.count(FAST_PATH) == 1


# take, peek, refund, available, reserve, give back, together, peek together and take with
# levels (many is several keys)
OPS = st.sampled_from([0, 2, 3, 4, 5, 5, 6, 7, 8, 9])
TOGETHER, PEEK_TOGETHER, TAKE_WITH_LEVELS = 7, 8, 9


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
    records: dict[str, bytes] = {}
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
            # Each path's own record of the call (read only by the ops that change a balance).
            token = os.urandom(8)
            records = {path: _keys.record(key, token) for path, key in keys.items()}
            args = [request, config.encoding]
        # One transaction per step: no other command runs between the two calls, so neither key
        # can expire before both are read back. (The server's clock runs on between the
        # commands of a transaction, each PEXPIRE and PTTL reading it afresh: the two TTLs may
        # differ by as long as the transaction took, a few milliseconds on a loaded machine, and
        # by a millisecond of rounding.)
        step_both = redis_client.pipeline(transaction=True)
        step_both.time()
        step_both.eval(SOURCE, 1, keys["fast"], *args, records["fast"])
        step_both.eval(general, 1, keys["general"], *args, records["general"])
        for key in keys.values():
            step_both.hgetall(key)
        for key in keys.values():
            step_both.pttl(key)
        step_both.exists(records["fast"])
        step_both.exists(records["general"])
        step_both.time()
        start, fast, slow, fast_fields, slow_fields, fast_ttl, slow_ttl, *recorded, end = (
            step_both.execute()
        )
        took_ms = ((end[0] - start[0]) * 10**6 + end[1] - start[1]) // 1000 + 1
        if op == 5 and isinstance(fast, list) and len(fast) == 4:
            moments.append(int(fast[3]))
        assert fast == slow, (op, n, now_us)
        assert fast_fields == slow_fields, (op, n, now_us)
        assert recorded[0] == recorded[1], (op, n, now_us)  # the call recorded on both, or neither
        assert (fast_ttl < 0) == (slow_ttl < 0), (op, n, now_us)
        assert abs(fast_ttl - slow_ttl) <= took_ms + 2, (op, n, now_us, took_ms)


# -- a stack of several keys: the general path against each key alone on the fast path ---------
#
# "Together" on several keys runs through the general path only: two passes over the keys, the
# first deciding each as a peek, the second taking on all of them or reading all as peeks. Each
# key here has one band of its own (its own rate, burst, initial tokens and least TTL), so each
# key alone runs through the fast path, where the stack is played by its definition: peek every
# key; if every one is allowed, take on every key (each take with a record named after the
# stack's token, so that it is one call sent again when the stack is). The replies, the stored
# fields and the expiries must be the same. A call sent again is played as a client's retry: the
# stack sent again, and, on the fast path, the takes sent again if it took, else the definition
# again.


def alone(
    key: tuple[bytes, bytes, Any, bytes], op: int, n: int, at: int, token: bytes
) -> list[Any]:
    """The arguments of ``EVAL`` for ``op`` (a peek, or a take with a record named after the
    stack's token) on one key alone, on the fast path."""
    _, name, config, tail = key
    args = [_bands.request(op, n, at) + tail, config.encoding]
    return [1, name, *args, _keys.record(name, token)] if op == 0 else [1, name, *args]


key_config = st.tuples(
    st.integers(1, 50),  # rate
    st.sampled_from([1, 3, 60]),  # per
    st.integers(1, 20),  # burst
    st.one_of(st.none(), st.integers(0, 20)),  # initial
    # At least 5 s, so that no key expires between the two transactions of a step.
    st.sampled_from([5000, 60000]),
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
# A stack that took everything sent again (a client's retry): it answers ALLOWED on every key, as
# it did, though the keys now hold too little to allow it again.
@example(
    configs=[(1, 60, 1, None, 5000), (1, 60, 2, None, 5000)],
    steps=[([1, 2, 0], 0, False, 1), ([1, 2, 0], 0, True, 1)],
)
@given(
    configs=st.lists(key_config, min_size=1, max_size=3),
    steps=st.lists(
        st.tuples(
            st.lists(st.integers(0, 25), min_size=3, max_size=3),  # each key's n
            st.integers(-2_000_000, 5_000_000),
            st.booleans(),  # sent again
            st.integers(0, 4),  # 0: peek together, else together
        ),
        min_size=1,
        max_size=20,
    ),
)
def test_a_stack_settles_as_its_keys_alone_on_the_fast_path(
    redis_client: Any,
    configs: list[tuple[int, int, int, int | None, int]],
    steps: list[tuple[list[int], int, bool, int]],
) -> None:
    keys = []
    for i, (rate, per, burst, initial, least_ttl_ms) in enumerate(configs):
        initial = None if initial is None else min(initial, burst)
        _, config = _bands.parse(rate, burst, per, None, initial)
        tail = _bands.script_args(initial, least_ttl_ms)
        keys.append((b"qos-test:stack:%d" % i, b"qos-test:alone:%d" % i, config, tail))
    redis_client.delete(*(name for key in keys for name in key[:2]))
    now_us = 10**12
    stack: list[bytes] = []
    sent: tuple[int, list[int], int, bytes] | None = None
    took = False
    # How far apart (ms) the stacked and the single keys were last written: the bound on their
    # TTLs' difference, which is set when they are written, whenever they are read.
    written_apart_ms = 0
    for ns, step, resend, which in steps:
        if not (resend and sent):
            now_us += step
            op = TOGETHER if which else PEEK_TOGETHER
            sent = (op, ns, now_us, os.urandom(8))
            took = False
        op, ns, at, token = sent
        n = [min(ns[i], config.largest + 1) for i, (_, _, config, _) in enumerate(keys)]
        request = _bands.request(op, n[0], at) + keys[0][3]
        request += b"".join(struct.pack(">d", n[i]) + keys[i][3] for i in range(1, len(keys)))
        record = _keys.record(keys[0][0], token)
        stack = [request, *(config.encoding for _, _, config, _ in keys), record]

        first = redis_client.pipeline(transaction=True)
        first.time()
        first.eval(SOURCE, len(keys), *(key[0] for key in keys), *stack)
        if not took:
            for i in range(len(keys)):
                first.eval(SOURCE, *alone(keys[i], 2, n[i], at, token))
        start, together, *peeks = first.execute()
        replayed = took
        if took:
            takes = True
        else:
            takes = op == TOGETHER and all(type(peek) is int and peek & 3 == 0 for peek in peeks)
        second = redis_client.pipeline(transaction=True)
        if takes:
            for i in range(len(keys)):
                second.eval(SOURCE, *alone(keys[i], 0, n[i], at, token))
        for key in keys:
            second.hgetall(key[0])
            second.hgetall(key[1])
        for key in keys:
            second.pttl(key[0])
            second.pttl(key[1])
        second.time()
        *replies, end = second.execute()
        took = took or takes
        took_ms = ((end[0] - start[0]) * 10**6 + end[1] - start[1]) // 1000 + 1
        if takes and not replayed:  # a call sent again writes nothing
            written_apart_ms = took_ms
        answers = replies[: len(keys)] if takes else peeks
        rest = replies[len(keys) :] if takes else replies
        fields, ttls = rest[: 2 * len(keys)], rest[2 * len(keys) :]
        where = (op, ns, at, replayed)
        assert together == answers, where
        assert fields[0::2] == fields[1::2], where
        for stacked, single in zip(ttls[0::2], ttls[1::2], strict=True):
            assert (stacked < 0) == (single < 0), where
            # The two keys were last written up to written_apart_ms apart (in the step that
            # took), each expiry rounded up to the millisecond on its own clock reading, and
            # each PTTL read truncated: a few ms.
            assert abs(stacked - single) <= written_apart_ms + 3, (where, written_apart_ms)


def test_the_script_refuses_a_stack_naming_a_key_twice(redis_client: Any) -> None:
    import redis

    _, config = _bands.parse(1, 5, 1, None, None)
    tail = _bands.script_args(None, 0)
    request = _bands.request(TOGETHER, 1, 10**12) + tail + struct.pack(">d", 1) + tail
    with pytest.raises(redis.ResponseError, match="names a key twice"):
        redis_client.eval(SOURCE, 2, b"k", b"k", request, config.encoding, config.encoding)
    # Three keys, and the arguments of two: refused before anything is read or written.
    with pytest.raises(redis.ResponseError, match="do not match its keys"):
        redis_client.eval(SOURCE, 3, b"a", b"b", b"c", request, config.encoding, config.encoding)
    assert redis_client.exists(b"k", b"a", b"b", b"c") == 0
