"""The script declares what it does, on the oldest server the Redis tests run against (issue 22).

``settle.lua`` starts with a ``#!lua`` line and no flags: it writes, it is refused before it runs
on a server out of memory or on a replica, it reads nothing stale, and its keys share one hash
slot (no ``allow-cross-slot-keys``). Servers read that line from Redis 7.0 and Valkey 7.2 on,
which the README names as the oldest supported; the tests run on Debian's redis-server, 7.0.15
here.
"""

from __future__ import annotations

from typing import Any

import qos_support
from protocol_in_code.qos.distributed import RedisKeyedRateLimiter
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
