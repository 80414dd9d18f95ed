"""The applications ``test_web_in_flight_workers.py`` serves under several worker processes:
``max_in_flight=2`` written as the guide writes it, with nothing said about workers.

Every application answers ``GET /pid`` (exempt) with the worker's pid, so the test can wait
until every worker serves, and ``GET /slow``, a view that counts itself running in a file every
worker shares and then waits for the test to open its gate. The folder of the count and the
gate is ``QOS_GATE_FOLDER``; ``QOS_SEATS_STORE=process`` keeps the seats in each worker (the
middleware then has no rate), ``QOS_SEATS_STORE=redis://...`` on that Redis server.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path
from typing import Any

#: How long a view waits for its gate at most, in seconds (a test that failed never opens it).
LONGEST_WAIT = 30.0
SEATS = 2


def _folder() -> Path:
    return Path(os.environ["QOS_GATE_FOLDER"])


def _in_process() -> bool:
    return os.environ.get("QOS_SEATS_STORE") == "process"


def _store(asyncio_client: bool = False) -> Any:
    """``QOS_SEATS_STORE``: ``process``, ``redis://...`` (a client of that server, an asyncio
    one for the ASGI forms), or the default store."""
    given = os.environ.get("QOS_SEATS_STORE")
    if given == "process":
        return "process"
    if given and given.startswith("redis://"):
        import redis
        import redis.asyncio

        return (redis.asyncio.Redis if asyncio_client else redis.Redis).from_url(given)
    return None


def _rate() -> str | None:
    """The middleware's rate; none with the seats in each process, whose warning is then the
    seats' own."""
    return None if _in_process() else "1000/minute"


def count(step: int) -> None:
    """Add ``step`` to the views running now, and keep the most ever seen: ``running most``
    in the file ``count``, under a lock every worker takes."""
    with open(_folder() / "count", "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        running, most = (int(x) for x in (file.read().split() or ["0", "0"]))
        running += step
        file.seek(0)
        file.truncate()
        file.write(f"{running} {max(most, running)}")


def read_count() -> tuple[int, int]:
    """``(running, most)`` now."""
    try:
        text = (_folder() / "count").read_text()
    except FileNotFoundError:
        return 0, 0
    running, most = (int(x) for x in (text.split() or ["0", "0"]))
    return running, most


def gate_open() -> bool:
    return (_folder() / "gate").exists()


def slow_view() -> str:
    count(+1)
    running = _folder() / f"running-{os.getpid()}"  # which workers run a view (to kill one)
    running.touch()
    try:
        deadline = time.monotonic() + LONGEST_WAIT
        while not gate_open() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        running.unlink(missing_ok=True)
        count(-1)
    return str(os.getpid())


async def slow_view_async() -> str:
    count(+1)
    try:
        deadline = time.monotonic() + LONGEST_WAIT
        while not gate_open() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        count(-1)
    return str(os.getpid())


def flask_middleware() -> Any:
    """Flask behind the WSGI middleware (gunicorn's sync workers)."""
    from flask import Flask
    from protocol_in_code.qos.wsgi import RateLimitMiddleware

    app = Flask(__name__)
    app.get("/pid")(lambda: str(os.getpid()))
    app.get("/slow")(slow_view)
    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, _rate(), max_in_flight=SEATS, exempt=["/pid"], store=_store()
    )
    return app


def flask_decorator() -> Any:
    """Flask, ``@limit(..., max_in_flight=2)`` on the view (gunicorn's sync workers)."""
    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask(__name__)
    app.get("/pid")(lambda: str(os.getpid()))

    @app.get("/slow")
    @limit("1000/minute", max_in_flight=SEATS, store=_store())
    def slow() -> str:
        return slow_view()

    return app


def fastapi_middleware() -> Any:
    """FastAPI behind the ASGI middleware (``uvicorn --workers``)."""
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse
    from protocol_in_code.qos.asgi import RateLimitMiddleware

    app = FastAPI()
    app.get("/pid", response_class=PlainTextResponse)(lambda: str(os.getpid()))
    app.get("/slow", response_class=PlainTextResponse)(slow_view_async)
    app.add_middleware(
        RateLimitMiddleware,
        limiter=_rate(),
        max_in_flight=SEATS,
        exempt=["/pid"],
        store=_store(asyncio_client=True),
    )
    return app


def fastapi_dependency() -> Any:
    """FastAPI, ``Depends(RateLimit(..., max_in_flight=2))`` on the route."""
    from fastapi import Depends, FastAPI
    from fastapi.responses import PlainTextResponse
    from protocol_in_code.qos.for_fastapi import RateLimit

    app = FastAPI()
    app.get("/pid", response_class=PlainTextResponse)(lambda: str(os.getpid()))
    seated = RateLimit(
        "1000/minute", max_in_flight=SEATS, name="slow", store=_store(asyncio_client=True)
    )
    app.get("/slow", response_class=PlainTextResponse, dependencies=[Depends(seated)])(
        slow_view_async
    )
    return app


def django_decorator() -> Any:
    """Django, ``@limit(..., max_in_flight=2)`` on a view, as a WSGI application."""
    import web_django_app

    web_django_app.configure()
    from django.core.handlers.wsgi import WSGIHandler
    from django.http import HttpResponse
    from django.urls import clear_url_caches, path
    from protocol_in_code.qos.for_django import limit

    def pid(request: Any) -> HttpResponse:
        return HttpResponse(str(os.getpid()))

    @limit("1000/minute", max_in_flight=SEATS, store=_store())
    def slow(request: Any) -> HttpResponse:
        return HttpResponse(slow_view())

    web_django_app.urlpatterns[:] = [path("pid", pid), path("slow", slow)]
    clear_url_caches()
    return WSGIHandler()
