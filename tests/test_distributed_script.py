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


# -- one settlement path, its numbers named once -------------------------------------------------
#
# The script settles every op, one band or several, one key or many, in one path. The numbers of
# its encoding are named once, at its top, and agree with the client's definitions in _bands.py.
# What it settles is checked against the Rust core's cases in test_settle_vectors.py.

TOGETHER, PEEK_TOGETHER = 7, 8


def script_constant(name: str) -> int:
    """The value the script gives ``name`` (``local NAME = 123``), which it must give once."""
    lines = [line for line in SOURCE.splitlines() if line.startswith(f"local {name} = ")]
    assert len(lines) == 1, (name, lines)
    return int(lines[0].split("=")[1])


def test_the_encoding_is_named_once_and_agrees_with_the_client() -> None:
    assert script_constant("MICROS_PER_SECOND") == _bands.MICROS_PER_SECOND
    assert script_constant("LAST") == _bands.TIME_BOUND_US
    for number in (_bands.MICROS_PER_SECOND, _bands.TIME_BOUND_US, 60_000):
        assert SOURCE.count(str(number)) == 1, number
    # A unit's scale appears only by name in the arithmetic.
    assert SOURCE.count("MICROS_PER_SECOND") >= 2


def test_the_accrual_is_written_once() -> None:
    """Every settlement forward (the elapsed time, a reservation's wait, a give-back's bands
    brought to one point) goes through one accrual."""
    assert SOURCE.count("* rate[i], capacity[i])") == 1
    assert "local function accrue(" in SOURCE


# -- a stack of several keys against each key alone ----------------------------------------------
#
# "Together" on several keys is two passes over the keys, the first deciding each as a peek, the
# second taking on all of them or reading all as peeks. Each key here has one band of its own
# (its own rate, burst, initial tokens and least TTL), and each key alone plays the stack by its
# definition: peek every key; if every one is allowed, take on every key (each take with a record
# named after the stack's token, so that it is one call sent again when the stack is). The
# replies, the stored fields and the expiries must be the same. A call sent again is played as a
# client's retry: the stack sent again, and, alone, the takes sent again if it took, else the
# definition again.


def alone(
    key: tuple[bytes, bytes, Any, bytes], op: int, n: int, at: int, token: bytes
) -> list[Any]:
    """The arguments of ``EVAL`` for ``op`` (a peek, or a take with a record named after the
    stack's token) on one key alone."""
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
def test_a_stack_settles_as_its_keys_alone(
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
    # How far apart (ms) the stacked and the single keys may have been last written: the bound on
    # their TTLs' difference, which is set when they are written, whenever they are read. A step
    # writes in both its transactions (a new key's anchor in the first, a take, or a take sent
    # again, in the second), so the bound is the longest step so far, however loaded the machine.
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
        written_apart_ms = max(written_apart_ms, took_ms)
        answers = replies[: len(keys)] if takes else peeks
        rest = replies[len(keys) :] if takes else replies
        fields, ttls = rest[: 2 * len(keys)], rest[2 * len(keys) :]
        where = (op, ns, at, replayed)
        assert together == answers, where
        assert fields[0::2] == fields[1::2], where
        for stacked, single in zip(ttls[0::2], ttls[1::2], strict=True):
            assert (stacked < 0) == (single < 0), where
            # The two keys were last written up to written_apart_ms apart, each expiry rounded
            # up to the millisecond on its own clock reading, and each PTTL read truncated: a
            # few ms more.
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
