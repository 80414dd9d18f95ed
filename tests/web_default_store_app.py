"""The applications ``test_web_default_store.py`` serves under several worker processes, each
written as the README and the guide write it: a rate, with nothing said about workers.

Every application answers ``GET /pid`` (never limited) with the worker's pid, so the test can
wait until every worker serves, and its limited route with the pid too. Each is made by a
factory named on the server's command line; ``QOS_WORKERS_FORM`` says which limiter the
middleware forms get (``"rate"``, the default store, or ``"process"``, an in-process
``KeyedRateLimiter``).
"""

from __future__ import annotations

import os
from typing import Any

#: Five at once, and a token back every 12 minutes: none comes back during a test, however slow
#: a loaded machine makes a restart.
RATE = "5/hour"
#: The README's quickstart: 100 a minute, 20 at once, per client.
QUICKSTART_RATE, QUICKSTART_BURST = "100/minute", 20


def _in_process() -> bool:
    return os.environ.get("QOS_WORKERS_FORM", "rate") == "process"


def flask_decorator() -> Any:
    """Flask, ``@limit("5/hour")`` under the route (gunicorn's sync workers)."""
    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask(__name__)

    @app.get("/pid")
    def pid() -> str:
        return str(os.getpid())

    @app.post("/login")
    @limit(RATE)
    def login() -> str:
        return str(os.getpid())

    return app


def flask_middleware() -> Any:
    """Flask behind the WSGI middleware, given a rate or an in-process limiter."""
    from flask import Flask
    from protocol_in_code.qos.keyed import KeyedRateLimiter
    from protocol_in_code.qos.wsgi import RateLimitMiddleware, Route

    app = Flask(__name__)

    @app.get("/pid")
    def pid() -> str:
        return str(os.getpid())

    @app.post("/login")
    def login() -> str:
        return str(os.getpid())

    limiter: Any = KeyedRateLimiter(RATE) if _in_process() else RATE
    app.wsgi_app = RateLimitMiddleware(  # type: ignore[method-assign]
        app.wsgi_app, routes=[Route("/login", limiter, name="workers-test-login")]
    )
    return app


def fastapi_dependency() -> Any:
    """FastAPI, ``Depends(RateLimit("5/hour"))`` on the route."""
    from fastapi import Depends, FastAPI
    from protocol_in_code.qos.for_fastapi import RateLimit

    app = FastAPI()

    @app.get("/pid")
    async def pid() -> int:
        return os.getpid()

    @app.post("/login", dependencies=[Depends(RateLimit(RATE))])
    async def login() -> int:
        return os.getpid()

    return app


def fastapi_quickstart() -> Any:
    """The README's FastAPI quickstart: the ASGI middleware, given a rate and a burst (or, with
    ``QOS_WORKERS_FORM=process``, the in-process limiter it gave before)."""
    from fastapi import FastAPI
    from protocol_in_code.qos.asgi import RateLimitMiddleware
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    app = FastAPI()

    @app.get("/pid")
    async def pid() -> int:
        return os.getpid()

    @app.get("/")
    async def hello() -> int:
        return os.getpid()

    if _in_process():
        limiter: Any = KeyedRateLimiter(QUICKSTART_RATE, burst=QUICKSTART_BURST)
        app.add_middleware(RateLimitMiddleware, limiter=limiter, exempt=["/pid"])
    else:
        app.add_middleware(
            RateLimitMiddleware,
            limiter=QUICKSTART_RATE,
            burst=QUICKSTART_BURST,
            name="workers-test-quickstart",
            exempt=["/pid"],
        )
    return app


def django_decorator() -> Any:
    """Django, ``@limit("5/hour")`` on a view, as a WSGI application."""
    import web_django_app

    web_django_app.configure()
    from django.core.handlers.wsgi import WSGIHandler
    from django.http import HttpResponse
    from django.urls import clear_url_caches, path
    from protocol_in_code.qos.for_django import limit

    def pid(request: Any) -> HttpResponse:
        return HttpResponse(str(os.getpid()))

    @limit(RATE)
    def login(request: Any) -> HttpResponse:
        return HttpResponse(str(os.getpid()))

    web_django_app.urlpatterns[:] = [path("pid", pid), path("login", login)]
    clear_url_caches()
    return WSGIHandler()
