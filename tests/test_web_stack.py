"""The middleware's ``stack=True``: every matching limit decides a request together, in real
servers.

A global limit (the middleware's ``limiter``), a route's and a client's apply at once; a
request is taken from all of them or from none, the RateLimit fields list every policy, and a
refusal names every violated one. The FastAPI example runs under uvicorn and the Flask one
under waitress; the limiters read a clock the test holds.
"""

from __future__ import annotations

import json
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
from web_servers import Uvicorn, Waitress  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "examples" / "web"))

import fastapi_app  # noqa: E402
import flask_app  # noqa: E402
from protocol_in_code.qos import Band, KeyedRateLimiter, RateLimiter  # noqa: E402
from protocol_in_code.qos.asgi import DecisionEvent, RequestInfo, Route  # noqa: E402
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware  # noqa: E402
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware  # noqa: E402

SECOND = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * SECOND

    def __call__(self) -> int:
        return self.now


@pytest.fixture(params=["fastapi+uvicorn", "flask+waitress"])
def serve(request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    """``serve(limiter, **options)``: the example app around ``limiter``; its URL."""
    started: list[Any] = []

    def start(limiter: Any, **options: Any) -> str:
        if request.param.startswith("fastapi"):
            server: Any = Uvicorn(fastapi_app.create_app(limiter, **options))
        else:
            server = Waitress(flask_app.create_app(limiter, **options))
        started.append(server.start())
        return str(server.url)

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def items(response: httpx.Response, field: str) -> dict[str, dict[str, Any]]:
    """{policy name: parameters}, without ``pk``, read by a Structured Field parser."""
    parsed = http_sf.parse(response.headers[field].encode("ascii"), tltype="list")
    return {name: {k: v for k, v in p.items() if k != "pk"} for name, p in parsed}


def by_client(info: RequestInfo) -> str:
    return info.headers.get("x-client", "anonymous")


def test_a_client_refused_spends_nothing_of_the_global_limit(serve, client):
    clock = Clock()
    everyone = RateLimiter(1, burst=5, per=60, clock=clock)
    per_client = KeyedRateLimiter(1, burst=2, per=60, clock=clock)
    events: list[DecisionEvent] = []
    url = serve(
        everyone,
        name="global",
        routes=[Route("/", per_client, name="client")],
        key=by_client,
        stack=True,
        problem_json=True,
        on_decision=events.append,
    )
    first = [client.get(url + "/", headers={"X-Client": "a"}) for _ in range(4)]
    assert [r.status_code for r in first] == [200, 200, 429, 429]
    # Two refusals of client a took nothing from the global limit: 3 of 5 left for the others.
    others = [client.get(url + "/", headers={"X-Client": c}).status_code for c in "bcbcd"]
    assert others == [200, 200, 200, 429, 429]
    assert everyone.available() == 0
    # Every policy is listed, each with its own r.
    assert items(first[0], "RateLimit-Policy") == {
        "client": {"q": 2, "w": 120},
        "global": {"q": 5, "w": 300},
    }
    assert items(first[1], "RateLimit") == {
        "client": {"r": 0, "t": 60},
        "global": {"r": 3, "t": 60},
    }
    # The refusal names the policy that refused, and the request's wait is that policy's.
    refused = first[2]
    assert refused.headers["Retry-After"] == "60"
    assert json.loads(refused.content)["violated-policies"] == ["client"]
    assert items(refused, "RateLimit") == {"client": {"r": 0, "t": 60}, "global": {"r": 3, "t": 60}}
    # The hook hears of each limit's own answer.
    assert [(e.policy, e.outcome.name) for e in events[4:6]] == [
        ("client", "DENIED"),
        ("global", "ALLOWED"),
    ]


def test_a_refusal_names_every_policy_it_broke(serve, client):
    clock = Clock()
    everyone = RateLimiter(1, burst=1, per=60, clock=clock)
    search = KeyedRateLimiter(bands=[Band(1, burst=1, per=60), Band(10, burst=10, per=3600)])
    url = serve(
        everyone,
        name="global",
        routes=[Route("/", search, name="search")],
        stack=True,
        problem_json=True,
    )
    assert client.get(url + "/").status_code == 200
    refused = client.get(url + "/")
    assert refused.status_code == 429
    assert json.loads(refused.content)["violated-policies"] == ["search-1", "global"]
    assert set(items(refused, "RateLimit-Policy")) == {"search-1", "search-2", "global"}


def test_a_route_without_a_limiter_exempts_the_request_from_every_limit(serve, client):
    everyone = RateLimiter(1, burst=1, per=60, clock=Clock())
    url = serve(
        everyone,
        routes=[Route("/health", None)],
        exempt=[],
        stack=True,
    )
    assert [client.get(url + "/health").status_code for _ in range(3)] == [200] * 3
    assert "RateLimit" not in client.get(url + "/health").headers
    assert [client.get(url + "/").status_code for _ in range(2)] == [200, 429]


async def app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b""]


@pytest.mark.parametrize(
    ("middleware", "inner"), [(ASGIMiddleware, app), (WSGIMiddleware, wsgi_app)]
)
def test_stacked_limits_must_have_names_of_their_own(middleware: Any, inner: Any) -> None:
    limiter = RateLimiter(10)
    with pytest.raises(ValueError, match="policy name"):
        middleware(inner, limiter=limiter, routes=[Route("/", limiter, name="default")], stack=True)
    # Without stack=True only one limit applies to a request, and names may repeat.
    middleware(inner, limiter=limiter, routes=[Route("/", limiter, name="default")])


def test_shadow_mode_decides_every_limit_and_refuses_nothing() -> None:
    clock = Clock()
    everyone = RateLimiter(1, burst=1, per=60, clock=clock)
    middleware = WSGIMiddleware(
        wsgi_app,
        limiter=everyone,
        name="global",
        routes=[Route("/", KeyedRateLimiter(1, burst=1, per=60, clock=clock), name="client")],
        stack=True,
        enforce=False,
    )
    answered: list[tuple[str, dict[str, str]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> None:
        answered.append((status, dict(headers)))

    for _ in range(2):
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"}
        middleware(environ, start_response)
    assert [status for status, _ in answered] == ["200 OK", "200 OK"]
    second = answered[1][1]
    assert "Retry-After" not in second
    assert second["RateLimit"].startswith('"client";r=0')
