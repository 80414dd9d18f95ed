"""``max_in_flight=``, in process: what a seat costs and when it is given back.

* the errors name the parameter and the value, in every form;
* the order with rate limits: a request they refuse takes no seat; one refused for a seat keeps
  its tokens spent; the refusal's status, fields and body;
* the seams: an application that raises, a task cancelled, a WSGI response closed (or whose own
  ``close()`` raises), an asyncio in-flight limiter whose lease is awaited;
* a hypothesis property: requests started, finished and cancelled at random through the ASGI
  middleware are admitted exactly when a model of seats per client says so.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")

from hypothesis import given, settings
from hypothesis import strategies as st
from protocol_in_code.qos import for_django, for_fastapi, for_flask
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.capabilities import Misfit
from protocol_in_code.qos.concurrency import ConcurrencyLimiter, KeyedConcurrencyLimiter
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware
from protocol_in_code.qos.wsgi import Seated
from test_web_middleware import _ok_asgi, _ok_wsgi, _request

# ---------------------------------------------------------------------------------------------
# Errors name the parameter and the value
# ---------------------------------------------------------------------------------------------


async def _never(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called")


FORMS = {
    "asgi": lambda **options: ASGIMiddleware(_never, RateLimiter(5), **options),
    "wsgi": lambda **options: WSGIMiddleware(_ok_wsgi, RateLimiter(5), **options),
    "fastapi": lambda **options: for_fastapi.RateLimit(RateLimiter(5), **options),
    "flask": lambda **options: for_flask.limit(RateLimiter(5), **options),
    "django": lambda **options: for_django.limit(RateLimiter(5), **options),
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    ("given", "error", "words"),
    [
        (0, ValueError, r"max_in_flight must be at least 1, not 0"),
        (-3, ValueError, r"max_in_flight must be at least 1, not -3"),
        (True, TypeError, r"max_in_flight must be an int .* not True"),
        ("2", TypeError, r"max_in_flight must be an int .* not '2'"),
        (2.5, TypeError, r"max_in_flight must be an int .* not 2.5"),
        (RateLimiter(5), TypeError, r"max_in_flight must be .* rate limiter"),
        (object(), TypeError, r"max_in_flight must be .*: object has no limit"),
    ],
)
def test_a_wrong_max_in_flight_is_named_with_its_value(
    form: str, given: Any, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        FORMS[form](max_in_flight=given)


class AsyncSeats:
    """A toy asyncio in-flight limiter of one limit: a :class:`ConcurrencyLimiter` whose calls
    and whose leases' ``release`` are awaited, as a store behind a server would have them."""

    def __init__(self, limit: int) -> None:
        self.inner = ConcurrencyLimiter(limit)
        self.released = 0

    @property
    def limit(self) -> int:
        return self.inner.limit

    async def try_acquire(self, n: int = 1) -> AsyncLease | None:
        await asyncio.sleep(0)
        lease = self.inner.try_acquire(n)
        return None if lease is None else AsyncLease(self, lease)

    async def acquire(self, n: int = 1, timeout: float | None = None) -> AsyncLease | None:
        return await self.try_acquire(n)


class AsyncLease:
    def __init__(self, seats: AsyncSeats, lease: Any) -> None:
        self.seats, self.lease = seats, lease

    @property
    def n(self) -> int:
        return int(self.lease.n)

    @property
    def token(self) -> int:
        return int(self.lease.token)

    async def release(self) -> None:
        await asyncio.sleep(0)
        if not self.lease.released:
            self.seats.released += 1
        self.lease.release()

    async def __aenter__(self) -> AsyncLease:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.release()


class BlockingSeats:
    """A toy synchronous in-flight limiter that declares its calls wait on the network."""

    blocks = Misfit("a toy in-flight limiter on a slow wire", "give it a fast one")

    def __init__(self) -> None:
        self.inner = ConcurrencyLimiter(1)
        self.limit = 1

    def try_acquire(self, n: int = 1) -> Any:
        return self.inner.try_acquire(n)

    def acquire(self, n: int = 1, timeout: float | None = None) -> Any:
        return self.inner.acquire(n, timeout)


def test_an_asyncio_in_flight_limiter_is_refused_where_it_cannot_be_awaited() -> None:
    for form in ("wsgi", "flask"):
        with pytest.raises(TypeError, match=r"max_in_flight: an asyncio limiter cannot serve"):
            FORMS[form](max_in_flight=AsyncSeats(1))
    with pytest.raises(TypeError, match=r"max_in_flight: an asyncio in-flight limiter"):
        FORMS["django"](max_in_flight=AsyncSeats(1))(lambda request: None)


def test_a_blocking_in_flight_limiter_is_refused_on_the_event_loop() -> None:
    for form in ("asgi", "fastapi"):
        with pytest.raises(TypeError, match=r"max_in_flight: a toy in-flight limiter on a slow"):
            FORMS[form](max_in_flight=BlockingSeats())
    assert _request(WSGIMiddleware(_ok_wsgi, max_in_flight=BlockingSeats()))[0] == 200


# ---------------------------------------------------------------------------------------------
# The order with rate limits, and the refusal
# ---------------------------------------------------------------------------------------------


async def _held(
    app: Any, client: str = "192.0.2.1", path: str = "/", gate: asyncio.Event | None = None
) -> tuple[asyncio.Task[None], list[dict[str, Any]]]:
    """A request through ``app`` started as a task (its view waiting on ``gate``), run until it
    is answered or its view waits; the task and the messages sent so far."""
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": path, "headers": [], "client": (client, 1)}
    scope["gate"] = gate if gate is not None else asyncio.Event()

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client never goes
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    task = asyncio.create_task(app(scope, receive, send))
    for _ in range(50):  # bounded: a few turns of the loop answer or reach the gate
        await asyncio.sleep(0)
    return task, sent


async def _gated(scope: Any, receive: Any, send: Any) -> None:
    """A view that waits on the request's gate, then answers 200."""
    scope["entered"] = True
    await scope["gate"].wait()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _status(sent: list[dict[str, Any]]) -> int | None:
    return sent[0]["status"] if sent else None


def _headers(sent: list[dict[str, Any]]) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in sent[0]["headers"]}


def test_a_request_the_rate_refuses_takes_no_seat_and_one_without_a_seat_keeps_its_tokens() -> None:
    async def scenario() -> None:
        rate = KeyedRateLimiter(1, burst=3)
        seats = KeyedConcurrencyLimiter(1)
        app = ASGIMiddleware(_gated, rate, max_in_flight=seats)
        first, sent = await _held(app)
        assert sent == [] and seats.in_flight == 1
        assert rate.available("192.0.2.1") == 2
        _, refused = await _held(app)
        assert _status(refused) == 429
        fields = _headers(refused)
        assert "retry-after" not in fields
        # The rate limit's fields: its token was taken, and is kept.
        assert fields["ratelimit"].startswith('"default";r=1;')
        assert rate.available("192.0.2.1") == 1
        _, third = await _held(app)
        assert _status(third) == 429 and rate.available("192.0.2.1") == 0
        _, by_rate = await _held(app)
        assert _status(by_rate) == 429 and "retry-after" in _headers(by_rate)
        assert seats.in_flight == 1  # the one request admitted, still running
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert seats.in_flight == 0

    asyncio.run(scenario())


def test_one_limit_for_everyone_refuses_with_503_and_a_problem_document_of_no_policy() -> None:
    async def scenario() -> None:
        seats = ConcurrencyLimiter(1)
        app = ASGIMiddleware(_gated, max_in_flight=seats, problem_json=True)
        first, _ = await _held(app, "192.0.2.1")
        _, refused = await _held(app, "192.0.2.2")
        assert _status(refused) == 503
        assert "retry-after" not in _headers(refused)
        problem = json.loads(refused[1]["body"])
        assert problem["type"] == "about:blank" and problem["status"] == 503
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)

    asyncio.run(scenario())


def test_enforce_false_lets_a_request_without_a_seat_through_holding_none() -> None:
    async def scenario() -> None:
        seats = KeyedConcurrencyLimiter(1)
        app = ASGIMiddleware(_gated, max_in_flight=seats, enforce=False)
        gate = asyncio.Event()
        first, _ = await _held(app, gate=gate)
        second, sent = await _held(app, gate=gate)
        assert sent == [] and seats.in_flight == 1  # the second runs, seatless
        gate.set()
        await asyncio.gather(first, second)
        assert seats.in_flight == 0

    asyncio.run(scenario())


def test_exempt_requests_and_a_key_of_none_take_no_seat() -> None:
    async def scenario() -> None:
        seats = KeyedConcurrencyLimiter(1)
        app = ASGIMiddleware(
            _gated,
            RateLimiter(100),
            max_in_flight=seats,
            exempt=["/health"],
            key=lambda info: None if info.path == "/anonymous" else info.client,
        )
        held = [await _held(app, path=path) for path in ("/health", "/anonymous", "/", "/")]
        assert [_status(sent) for _, sent in held] == [None, None, None, 429]
        assert seats.in_flight == 1
        for task, _ in held:
            task.cancel()
        await asyncio.gather(*(task for task, _ in held), return_exceptions=True)
        assert seats.in_flight == 0

    asyncio.run(scenario())


def test_the_routes_keep_their_rates_and_every_request_not_exempt_takes_a_seat() -> None:
    from protocol_in_code.qos.asgi import Route

    async def scenario() -> None:
        seats = KeyedConcurrencyLimiter(1)
        app = ASGIMiddleware(
            _gated,
            routes=[Route("/api", RateLimiter(100)), Route("/free", None)],
            max_in_flight=seats,
        )
        held = [await _held(app, path=path) for path in ("/free", "/other", "/api")]
        assert [_status(sent) for _, sent in held] == [None, None, 429]
        for task, _ in held:
            task.cancel()
        await asyncio.gather(*(task for task, _ in held), return_exceptions=True)
        assert seats.in_flight == 0

    asyncio.run(scenario())


# ---------------------------------------------------------------------------------------------
# Given back on every way out
# ---------------------------------------------------------------------------------------------


def test_an_application_that_raises_gives_its_seat_back_under_asgi_and_wsgi() -> None:
    async def failing_asgi(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("the view failed")

    def failing_wsgi(environ: Any, start_response: Any) -> Any:
        raise RuntimeError("the view failed")

    for make in (
        lambda seats: ASGIMiddleware(failing_asgi, max_in_flight=seats),
        lambda seats: WSGIMiddleware(failing_wsgi, max_in_flight=seats),
    ):
        # A lease that is released only when told: a native one dropped would be released too.
        events: list[str] = []
        seats = RecordedSeats(events)
        with pytest.raises(RuntimeError, match="the view failed"):
            _request(make(seats))
        assert events == ["released"]


def test_an_asyncio_in_flight_limiter_s_lease_is_awaited_when_given_back() -> None:
    async def scenario() -> None:
        seats = AsyncSeats(1)
        app = ASGIMiddleware(_ok_asgi, max_in_flight=seats)
        _, sent = await _held(app)
        assert _status(sent) == 200
        assert seats.released == 1 and seats.inner.in_flight == 0
        gate = asyncio.Event()
        app = ASGIMiddleware(_gated, max_in_flight=seats)
        first, _ = await _held(app, gate=gate)
        _, refused = await _held(app, "192.0.2.9")
        assert _status(refused) == 503
        first.cancel()  # a cancelled request still awaits its lease's release
        await asyncio.gather(first, return_exceptions=True)
        assert seats.released == 2 and seats.inner.in_flight == 0

    asyncio.run(scenario())


class Recorded:
    """A lease that records when it is released, in the order of ``events``."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def release(self) -> None:
        self.events.append("released")


class Closing:
    """A WSGI response whose ``close()`` is recorded, and may raise."""

    def __init__(self, events: list[str], fails: bool = False) -> None:
        self.events, self.fails = events, fails

    def __iter__(self) -> Iterator[bytes]:
        yield b"part"

    def close(self) -> None:
        self.events.append("closed")
        if self.fails:
            raise RuntimeError("close failed")


class RecordedSeats:
    """A toy synchronous in-flight limiter of one limit, whose every lease is :class:`Recorded`."""

    limit = 1

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def try_acquire(self, n: int = 1) -> Recorded:
        return Recorded(self.events)

    def acquire(self, n: int = 1, timeout: float | None = None) -> Recorded:
        return Recorded(self.events)


def test_a_wsgi_response_gives_its_seat_back_when_closed_after_its_own_close() -> None:
    events: list[str] = []
    seated = Seated(Closing(events), Recorded(events))
    assert list(seated) == [b"part"] and events == []
    seated.close()
    assert events == ["closed", "released"]
    events.clear()
    with pytest.raises(RuntimeError, match="close failed"):
        Seated(Closing(events, fails=True), Recorded(events)).close()
    assert events == ["closed", "released"]
    events.clear()
    Seated([b"a list has no close"], Recorded(events)).close()
    assert events == ["released"]


def test_the_wsgi_middleware_holds_the_seat_until_the_server_closes_the_response() -> None:
    seats = KeyedConcurrencyLimiter(1)
    app = WSGIMiddleware(_ok_wsgi, max_in_flight=seats)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "wsgi.input": io.BytesIO()}
    environ["REMOTE_ADDR"] = "192.0.2.1"
    statuses: list[str] = []
    response = app(dict(environ), lambda status, headers: statuses.append(status))
    assert b"".join(response) == b"ok" and seats.in_flight == 1  # sent, not yet closed
    refused = app(dict(environ), lambda status, headers: statuses.append(status))
    assert statuses == ["200 OK", "429 Too Many Requests"]
    assert list(refused) == [b"Too Many Requests\n"]
    response.close()  # type: ignore[attr-defined]
    assert seats.in_flight == 0


# ---------------------------------------------------------------------------------------------
# A model: seats per client, requests started, finished and cancelled at random
# ---------------------------------------------------------------------------------------------

CLIENTS = ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
steps = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sampled_from(CLIENTS)),
        st.tuples(st.sampled_from(["finish", "cancel"]), st.integers(0, 20)),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(limit=st.integers(1, 3), steps=steps)
def test_requests_are_admitted_exactly_as_a_model_of_seats_per_client_says(
    limit: int, steps: list[tuple[str, Any]]
) -> None:
    """The model: each client has ``limit`` seats; a request is admitted when its client has
    one free, and gives it back when it finishes or is cancelled."""

    async def scenario() -> None:
        seats = KeyedConcurrencyLimiter(limit)
        app = ASGIMiddleware(_gated, max_in_flight=seats)
        running: list[tuple[str, asyncio.Task[None], asyncio.Event, list[Any]]] = []
        model: dict[str, int] = dict.fromkeys(CLIENTS, 0)
        for step, value in steps:
            if step == "start":
                gate = asyncio.Event()
                task, sent = await _held(app, value, gate=gate)
                if model[value] < limit:
                    assert sent == [], "admitted: the view runs"
                    model[value] += 1
                    running.append((value, task, gate, sent))
                else:
                    assert _status(sent) == 429
            elif running:
                client, task, gate, sent = running.pop(value % len(running))
                if step == "finish":
                    gate.set()
                    await task
                    assert _status(sent) == 200
                else:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                model[client] -= 1
            assert seats.in_flight == sum(model.values())
        for _, task, _, _ in running:
            task.cancel()
        await asyncio.gather(*(task for _, task, _, _ in running), return_exceptions=True)
        assert seats.in_flight == 0

    asyncio.run(scenario())


def test_fastapi_before_0_118_is_refused_max_in_flight_and_the_dependency_is_one_with_yield(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before 0.118, FastAPI ended a dependency with yield before a streamed body was sent, so
    a seat given back there would come back too early: refused, by name. A rate limit alone
    needs no yield and is taken on any version."""
    limiter = KeyedRateLimiter("10/second")
    seated = for_fastapi.RateLimit(limiter, max_in_flight=2)
    assert inspect.isasyncgenfunction(type(seated).__call__)
    assert not inspect.isasyncgenfunction(type(for_fastapi.RateLimit(limiter)).__call__)
    monkeypatch.setattr(for_fastapi, "_FASTAPI_VERSION", (0, 117))
    with pytest.raises(RuntimeError, match=r"max_in_flight: FastAPI .* 0\.118 or later"):
        for_fastapi.RateLimit(limiter, max_in_flight=2)
    assert type(for_fastapi.RateLimit(limiter)) is for_fastapi.RateLimit


# ---------------------------------------------------------------------------------------------
# Behind a proxy: the seat is the forwarded client's, as its rate limit is
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])
def test_behind_a_trusted_proxy_the_seat_is_the_forwarded_client_s(middleware: Any) -> None:
    seats = KeyedConcurrencyLimiter(1)
    app = middleware(
        _ok_asgi if middleware is ASGIMiddleware else _ok_wsgi,
        None,
        max_in_flight=seats,
        trusted_proxies=["10.0.0.0/8"],
    )
    held = seats.try_acquire("203.0.113.7")
    assert held is not None
    forwarded = {"x-forwarded-for": "203.0.113.7"}
    assert _request(app, client="10.0.0.1", headers=forwarded)[0] == 429
    other = {"x-forwarded-for": "203.0.113.8"}
    assert _request(app, client="10.0.0.1", headers=other)[0] == 200
    # A peer that is not a trusted proxy cannot name another client: its own address is its key.
    assert _request(app, client="198.51.100.1", headers=forwarded)[0] == 200
    held.release()
    assert _request(app, client="10.0.0.1", headers=forwarded)[0] == 200


# ---------------------------------------------------------------------------------------------
# A seat that cannot be given back: logged, never raised into the application or the server
# ---------------------------------------------------------------------------------------------


class Unreleasable:
    """A lease whose release fails, as a Redis lease that had lapsed (``LeaseExpired``) or
    whose server cannot be reached does; awaited, if ``awaited``."""

    def __init__(self, awaited: bool) -> None:
        self.awaited = awaited

    def release(self) -> Any:
        if self.awaited:
            return self._release_async()
        raise RuntimeError("the lease had lapsed")

    async def _release_async(self) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the lease had lapsed")


class UnreleasableSeats:
    """A toy in-flight limiter of one limit whose every lease is :class:`Unreleasable`."""

    limit = 1

    def __init__(self, awaited: bool = False) -> None:
        self.awaited = awaited

    def try_acquire(self, n: int = 1) -> Unreleasable:
        return Unreleasable(self.awaited)

    def acquire(self, n: int = 1, timeout: float | None = None) -> Unreleasable:
        return Unreleasable(self.awaited)


class AsyncUnreleasableSeats(UnreleasableSeats):
    async def try_acquire(self, n: int = 1) -> Unreleasable:  # type: ignore[override]
        return Unreleasable(True)

    async def acquire(  # type: ignore[override]
        self, n: int = 1, timeout: float | None = None
    ) -> Unreleasable:
        return Unreleasable(True)


def _flask_app(seats: Any) -> Any:
    flask = pytest.importorskip("flask")
    app = flask.Flask(__name__)

    @app.get("/")
    @for_flask.limit(RateLimiter(5), max_in_flight=seats)
    def view() -> str:
        return "ok"

    return app


def _fastapi_app(seats: Any) -> Any:
    fastapi = pytest.importorskip("fastapi")
    app = fastapi.FastAPI()
    limit = for_fastapi.RateLimit(RateLimiter(5), max_in_flight=seats)

    @app.get("/", dependencies=[fastapi.Depends(limit)])
    async def view() -> str:
        return "ok"

    return app


UNRELEASABLE = {
    "asgi": lambda: _request(ASGIMiddleware(_ok_asgi, max_in_flight=UnreleasableSeats()))[0],
    "asgi, awaited": lambda: _request(
        ASGIMiddleware(_ok_asgi, max_in_flight=AsyncUnreleasableSeats())
    )[0],
    "wsgi": lambda: _closed_wsgi(WSGIMiddleware(_ok_wsgi, max_in_flight=UnreleasableSeats())),
    "wsgi, the view raising": lambda: _closed_wsgi(
        WSGIMiddleware(_raising_wsgi, max_in_flight=UnreleasableSeats())
    ),
    "flask": lambda: _flask_status(_flask_app(UnreleasableSeats())),
    "fastapi": lambda: _fastapi_test_client(_fastapi_app(AsyncUnreleasableSeats())),
}


def _closed_wsgi(app: Any) -> int:
    got: list[int] = []
    response = app(
        {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": "192.0.2.1"},
        lambda status, fields, exc_info=None: got.append(int(status.split()[0])),
    )
    b"".join(response)
    response.close()
    return got[0]


def _flask_status(app: Any) -> int:
    response = app.test_client().get("/")
    response.close()  # as the server closes it, once sent
    return int(response.status_code)


def _raising_wsgi(environ: Any, start_response: Any) -> Any:
    raise LookupError("the view's own error")


def _fastapi_test_client(app: Any) -> int:
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        return int(client.get("/").status_code)


@pytest.mark.parametrize("form", UNRELEASABLE)
def test_a_seat_that_cannot_be_given_back_is_logged_and_the_answer_stands(
    form: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("ERROR", logger="protocol_in_code.qos")
    if form == "wsgi, the view raising":
        with pytest.raises(LookupError, match="the view's own error"):  # not the release's
            UNRELEASABLE[form]()
    else:
        assert UNRELEASABLE[form]() == 200
    logged = [record for record in caplog.records if record.name == "protocol_in_code.qos"]
    assert len(logged) == 1, caplog.text
    assert "could not be given back" in logged[0].getMessage()
    assert logged[0].exc_info is not None and "had lapsed" in str(logged[0].exc_info[1])


# ---------------------------------------------------------------------------------------------
# Under a mount, with a path and a method as some servers pass them
# ---------------------------------------------------------------------------------------------


def test_under_a_root_path_an_exempt_route_takes_no_seat_however_spelled() -> None:
    """A client whose one seat is held still reaches an exempt route, written relative to the
    mount, whether the server sends ``//health`` or a lower-case method; every other route is
    refused for want of a seat."""
    from test_web_middleware import _call

    seats = KeyedConcurrencyLimiter(1)
    held = seats.try_acquire("192.0.2.1")
    assert held is not None
    app = ASGIMiddleware(_ok_asgi, None, max_in_flight=seats, exempt=["/health"])

    async def asgi(path: str, method: str) -> int:
        status, _ = await _call(app, path, "192.0.2.1", root_path="/api", method=method)
        return int(status)

    for path, method in [("/api/health", "GET"), ("/api//health", "GET"), ("/api/health", "get")]:
        assert asyncio.run(asgi(path, method)) == 200, (path, method)
    assert asyncio.run(asgi("/api/work", "get")) == 429

    wsgi = WSGIMiddleware(_ok_wsgi, None, max_in_flight=seats, exempt=["/health"])
    got: list[str] = []

    def start_response(status: str, fields: Any, exc_info: Any = None) -> None:
        got.append(status)

    for path_info, method in [("/health", "GET"), ("//health", "GET"), ("/health", "get")]:
        environ = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "/api",
            "PATH_INFO": path_info,
            "REMOTE_ADDR": "192.0.2.1",
        }
        b"".join(wsgi(environ, start_response))
        assert got[-1].startswith("200"), (path_info, method)
    work = {"REQUEST_METHOD": "get", "SCRIPT_NAME": "/api", "PATH_INFO": "/work"}
    b"".join(wsgi({**work, "REMOTE_ADDR": "192.0.2.1"}, start_response))
    assert got[-1].startswith("429")
    held.release()
