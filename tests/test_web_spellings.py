"""A limited view is limited however a client spells its method and path (issue 32, items 3
and 4).

Routers read a request more loosely than it is written: Flask (Werkzeug) and Django route
``post`` as ``POST``, Werkzeug merges ``//upload`` into ``/upload``, and a server that decodes
``%2F`` turns ``/%2Fupload`` into ``//upload``. A route of the middleware must match every
spelling the application will run as the limited view. Each server here (Werkzeug's,
waitress and gunicorn with Flask, uvicorn with Starlette, Django's runserver with its
middleware) serves one view,
``POST /upload``, limited to two runs; two plain requests spend the limit, then every spelling
is sent once over a raw socket (an HTTP client would correct the spelling), and the view must
have run twice in all, whatever each server answered to each spelling (429, 404, 400 or a
redirect).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi and protocol_in_code.qos.wsgi")
pytest.importorskip("flask")
pytest.importorskip("starlette")

from redis_servers import free_port
from web_servers import Uvicorn, Waitress
from web_spellings_app import BURST, create_flask_app, create_starlette_app

STARTUP_SECONDS = 30.0
TESTS = str(qos_support.REPO_ROOT / "tests")

#: (method, path) as a client may send them for the view at ``POST /upload``.
SPELLINGS = [
    ("post", "/upload"),
    ("Post", "/upload"),
    ("POST", "//upload"),
    ("POST", "///upload"),
    ("POST", "/%2Fupload"),
    ("POST", "/%2fupload"),
    ("POST", "/./upload"),
    ("POST", "/x/../upload"),
    ("POST", "/x/%2E%2E/upload"),
    ("post", "//./upload"),
    ("POST", "/upload/"),
]


def send(port: int, method: str, path: str) -> int:
    """Send one request as written, over a raw socket; the status code (0 if the server
    closed the connection without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        request = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
        sock.sendall((request + "Connection: close\r\n\r\n").encode("ascii"))
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                return 0
            reply += chunk
    parts = reply.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def runs(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /runs HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    return int(reply.rsplit(b"\r\n\r\n", 1)[1])


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def werkzeug() -> Iterator[int]:
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, create_flask_app(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        thread.join(STARTUP_SECONDS)


def waitress() -> Iterator[int]:
    pytest.importorskip("waitress")
    server = Waitress(create_flask_app()).start()
    try:
        yield server.sock.getsockname()[1]
    finally:
        server.stop()


def gunicorn() -> Iterator[int]:
    pytest.importorskip("gunicorn")
    port = free_port()
    command = [
        sys.executable, "-m", "gunicorn", "--workers", "1", "--bind", f"127.0.0.1:{port}",
        "--chdir", TESTS, "--log-level", "warning", "web_spellings_app:create_flask_app()",
    ]  # fmt: skip
    process = subprocess.Popen(command)
    try:
        qos_support.wait_until(
            lambda: listening(port) or process.poll() is not None,
            "gunicorn listening",
            STARTUP_SECONDS,
        )
        assert process.poll() is None, f"gunicorn exited: {process.returncode}"
        yield port
    finally:
        process.terminate()
        process.wait(STARTUP_SECONDS)


def uvicorn() -> Iterator[int]:
    pytest.importorskip("uvicorn")
    server = Uvicorn(create_starlette_app()).start()
    try:
        yield server.sock.getsockname()[1]
    finally:
        server.stop()


#: A Django project with the middleware limiting ``POST /upload``, for ``runserver``.
DJANGO_SETTINGS = f"""
from protocol_in_code.qos import RateLimiter
from protocol_in_code.qos.for_django import Route
DEBUG = False
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "spelling_urls"
INSTALLED_APPS = []
SECRET_KEY = "not a secret: a test site on loopback, not a secret at all"
MIDDLEWARE = ["protocol_in_code.qos.for_django.RateLimitMiddleware"]
QOS_RATE_LIMIT = {{
    "routes": [Route("/upload", RateLimiter(1, per=3600, burst={BURST}), methods={{"POST"}})],
}}
"""

DJANGO_URLS = """
from django.http import HttpResponse
from django.urls import path

ran = [0]

def upload(request):
    ran[0] += 1
    return HttpResponse("uploaded")

def runs(request):
    return HttpResponse(str(ran[0]))

urlpatterns = [path("upload", upload), path("runs", runs)]
"""


def django_runserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    pytest.importorskip("django")
    folder = tmp_path_factory.mktemp("spellings-site")
    (folder / "spelling_settings.py").write_text(DJANGO_SETTINGS)
    (folder / "spelling_urls.py").write_text(DJANGO_URLS)
    port = free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "spelling_settings", "PYTHONPATH": str(folder)}
    command = [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, cwd=folder, env=env, stderr=subprocess.DEVNULL)
    try:
        qos_support.wait_until(
            lambda: listening(port) or process.poll() is not None,
            "runserver listening",
            STARTUP_SECONDS,
        )
        assert process.poll() is None, f"runserver exited: {process.returncode}"
        yield port
    finally:
        process.terminate()
        process.wait(STARTUP_SECONDS)


SERVERS: dict[str, Callable[..., Iterator[int]]] = {
    "django+runserver": django_runserver,
    "flask+werkzeug": werkzeug,
    "flask+waitress": waitress,
    "flask+gunicorn": gunicorn,
    "starlette+uvicorn": uvicorn,
}


@pytest.fixture(params=sorted(SERVERS))
def port(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    start = SERVERS[request.param]
    yield from start(tmp_path_factory) if start is django_runserver else start()


def test_every_spelling_of_a_limited_view_is_limited(port: int) -> None:
    assert [send(port, "POST", "/upload") for _ in range(BURST)] == [200] * BURST
    answers = {f"{method} {path}": send(port, method, path) for method, path in SPELLINGS}
    assert runs(port) == BURST, answers
    assert answers["post /upload"] in (429, 400, 405, 501), answers


@pytest.mark.parametrize(
    ("given", "read"),
    [
        (("post", "/upload"), ("POST", "/upload")),
        (("GET", "//upload"), ("GET", "/upload")),
        (("GET", "/a/./b/../upload"), ("GET", "/a/upload")),
        (("GET", "/upload//"), ("GET", "/upload/")),
        (("GET", "/.."), ("GET", "/")),
        (("GET", "/.well-known/x"), ("GET", "/.well-known/x")),
        (("GET", "/café"), ("GET", "/café")),
    ],
)
def test_a_request_is_read_as_routers_read_it(given: tuple[str, str], read: Any) -> None:
    from protocol_in_code.qos._http.rules import routed

    assert routed(*given) == read
