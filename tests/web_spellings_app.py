"""Applications for ``test_web_spellings.py``: one view, ``POST /upload``, limited to
``BURST`` runs by a route of the middleware, and ``GET /runs``, which says how many times the
view ran. A server in another process (gunicorn) imports them from here."""

from __future__ import annotations

from typing import Any

from protocol_in_code.qos import RateLimiter

#: How many runs of the view the limit allows (its rate refills one an hour).
BURST = 2


def limiter() -> RateLimiter:
    return RateLimiter(1, burst=BURST, per=3600)


def create_flask_app() -> Any:
    """Flask, under the WSGI middleware: ``Route("/upload", methods={"POST"})``."""
    from flask import Flask
    from protocol_in_code.qos.wsgi import RateLimitMiddleware, Route

    app = Flask(__name__)
    runs = [0]

    @app.post("/upload")
    def upload() -> str:
        runs[0] += 1
        return "uploaded"

    @app.get("/runs")
    def count() -> str:
        return str(runs[0])

    routes = [Route("/upload", limiter(), methods={"POST"})]
    return RateLimitMiddleware(app, routes=routes)


def create_starlette_app() -> Any:
    """Starlette, under the ASGI middleware: the same view, the same route."""
    from protocol_in_code.qos.asgi import RateLimitMiddleware, Route
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route as Path

    runs = [0]

    async def upload(request: Request) -> PlainTextResponse:
        runs[0] += 1
        return PlainTextResponse("uploaded")

    async def count(request: Request) -> PlainTextResponse:
        return PlainTextResponse(str(runs[0]))

    app = Starlette(routes=[Path("/upload", upload, methods=["POST"]), Path("/runs", count)])
    routes = [Route("/upload", limiter(), methods={"POST"})]
    return RateLimitMiddleware(app, routes=routes)
