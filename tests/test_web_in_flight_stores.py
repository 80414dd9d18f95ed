"""An int ``max_in_flight`` is kept where ``store=`` keeps the rates: one limit per client for
every worker of the host by default, or of every host on Redis (issue 35).

Two middleware opened on one table stand for two workers of one server: seats taken through
one are seen by the other, by name, whichever store holds them. In a server with real worker
processes: ``test_web_in_flight_workers.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")

from protocol_in_code import _native
from protocol_in_code.qos import for_flask
from protocol_in_code.qos._http.stores import table_name, view_table
from protocol_in_code.qos._stores import SharedTables
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
from protocol_in_code.qos.concurrency import KeyedConcurrencyLimiter
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.shared import SharedKeyedConcurrencyLimiter
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware
from test_web_middleware import _call, _ok_asgi, _ok_wsgi, _request

CLIENT = "192.0.2.1"


def _name() -> str:
    """A form name of this test alone: its seats' table is ``web.<name>-in-flight``."""
    return f"stores-{uuid.uuid4().hex[:12]}"


def _seats(app: Any) -> Any:
    return app.rules.seats.limiter


def _wsgi(app: Any, client: str) -> int:
    """One request through the WSGI middleware, its response closed as a server closes it
    (which gives its seat back): the status."""
    got: list[int] = []

    def start_response(status: str, fields: Any, exc_info: Any = None) -> None:
        got.append(int(status.split()[0]))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "REMOTE_ADDR": client}
    response = app(environ, start_response)
    try:
        b"".join(response)
    finally:
        getattr(response, "close", lambda: None)()
    return got[0]


@pytest.mark.parametrize("middleware", [ASGIMiddleware, WSGIMiddleware], ids=["asgi", "wsgi"])
def test_by_default_the_seats_are_a_table_of_the_host_named_after_the_form(
    middleware: Any,
) -> None:
    name = _name()
    app = middleware(
        _ok_asgi if middleware is ASGIMiddleware else _ok_wsgi,
        "100/minute",
        name=name,
        max_in_flight=2,
    )
    seats = _seats(app)
    assert isinstance(seats, SharedKeyedConcurrencyLimiter)
    files = [path.name for path in _native._host_folder().iterdir() if name in path.name]
    assert any(f"web.{name}-in-flight.seats-keys" in file for file in files), files
    # Another worker opens the same table by its name: the client's two seats taken there
    # leave none here.
    other = SharedKeyedConcurrencyLimiter(f"web.{name}-in-flight", 2)
    leases = [other.try_acquire(CLIENT) for _ in range(2)]
    assert all(leases)
    assert _request(app, client=CLIENT)[0] == 429
    assert _request(app, client="192.0.2.2")[0] == 200
    for lease in leases:
        assert lease is not None
        lease.release()
    assert _request(app, client=CLIENT)[0] == 200
    assert seats.in_flight == 0


def test_a_store_folder_keeps_the_seats_there(tmp_path: Path) -> None:
    name = _name()
    app = WSGIMiddleware(_ok_wsgi, "100/minute", name=name, max_in_flight=1, store=tmp_path)
    assert any(path.name.endswith(".seats") for path in tmp_path.iterdir())
    other = SharedKeyedConcurrencyLimiter(f"web.{name}-in-flight", 1, path=tmp_path)
    with other.acquire(CLIENT):
        assert _request(app, client=CLIENT)[0] == 429
    assert _request(app, client=CLIENT)[0] == 200


def test_store_process_keeps_the_seats_in_the_process_and_is_allowed_with_limiters() -> None:
    app = WSGIMiddleware(_ok_wsgi, KeyedRateLimiter(5), max_in_flight=2, store="process")
    assert isinstance(_seats(app), KeyedConcurrencyLimiter)
    alone = WSGIMiddleware(_ok_wsgi, None, max_in_flight=2, store="process")
    assert isinstance(_seats(alone), KeyedConcurrencyLimiter)


def test_an_in_flight_limiter_given_is_used_as_it_is_and_store_is_then_refused() -> None:
    given = KeyedConcurrencyLimiter(3)
    app = WSGIMiddleware(_ok_wsgi, "100/minute", max_in_flight=given, store="process")
    assert _seats(app) is given
    with pytest.raises(TypeError, match="store= says where"):
        WSGIMiddleware(_ok_wsgi, KeyedRateLimiter(5), max_in_flight=given, store="process")


def test_a_deploy_that_changes_the_limit_sets_the_table_s_limit(tmp_path: Path) -> None:
    """The table's limit is in its file: a form started with another number sets it, for every
    worker, evicting nobody."""
    name = _name()
    table = f"web.{name}-in-flight"
    old = SharedKeyedConcurrencyLimiter(table, 2, path=tmp_path)
    held = old.try_acquire(CLIENT, 2)
    assert held is not None
    with pytest.warns(RuntimeWarning, match=r"had a limit of 2, and has 3 .* name= of its own"):
        app = WSGIMiddleware(_ok_wsgi, "100/minute", name=name, max_in_flight=3, store=tmp_path)
    assert _seats(app).limit == 3 and old.limit == 3
    assert old.in_flight == 2  # nobody evicted
    assert _wsgi(app, CLIENT) == 200  # the third seat
    # A worker of a later deploy, with another number: it sets the limit for everyone.
    with pytest.warns(RuntimeWarning, match="had a limit of 3"):
        lower = SharedTables(tmp_path).keyed_in_flight(1, table)
    assert old.limit == 1 and lower.try_acquire(CLIENT) is None
    held.release()
    assert _wsgi(app, CLIENT) == 200


def test_a_view_s_seats_are_named_after_the_view(tmp_path: Path) -> None:
    flask = pytest.importorskip("flask")
    app = flask.Flask(__name__)

    @app.get("/export")
    @for_flask.limit(KeyedRateLimiter(100), max_in_flight=1, store=tmp_path)
    def export() -> str:
        return "ok"

    assert app.test_client().get("/export").status_code == 200
    names = [path.name for path in tmp_path.iterdir() if path.name.endswith(".seats")]
    table = view_table(export.__wrapped__)  # type: ignore[attr-defined]
    assert table is not None and table.startswith("view.test_web_in_flight_stores.")
    assert len(names) == 1 and f".{table_name(table, 'in-flight')}.seats-" in names[0], names


class _RatesOnly:
    """A store of one's own that keeps rates and no seats."""

    named = None

    def keyed_limiter(self, rate: Any, burst: int | None, name: str) -> Any:
        return KeyedRateLimiter(rate, burst=burst)


class _WithSeats(_RatesOnly):
    def __init__(self) -> None:
        self.made: list[tuple[int, str]] = []

    def keyed_in_flight(self, limit: int, name: str) -> Any:
        self.made.append((limit, name))
        return KeyedConcurrencyLimiter(limit)


def test_a_store_of_one_s_own_keeps_seats_only_if_it_says_how() -> None:
    with pytest.raises(TypeError, match=r"max_in_flight=2 .*_RatesOnly keeps no in-flight"):
        WSGIMiddleware(_ok_wsgi, "5/minute", max_in_flight=2, store=_RatesOnly())
    store = _WithSeats()
    name = _name()
    app = WSGIMiddleware(_ok_wsgi, "5/minute", name=name, max_in_flight=2, store=store)
    assert store.made == [(2, f"web.{name}-in-flight")]
    assert isinstance(_seats(app), KeyedConcurrencyLimiter)


def test_a_redis_client_keeps_a_client_s_seats_for_every_host(redis_client: Any) -> None:
    from protocol_in_code.qos.distributed import RedisKeyedConcurrencyLimiter

    name = _name()
    app = WSGIMiddleware(_ok_wsgi, "100/minute", name=name, max_in_flight=1, store=redis_client)
    seats = _seats(app)
    assert isinstance(seats, RedisKeyedConcurrencyLimiter) and seats.options.heartbeat
    other_host = RedisKeyedConcurrencyLimiter(redis_client, 1, name=f"web.{name}-in-flight")
    with other_host.acquire(CLIENT):
        assert _wsgi(app, CLIENT) == 429
        assert _wsgi(app, "192.0.2.2") == 200
    assert _wsgi(app, CLIENT) == 200
    assert other_host.in_flight_of(CLIENT) == 0  # each response gave its seat back


def test_an_asyncio_redis_client_keeps_them_under_asgi(redis_server: Any) -> None:
    import redis.asyncio
    from protocol_in_code.qos.distributed import AsyncRedisKeyedConcurrencyLimiter

    name = _name()

    async def main() -> list[int]:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            app = ASGIMiddleware(_ok_asgi, "100/minute", name=name, max_in_flight=1, store=client)
            seats = _seats(app)
            assert isinstance(seats, AsyncRedisKeyedConcurrencyLimiter)
            other = AsyncRedisKeyedConcurrencyLimiter(client, 1, name=f"web.{name}-in-flight")
            lease = await other.try_acquire(CLIENT)
            assert lease is not None
            refused = (await _call(app, "/", CLIENT))[0]
            await lease.release()
            allowed = (await _call(app, "/", CLIENT))[0]
            left = await other.in_flight_of(CLIENT)
            return [refused, allowed, left]
        finally:
            await client.aclose()

    assert asyncio.run(main()) == [429, 200, 0]


def test_a_synchronous_redis_client_under_asgi_is_refused_naming_the_store() -> None:
    redis = pytest.importorskip("redis")
    client = redis.Redis(port=1)  # never asked: the refusal comes first
    with pytest.raises(TypeError, match=r"store \(the Redis client for max_in_flight\)"):
        ASGIMiddleware(_ok_asgi, None, max_in_flight=2, store=client)
    # Given as it is, a synchronous Redis in-flight limiter is refused there too, naming it.
    from protocol_in_code.qos.distributed import RedisKeyedConcurrencyLimiter

    given = RedisKeyedConcurrencyLimiter(client, 2, name="given")
    with pytest.raises(TypeError, match=r"max_in_flight: a Redis limiter on a synchronous"):
        ASGIMiddleware(_ok_asgi, None, max_in_flight=given)


def test_a_key_a_redis_store_cannot_take_is_refused_before_a_token_is_spent() -> None:
    redis = pytest.importorskip("redis")
    limiter = KeyedRateLimiter(5)
    client = redis.Redis(port=1)  # never asked: the key is refused first
    app = WSGIMiddleware(_ok_wsgi, limiter, key=lambda info: 7, max_in_flight=2, store=client)
    with pytest.raises(TypeError, match="a Redis limiter cannot take"):
        _wsgi(app, CLIENT)
    assert len(limiter) == 0


def test_django_refuses_seats_it_cannot_serve_naming_the_store() -> None:
    """Django's ``async def`` view runs on the event loop, where seats on a synchronous Redis
    client would block it; and Django closes a response in a synchronous call, where an asyncio
    client's lease cannot be given back. Each refusal names the store."""
    pytest.importorskip("django")
    redis = pytest.importorskip("redis")
    asyncio_redis = pytest.importorskip("redis.asyncio")
    import web_django_app

    web_django_app.configure()
    from django.http import HttpResponse
    from protocol_in_code.qos import for_django

    async def view(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    # Never asked: each refusal comes as the decorator is given its view.
    blocking = for_django.limit(KeyedRateLimiter(100), max_in_flight=2, store=redis.Redis(port=1))
    with pytest.raises(TypeError, match=r"store \(the Redis client for max_in_flight\).*async"):
        blocking(view)
    awaited = for_django.limit(
        KeyedRateLimiter(100), max_in_flight=2, store=asyncio_redis.Redis(port=1)
    )
    with pytest.raises(TypeError, match=r"store \(the Redis client for max_in_flight\).*'shared'"):
        awaited(_django_view)


def _django_view(request: Any) -> Any:
    return None


@pytest.mark.parametrize(("store", "words"), [(None, "limit must be"), ("process", "limit")])
def test_a_number_no_store_can_keep_is_an_error_naming_max_in_flight(
    store: Any, words: str
) -> None:
    with pytest.raises(ValueError, match=f"max_in_flight: .*{words}"):
        WSGIMiddleware(_ok_wsgi, "5/minute", max_in_flight=2**64, store=store)
