"""The Redis limiters through valkey-py, Valkey's client, which speaks the same protocol with
the same API: decisions, batches, a script reloaded after SCRIPT FLUSH, and on_error when the
server is gone. (The server is redis-server: the protocol is the same.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis_servers
from protocol_in_code.qos import KeyedRateLimiter, LimitOutcome, RateLimiter
from protocol_in_code.qos.distributed import (
    LimiterUnavailable,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)

valkey = pytest.importorskip("valkey", reason="pip install valkey to test valkey-py's client")


def test_valkey_py_decides_as_in_process(redis_server: Any) -> None:
    client = valkey.Valkey(host=redis_servers.HOST, port=redis_server.port)
    client.flushall()
    remote = RedisRateLimiter(client, 10, name="v", burst=3)
    local = RateLimiter(10, burst=3)
    for now_ns in (0, 0, 0, 0, 50_000_000, 100_000_000, 10**9):
        assert remote.check(now_ns=now_ns) == local.check(now_ns=now_ns)
    keyed = RedisKeyedRateLimiter(client, 5, name="clients", burst=2)
    in_process = KeyedRateLimiter(5, burst=2)
    keys = ["a", "a", "a", "b", b"c"]
    assert keyed.try_acquire_many(keys, now_ns=0) == [
        in_process.try_acquire(key, now_ns=0) for key in keys
    ]
    client.script_flush()  # invisible: the script is sent again
    assert remote.try_acquire(now_ns=2 * 10**9)


def test_valkey_py_on_an_unreachable_server(tmp_path: Path) -> None:
    server = redis_servers.Server(tmp_path / "valkey").start()
    client = valkey.Valkey(
        host=redis_servers.HOST, port=server.port, socket_timeout=0.2, socket_connect_timeout=0.2
    )
    deny = RedisRateLimiter(client, 10, name="v", on_error="deny")
    fails = RedisRateLimiter(client, 10, name="v")
    assert deny.try_acquire()
    server.stop()
    assert deny.check().outcome is LimitOutcome.DENIED
    with pytest.raises(LimiterUnavailable):
        fails.try_acquire()
