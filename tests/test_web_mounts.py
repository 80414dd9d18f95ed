"""A ``Route`` is written as the application it wraps writes its own routes: relative to where
that application is mounted (issue 32, item 5).

An application is mounted under a prefix by a router (Starlette's ``Mount``, Werkzeug's
``DispatcherMiddleware``) or by its server (``uvicorn --root-path``, gunicorn's
``SCRIPT_NAME``). Its own routes are written without the prefix, and so are the middleware's
routes and exempt prefixes, whichever server runs it. Each case here serves one application,
written as if at the root, with ``POST /upload`` limited to ``BURST`` runs by
``Route("/upload")``, under a mount; ``SENT`` requests are sent through the mount, and the
view must run ``BURST`` times, the others refused, and the key function must have been shown
``/upload`` every time.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")
pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("django")
pytest.importorskip("uvicorn")

import httpx
import web_django_app
from redis_servers import free_port
from web_mounts_app import (
    BURST,
    Seen,
    fastapi_app,
    fastapi_dependency_app,
    flask_app,
    limiter,
    starlette_app,
)
from web_servers import Uvicorn

#: Requests sent to the limited view in each case.
SENT = 5
STARTUP_SECONDS = 30.0
TESTS = str(qos_support.REPO_ROOT / "tests")


@contextmanager
def uvicorn(app: Any, **config: Any) -> Iterator[str]:
    server = Uvicorn(app, **config).start()
    try:
        yield server.url
    finally:
        server.stop()


def starlette_mount(sub: Any) -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    return Starlette(routes=[Mount("/v1", app=sub)])


def fastapi_mount(sub: Any) -> Any:
    from fastapi import FastAPI

    app = FastAPI()
    app.mount("/v1", sub)
    return app


def as_older_servers(app: Any) -> Any:
    """``app`` given the path as ASGI servers gave it before the spec had ``path`` include
    ``root_path``: without it."""

    async def older(scope: Any, receive: Any, send: Any) -> None:
        root = scope.get("root_path", "")
        if scope["type"] == "http" and root and scope["path"].startswith(root + "/"):
            scope = {**scope, "path": scope["path"][len(root) :]}
        await app(scope, receive, send)

    return older


@contextmanager
def werkzeug_dispatcher() -> Iterator[str]:
    """Flask mounted at ``/v1`` by Werkzeug's ``DispatcherMiddleware``, under Werkzeug's
    server: ``/v1`` moves from ``PATH_INFO`` to ``SCRIPT_NAME``."""
    from flask import Flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware
    from werkzeug.serving import make_server

    app = DispatcherMiddleware(Flask("root"), {"/v1": flask_app()})
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
        thread.join(STARTUP_SECONDS)


@contextmanager
def gunicorn_script_name() -> Iterator[str]:
    """Flask under gunicorn with ``SCRIPT_NAME=/api``: gunicorn takes ``/api`` off the path
    of every request, which must start with it."""
    pytest.importorskip("gunicorn")
    port = free_port()
    command = [
        sys.executable, "-m", "gunicorn", "--workers", "1", "--bind", f"127.0.0.1:{port}",
        "--env", "SCRIPT_NAME=/api", "--chdir", TESTS, "--log-level", "warning",
        "web_mounts_app:flask_app()",
    ]  # fmt: skip
    process = subprocess.Popen(command)
    try:
        qos_support.wait_until(
            lambda: _listening(port) or process.poll() is not None,
            "gunicorn listening",
            STARTUP_SECONDS,
        )
        assert process.poll() is None, f"gunicorn exited: {process.returncode}"
        yield f"http://127.0.0.1:{port}/api"
    finally:
        process.terminate()
        process.wait(STARTUP_SECONDS)


def _listening(port: int) -> bool:
    import socket

    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextmanager
def at(prefix: str, served: AbstractContextManager[str]) -> Iterator[str]:
    """The URL of what ``served`` serves, under ``prefix``."""
    with served as url:
        yield url + prefix


#: Each case: the application served, and the URL its routes are reached under.
CASES: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "starlette Mount /v1, uvicorn": lambda: at("/v1", uvicorn(starlette_mount(starlette_app()))),
    "fastapi mount /v1, uvicorn": lambda: at("/v1", uvicorn(fastapi_mount(fastapi_app()))),
    "starlette, uvicorn --root-path /api": lambda: uvicorn(starlette_app(), root_path="/api"),
    "fastapi, uvicorn --root-path /api": lambda: uvicorn(fastapi_app(), root_path="/api"),
    "starlette, --root-path /api, path without it (older servers)": lambda: uvicorn(
        as_older_servers(starlette_app()), root_path="/api"
    ),
    "starlette Mount /v1, uvicorn --root-path /api": lambda: at(
        "/v1", uvicorn(starlette_mount(starlette_app()), root_path="/api")
    ),
    "flask DispatcherMiddleware /v1, werkzeug": werkzeug_dispatcher,
    "flask, gunicorn SCRIPT_NAME=/api": gunicorn_script_name,
    "fastapi RateLimit, mount /v1, uvicorn": lambda: at(
        "/v1", uvicorn(fastapi_mount(fastapi_dependency_app()))
    ),
    "fastapi RateLimit, uvicorn --root-path /api": lambda: uvicorn(
        fastapi_dependency_app(), root_path="/api"
    ),
}


@pytest.fixture(params=list(CASES))
def base(request: pytest.FixtureRequest) -> Iterator[str]:
    with CASES[request.param]() as url:
        yield url


def test_a_route_is_relative_to_the_mount(base: str) -> None:
    with httpx.Client(base_url=base) as client:
        statuses = [client.post("/upload").status_code for _ in range(SENT)]
        seen = client.get("/runs").json()
    assert seen["runs"] == BURST, (statuses, seen)
    assert statuses == [200] * BURST + [429] * (SENT - BURST), seen
    assert seen["paths"] == ["/upload"] * SENT


def test_under_root_path_the_prefix_written_again_is_routed_by_neither() -> None:
    """uvicorn puts ``--root-path`` before every path, so a client (or a proxy that does not
    take it off) writing ``/api/upload`` reaches ``/api/api/upload``: the application routes
    it nowhere, and the route does not match it either; ``/upload`` is the limited view."""
    with uvicorn(starlette_app(), root_path="/api") as url, httpx.Client(base_url=url) as client:
        prefixed = [client.post("/api/upload").status_code for _ in range(SENT)]
        statuses = [client.post("/upload").status_code for _ in range(SENT)]
        seen = client.get("/runs").json()
    assert prefixed == [404] * SENT
    assert seen["runs"] == BURST, (statuses, seen)
    assert statuses == [200] * BURST + [429] * (SENT - BURST)


# ---------------------------------------------------------------------------------------------
# One request, every reader: ASGI and WSGI, the middleware and the framework forms
# ---------------------------------------------------------------------------------------------

#: (ASGI ``path``, ``root_path``), the WSGI ``SCRIPT_NAME`` and ``PATH_INFO`` (PEP 3333: the
#: path's bytes as latin-1) of the same request, and the path every reader must give.
EQUIVALENT = [
    (("/v1/upload", "/v1"), ("/v1", "/upload"), "/upload"),
    (("/api/v1/upload", "/api/v1"), ("/api/v1", "/upload"), "/upload"),
    (("/upload", "/api"), ("/api", "/upload"), "/upload"),  # path without root_path: older servers
    (("/upload", ""), ("", "/upload"), "/upload"),
    (("/api/", "/api"), ("/api", "/"), "/"),
    (("/v1/café", "/v1"), ("/v1", "/caf\xc3\xa9"), "/café"),
    (("/v1//upload", "/v1"), ("/v1", "//upload"), "//upload"),  # spelled as sent; matched merged
]

#: The edges, which Django's ASGI request reads otherwise (it cuts ``root_path``'s characters
#: off whatever follows: ``ary/upload``, ``upload``, an empty path): where ``root_path`` is
#: not a whole first segment of the path, which Starlette routes as it is, and so do the
#: middleware; and the mount's own path, which is its root.
AT_THE_EDGES = [
    (("/apiary/upload", "/api"), ("", "/apiary/upload"), "/apiary/upload"),
    (("/api/upload", "/api/"), ("", "/api/upload"), "/api/upload"),
    (("/api", "/api"), ("/api", ""), "/"),
]


def _cases(cases: list[Any]) -> Any:
    """``cases`` as parameters named by their scope."""
    return pytest.mark.parametrize(
        ("asgi", "wsgi", "relative"),
        cases,
        ids=[f"{path} under {root or 'no root'}" for (path, root), _, _ in cases],
    )


def _matched(path: str) -> str:
    """``path`` as routes match it (``//upload`` is ``/upload``): a route written so."""
    from protocol_in_code.qos._http.rules import routed

    return routed("POST", path)[1]


def _scope(path: str, root_path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": root_path,
        "query_string": b"",
        "headers": [],
        "client": ("192.0.2.1", 5000),
    }


def _environ(script_name: str, path_info: str) -> dict[str, Any]:
    return {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": script_name,
        "PATH_INFO": path_info,
        "REMOTE_ADDR": "192.0.2.1",
        "wsgi.input": io.BytesIO(),
    }


async def _ok_asgi(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _ok_wsgi(environ: Any, start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b""]


async def _discard(message: Any) -> None:
    pass


def _started(status: str, headers: Any, exc_info: Any = None) -> None:
    pass


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def _asgi_path(scope: dict[str, Any], seen: Seen, route: str | None) -> None:
    """Through the ASGI middleware, under its own limiter, or only under ``Route(route)``: then
    the key function is shown the path only if the route matched it."""
    from protocol_in_code.qos.asgi import RateLimitMiddleware, Route

    if route is None:
        app = RateLimitMiddleware(_ok_asgi, limiter(), key=seen.key)
    else:
        app = RateLimitMiddleware(_ok_asgi, routes=[Route(route, limiter())], key=seen.key)
    asyncio.run(app(scope, _receive, _discard))


def _wsgi_path(environ: dict[str, Any], seen: Seen, route: str | None) -> None:
    """:func:`_asgi_path` through the WSGI middleware."""
    from protocol_in_code.qos.wsgi import RateLimitMiddleware, Route

    if route is None:
        app = RateLimitMiddleware(_ok_wsgi, limiter(), key=seen.key)
    else:
        app = RateLimitMiddleware(_ok_wsgi, routes=[Route(route, limiter())], key=seen.key)
    b"".join(app(environ, _started))


def _fastapi_path(scope: dict[str, Any], seen: Seen) -> None:
    from protocol_in_code.qos.for_fastapi import RateLimit
    from starlette.requests import Request
    from starlette.responses import Response

    asyncio.run(RateLimit(limiter(), key=seen.key)(Request(scope, _receive), Response()))


def _flask_path(environ: dict[str, Any], seen: Seen) -> None:
    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask("paths")
    view = limit(limiter(), key=seen.key)(lambda: "ok")
    with app.test_request_context(method="POST", environ_overrides=environ):
        view()


def _django_paths(scope: dict[str, Any], environ: dict[str, Any], seen: Seen) -> None:
    """The Django decorator, given Django's own ASGI and WSGI requests."""
    web_django_app.configure()
    from django.core.handlers.asgi import ASGIRequest
    from django.core.handlers.wsgi import WSGIRequest
    from django.http import HttpResponse
    from protocol_in_code.qos.for_django import limit

    view = limit(limiter(), key=seen.key)(lambda request: HttpResponse("ok"))
    view(ASGIRequest(scope, io.BytesIO()))
    view(WSGIRequest(environ))


@_cases(EQUIVALENT + AT_THE_EDGES)
def test_asgi_and_wsgi_give_the_same_path(asgi: Any, wsgi: Any, relative: str) -> None:
    for route in (None, _matched(relative)):
        seen = Seen()
        _asgi_path(_scope(*asgi), seen, route)
        _wsgi_path(_environ(*wsgi), seen, route)
        assert seen.paths == [relative, relative], route


@_cases(EQUIVALENT)
def test_the_framework_forms_give_the_middleware_s_path(
    asgi: Any, wsgi: Any, relative: str
) -> None:
    seen = Seen()
    _fastapi_path(_scope(*asgi), seen)
    _flask_path(_environ(*wsgi), seen)
    _django_paths(_scope(*asgi), _environ(*wsgi), seen)
    assert seen.paths == [relative] * 4


# An exempt "/" is every path, however read: no case of it here.
@_cases([case for case in EQUIVALENT + AT_THE_EDGES if case[2] != "/"])
def test_exempt_prefixes_are_relative_to_the_mount(asgi: Any, wsgi: Any, relative: str) -> None:
    from protocol_in_code.qos.asgi import RateLimitMiddleware as ASGIMiddleware
    from protocol_in_code.qos.wsgi import RateLimitMiddleware as WSGIMiddleware

    seen = Seen()
    exempt = [_matched(relative)]
    asgi_app = ASGIMiddleware(_ok_asgi, limiter(), key=seen.key, exempt=exempt)
    asyncio.run(asgi_app(_scope(*asgi), _receive, _discard))
    wsgi_app = WSGIMiddleware(_ok_wsgi, limiter(), key=seen.key, exempt=exempt)
    b"".join(wsgi_app(_environ(*wsgi), _started))
    assert seen.paths == []
