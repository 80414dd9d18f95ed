"""A synchronous Redis limiter never reaches the event loop (issue 32, item 8).

Under ASGI every request of a worker is served by one event loop. A Redis limiter on a
synchronous client waits for the server inside the loop: with the server stopped, an exempt
``/health`` route that never touches Redis stalled 1.2 to 5 s behind limited requests. The ASGI
middleware, the FastAPI dependency and Django's decorator on an ``async def`` view refuse such
a limiter when they are built, naming the asyncio client to give instead; the WSGI middleware,
Flask's decorator and Django's on a synchronous view (each request in a thread of its own) take
it as before.
"""

from __future__ import annotations

from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and the framework forms")
redis = pytest.importorskip("redis")
redis_asyncio = pytest.importorskip("redis.asyncio")
pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("django")

import web_django_app  # noqa: E402
from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware  # noqa: E402
from protocol_in_code.qos.asgi import Route  # noqa: E402
from protocol_in_code.qos.distributed import AsyncRedisKeyedRateLimiter, RedisKeyedRateLimiter  # noqa: E402
from protocol_in_code.qos.for_django import limit as django_limit  # noqa: E402
from protocol_in_code.qos.for_fastapi import RateLimit  # noqa: E402
from protocol_in_code.qos.for_flask import limit as flask_limit  # noqa: E402
from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware  # noqa: E402
from redis_servers import free_port  # noqa: E402

web_django_app.configure()


def _nowhere() -> str:
    """A Redis URL nobody listens on: nothing here talks to a server."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def sync_limiter() -> Any:
    return RedisKeyedRateLimiter(redis.Redis.from_url(_nowhere()), 5, name="loop-test")


@pytest.fixture
def async_limiter() -> Any:
    return RedisKeyedRateLimiter(redis_asyncio.Redis.from_url(_nowhere()), 5, name="loop-test")


async def _app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    raise AssertionError("never called")


def _wsgi_app(environ: Any, start_response: Any) -> Any:  # pragma: no cover
    raise AssertionError("never called")


BLOCKS = "would block the event loop.*redis.asyncio.Redis"


def test_the_asgi_middleware_refuses_a_synchronous_redis_limiter(sync_limiter: Any) -> None:
    with pytest.raises(TypeError, match=f"limiter: a Redis limiter on a synchronous.*{BLOCKS}"):
        ASGIMiddleware(_app, sync_limiter)
    with pytest.raises(TypeError, match=r"routes\[0\]\.limiter: .*" + BLOCKS):
        ASGIMiddleware(_app, routes=[Route("/api", sync_limiter)])


def test_a_rate_in_a_synchronous_redis_store_is_refused_under_asgi() -> None:
    client = redis.Redis.from_url(_nowhere())
    with pytest.raises(TypeError, match=BLOCKS):
        ASGIMiddleware(_app, "5/second", store=client)
    with pytest.raises(TypeError, match=BLOCKS):
        RateLimit("5/second", store=client)


def test_the_fastapi_dependency_refuses_a_synchronous_redis_limiter(sync_limiter: Any) -> None:
    with pytest.raises(TypeError, match=BLOCKS):
        RateLimit(sync_limiter)
    with pytest.raises(TypeError, match=BLOCKS):
        RateLimit({"global": sync_limiter, "client": "5/second"}, store="process")


def test_django_refuses_it_on_an_async_view_only(sync_limiter: Any) -> None:
    async def view_async(request: Any) -> Any:  # pragma: no cover
        raise AssertionError("never called")

    def view(request: Any) -> Any:  # pragma: no cover
        raise AssertionError("never called")

    with pytest.raises(TypeError, match=r"view_async, an async view.*redis.asyncio.Redis"):
        django_limit(sync_limiter)(view_async)
    assert django_limit(sync_limiter)(view).limiter is sync_limiter


def test_the_synchronous_servers_take_it(sync_limiter: Any) -> None:
    assert WSGIMiddleware(_wsgi_app, sync_limiter).rules.rules[0].limiter is sync_limiter

    def view() -> str:  # pragma: no cover
        raise AssertionError("never called")

    assert flask_limit(sync_limiter)(view).limiter is sync_limiter  # type: ignore[attr-defined]


def test_an_asyncio_client_is_taken_under_asgi(async_limiter: Any) -> None:
    assert isinstance(async_limiter, AsyncRedisKeyedRateLimiter)
    assert ASGIMiddleware(_app, async_limiter).rules.rules[0].awaited
    assert RateLimit(async_limiter).rule.awaited
    store = redis_asyncio.Redis.from_url(_nowhere())
    assert RateLimit("5/second", store=store).rule.awaited
