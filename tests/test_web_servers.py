"""The middleware in real servers: the FastAPI example under uvicorn, the Flask one under waitress.

Every test runs against both, over real TCP on loopback, driven by httpx, and reads the header
fields with a Structured Field parser (``http_sf``), so a field that only looks right fails.
The limiters are given a clock the test holds, so every wait is exact and nothing sleeps:
there is no timing assertion here. Two clients are two loopback addresses (127.0.0.1 and
127.0.0.2), which the server sees as two peers.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")

pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("waitress")
http_sf = pytest.importorskip("http_sf")
import httpx  # noqa: E402
from qos_support import REPO_ROOT  # noqa: E402
from web_servers import Uvicorn, Waitress, dual_stack_listener, unix_listener  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "examples" / "web"))

import fastapi_app  # noqa: E402
import flask_app  # noqa: E402
from protocol_in_code.qos.asgi import Route  # noqa: E402
from protocol_in_code.qos.keyed import KeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.limiter import Band, RateLimiter  # noqa: E402

SECOND = 1_000_000_000
T0 = 1_000 * SECOND


class Clock:
    """A clock the test moves by hand, in integer nanoseconds."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


Serve = Callable[..., str]


@pytest.fixture(params=["fastapi+uvicorn", "flask+waitress"])
def serve(request: pytest.FixtureRequest) -> Iterator[Serve]:
    """``serve(limiter, listener=None, **options)``: the example app around ``limiter``, served
    on ``listener`` (a free port of 127.0.0.1 by default); its URL."""
    started: list[Any] = []

    def start(limiter: Any, listener: socket.socket | None = None, **options: Any) -> str:
        if request.param.startswith("fastapi"):
            server: Any = Uvicorn(fastapi_app.create_app(limiter, **options), listener)
        else:
            server = Waitress(flask_app.create_app(limiter, **options), listener)
        started.append(server.start())
        return str(server.url)

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def clients() -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two clients on two loopback addresses."""
    one = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.1"), timeout=10)
    two = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10)
    yield one, two
    one.close()
    two.close()


def items(response: httpx.Response, field: str) -> dict[str, dict[str, Any]]:
    """A RateLimit field parsed as a Structured Field List: {policy name: parameters}."""
    parsed = http_sf.parse(response.headers[field].encode("ascii"), tltype="list")
    assert all(isinstance(name, str) for name, _ in parsed), parsed
    return {name: dict(params) for name, params in parsed}


def test_burst_plus_one_gives_exactly_one_429_with_exact_fields(serve, clients):
    clock = Clock()
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock))  # 2 per second, bursts of 5
    client = clients[0]
    responses = [client.get(url + "/") for _ in range(6)]
    assert [r.status_code for r in responses] == [200] * 5 + [429]
    for i, response in enumerate(responses[:5]):
        policy = items(response, "RateLimit-Policy")["default"]
        # q: the burst; w: an empty bucket fills in 5/2 s, rounded up.
        assert (policy["q"], policy["w"]) == (5, 3)
        state = items(response, "RateLimit")["default"]
        # r: whole tokens left. No t: a token comes every 500 ms, so the client may use more
        # than r within any whole second, and the only true window is 0 seconds.
        assert state | {"pk": None} == {"r": 4 - i, "pk": None}
        assert "Retry-After" not in response.headers
    refused = responses[5]
    # The wait is exactly half a second (one token at 2 per second): rounded up, 1.
    assert refused.headers["Retry-After"] == "1"
    assert http_sf.parse(refused.headers["Retry-After"].encode(), tltype="item")[0] == 1
    assert items(refused, "RateLimit")["default"] | {"pk": None} == {"r": 0, "pk": None}
    assert items(refused, "RateLimit-Policy")["default"]["q"] == 5


def test_a_request_at_exactly_the_wait_passes_and_one_ns_earlier_is_refused(serve, clients):
    clock = Clock()
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock))
    client = clients[0]
    assert [client.get(url + "/").status_code for _ in range(5)] == [200] * 5
    clock.now = T0 + SECOND // 2 - 1
    assert client.get(url + "/").status_code == 429
    clock.now = T0 + SECOND // 2
    assert client.get(url + "/").status_code == 200
    assert client.get(url + "/").status_code == 429


def test_two_clients_are_limited_independently(serve, clients):
    clock = Clock()
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock))
    one, two = clients
    assert [one.get(url + "/").status_code for _ in range(6)] == [200] * 5 + [429]
    from_two = [two.get(url + "/") for _ in range(6)]
    assert [r.status_code for r in from_two] == [200] * 5 + [429]
    # Each client has its own partition key, and neither reveals the address.
    pk_one = items(one.get(url + "/"), "RateLimit")["default"]["pk"]
    pk_two = items(from_two[0], "RateLimit")["default"]["pk"]
    assert isinstance(pk_one, bytes) and isinstance(pk_two, bytes) and pk_one != pk_two
    for pk in (pk_one, pk_two):
        assert b"127.0.0" not in pk and b"\x7f\x00\x00" not in pk


def test_a_spoofed_forwarded_for_from_an_untrusted_peer_changes_nothing(serve, clients):
    clock = Clock()
    # Only 10.0.0.1 is a trusted proxy: the loopback clients are not.
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock), trusted_proxies=["10.0.0.1"])
    client = clients[0]
    codes = [
        client.get(url + "/", headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code
        for i in range(6)
    ]
    assert codes == [200] * 5 + [429]
    spoofed = client.get(url + "/", headers={"Forwarded": "for=198.51.100.7"})
    assert spoofed.status_code == 429


def test_a_trusted_proxy_forwards_each_client_s_address(serve, clients):
    clock = Clock()
    url = serve(KeyedRateLimiter(2, burst=5, clock=clock), trusted_proxies=["127.0.0.1"])
    proxy, other = clients
    # Through the trusted proxy (127.0.0.1), two clients behind it are two keys...
    for address in ("203.0.113.1", "203.0.113.2"):
        codes = [
            proxy.get(url + "/", headers={"X-Forwarded-For": f"198.51.100.9, {address}"})
            for _ in range(6)
        ]
        assert [r.status_code for r in codes] == [200] * 5 + [429]
    # ...and a client that is not the proxy cannot borrow their keys or make new ones.
    codes = [
        other.get(url + "/", headers={"X-Forwarded-For": f"192.0.2.{i}"}).status_code
        for i in range(6)
    ]
    assert codes == [200] * 5 + [429]


def test_never_is_429_without_retry_after(serve, clients):
    clock = Clock()
    url = serve(
        KeyedRateLimiter(2, burst=5, clock=clock),
        cost=lambda info: int(info.headers.get("x-cost", "1")),
    )
    client = clients[0]
    too_big = client.get(url + "/", headers={"X-Cost": "6"})
    assert too_big.status_code == 429
    assert "Retry-After" not in too_big.headers
    assert items(too_big, "RateLimit")["default"]["r"] == 5  # nothing was taken
    assert client.get(url + "/", headers={"X-Cost": "5"}).status_code == 200
    assert client.get(url + "/").status_code == 429


def test_a_full_keyed_table_is_503_with_retry_after(serve, clients):
    clock = Clock()
    url = serve(KeyedRateLimiter(1, burst=1, max_keys=1, clock=clock))
    one, two = clients
    assert one.get(url + "/").status_code == 200
    full = two.get(url + "/")
    assert full.status_code == 503
    assert full.headers["Retry-After"] == "1"
    assert "default" in items(full, "RateLimit-Policy")
    clock.now = T0 + SECOND  # the first client's bucket is full again: it may be forgotten
    assert two.get(url + "/").status_code == 200


def test_several_bands_are_several_policies(serve, clients):
    clock = Clock()
    limiter = RateLimiter(bands=[Band(10, burst=3), Band("20/minute")], clock=clock)
    url = serve(limiter, legacy_headers=True)
    response = clients[0].get(url + "/")
    policies = items(response, "RateLimit-Policy")
    assert {name: (p["q"], p["w"]) for name, p in policies.items()} == {
        "default-1": (3, 1),
        "default-2": (20, 60),
    }
    # One limiter for everyone: no partition key.
    assert all("pk" not in p for p in policies.values())
    state = items(response, "RateLimit")
    # Each band its own r: 2 of 3 in the first, 19 of 20 in the second. The second's next
    # token is 3 s away (20 a minute): within 3 s no more than 19. The first's is 100 ms
    # away: no whole second says anything, so no t.
    assert state == {"default-1": {"r": 2}, "default-2": {"r": 19, "t": 3}}
    assert response.headers["X-RateLimit-Limit"] == "3"
    assert response.headers["X-RateLimit-Remaining"] == "2"
    assert response.headers["X-RateLimit-Reset"] == "1"


def test_exempt_paths_and_headers_off_on_allowed(serve, clients):
    clock = Clock()
    url = serve(KeyedRateLimiter(1, burst=1, clock=clock), headers_on_allowed=False)
    client = clients[0]
    first = client.get(url + "/")
    assert first.status_code == 200 and "RateLimit" not in first.headers
    assert client.get(url + "/").status_code == 429
    health = [client.get(url + "/health") for _ in range(3)]
    assert [r.status_code for r in health] == [200] * 3
    assert all("RateLimit" not in r.headers for r in health)


def test_routes_and_exempt_prefixes_match_the_path_the_client_sent(serve, clients):
    clock = Clock()
    url = serve(
        KeyedRateLimiter(1, burst=1, clock=clock),
        routes=[Route("/café", KeyedRateLimiter(1, burst=2, clock=clock))],
        exempt=["/übersicht"],
    )
    client = clients[0]
    # httpx sends /caf%C3%A9; the route's burst of 2 applies, not the default's 1.
    cafe = [client.get(url + "/café/menu") for _ in range(3)]
    assert [r.status_code for r in cafe] == [404, 404, 429]  # the example has no such page
    assert list(items(cafe[0], "RateLimit-Policy")) == ["/caf%C3%A9"]
    overview = [client.get(url + "/übersicht") for _ in range(3)]
    assert [r.status_code for r in overview] == [404] * 3
    assert all("RateLimit" not in r.headers for r in overview)
    # Not UTF-8 (é as the single latin-1 byte E9): read as /caf\ufffd, as the application
    # reads it, so it is not the route's but the default limit's, and nothing fails.
    not_utf8 = [client.get(url + "/caf%E9") for _ in range(2)]
    assert [r.status_code for r in not_utf8] == [404, 429]
    assert list(items(not_utf8[0], "RateLimit-Policy")) == ["default"]


def test_clients_behind_a_trusted_proxy_on_a_unix_socket_are_told_apart(serve, tmp_path):
    # As behind nginx proxying to a Unix socket: the server gives the peer no address.
    clock = Clock()
    trusting = str(tmp_path / "trusting.sock")
    serve(
        KeyedRateLimiter(2, burst=5, clock=clock), unix_listener(trusting), trusted_proxies=["unix"]
    )
    not_trusting = str(tmp_path / "not-trusting.sock")
    serve(KeyedRateLimiter(2, burst=5, clock=clock), unix_listener(not_trusting))

    def codes(path: str, forwarded_for: str) -> list[int]:
        with httpx.Client(transport=httpx.HTTPTransport(uds=path), timeout=10) as proxy:
            headers = {"X-Forwarded-For": forwarded_for}
            return [proxy.get("http://localhost/", headers=headers).status_code for _ in range(6)]

    # Trusted: each forwarded client has its own bucket.
    assert codes(trusting, "203.0.113.1") == [200] * 5 + [429]
    assert codes(trusting, "203.0.113.2:5678") == [200] * 5 + [429]
    # Not trusted: the header is ignored, and everyone behind the socket is one client.
    assert codes(not_trusting, "203.0.113.1") == [200] * 5 + [429]
    assert codes(not_trusting, "203.0.113.2") == [429] * 6


def test_on_a_dual_stack_listener_an_ipv4_peer_is_its_ipv4_address(serve, clients):
    # The server tells of 127.0.0.1 as ::ffff:127.0.0.1; it matches the trusted 127.0.0.1, and
    # the other client's key is 127.0.0.2, as on an IPv4 listener.
    clock = Clock()
    seen: list[str | None] = []
    url = serve(
        KeyedRateLimiter(2, burst=5, clock=clock),
        dual_stack_listener(),
        trusted_proxies=["127.0.0.1"],
        exempt=lambda info: seen.append(info.client),
    )
    proxy, other = clients
    for address in ("203.0.113.1", "203.0.113.2"):
        responses = [proxy.get(url + "/", headers={"X-Forwarded-For": address}) for _ in range(6)]
        assert [r.status_code for r in responses] == [200] * 5 + [429]
    assert other.get(url + "/").status_code == 200
    assert seen == ["203.0.113.1"] * 6 + ["203.0.113.2"] * 6 + ["127.0.0.2"]
