"""Every failure the server answers with reaches ``on_error`` (issue 22, item 2).

A server can be reachable and still unable to decide: out of memory (OOM), busy running a
script (BUSY), a replica (READONLY), short of replicas (NOREPLICAS), loading its data
(LOADING), or the script fails on a key another program wrote (WRONGTYPE). Each used to reach
the caller as a raw redis-py exception under every ``on_error`` setting; each is now what an
unreachable server is: ``LimiterUnavailable`` under ``"raise"``, the answer of ``"allow"``,
``"deny"``, or of the local limiter given as the fallback. Each fault is made on a real
redis-server of the test's own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support
from protocol_in_code._native import _canonical
from protocol_in_code.qos import KeyedRateLimiter
from protocol_in_code.qos.distributed import LimiterUnavailable, RedisKeyedRateLimiter

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")


def out_of_memory(client: Any) -> Iterator[None]:
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")
    yield
    client.config_set("maxmemory", "0")


def busy(client: Any) -> Iterator[None]:
    client.config_set("busy-reply-threshold", "10")
    runner = client.connection_pool.make_connection()
    runner.send_command("EVAL", "while true do end", "0")
    time.sleep(0.1)  # past the threshold: everyone else is answered BUSY
    yield
    client.script_kill()
    try:
        runner.read_response()
    except Exception:  # the script was killed: its caller is told so
        pass
    runner.disconnect()


def replica(client: Any) -> Iterator[None]:
    client.execute_command("REPLICAOF", "127.0.0.1", "1")  # a master that is not there
    yield
    client.execute_command("REPLICAOF", "NO", "ONE")


def no_replicas(client: Any) -> Iterator[None]:
    client.config_set("min-replicas-to-write", "1")
    yield
    client.config_set("min-replicas-to-write", "0")


def wrong_type(client: Any) -> Iterator[None]:
    client.set(LIMITER_KEY, "another program's value")
    yield


#: The key the limiter below keeps "k" in: the key as its hash tag, then its configuration's
#: fingerprint and its name.
LIMITER_KEY = f"qos:{{k}}:{_canonical([(5, 5)])[1]:016x}:clients"
FAULTS: dict[str, Callable[[Any], Iterator[None]]] = {
    "OOM": out_of_memory,
    "BUSY": busy,
    "READONLY": replica,
    "NOREPLICAS": no_replicas,
    "WRONGTYPE": wrong_type,
}
#: How each fault is named in the LimiterUnavailable message (the client's error class, or the
#: server's own code when the client keeps it in the text).
NAMED = {
    "OOM": "OutOfMemoryError",
    "BUSY": "BUSY",
    "READONLY": "ReadOnlyError",
    "NOREPLICAS": "NOREPLICAS",
    "WRONGTYPE": "WRONGTYPE",
}
POLICIES: dict[str, Any] = {
    "raise": LimiterUnavailable,
    "allow": True,
    "deny": False,
    "local": "local",
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("fault", FAULTS)
def test_a_server_that_cannot_decide_is_answered_by_on_error(
    own_redis_server: Any, fault: str, policy: str
) -> None:
    client = own_redis_server.client()
    local = KeyedRateLimiter(1, burst=1)
    on_error = local if policy == "local" else policy
    limiter = RedisKeyedRateLimiter(client, 5, name="clients", on_error=on_error)
    assert limiter.redis_key("k") == LIMITER_KEY.encode()
    making = FAULTS[fault](client)
    next(making)
    try:
        if policy == "raise":
            with pytest.raises(LimiterUnavailable) as raised:
                limiter.try_acquire("k")
            assert NAMED[fault] in str(raised.value)
        elif policy == "local":
            assert [limiter.try_acquire("k") for _ in range(2)] == [True, False]
        else:
            assert limiter.try_acquire("k") is POLICIES[policy]
            assert limiter.check("k").allowed is POLICIES[policy]
    finally:
        for _ in making:
            pass
    if fault != "WRONGTYPE":
        assert limiter.try_acquire("k") is True, "decided by the server again"


@pytest.mark.parametrize(
    "name", ["ClusterDownError", "MasterDownError", "BusyLoadingError", "TryAgainError"]
)
def test_the_cluster_and_loading_errors_reach_on_error_too(name: str) -> None:
    import redis
    import redis.exceptions

    error = getattr(redis.exceptions, name)(f"{name} from the server")

    def failing(*args: Any) -> Any:
        raise error

    client = redis.Redis(port=1)  # never connected: its calls raise the error above
    client.evalsha = client.eval = failing  # type: ignore[method-assign]
    assert (
        RedisKeyedRateLimiter(client, 5, name="clients", on_error="deny").try_acquire("k") is False
    )
    with pytest.raises(LimiterUnavailable, match=name):
        RedisKeyedRateLimiter(client, 5, name="clients").try_acquire("k")


def test_a_busy_server_is_answered_without_waiting_for_the_script(own_redis_server: Any) -> None:
    """BUSY comes back at once: the call does not wait for the long script to end."""
    client = own_redis_server.client()
    limiter = RedisKeyedRateLimiter(client, 5, name="clients", on_error="deny")
    making = busy(client)
    next(making)
    answers: list[bool] = []
    caller = threading.Thread(target=lambda: answers.append(limiter.try_acquire("k")))
    caller.start()
    caller.join(10)
    for _ in making:
        pass
    assert answers == [False]
