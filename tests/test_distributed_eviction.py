"""A server that may evict the limiters' keys is named once, in a RuntimeWarning.

Every key a limiter writes has a time to live, so under any ``maxmemory-policy`` but
``noeviction`` (``allkeys-*`` and ``volatile-*`` alike) a server at its ``maxmemory`` may delete
it, and a throttled client whose key is deleted starts again with a full burst. The limiters
ask the server (``CONFIG GET maxmemory maxmemory-policy``) once per client object, after the
first call it answered, and say so once. Each server here is started by its test with the
settings under test. The memory limit is 2 MB: an empty redis-server already holds about 0.9 MB,
and with the script cached and a client's buffers it passes 1 MB, where every script call is
refused ``OOM`` (so no call would ever be answered).
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis_servers
from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter

#: How the warning starts (also how the docs tell readers to filter it).
WARNING = "the Redis server may evict the rate limiters' keys"

LIMIT = "2mb"
LIMIT_BYTES = "2097152"


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., redis_servers.Server]]:
    """Start a redis-server of the test's own with these extra arguments; stopped after."""
    redis_servers.require_redis()
    started: list[redis_servers.Server] = []

    def server(*options: str) -> redis_servers.Server:
        started.append(
            redis_servers.Server(tmp_path / f"redis{len(started)}", options=options).start()
        )
        return started[-1]

    yield server
    for each in started:
        each.stop()


def evicting(start: Callable[..., redis_servers.Server], policy: str) -> redis_servers.Server:
    return start("--maxmemory", LIMIT, "--maxmemory-policy", policy)


@contextlib.contextmanager
def warned() -> Iterator[list[str]]:
    """The eviction warnings given inside, every one of them (none hidden as a repeat)."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    found.extend(
        str(each.message)
        for each in caught
        if issubclass(each.category, RuntimeWarning) and str(each.message).startswith(WARNING)
    )


def config_gets(server: redis_servers.Server) -> tuple[int, int]:
    """``CONFIG GET``s the server ran and refused (an ACL's NOPERM), from ``INFO
    commandstats``."""
    for line in server.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_config|get:"):
            fields = dict(part.split("=") for part in line.split(":", 1)[1].split(","))
            return int(fields["calls"]), int(fields["rejected_calls"])
    return 0, 0


def client_of(package: str, server: redis_servers.Server, **options: Any) -> Any:
    if package == "valkey":
        valkey = pytest.importorskip("valkey", reason="pip install valkey to test valkey-py")
        return valkey.Valkey(host=redis_servers.HOST, port=server.port, **options)
    return server.client(**options)


def async_client_of(package: str, server: redis_servers.Server, **options: Any) -> Any:
    if package == "valkey":
        pytest.importorskip("valkey", reason="pip install valkey to test valkey-py")
        import valkey.asyncio

        return valkey.asyncio.Valkey(host=redis_servers.HOST, port=server.port, **options)
    import redis.asyncio

    return redis.asyncio.Redis(host=redis_servers.HOST, port=server.port, **options)


@pytest.mark.parametrize(
    ("package", "policy"),
    [
        ("redis", "allkeys-lru"),
        ("redis", "volatile-lru"),
        ("redis", "volatile-ttl"),
        ("valkey", "allkeys-lru"),
    ],
)
def test_an_evicting_policy_is_named_once_per_client(
    start: Callable[..., redis_servers.Server], package: str, policy: str
) -> None:
    server = evicting(start, policy)
    client = client_of(package, server)
    with warned() as made:
        per_client = RedisKeyedRateLimiter(
            client, name="login", plans={"free": "3/hour", "pro": "30/hour"}
        )
        everyone = RedisRateLimiter(client, "100/hour", name="everyone")
    assert made == [] and config_gets(server) == (0, 0)  # making a limiter asks nothing

    with warned() as said:
        answers = [per_client.try_acquire("alice", plan="free") for _ in range(4)]
        assert per_client.try_acquire("alice", plan="pro")
        assert everyone.try_acquire() and everyone.peek().allowed
        assert per_client.try_acquire_many(["bob", "carol"], plan="free") == [True, True]
    assert answers == [True, True, True, False]
    assert len(said) == 1, said  # one client: one warning, whatever the limiters and calls
    assert f"maxmemory-policy {policy}" in said[0] and f"maxmemory {LIMIT_BYTES}" in said[0]
    assert config_gets(server) == (1, 0)  # asked once

    with warned() as again:  # another client object asks (and says) again, once
        other = RedisRateLimiter(client_of(package, server), "100/hour", name="everyone")
        assert other.try_acquire() and other.try_acquire()
    assert len(again) == 1 and config_gets(server) == (2, 0)


@pytest.mark.parametrize(
    ("limit", "policy"), [(LIMIT, "noeviction"), ("0", "allkeys-lru"), ("0", "volatile-lru")]
)
def test_a_server_that_never_evicts_is_asked_and_not_named(
    start: Callable[..., redis_servers.Server], limit: str, policy: str
) -> None:
    server = start("--maxmemory", limit, "--maxmemory-policy", policy)
    per_client = RedisKeyedRateLimiter(server.client(), "3/hour", name="login")
    with warned() as said:
        assert [per_client.try_acquire("alice") for _ in range(4)] == [True, True, True, False]
    assert said == []
    assert config_gets(server) == (1, 0)  # the server was asked, and its answer read as safe


def test_a_user_without_config_gets_no_warning_and_no_error(
    start: Callable[..., redis_servers.Server],
) -> None:
    server = evicting(start, "allkeys-lru")
    server.cli("ACL", "SETUSER", "limiter", "on", ">secret", "~*", "&*", "+@all", "-config")
    client = server.client(username="limiter", password="secret")
    per_client = RedisKeyedRateLimiter(client, "3/hour", name="login")  # on_error="raise"
    with warned() as said:
        assert [per_client.try_acquire("alice") for _ in range(4)] == [True, True, True, False]
        assert per_client.peek("alice").outcome.name == "DENIED"
    assert said == []
    assert config_gets(server) == (0, 1)  # asked once, refused (NOPERM), and never again


def test_a_disabled_config_command_gets_no_warning_and_no_error(
    start: Callable[..., redis_servers.Server],
) -> None:
    """As managed services do: the command renamed away (here to nothing)."""
    server = start(
        "--rename-command", "CONFIG", "", "--maxmemory", LIMIT, "--maxmemory-policy", "allkeys-lru"
    )
    client = server.client()
    assert client.ping()  # connected: redis-py's own questions on connecting are answered
    errors_before = errors_said(server)
    per_client = RedisKeyedRateLimiter(client, "3/hour", name="login")
    with warned() as said:
        assert [per_client.try_acquire("alice") for _ in range(4)] == [True, True, True, False]
    assert said == []
    assert errors_said(server) == errors_before + 1  # asked once: "unknown command"


def errors_said(server: redis_servers.Server) -> int:
    """The ``ERR`` replies the server gave (``INFO errorstats``)."""
    for line in server.cli("INFO", "errorstats").splitlines():
        if line.startswith("errorstat_ERR:"):
            return int(line.split("count=", 1)[1])
    return 0


@pytest.mark.parametrize("package", ["redis", "valkey"])
def test_an_asyncio_client_is_told_once(
    start: Callable[..., redis_servers.Server], package: str
) -> None:
    server = evicting(start, "volatile-lru")

    async def main() -> list[bool]:
        client = async_client_of(package, server)
        try:
            per_client = RedisKeyedRateLimiter(client, "3/hour", name="login")
            everyone = RedisRateLimiter(client, "100/hour", name="everyone")
            answers = [await per_client.try_acquire("alice") for _ in range(4)]
            assert await everyone.try_acquire()
            assert await per_client.try_acquire_many(["bob"]) == [True]
            return answers
        finally:
            await client.aclose()

    with warned() as said:
        assert asyncio.run(main()) == [True, True, True, False]
    assert len(said) == 1 and "maxmemory-policy volatile-lru" in said[0], said
    assert config_gets(server) == (1, 0)


def test_an_asyncio_user_without_config_gets_no_warning_and_no_error(
    start: Callable[..., redis_servers.Server],
) -> None:
    server = evicting(start, "allkeys-lru")
    server.cli("ACL", "SETUSER", "limiter", "on", ">secret", "~*", "&*", "+@all", "-config")

    async def main() -> list[bool]:
        client = async_client_of("redis", server, username="limiter", password="secret")
        try:
            per_client = RedisKeyedRateLimiter(client, "3/hour", name="login")
            return [await per_client.try_acquire("alice") for _ in range(4)]
        finally:
            await client.aclose()

    with warned() as said:
        assert asyncio.run(main()) == [True, True, True, False]
    assert said == [] and config_gets(server) == (0, 1)


@pytest.fixture
def one_master_evicting(redis_cluster: Any) -> Iterator[redis_servers.Server]:
    """The session's cluster with one master under allkeys-lru (64 MB, far from full), put
    back as it was after."""
    master = redis_cluster.masters()[0]
    master.cli("CONFIG", "SET", "maxmemory", "64mb", "maxmemory-policy", "allkeys-lru")
    try:
        yield master
    finally:
        master.cli("CONFIG", "SET", "maxmemory", "0", "maxmemory-policy", "noeviction")


def cluster_config_gets(cluster: Any) -> list[int]:
    return [config_gets(node)[0] for node in cluster.masters()]


def test_a_cluster_names_each_evicting_primary(
    redis_cluster: Any, one_master_evicting: redis_servers.Server
) -> None:
    """Every primary is asked once, after the first answered call (here a batch, sent in one
    pipeline per node); the one that may evict is named by its address."""
    before = cluster_config_gets(redis_cluster)
    client = redis_cluster.client()
    try:
        per_client = RedisKeyedRateLimiter(client, "3/hour", name="eviction-sync")
        with warned() as said:
            keys = [f"k{i}" for i in range(30)]
            assert per_client.try_acquire_many(keys) == [True] * 30
            assert per_client.try_acquire("k0")
        assert len(said) == 1, said
        assert f"127.0.0.1:{one_master_evicting.port}: maxmemory-policy allkeys-lru" in said[0]
        assert said[0].count("127.0.0.1:") == 1  # the others never evict
        after = cluster_config_gets(redis_cluster)
        assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]
    finally:
        client.close()


def test_an_asyncio_cluster_names_each_evicting_primary(
    redis_cluster: Any, one_master_evicting: redis_servers.Server
) -> None:
    from redis.asyncio.cluster import RedisCluster

    before = cluster_config_gets(redis_cluster)

    async def main() -> None:
        client = RedisCluster(host=redis_servers.HOST, port=redis_cluster.nodes[0].port)
        try:
            per_client = RedisKeyedRateLimiter(client, "3/hour", name="eviction-async")
            assert await per_client.try_acquire("k0")  # a cold client: the first call
            assert await per_client.try_acquire_many(["k1", "k2"]) == [True, True]
        finally:
            await client.aclose()

    with warned() as said:
        asyncio.run(main())
    assert len(said) == 1, said
    assert f"127.0.0.1:{one_master_evicting.port}: maxmemory-policy allkeys-lru" in said[0]
    after = cluster_config_gets(redis_cluster)
    assert [b - a for a, b in zip(before, after, strict=True)] == [1, 1, 1]


def fill_until_gone(client: Any, key: bytes, ttl: int | None = None, rounds: int = 100) -> bool:
    """Write other keys (200 of 1 KB a round, with a time to live of ``ttl`` seconds if given,
    at most ``rounds`` rounds: 20 MB) until ``key`` is gone or the server refuses (OOM):
    whether it went."""
    value = b"x" * 1000
    for round_ in range(rounds):
        pipe = client.pipeline(transaction=False)
        for i in range(200):
            pipe.set(f"filler:{round_}:{i}", value, ex=ttl)
        try:
            pipe.execute()
        except Exception as error:  # OOM: nothing it may evict
            assert "OOM" in str(error) or "maxmemory" in str(error), error
            break
        if not client.exists(key):
            break
    return not client.exists(key)


@pytest.mark.parametrize(
    ("policy", "ttl"),
    [("allkeys-lru", None), ("volatile-lru", 3600)],  # volatile-*: the other keys a cache's
)
def test_an_evicted_key_lets_a_throttled_client_off(
    start: Callable[..., redis_servers.Server], policy: str, ttl: int | None
) -> None:
    """The danger the warning names, reproduced: a client that spent its burst of 3 (at 3 an
    hour) gets a fresh burst once the server evicts its key to make room. The warning was
    given at its first call."""
    server = evicting(start, policy)
    client = server.client()
    per_client = RedisKeyedRateLimiter(client, "3/hour", name="login", on_error="deny")
    with warned() as said:
        assert [per_client.try_acquire("alice") for _ in range(4)] == [True, True, True, False]
    assert len(said) == 1 and f"maxmemory-policy {policy}" in said[0], said
    assert fill_until_gone(client, per_client.redis_key("alice"), ttl), "not evicted"
    assert [per_client.try_acquire("alice") for _ in range(4)] == [True, True, True, False]


def test_noeviction_keeps_a_throttled_client_throttled(
    start: Callable[..., redis_servers.Server],
) -> None:
    """The setting the docs ask for: the full server refuses writes (OOM), the limiter's
    ``on_error`` answers while it is full, and the spent key stays spent."""
    server = evicting(start, "noeviction")
    client = server.client()
    per_client = RedisKeyedRateLimiter(client, "3/hour", name="login", on_error="deny")
    with warned() as said:
        assert [per_client.try_acquire("alice") for _ in range(4)] == [True, True, True, False]
    assert said == []
    assert not fill_until_gone(client, per_client.redis_key("alice"))
    assert [per_client.try_acquire("alice") for _ in range(4)] == [False] * 4
    assert client.exists(per_client.redis_key("alice"))
