"""Applications for ``test_web_mounts.py``, each written as it would be to run at the root:
``POST /upload``, limited to ``BURST`` runs, and ``GET /runs``, which says (as JSON) how many
times the view ran and which paths the key function was shown. The tests mount them under a
prefix; a server in another process (gunicorn) imports them from here.
"""

from __future__ import annotations

from typing import Any

from protocol_in_code.qos.keyed import KeyedRateLimiter

#: How many runs of the view the limit allows (its rate refills one an hour).
BURST = 2


class Seen:
    """What one application saw: runs of the view, and the paths given to the key function."""

    def __init__(self) -> None:
        self.runs = 0
        self.paths: list[str] = []

    def key(self, info: Any) -> str:
        """The key function: one client for all, and the request's path written down."""
        self.paths.append(info.path)
        return "everyone"

    def report(self) -> dict[str, Any]:
        return {"runs": self.runs, "paths": self.paths}


def limiter() -> KeyedRateLimiter:
    return KeyedRateLimiter(1, burst=BURST, per=3600)


def starlette_app() -> Any:
    """Starlette, inside the ASGI middleware: ``Route("/upload", methods={"POST"})``."""
    from protocol_in_code.qos.asgi import RateLimitMiddleware, Route
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route as Path

    seen = Seen()

    async def upload(request: Request) -> PlainTextResponse:
        seen.runs += 1
        return PlainTextResponse("uploaded")

    async def runs(request: Request) -> JSONResponse:
        return JSONResponse(seen.report())

    app = Starlette(routes=[Path("/upload", upload, methods=["POST"]), Path("/runs", runs)])
    routes = [Route("/upload", limiter(), methods={"POST"})]
    return RateLimitMiddleware(app, routes=routes, key=seen.key)


def fastapi_app() -> Any:
    """FastAPI, with the ASGI middleware added as its documentation shows: the same route."""
    from fastapi import FastAPI
    from protocol_in_code.qos.asgi import RateLimitMiddleware, Route

    seen = Seen()
    app = FastAPI()
    routes = [Route("/upload", limiter(), methods={"POST"})]
    app.add_middleware(RateLimitMiddleware, routes=routes, key=seen.key)

    @app.post("/upload")
    async def upload() -> str:
        seen.runs += 1
        return "uploaded"

    @app.get("/runs")
    async def runs() -> dict[str, Any]:
        return seen.report()

    return app


def fastapi_dependency_app() -> Any:
    """FastAPI, the view limited by the ``RateLimit`` dependency rather than the middleware."""
    from fastapi import Depends, FastAPI
    from protocol_in_code.qos.for_fastapi import RateLimit

    seen = Seen()
    app = FastAPI()

    @app.post("/upload", dependencies=[Depends(RateLimit(limiter(), key=seen.key))])
    async def upload() -> str:
        seen.runs += 1
        return "uploaded"

    @app.get("/runs")
    async def runs() -> dict[str, Any]:
        return seen.report()

    return app


def flask_app() -> Any:
    """Flask, its ``wsgi_app`` inside the WSGI middleware: the same route."""
    from flask import Flask
    from protocol_in_code.qos.wsgi import RateLimitMiddleware, Route

    seen = Seen()
    app = Flask(__name__)

    @app.post("/upload")
    def upload() -> str:
        seen.runs += 1
        return "uploaded"

    @app.get("/runs")
    def runs() -> dict[str, Any]:
        return seen.report()

    routes = [Route("/upload", limiter(), methods={"POST"})]
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, routes=routes, key=seen.key)  # type: ignore[method-assign]
    return app
