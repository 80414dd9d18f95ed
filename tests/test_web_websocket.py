"""A refused WebSocket handshake is told why and for how long, under every uvicorn WebSocket
implementation.

A WebSocket closed before it is accepted becomes, in the server, a bare HTTP 403: no
``Retry-After``, no RateLimit fields, no body. Where the server offers ASGI's denial response
(``websocket.http.response``), the middleware sends the refusal an HTTP request gets instead:
429 (or 503), ``Retry-After``, the fields and the body. Where it does not, the handshake is
accepted and at once closed with 1008 and a reason naming the wait. An allowed handshake's
``101`` carries the RateLimit fields.

uvicorn runs as a process (``--ws websockets``, ``websockets-sansio``, the default when
``websockets`` is installed, and ``wsproto``) on a socket the test binds and hands it, and the
``websockets`` client makes the handshakes. The extension is hidden from the middleware by the
served application itself (``web_websocket_app``) to reach the other path under the same
servers. The in-memory tests drive both paths message by message; with servers of ASGI spec
versions before 2.3 (or none said, as daphne), which can send neither headers on the ``101``
nor a close reason, and where a refusal is closed before it is accepted, as it always was;
with refusals of other kinds (a cost above the burst, a full keyed table); and with a client
that leaves before its answer.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi")
pytest.importorskip("uvicorn")
pytest.importorskip("wsproto")
pytest.importorskip("websockets")
http_sf = pytest.importorskip("http_sf")
import httpx  # noqa: E402
from protocol_in_code.qos.asgi import RateLimitMiddleware  # noqa: E402
from protocol_in_code.qos.keyed import KeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.limiter import RateLimiter  # noqa: E402
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK, InvalidStatus  # noqa: E402
from websockets.sync.client import ClientConnection, connect  # noqa: E402

STARTUP_SECONDS = 30.0
TIMEOUT = 10.0
IMPLEMENTATIONS = ["websockets", "websockets-sansio", "wsproto"]
#: One an hour: a refused handshake waits about the hour (less the time the test took, so
#: the bounds below are wide: no timing is asserted).
HOUR = 3600


def _open(url: str) -> ClientConnection:
    """A WebSocket handshake with ``url``. The socket listens before the server starts, so a
    handshake made while uvicorn is still starting waits in the backlog: it is given the
    server's start-up time, not refused."""
    return connect(url, open_timeout=STARTUP_SECONDS, proxy=None)


@pytest.fixture
def uvicorn_ws() -> Iterator[Callable[..., str]]:
    """``start(implementation, hide_extension=False)``: ``web_websocket_app`` served by a uvicorn
    process with that ``--ws`` implementation; its address, ``127.0.0.1:port``."""
    started: list[tuple[subprocess.Popen[bytes], socket.socket]] = []

    def start(implementation: str, hide_extension: bool = False) -> str:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        env = dict(os.environ, QOS_WS_HIDE_EXTENSION="1" if hide_extension else "0")
        server = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", "--factory", "web_websocket_app:create_app",
                "--app-dir", str(qos_support.REPO_ROOT / "tests"),
                "--fd", str(listener.fileno()), "--ws", implementation,
                "--lifespan", "off", "--log-level", "warning", "--no-access-log",
            ],
            env=env,
            pass_fds=[listener.fileno()],
            start_new_session=True,
        )  # fmt: skip
        started.append((server, listener))
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for server, listener in started:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(STARTUP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        listener.close()


def _allowed(address: str) -> dict[str, str]:
    """The first handshake, which the burst of 1 allows: the application runs (it says hello and
    closes normally); the ``101``'s RateLimit fields."""
    with _open(f"ws://{address}/chat") as ws:
        assert ws.recv(timeout=TIMEOUT) == "hello"
        with pytest.raises(ConnectionClosedOK) as closed:
            ws.recv(timeout=TIMEOUT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
        return {k.lower(): v for k, v in ws.response.headers.raw_items()}


def _policy_and_quota(fields: dict[str, str]) -> tuple[Any, Any]:
    """``RateLimit-Policy`` and ``RateLimit``, each parsed as a Structured Field list."""
    return (
        http_sf.parse(fields["ratelimit-policy"].encode(), tltype="list"),
        http_sf.parse(fields["ratelimit"].encode(), tltype="list"),
    )


def _item(parsed: Any) -> tuple[str, dict[str, Any]]:
    """The one item of a parsed list: its name and parameters."""
    [(name, parameters)] = parsed
    return str(name), dict(parameters)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_a_refused_handshake_gets_the_429_an_http_request_gets(uvicorn_ws, implementation):
    address = uvicorn_ws(implementation)
    allowed = _allowed(address)
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://{address}/chat", open_timeout=TIMEOUT, proxy=None)
    response = refused.value.response
    fields = {k.lower(): v for k, v in response.headers.raw_items()}
    assert response.status_code == 429
    assert HOUR // 2 < int(fields["retry-after"]) <= HOUR
    policy, quota = _policy_and_quota(fields)
    assert _item(policy) == ("ws", {"q": 1, "w": HOUR})
    name, parameters = _item(quota)
    assert name == "ws" and parameters["r"] == 0
    assert 0 < parameters["t"] <= int(fields["retry-after"])
    assert fields["content-type"] == "text/plain; charset=utf-8"
    assert bytes(response.body) == b"Too Many Requests\n"

    # An HTTP request to the same limit is refused with the same status, fields and body.
    http = httpx.get(f"http://{address}/chat", timeout=TIMEOUT)
    assert http.status_code == response.status_code
    assert http.headers["ratelimit-policy"] == fields["ratelimit-policy"]
    assert http.headers["content-type"] == fields["content-type"]
    assert http.content == bytes(response.body)
    assert HOUR // 2 < int(http.headers["retry-after"]) <= HOUR

    # The allowed handshake's 101 said the policy and what was left of it.
    policy, quota = _policy_and_quota(allowed)
    assert _item(policy) == ("ws", {"q": 1, "w": HOUR})
    assert _item(quota)[1]["r"] == 0 and "retry-after" not in allowed


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_without_the_extension_a_refused_handshake_is_accepted_then_closed_with_1008(
    uvicorn_ws, implementation
):
    address = uvicorn_ws(implementation, hide_extension=True)
    allowed = _allowed(address)

    with _open(f"ws://{address}/chat") as ws:
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=TIMEOUT)
        fields = {k.lower(): v for k, v in ws.response.headers.raw_items()}
    received = closed.value.rcvd
    assert received is not None and received.code == 1008
    retry = int(fields["retry-after"])
    assert HOUR // 2 < retry <= HOUR
    assert received.reason == f"Too Many Requests; retry after {retry} s"
    _, quota = _policy_and_quota(fields)
    assert _item(quota)[1]["r"] == 0
    assert "ratelimit" in allowed and "retry-after" not in allowed


# In memory: the messages themselves.

SECOND = 1_000_000_000


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "websocket.accept"})


def _handshake(
    app: Any,
    *,
    extension: bool,
    spec_version: str | None = "2.4",
    first: str = "websocket.connect",
    client: str = "192.0.2.1",
) -> list[dict[str, Any]]:
    """What ``app`` sends for one WebSocket handshake, from a server that offers the denial
    response or not, and says ``spec_version`` (or no version); ``first`` is the first
    message the server gives the application."""
    sent: list[dict[str, Any]] = []
    received = 0

    async def receive() -> dict[str, Any]:
        nonlocal received
        received += 1
        return {"type": first if received == 1 else "websocket.disconnect", "code": 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope: dict[str, Any] = {
        "type": "websocket",
        "path": "/chat",
        "headers": [],
        "client": (client, 5000),
        "extensions": {"websocket.http.response": {}} if extension else {},
    }
    if spec_version is not None:
        scope["asgi"] = {"version": "3.0", "spec_version": spec_version}
    asyncio.run(app(scope, receive, send))
    return sent


def _limited(limiter: Any, **options: Any) -> RateLimitMiddleware:
    return RateLimitMiddleware(_hello, limiter, name="ws", websocket=True, **options)


def _fixed_clock() -> Callable[[], int]:
    return lambda: 1_000 * SECOND


def test_in_memory_a_refusal_is_the_denial_response_where_the_server_offers_it():
    app = _limited(RateLimiter(1, burst=1, per=60, clock=_fixed_clock()))
    assert _handshake(app, extension=True)[0]["type"] == "websocket.accept"
    start, body = _handshake(app, extension=True)
    assert start == {
        "type": "websocket.http.response.start",
        "status": 429,
        "headers": [
            (b"retry-after", b"60"),
            (b"ratelimit-policy", b'"ws";q=1;w=60'),
            (b"ratelimit", b'"ws";r=0;t=60'),
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"18"),
        ],
    }
    assert body == {"type": "websocket.http.response.body", "body": b"Too Many Requests\n"}


def test_in_memory_a_refusal_is_accept_then_close_1008_where_the_extension_is_absent():
    app = _limited(RateLimiter(1, burst=1, per=60, clock=_fixed_clock()))
    _handshake(app, extension=False)
    assert _handshake(app, extension=False) == [
        {
            "type": "websocket.accept",
            "headers": [
                (b"retry-after", b"60"),
                (b"ratelimit-policy", b'"ws";q=1;w=60'),
                (b"ratelimit", b'"ws";r=0;t=60'),
            ],
        },
        {"type": "websocket.close", "code": 1008, "reason": "Too Many Requests; retry after 60 s"},
    ]
    assert _handshake(app, extension=False, spec_version="2.3")[1]["code"] == 1008
    # A server before ASGI spec 2.3 (or one that says no version, as daphne) sends no reason:
    # the handshake is closed before it is accepted, which the server makes a 403.
    for version in (None, "2.0", "2.2"):
        assert _handshake(app, extension=False, spec_version=version) == [
            {"type": "websocket.close", "code": 1008}
        ]


def test_in_memory_an_allowed_handshake_carries_the_fields_where_accept_takes_headers():
    clock = _fixed_clock()
    accepted = _handshake(_limited(RateLimiter(1, burst=5, clock=clock)), extension=True)
    assert accepted == [
        {
            "type": "websocket.accept",
            "headers": [(b"ratelimit-policy", b'"ws";q=5;w=5'), (b"ratelimit", b'"ws";r=4;t=1')],
        }
    ]
    for version in (None, "2.0"):
        app = _limited(RateLimiter(1, burst=5, clock=clock))
        assert _handshake(app, extension=True, spec_version=version) == [
            {"type": "websocket.accept"}
        ]
    quiet = _limited(RateLimiter(1, burst=5, clock=clock), headers_on_allowed=False)
    assert _handshake(quiet, extension=True) == [{"type": "websocket.accept"}]

    # An application that answers a handshake with a denial response of its own: the fields
    # are on it, as on any response, whatever the spec version.
    async def deny(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.http.response.start", "status": 401, "headers": []})
        await send({"type": "websocket.http.response.body", "body": b""})

    denying = RateLimitMiddleware(deny, RateLimiter(1, burst=5, clock=clock), websocket=True)
    start, _ = _handshake(denying, extension=True, spec_version=None)
    assert start["status"] == 401
    assert [name for name, _ in start["headers"]] == [b"ratelimit-policy", b"ratelimit"]


def test_in_memory_other_refusals_say_their_own_status_and_wait():
    clock = _fixed_clock()
    # A cost above the burst can never pass: a 429 without Retry-After, a reason without a wait.
    never = _limited(RateLimiter(1, burst=1, clock=clock), cost=lambda info: 2)
    assert _handshake(never, extension=False)[1] == {
        "type": "websocket.close",
        "code": 1008,
        "reason": "Too Many Requests",
    }
    start, _ = _handshake(never, extension=True)
    assert start["status"] == 429 and b"retry-after" not in dict(start["headers"])
    # A full keyed table: the server is out of room, a 503 with the wait for a slot.
    full = _limited(KeyedRateLimiter(1, burst=1, max_keys=1, clock=clock))
    _handshake(full, extension=True, client="192.0.2.1")
    closed = _handshake(full, extension=False, client="192.0.2.2")[1]
    assert closed["reason"].startswith("Service Unavailable; retry after ")
    start, _ = _handshake(full, extension=True, client="192.0.2.2")
    assert start["status"] == 503
    # The problem document, where asked for, is the body of the denial response too.
    problem = _limited(RateLimiter(1, burst=1, clock=clock), problem_json=True)
    _handshake(problem, extension=True)
    start, body = _handshake(problem, extension=True)
    assert (b"content-type", b"application/problem+json") in start["headers"]
    assert b'"violated-policies": ["ws"]' in body["body"]


def test_in_memory_a_client_that_left_before_its_refusal_is_sent_nothing():
    app = _limited(RateLimiter(1, burst=1, per=60, clock=_fixed_clock()))
    _handshake(app, extension=True)
    for extension in (True, False):
        assert _handshake(app, extension=extension, first="websocket.disconnect") == []
