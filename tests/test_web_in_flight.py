"""``max_in_flight=``: how many requests at once, under real servers (uvicorn and waitress).

The applications here count the views running for each client, and hold each view on a gate the
test opens: so "at most 2 at once" is read from the application itself, and a request is known
to hold its seat because its view is still running (or its body still streaming). Nothing is
timed: the test waits, each time in a loop bounded in count and time, for a state it can see
(a view running, a response answered, a seat given back).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")

pytest.importorskip("uvicorn")
pytest.importorskip("waitress")
import httpx
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.concurrency import (
    ConcurrencyLimiter,
    KeyedConcurrencyLimiter,
)
from protocol_in_code.qos.limiter import RateLimiter
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware
from web_servers import Uvicorn, Waitress

#: The longest any wait here may take before the test fails: a bound, not a timing.
PATIENCE = 10.0


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait, bounded in time, for ``condition``; fail naming ``what`` if it never holds."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.005)


class Views:
    """What the application's views share: the views running per client, the most seen at
    once, and the gate they wait on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.gate = threading.Event()
        self.left = threading.Event()

    def enter(self, client: str) -> None:
        with self.lock:
            self.running[client] = self.running.get(client, 0) + 1
            self.most[client] = max(self.most.get(client, 0), self.running[client])

    def leave(self, client: str) -> None:
        with self.lock:
            self.running[client] -= 1

    def now(self, client: str) -> int:
        with self.lock:
            return self.running.get(client, 0)


def asgi_app(views: Views) -> Any:
    """``/slow`` waits at the gate; ``/stream`` sends a first part, waits at the gate, sends
    the last; ``/hang`` sends a first part, reads the client's going, and then waits at the gate
    without ending; ``/after`` sends its whole body, then waits at the gate; anything else
    answers at once."""

    async def wait_for_gate() -> None:
        deadline = time.monotonic() + PATIENCE
        while not views.gate.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        client, path = scope["client"][0], scope["path"]
        start = {"type": "http.response.start", "status": 200, "headers": []}
        if path == "/slow":
            views.enter(client)
            try:
                await wait_for_gate()
            finally:
                views.leave(client)
            await send(start)
            await send({"type": "http.response.body", "body": b"slow"})
        elif path == "/after":  # the whole body sent, then work goes on (a background task)
            await send(start)
            await send({"type": "http.response.body", "body": b"sent"})
            views.enter(client)
            try:
                await wait_for_gate()
            finally:
                views.leave(client)
        elif path in ("/stream", "/hang"):
            await send(start)
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
            if path == "/hang":
                while (await receive())["type"] != "http.disconnect":
                    pass
                views.left.set()
                await wait_for_gate()
                return
            await wait_for_gate()
            await send({"type": "http.response.body", "body": b"last"})
        else:
            await send(start)
            await send({"type": "http.response.body", "body": b"fast"})

    return app


def wsgi_app(views: Views) -> Any:
    """The same routes, under WSGI (``/hang`` aside): ``/stream`` is a generator."""

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        client, path = environ["REMOTE_ADDR"], environ["PATH_INFO"]
        start_response("200 OK", [("Content-Type", "text/plain")])
        if path == "/slow":
            views.enter(client)
            try:
                views.gate.wait(PATIENCE)
            finally:
                views.leave(client)
            return [b"slow"]
        if path == "/stream":
            return streamed()
        return [b"fast"]

    def streamed() -> Iterator[bytes]:
        yield b"first"
        views.gate.wait(PATIENCE)
        yield b"last"

    return app


Serve = Callable[..., str]


@pytest.fixture(params=["asgi+uvicorn", "wsgi+waitress"])
def serve(request: pytest.FixtureRequest) -> Iterator[Serve]:
    """``serve(views, **options)``: the application of ``views`` behind the middleware of
    ``options``, served; its URL."""
    started: list[Any] = []

    def start(views: Views, **options: Any) -> str:
        if request.param.startswith("asgi"):
            server: Any = Uvicorn(ASGIMiddleware(asgi_app(views), **options))
        else:
            server = Waitress(WSGIMiddleware(wsgi_app(views), **options), threads=8)
        started.append(server.start())
        return str(server.url)

    yield start
    for server in started:
        server.stop()


def client_at(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=PATIENCE)


def in_threads(calls: list[Callable[[], httpx.Response]]) -> tuple[list[Any], list[Any]]:
    """Start each call in a thread; the list their responses go into, and the threads."""
    answered: list[Any] = []

    def run(call: Callable[[], httpx.Response]) -> None:
        answered.append(call())

    threads = [threading.Thread(target=run, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    return answered, threads


def test_a_slow_route_never_runs_more_than_max_in_flight_views_at_once_per_client(
    serve: Serve,
) -> None:
    views = Views()
    url = serve(views, max_in_flight=2)
    one, two = client_at("127.0.0.1"), client_at("127.0.0.2")
    calls = [lambda: one.get(url + "/slow") for _ in range(4)]
    calls += [lambda: two.get(url + "/slow") for _ in range(2)]
    answered, threads = in_threads(calls)
    # Two of the first client's four requests are refused at once; the others wait at the gate.
    eventually(lambda: len(answered) == 2, "two requests refused")
    eventually(lambda: views.now("127.0.0.1") == 2, "two views of the first client running")
    eventually(lambda: views.now("127.0.0.2") == 2, "two views of the second client running")
    for refused in answered:
        assert refused.status_code == 429
        assert "retry-after" not in refused.headers
    views.gate.set()
    for thread in threads:
        thread.join(PATIENCE)
    assert sorted(r.status_code for r in answered) == [200, 200, 200, 200, 429, 429]
    assert views.most == {"127.0.0.1": 2, "127.0.0.2": 2}
    # Every seat was given back: the client has its two again.
    views.gate.clear()
    again, threads = in_threads([lambda: one.get(url + "/slow") for _ in range(2)])
    eventually(lambda: views.now("127.0.0.1") == 2, "two views running again")
    views.gate.set()
    for thread in threads:
        thread.join(PATIENCE)
    assert [r.status_code for r in again] == [200, 200]


def test_a_streaming_response_holds_its_seat_to_its_last_part(serve: Serve) -> None:
    views = Views()
    seats = KeyedConcurrencyLimiter(2)
    url = serve(views, max_in_flight=seats)
    probe = client_at("127.0.0.1")
    with contextlib.ExitStack() as open_streams:
        streams = []
        for client in [client_at("127.0.0.1") for _ in range(2)]:
            stream = open_streams.enter_context(client.stream("GET", url + "/stream"))
            parts = stream.iter_raw()
            assert next(parts) == b"first"
            streams.append(parts)
        refused = probe.get(url + "/fast")
        assert refused.status_code == 429, "a third request while two streams are open"
        assert seats.in_flight == 2
        views.gate.set()
        for parts in streams:
            assert b"".join(parts) == b"last"
    eventually(lambda: seats.in_flight == 0, "both streams' seats given back")
    assert probe.get(url + "/fast").status_code == 200


def test_a_client_that_goes_gives_its_seat_back_though_the_view_goes_on() -> None:
    views = Views()
    seats = ConcurrencyLimiter(1)
    server = Uvicorn(ASGIMiddleware(asgi_app(views), max_in_flight=seats)).start()
    try:
        client = client_at("127.0.0.1")
        with client.stream("GET", server.url + "/hang") as stream:
            parts = stream.iter_raw()  # kept: a part iterator dropped closes the connection
            assert next(parts) == b"first"
            assert seats.in_flight == 1
            assert client_at("127.0.0.2").get(server.url + "/fast").status_code == 503
        client.close()  # the connection itself goes: the server tells the application
        eventually(views.left.is_set, "the application told of the client's going")
        eventually(lambda: seats.in_flight == 0, "the seat given back")
        # The view is still waiting at the gate; the seat is free all the same.
        assert client_at("127.0.0.2").get(server.url + "/fast").status_code == 200
    finally:
        views.gate.set()
        server.stop()


def test_the_seat_is_given_back_once_the_body_is_sent_though_the_application_goes_on() -> None:
    views = Views()
    seats = ConcurrencyLimiter(1)
    server = Uvicorn(ASGIMiddleware(asgi_app(views), max_in_flight=seats)).start()
    try:
        client = client_at("127.0.0.1")
        assert client.get(server.url + "/after").text == "sent"
        eventually(lambda: views.now("127.0.0.1") == 1, "the work after the body running")
        eventually(lambda: seats.in_flight == 0, "the seat given back")
        assert client.get(server.url + "/fast").status_code == 200
    finally:
        views.gate.set()
        server.stop()


# ---------------------------------------------------------------------------------------------
# The framework forms: each holds the seat until its response's body has been sent
# ---------------------------------------------------------------------------------------------


def streamed(views: Views) -> Iterator[bytes]:
    """A body whose last part waits at the gate."""
    yield b"first"
    views.gate.wait(PATIENCE)
    yield b"last"


def fastapi_form(views: Views, seats: Any) -> Any:
    from fastapi import Depends, FastAPI
    from fastapi.responses import PlainTextResponse, StreamingResponse
    from protocol_in_code.qos.for_fastapi import RateLimit, rate_limit_exceeded_handler
    from protocol_in_code.qos.for_fastapi import RateLimitExceeded as Exceeded

    app = FastAPI()
    app.add_exception_handler(Exceeded, rate_limit_exceeded_handler)
    limited = [Depends(RateLimit(RateLimiter(1000), max_in_flight=seats))]

    @app.get("/stream", dependencies=limited)
    def stream() -> StreamingResponse:
        return StreamingResponse(streamed(views))

    @app.get("/fast", dependencies=limited)
    async def fast() -> PlainTextResponse:
        return PlainTextResponse("fast")

    return app


def flask_form(views: Views, seats: Any) -> Any:
    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask(__name__)
    limited = limit(RateLimiter(1000), max_in_flight=seats)

    @app.get("/stream")
    @limited
    def stream() -> Any:
        return app.response_class(streamed(views))

    @app.get("/fast")
    @limited
    def fast() -> str:
        return "fast"

    return app


def django_form(views: Views, seats: Any, form: str) -> Any:
    import web_django_app
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.http import HttpResponse, StreamingHttpResponse
    from django.urls import clear_url_caches, path
    from protocol_in_code.qos.for_django import limit

    web_django_app.configure()

    def stream(request: Any) -> Any:
        return StreamingHttpResponse(streamed(views))

    def fast(request: Any) -> Any:
        return HttpResponse(b"fast")

    if form == "decorator":
        limited = limit(RateLimiter(1000), max_in_flight=seats)
        stream, fast = limited(stream), limited(fast)
        settings.MIDDLEWARE = []
    else:
        options = {"limiter": RateLimiter(1000), "max_in_flight": seats}
        web_django_app.Limited.options = options
        settings.MIDDLEWARE = ["web_django_app.Limited"]
    web_django_app.urlpatterns[:] = [path("stream", stream), path("fast", fast)]
    clear_url_caches()
    return WSGIHandler()


@pytest.mark.parametrize(
    "form", ["fastapi+uvicorn", "flask+waitress", "django-decorator+waitress", "django-mw+waitress"]
)
def test_each_framework_form_holds_the_seat_until_its_stream_ends(form: str) -> None:
    pytest.importorskip(form.split("+")[0].split("-")[0])
    views = Views()
    seats = KeyedConcurrencyLimiter(1)
    if form.startswith("fastapi"):
        server: Any = Uvicorn(fastapi_form(views, seats))
    elif form.startswith("flask"):
        server = Waitress(flask_form(views, seats))
    else:
        server = Waitress(django_form(views, seats, form[len("django-") :].split("+")[0]))
    server.start()
    try:
        client, probe = client_at("127.0.0.1"), client_at("127.0.0.1")
        with client.stream("GET", server.url + "/stream") as stream:
            parts = stream.iter_raw()
            assert next(parts) == b"first"
            refused = probe.get(server.url + "/fast")
            assert refused.status_code == 429, "a second request while the stream is open"
            assert "retry-after" not in refused.headers
            views.gate.set()
            assert b"".join(parts) == b"last"
        eventually(lambda: seats.in_flight == 0, "the stream's seat given back")
        assert probe.get(server.url + "/fast").text == "fast"
        eventually(lambda: seats.in_flight == 0, "the second request's seat given back")
    finally:
        views.gate.set()
        server.stop()


@pytest.mark.parametrize("form", ["decorator", "middleware"])
def test_django_under_asgi_seats_an_async_view(form: str) -> None:
    """Django's asynchronous paths: the ``async def`` view's decorator, and the middleware in
    an asynchronous chain, both served by uvicorn."""
    pytest.importorskip("django")
    import web_django_app
    from django.conf import settings
    from django.core.handlers.asgi import ASGIHandler
    from django.http import HttpResponse
    from django.urls import clear_url_caches, path
    from protocol_in_code.qos.for_django import limit

    web_django_app.configure()
    views, seats = Views(), KeyedConcurrencyLimiter(1)

    async def slow(request: Any) -> Any:
        views.enter("django")
        deadline = time.monotonic() + PATIENCE
        while not views.gate.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        views.leave("django")
        return HttpResponse(b"slow")

    if form == "decorator":
        slow = limit(RateLimiter(1000), max_in_flight=seats)(slow)
        settings.MIDDLEWARE = []
    else:
        web_django_app.Limited.options = {"limiter": RateLimiter(1000), "max_in_flight": seats}
        settings.MIDDLEWARE = ["web_django_app.Limited"]
    web_django_app.urlpatterns[:] = [path("slow", slow)]
    clear_url_caches()
    server = Uvicorn(ASGIHandler()).start()
    try:
        client = client_at("127.0.0.1")
        answered, threads = in_threads([lambda: client.get(server.url + "/slow")])
        eventually(lambda: views.now("django") == 1, "the first view running")
        assert client_at("127.0.0.1").get(server.url + "/slow").status_code == 429
        views.gate.set()
        for thread in threads:
            thread.join(PATIENCE)
        assert [r.status_code for r in answered] == [200]
        eventually(lambda: seats.in_flight == 0, "the seat given back")
    finally:
        views.gate.set()
        server.stop()
