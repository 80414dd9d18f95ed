"""The middleware in process: configuration errors, keys, proxies, scopes passed through, Redis.

The behaviours users see are tested in real servers (``test_web_servers.py``); here are the
parts a server cannot reach: bad arguments raise at construction naming the parameter, a key
or cost the limiter cannot take raises before anything is spent, the ``Forwarded`` chain is
walked as ``X-Forwarded-For`` is, WebSocket and lifespan scopes go through untouched, 1,000
concurrent requests admit exactly the burst, and the Redis limiters (asyncio under ASGI,
synchronous under WSGI) say what the in-process ones say.
"""

from __future__ import annotations

import asyncio
import gc
import io
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")
from protocol_in_code.qos import asgi
from protocol_in_code.qos._http import addresses, fields
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.asgi import Route
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware


async def _ok_asgi(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await send({"type": "lifespan.startup.complete"})
        return
    if scope["type"] == "websocket":
        await send({"type": "websocket.accept"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _ok_wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


async def _call(app: Any, path: str = "/", client: str | None = "192.0.2.1", **extra: Any) -> Any:
    scope = {
        "type": "http",
        "method": extra.pop("method", "GET"),
        "path": path,
        "headers": extra.pop("headers", []),
        "client": None if client is None else (client, 1234),
        **extra,
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    return start["status"], {k.decode(): v.decode() for k, v in start.get("headers", [])}


def _request(
    app: Any,
    path: str = "/",
    method: str = "GET",
    client: str | None = "192.0.2.1",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str]]:
    """One request through either middleware, in process, as its server would make it: the
    status and the response's header fields (names in lower case).

    ``path`` is the path as ASGI gives it; under WSGI it becomes ``PATH_INFO`` as PEP 3333 has
    servers write it (its UTF-8 bytes read as latin-1). ``client=None`` is a peer on a Unix
    socket: no ``client`` in the scope, no ``REMOTE_ADDR`` in the environ.
    """
    headers = headers or {}
    if isinstance(app, ASGIMiddleware):
        raw = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers.items()
        ]
        return asyncio.run(_call(app, path, client, method=method, headers=raw))
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path.encode("utf-8").decode("latin-1"),
        "wsgi.input": io.BytesIO(),
    }
    if client is not None:
        environ["REMOTE_ADDR"] = client
    for name, value in headers.items():
        environ["HTTP_" + name.upper().replace("-", "_")] = value
    got: dict[str, Any] = {}

    def start_response(status: str, fields: list[tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"], got["fields"] = int(status.split()[0]), fields

    b"".join(app.__call__(environ, start_response))
    return got["status"], {name.lower(): value for name, value in got["fields"]}


def _around(middleware: Any, limiter: Any = None, **options: Any) -> Any:
    """``middleware`` (the ASGI or the WSGI class) around an application answering 200."""
    return middleware(_ok_asgi if middleware is ASGIMiddleware else _ok_wsgi, limiter, **options)


BOTH = pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware])
@pytest.mark.parametrize(
    ("arguments", "error", "parameter"),
    [
        ({"limiter": object()}, TypeError, "limiter"),
        ({}, ValueError, "limiter"),
        ({"limiter": RateLimiter(1), "trusted_proxies": "10.0.0.1"}, TypeError, "trusted_proxies"),
        ({"limiter": RateLimiter(1), "trusted_proxies": ["nope"]}, ValueError, "trusted_proxies"),
        ({"limiter": RateLimiter(1), "forwarded_header": "X-Real-IP"}, ValueError, "forwarded"),
        ({"limiter": RateLimiter(1), "key": "ip"}, TypeError, "key"),
        ({"limiter": RateLimiter(1), "cost": 2}, TypeError, "cost"),
        ({"limiter": RateLimiter(1), "exempt": "/health"}, TypeError, "exempt"),
        ({"limiter": RateLimiter(1), "exempt": ["health"]}, ValueError, "exempt"),
        ({"limiter": RateLimiter(1), "name": 'a"\n'}, ValueError, "name"),
        ({"limiter": RateLimiter(1), "partition_secret": b"short"}, ValueError, "partition_secret"),
        ({"routes": [Route("api", RateLimiter(1))]}, ValueError, "routes[0].prefix"),
        ({"routes": [Route("/api", object())]}, TypeError, "routes[0].limiter"),
        ({"routes": [Route("/api", RateLimiter(1), methods="GET")]}, TypeError, "methods"),
        ({"routes": Route("/api", RateLimiter(1))}, TypeError, "routes"),
    ],
)
def test_bad_configuration_raises_at_construction_naming_the_parameter(
    middleware, arguments, error, parameter
):
    app = _ok_asgi if middleware is ASGIMiddleware else _ok_wsgi
    with pytest.raises(error, match=parameter.replace("[", r"\[").replace("]", r"\]")):
        middleware(app, **arguments)


@BOTH
@pytest.mark.parametrize("headers_on_allowed", [True, False])
@pytest.mark.parametrize("key", [("user", 42), 42])
def test_a_tuple_or_an_int_key_is_limited_as_an_address_is(middleware, headers_on_allowed, key):
    limiter = KeyedRateLimiter(1, burst=2, clock=lambda: 0)
    app = _around(middleware, limiter, key=lambda info: key, headers_on_allowed=headers_on_allowed)
    answers = [_request(app) for _ in range(3)]
    assert [status for status, _ in answers] == [200, 200, 429]
    assert limiter.available(key) == 0  # two tokens spent, one per request allowed
    assert answers[2][1]["ratelimit"].startswith('"default";r=0;t=1;pk=:')


@BOTH
@pytest.mark.parametrize("key", [[1], ("user", [1]), {"a": 1}])
def test_a_key_the_limiter_cannot_take_raises_before_anything_is_spent(middleware, key):
    limiter = KeyedRateLimiter(1, burst=2, clock=lambda: 0)
    app = _around(middleware, limiter, key=lambda info: key)
    with pytest.raises(TypeError, match=re.escape(f"key= returned {key!r}, which")):
        _request(app)
    assert len(limiter) == 0


def test_a_redis_limiter_s_key_must_be_text_and_is_checked_before_the_server_is_asked():
    import redis
    import redis.asyncio
    from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter, RedisKeyedRateLimiter
    from redis_servers import free_port

    # Nobody listens on these ports: a request that reached the server would fail otherwise.
    wsgi = WSGIMiddleware(
        _ok_wsgi,
        RedisKeyedRateLimiter(redis.Redis(port=free_port()), "3/hour", name="clients"),
        key=lambda i: 42,
    )
    asgi = ASGIMiddleware(
        _ok_asgi,
        AsyncRedisKeyedRateLimiter(redis.asyncio.Redis(port=free_port()), "3/hour", name="clients"),
        key=lambda info: ("user", 42),
    )
    with pytest.raises(TypeError, match=r"key= returned 42, which a Redis limiter cannot take"):
        _request(wsgi)
    with pytest.raises(TypeError, match=r"key= returned \('user', 42\), which a Redis limiter"):
        _request(asgi)


@BOTH
def test_a_cost_no_limiter_takes_raises_naming_it_before_anything_is_spent(middleware):
    limiter = KeyedRateLimiter(1, burst=2, clock=lambda: 0)
    app = _around(middleware, limiter, cost=lambda info: 2**64)
    with pytest.raises(ValueError, match=r"cost= returned 18446744073709551616, which"):
        _request(app)
    assert len(limiter) == 0


def test_forwarded_and_x_forwarded_for_are_walked_from_the_right_past_trusted_hops():
    proxies = addresses.TrustedProxies.parse(["10.0.0.0/8", "2001:db8::/32"])
    xff = {"x-forwarded-for": "198.51.100.1, 203.0.113.5, 10.1.1.1"}
    assert addresses.client_address("10.0.0.2", xff, proxies, "x-forwarded-for") == "203.0.113.5"
    # From an untrusted peer, the header is ignored.
    assert addresses.client_address("192.0.2.9", xff, proxies, "x-forwarded-for") == "192.0.2.9"
    forwarded = {
        "forwarded": 'for=198.51.100.1;proto=https, for="[2001:db8::7]:4711", for=10.2.2.2:80'
    }
    # 2001:db8::7 is trusted too, so the client is the hop before it.
    assert addresses.client_address("10.0.0.2", forwarded, proxies, "forwarded") == "198.51.100.1"
    # Only trusted hops: the leftmost. Garbage where an address should be: the peer.
    assert (
        addresses.client_address(
            "10.0.0.2", {"x-forwarded-for": "10.3.3.3"}, proxies, "x-forwarded-for"
        )
        == "10.3.3.3"
    )
    garbage = {"x-forwarded-for": "unknown, 10.3.3.3"}
    assert addresses.client_address("10.0.0.2", garbage, proxies, "x-forwarded-for") == "10.0.0.2"


def _key_of_request(middleware: Any, peer: str | None, headers: Any = None, **options: Any) -> Any:
    """The key a keyed limiter behind ``middleware`` is asked for on a request from ``peer``."""
    limiter = KeyedRateLimiter(1, clock=lambda: 0)
    _request(_around(middleware, limiter, **options), client=peer, headers=headers)
    (key,) = limiter
    return key


@BOTH
@pytest.mark.parametrize(
    ("header", "value", "client"),
    [
        ("X-Forwarded-For", "203.0.113.5:5678", "203.0.113.5"),
        ("X-Forwarded-For", "[2001:DB8::1]:443", "2001:db8::1"),
        ("X-Forwarded-For", "[2001:db8:0:0:0:0:0:1]", "2001:db8::1"),
        ("X-Forwarded-For", "::ffff:203.0.113.5", "203.0.113.5"),
        ("Forwarded", 'for="[2001:DB8::1]:443"', "2001:db8::1"),
        ("Forwarded", "for=203.0.113.5:5678", "203.0.113.5"),
        ("Forwarded", 'for="203.0.113.5:_hidden"', "203.0.113.5"),
        # Garbage where the client should be: the peer, as ever.
        ("X-Forwarded-For", "203.0.113.5:http", "10.0.0.2"),
        ("X-Forwarded-For", "[2001:db8::1]443", "10.0.0.2"),
        ("X-Forwarded-For", "[2001:db8::1", "10.0.0.2"),
        ("X-Forwarded-For", "203.0.113.5" + "0" * 100, "10.0.0.2"),
        ("X-Forwarded-For", "unix:", "10.0.0.2"),
        ("Forwarded", "for=_hidden", "10.0.0.2"),
        ("Forwarded", "for=unknown", "10.0.0.2"),
    ],
)
def test_a_hop_with_a_port_is_its_address_normalised_and_garbage_leaves_the_peer(
    middleware, header, value, client
):
    key = _key_of_request(
        middleware,
        "10.0.0.2",
        {header: value},
        trusted_proxies=["10.0.0.0/8"],
        forwarded_header=header,
    )
    assert key == client


@BOTH
def test_one_client_has_one_key_however_its_address_is_spelled(middleware):
    for spelling in ("2001:DB8::1", "2001:db8:0:0:0:0:0:1", "2001:0db8::0001"):
        assert _key_of_request(middleware, spelling) == "2001:db8::1"
    assert _key_of_request(middleware, "::ffff:192.0.2.1") == "192.0.2.1"
    # A peer that is no address (a test client's name) is kept as it is, and never a proxy.
    assert _key_of_request(middleware, "testclient", trusted_proxies=["0.0.0.0/0"]) == "testclient"


@BOTH
@pytest.mark.parametrize("trusted", ["127.0.0.0/8", "127.0.0.1", "::ffff:127.0.0.0/104"])
@pytest.mark.parametrize("peer", ["::ffff:127.0.0.1", "127.0.0.1"])
def test_an_ipv4_mapped_peer_is_in_the_ipv4_network_it_maps_to(middleware, trusted, peer):
    xff = {"X-Forwarded-For": "203.0.113.5"}
    assert _key_of_request(middleware, peer, xff, trusted_proxies=[trusted]) == "203.0.113.5"


@BOTH
def test_a_unix_socket_peer_is_a_proxy_only_when_unix_is_trusted(middleware):
    xff = {"X-Forwarded-For": "203.0.113.5"}
    assert _key_of_request(middleware, None, xff, trusted_proxies=["unix"]) == "203.0.113.5"
    # No field, or garbage in it: the peer, which has no address.
    assert _key_of_request(middleware, None, trusted_proxies=["unix"]) == "unknown"
    garbage = {"X-Forwarded-For": "?"}
    assert _key_of_request(middleware, None, garbage, trusted_proxies=["unix"]) == "unknown"
    # "unix" trusts no TCP peer, and no network trusts a Unix socket.
    assert _key_of_request(middleware, "192.0.2.9", xff, trusted_proxies=["unix"]) == "192.0.2.9"
    assert _key_of_request(middleware, None, xff, trusted_proxies=["0.0.0.0/0"]) == "unknown"


@pytest.mark.parametrize("remote_addr", ["", "localhost", None])
def test_wsgi_tells_a_unix_socket_peer_by_an_empty_missing_or_waitress_remote_addr(remote_addr):
    limiter = KeyedRateLimiter(1, burst=1, clock=lambda: 0)
    app = WSGIMiddleware(_ok_wsgi, limiter, trusted_proxies=["unix"])
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_X_FORWARDED_FOR": "203.0.113.1"}
    if remote_addr is not None:
        environ["REMOTE_ADDR"] = remote_addr
    b"".join(app(environ, lambda status, headers, exc_info=None: None))
    assert list(limiter) == ["203.0.113.1"]


def test_policy_quota_and_window_from_a_band():
    from fractions import Fraction

    policy = fields.Policy.of("p", Fraction(1, 3), 20)  # 20 per minute
    assert (policy.burst, policy.window) == (20, 60)
    assert policy.reset_seconds(20) == 0 and policy.reset_seconds(19) == 3
    assert fields.Policy.of("p", 1000, 10).window == 1  # never a window of 0 seconds


def test_websocket_and_lifespan_pass_through_unless_configured():
    limiter = RateLimiter(1, burst=1, clock=lambda: 0)
    app = ASGIMiddleware(_ok_asgi, limiter)

    async def scope_of(kind: str, middleware: Any) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": f"{kind}.connect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": kind, "path": "/ws", "headers": [], "client": ("192.0.2.1", 1)}
        await middleware(scope, receive, send)
        return sent

    for _ in range(3):
        assert asyncio.run(scope_of("websocket", app)) == [{"type": "websocket.accept"}]
        assert asyncio.run(scope_of("lifespan", app)) == [{"type": "lifespan.startup.complete"}]
    assert limiter.available() == 1  # nothing was taken
    limited = ASGIMiddleware(_ok_asgi, limiter, websocket=True)
    assert asyncio.run(scope_of("websocket", limited)) == [{"type": "websocket.accept"}]
    assert asyncio.run(scope_of("websocket", limited)) == [
        {"type": "websocket.close", "code": 1008}
    ]


def test_routes_methods_costs_and_exemptions():
    clock = [0]
    api = KeyedRateLimiter(10, burst=10, clock=lambda: clock[0])
    everything = KeyedRateLimiter(1, burst=1, clock=lambda: clock[0])
    app = ASGIMiddleware(
        _ok_asgi,
        everything,
        routes=[
            Route("/api/", api, methods={"post"}, cost=lambda info: 4, name="api"),
            Route("/static", None),
        ],
        exempt=lambda info: info.headers.get("x-internal") == "yes",
    )

    async def run() -> None:
        status, headers = await _call(app, "/api/items", method="POST")
        assert status == 200 and headers["ratelimit"].startswith('"api";r=6;')
        assert (await _call(app, "/api/items", method="POST"))[0] == 200
        assert (await _call(app, "/api/items", method="POST"))[0] == 429  # 2 left, costs 4
        # GET on /api is not the route's: the default limit.
        status, headers = await _call(app, "/api/items")
        assert status == 200 and headers["ratelimit"].startswith('"default";r=0;')
        assert (await _call(app, "/apiary"))[0] == 429  # segments, not characters
        for _ in range(3):
            assert (await _call(app, "/static/a.css"))[0] == 200
            assert (await _call(app, "/", headers=[(b"x-internal", b"yes")]))[0] == 200

    asyncio.run(run())


@BOTH
def test_a_route_for_get_limits_head_too(middleware):
    api = KeyedRateLimiter(1, burst=2, clock=lambda: 0)
    app = _around(middleware, routes=[Route("/api", api, methods={"GET"}, name="api")])
    # HEAD runs the GET handler: it spends the route's tokens, and is refused with GET.
    assert _request(app, "/api/items", "HEAD")[0] == 200
    assert _request(app, "/api/items", "GET")[0] == 200
    status, headers = _request(app, "/api/items", "HEAD")
    assert status == 429 and headers["ratelimit"].startswith('"api";r=0;')
    assert _request(app, "/api/items", "POST")[0] == 200  # not the route's, and no default


def test_a_wsgi_path_is_read_as_utf8_with_u_fffd_for_a_byte_that_is_not():
    paths: list[str] = []
    app = WSGIMiddleware(_ok_wsgi, KeyedRateLimiter(1), key=lambda info: paths.append(info.path))
    for path_info in (
        "/caf\xc3\xa9",  # /café as PEP 3333 has servers give it: its UTF-8 bytes as latin-1
        "/caf\xe9",  # the latin-1 byte E9 alone, which is not UTF-8
        "/€",  # a server that decoded it already, against PEP 3333 (€ is no latin-1): as it is
    ):
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path_info, "REMOTE_ADDR": "192.0.2.1"}
        b"".join(app(environ, lambda status, headers, exc_info=None: None))
    assert paths == ["/café", "/caf\ufffd", "/€"]


def _bytes_allocated_in(folder: Path) -> int:
    """Bytes allocated by code in ``folder``'s files and still alive, as tracemalloc sees."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot()
    ours = snapshot.filter_traces([tracemalloc.Filter(True, str(folder / "*"))])
    return sum(stat.size for stat in ours.statistics("filename"))


def test_long_keys_leave_the_middleware_s_own_memory_bounded():
    # 4,000 distinct API keys of 60 KB each (240 MB in all) as the key. Each key refills a
    # second after its request and the clock moves a second per request, so the table may
    # forget it: what stays is what the middleware itself keeps (its code is in qos/).
    now = [0]

    def clock() -> int:
        now[0] += 1_000_000_000
        return now[0]

    limiter = KeyedRateLimiter(1, burst=1, max_keys=64, clock=clock)
    app = ASGIMiddleware(_ok_asgi, limiter, key=lambda info: info.headers["x-api-key"])

    async def requests() -> list[int]:
        statuses = []
        for i in range(4_000):
            api_key = b"%05d" % i + b"k" * 60_000
            statuses.append((await _call(app, headers=[(b"x-api-key", api_key)]))[0])
        return statuses

    tracemalloc.start()
    try:
        before = _bytes_allocated_in(Path(asgi.__file__).parent)
        statuses = asyncio.run(requests())
        grown = _bytes_allocated_in(Path(asgi.__file__).parent) - before
    finally:
        tracemalloc.stop()
    assert statuses == [200] * 4_000
    assert grown < 1_000_000, f"the middleware kept {grown:,} bytes"


def test_a_thousand_concurrent_requests_admit_exactly_the_burst():
    limiter = RateLimiter(1, burst=100, clock=lambda: 0)
    app = ASGIMiddleware(_ok_asgi, limiter)

    async def run() -> list[int]:
        answers = await asyncio.gather(*(_call(app) for _ in range(1000)))
        return [status for status, _ in answers]

    statuses = asyncio.run(run())
    assert statuses.count(200) == 100 and statuses.count(429) == 900


def _wsgi_call(app: Any, client: str = "192.0.2.1") -> tuple[str, dict[str, str]]:
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        got["status"], got["headers"] = status, dict(headers)

    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/",
        "REMOTE_ADDR": client,
        "wsgi.input": io.BytesIO(),
    }
    b"".join(app(environ, start_response))
    return got["status"], got["headers"]


def test_redis_limiters_sync_under_wsgi_asyncio_under_asgi(redis_server):
    import redis.asyncio
    from protocol_in_code.qos.distributed import (
        AsyncRedisKeyedRateLimiter,
        RedisKeyedRateLimiter,
    )

    sync = redis_server.client()
    sync.flushall()
    wsgi = WSGIMiddleware(
        _ok_wsgi, RedisKeyedRateLimiter(sync, "3/hour", name="clients", prefix="wsgi:")
    )
    statuses = [_wsgi_call(wsgi)[0] for _ in range(4)]
    assert statuses == ["200 OK"] * 3 + ["429 Too Many Requests"]
    _, headers = _wsgi_call(wsgi)
    assert headers["Retry-After"] == "1200"  # one token at 3 per hour: exactly 20 minutes
    # A slow band: the Redis limiter says its next token with its decision (check_levels), so
    # t is the time until it, rounded down (under a second has passed since the refusal before),
    # never more than the Retry-After (the bucket is full again in an hour, t=3600 once said).
    assert headers["RateLimit"].startswith(('"default";r=0;t=1199;pk=:', '"default";r=0;t=1198;'))
    assert _wsgi_call(wsgi, client="192.0.2.2")[0] == "200 OK"
    with pytest.raises(TypeError, match="limiter"):
        WSGIMiddleware(
            _ok_wsgi,
            AsyncRedisKeyedRateLimiter(
                redis.asyncio.Redis(port=redis_server.port), "3/hour", name="clients"
            ),
        )

    async def run() -> list[int]:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            limiter = AsyncRedisKeyedRateLimiter(client, "3/hour", name="clients", prefix="asgi:")
            app = ASGIMiddleware(_ok_asgi, limiter)
            return [(await _call(app))[0] for _ in range(4)]
        finally:
            await client.aclose()

    assert asyncio.run(run()) == [200, 200, 200, 429]
    sync.close()


def test_an_unreachable_redis_server_is_the_limiter_s_on_error_policy():
    import redis
    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis_servers import free_port

    nobody = redis.Redis(
        port=free_port(),
        socket_connect_timeout=0.5,
        socket_timeout=0.5,
        retry=Retry(NoBackoff(), 0),
    )
    deny = WSGIMiddleware(
        _ok_wsgi, RedisKeyedRateLimiter(nobody, "3/hour", name="clients", on_error="deny")
    )
    status, headers = _wsgi_call(deny)
    assert status == "429 Too Many Requests" and headers["Retry-After"] == "1"
    allow = WSGIMiddleware(
        _ok_wsgi, RedisKeyedRateLimiter(nobody, "3/hour", name="clients", on_error="allow")
    )
    assert _wsgi_call(allow)[0] == "200 OK"
    nobody.close()
